#!/usr/bin/env bash
# The test command: installs the dependencies, fetches the model, configures, builds (-j2) and runs
# every test. Extra ctest arguments can be passed through, e.g. `deploy/test.sh -LE slow`.
set -euo pipefail
cd "$(dirname "$0")/.."

phase() { echo "test.sh: $1 done at ${SECONDS} s"; }  # where the time goes, in the log

deploy/install-deps.sh
deploy/fetch-model.sh
deploy/fetch-tokenizers.sh
phase "dependencies, model and tokenizers"
# Device code for sm_90 alone (the lent devices' arch): the build checks that it compiles, and each arch costs
# minutes of nvcc on two cores. A build of the runtime (README) makes 80 and 90.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DILLM_UNITY_BUILD=ON -DCMAKE_CUDA_ARCHITECTURES=90-real
cmake --build build -j2
phase "build"
cd build
status=0
ctest --output-on-failure -j2 --timeout 900 "$@" || status=$?
phase "tests"
exit $status
