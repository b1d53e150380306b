#!/usr/bin/env bash
# deploy/sanitize.sh [ctest-like filter args]: builds the unit tests of gpu/ and transport/ (the engine, the CPU
# kernels, KV pools, the model files and tokenizer, the attention wire and the UCX transport) with
# AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer (ILLM_SANITIZE_ADDRESS/UNDEFINED, in
# build-sanitize/ or $ILLM_SANITIZE_BUILD), then runs them; any report fails it. The actor tests (test_actors)
# are left out here for time: every CAF translation unit costs seconds, twice over under the sanitizers; build
# them the same way (cmake -DILLM_SANITIZE_ADDRESS=ON -DILLM_SANITIZE_UNDEFINED=ON, target test_actors) to run
# them too. Extra arguments go to each test program (doctest's, e.g. -tc="*pool*").
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ILLM_SANITIZE_BUILD:-build-sanitize}
mkdir -p "$build"
# -O1 with line tables only: the sanitizers' advice, and half the compile time of -O2 -g (reports keep their lines).
# A unity build (16 sources a translation unit) parses the shared headers once a batch: a third less compile time.
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
     -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DILLM_SANITIZE_ADDRESS=ON \
     -DILLM_SANITIZE_UNDEFINED=ON -DILLM_ENABLE_CUDA=OFF -DILLM_UNITY_BUILD=ON > "$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  exit 1
fi
cmake --build "$build" -j"$(nproc)" --target test_gpu test_transport > "$build/build.log" 2>&1 || {
  tail -n 40 "$build/build.log" >&2
  exit 1
}
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in gpu/test_gpu transport/test_transport; do
  echo "== $t under ASan, LSan and UBSan"
  "$build/tests/$t" "$@"
done
