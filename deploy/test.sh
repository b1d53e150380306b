#!/usr/bin/env bash
# The test command: installs the dependencies, fetches the model, configures, builds (-j2) and runs
# every test. Extra ctest arguments can be passed through, e.g. `deploy/test.sh -LE slow`.
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
deploy/fetch-model.sh
deploy/fetch-tokenizers.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
cd build
ctest --output-on-failure -j2 --timeout 900 "$@"
