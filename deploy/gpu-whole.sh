#!/usr/bin/env bash
# deploy/gpu-whole.sh BUILD: the whole illm with CUDA on a GPU machine whose image lacks CAF, UCX and the rest, built
# on the Debian packages deploy/gpu-bundle.sh fetched: they are unpacked into BUILD/deps-root (deploy/unpack-debs.py,
# never into /), found there first (-DILLM_DEPS_ROOT, cmake/deps_root.cmake) and run from there (the build RPATH).
# Prints where CMake found CAF, UCX, OpenBLAS and fmt and what `ldd BUILD/illm` resolves. Does only what is left
# when BUILD was built before. Used by deploy/gpu-check.sh and deploy/gpu-runtime.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: gpu-whole.sh BUILD}
if ! compgen -G "deploy/gpu-bundle/*.deb" >/dev/null; then
  echo "gpu-whole: no deploy/gpu-bundle (run deploy/gpu-bundle.sh on a Debian 12 machine first)" >&2
  exit 2
fi
root="$PWD/$build/deps-root"
[[ -d "$root/usr" ]] || python3 deploy/unpack-debs.py "$root" deploy/gpu-bundle/*.deb
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DILLM_DEPS_ROOT="$root" -DILLM_BUILD_TESTS=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target illm
grep -E "^(CAF_CORE_LIBRARY|ucx_DIR|OpenBLAS_DIR|fmt_DIR|ILLM_ENABLE_CUDA):" "$build/CMakeCache.txt"
ldd "$build/illm" | grep -E "caf|ucp|openblas|icu|cudart|cublas" || true
