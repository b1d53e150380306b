#!/usr/bin/env bash
# Fetches here (apt-get download, Debian 12) the packages that the whole build and run of illm need and a GPU
# machine's image lacks: CAF, UCX (and the verbs and NUMA libraries it links), OpenBLAS, fmt, CLI11, nlohmann-json,
# doctest, PCRE2, ICU, OpenSSL and pkgconf, into deploy/gpu-bundle/ (git ignores it; the device tool carries the
# working tree with it), and Llama 3.1's tokenizer (deploy/fetch-tokenizers.sh; tokenizer.json gzipped) for the
# checkpoints deploy/gpu-runtime.sh writes there. deploy/gpu-whole.sh unpacks the packages into a prefix of its own
# there and builds the whole illm with CUDA against them. Fails when the bundle passes 45 MiB. Does nothing when it
# is complete.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=deploy/gpu-bundle
packages=(
  libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17
  libucx-dev libucx0 libibverbs1 librdmacm1 libnuma1
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5 libquadmath0
  libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev doctest-dev
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libicu-dev libicu72 libssl-dev libssl3
  pkgconf pkgconf-bin libpkgconf3
)
limit_mib=45
tokenizer="$dest/llama3_1"

complete() {
  [[ -f "$tokenizer/tokenizer.json.gz" && -f "$tokenizer/tokenizer_config.json" ]] || return 1
  for p in "${packages[@]}"; do compgen -G "$dest/${p}_*.deb" >/dev/null || return 1; done
}
if complete; then
  echo "gpu-bundle: complete in $dest ($(du -sm "$dest" | cut -f1) MiB)"
  exit 0
fi
command -v apt-get >/dev/null || { echo "gpu-bundle: apt-get not found (a Debian 12 machine fetches the bundle)" >&2; exit 1; }
mkdir -p "$dest" "$tokenizer"
(cd "$dest" && apt-get download -q "${packages[@]}")
bash deploy/fetch-tokenizers.sh
source_tokenizer="${ILLM_MODELS:-$HOME/.cache/illm/models}/hf-tokenizers/llama3_1"
gzip -9 -c "$source_tokenizer/tokenizer.json" >"$tokenizer/tokenizer.json.gz"
cp "$source_tokenizer/tokenizer_config.json" "$source_tokenizer/LICENSE" "$tokenizer/"
size=$(du -sm "$dest" | cut -f1)
echo "gpu-bundle: ${#packages[@]} packages and a tokenizer, $size MiB in $dest"
if (( size > limit_mib )); then
  echo "gpu-bundle: more than $limit_mib MiB: the device tool carries at most 64 MiB with the working tree" >&2
  exit 1
fi
