#!/usr/bin/env bash
# The run command: installs the dependencies, fetches the model, builds, then runs the main job: the
# real model generating text through the DistAttention path (the request's KV blocks spread over
# several pools, each layer's attention merged from one partial per pool).
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
deploy/fetch-model.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2

prompt="${ILLM_PROMPT:-Once upon a time}"
echo
echo "== build/illm generate --model stories15M --prompt \"$prompt\" --max-tokens 200 --temperature 0 --kv-pools 3"
build/illm generate --model stories15M --prompt "$prompt" --max-tokens 200 --temperature 0 --kv-pools 3
echo
echo "More: build/illm generate --help, build/illm bench engine"
