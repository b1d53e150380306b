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

# A long prompt (a story told over and over, about 1300 tokens) for a cluster whose instances hold 48
# blocks (768 tokens) each: the request can only run by borrowing blocks from the other instances.
prompt_file="$(mktemp)"
trap 'rm -f "$prompt_file"' EXIT
for _ in $(seq 24); do
  echo "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine."
  echo "One day, she saw a big, red ball in the sky. It was the sun! She thought it was so pretty."
done > "$prompt_file"
echo
echo "== build/illm generate --instances 3 --kv-blocks-per-instance 48 --prompt-file <1300-token story> --max-tokens 40 --temperature 0 --json"
build/illm generate --model stories15M --prompt-file "$prompt_file" --max-tokens 40 --temperature 0 \
  --instances 3 --kv-blocks-per-instance 48 --json |
  python3 -c 'import json, sys
r = json.load(sys.stdin)
print("continuation:", r["text"].strip())
print("stats:", r["stats"])
print("blocks per instance at the end:", r["blocks_per_instance"])
for m in r["moves"]: print("move {move_id}: {blocks} blocks, instance {source} -> {destination}".format(**m), "(a loan)" if m["loan"] else "(gManager)")
for m in r["refusals"]: print("refused {move_id}: instance {source} -> {destination}: {reason}".format(**m))'
echo
echo "== build/illm generate --prompt \"Once upon a time\" --max-tokens 60 --temperature 0 --kv-pools 3"
build/illm generate --model stories15M --prompt "Once upon a time" --max-tokens 60 --temperature 0 --kv-pools 3
echo
echo "More: build/illm generate --help, build/illm bench engine"
