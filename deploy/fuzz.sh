#!/usr/bin/env bash
# deploy/fuzz.sh [TARGET|all] [SECONDS]: builds the libFuzzer targets of tests/fuzz with clang, AddressSanitizer
# and UndefinedBehaviorSanitizer (in build-fuzz/, or $ILLM_FUZZ_BUILD), then runs TARGET (every one by default)
# for SECONDS each (default 60) on its corpus: the committed seeds of tests/fuzz/corpus/TARGET (read only) and
# what earlier runs found (BUILD/corpus/TARGET). A crash, a leak or undefined behaviour stops it: the input is
# saved under BUILD/crashes/TARGET and the command that replays it is printed. Needs clang and libFuzzer
# (Debian: clang, libfuzzer-14-dev; deploy/install-deps.sh installs them).
#
# Targets: attention_wire (attend and partials messages of the data plane), openai_request (completions and
# chat bodies), checkpoint (llama2.c model files), tokenizer (tokenizer.bin files, and text to encode),
# peer_messages (the control plane's messages through CAF's deserializer), http_head (HTTP request lines and
# headers, as any client can send them), safetensors (safetensors checkpoint files: header and offsets), gguf (GGUF files: header, metadata, vocabulary,
# tensors), tokenizer_json (Hugging Face tokenizer.json files,
# then a text through them), chat_template (Jinja chat templates, parsed and rendered), json_schema (structured
# outputs' schemas compiled, and an output matched against each). Inputs go up to 1 MiB (a client's body is up to
# max_body_bytes); the targets that read JSON get a dictionary whose entries nest deeply (tests/fuzz/json.dict).
set -euo pipefail
cd "$(dirname "$0")/.."
all_targets=(attention_wire openai_request checkpoint tokenizer peer_messages http_head safetensors gguf tokenizer_json
             chat_template json_schema)
target=${1:-all}
seconds=${2:-60}
build=${ILLM_FUZZ_BUILD:-build-fuzz}
if [[ "$target" == all ]]; then
  targets=("${all_targets[@]}")
elif [[ " ${all_targets[*]} " == *" $target "* ]]; then
  targets=("$target")
else
  echo "fuzz.sh: unknown target '$target' (one of: ${all_targets[*]}, all)" >&2
  exit 2
fi
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: SECONDS must be a positive whole number, not '$seconds'" >&2
  exit 2
fi
if ! command -v clang++ > /dev/null; then
  echo "fuzz.sh: clang++ is needed (apt-get install clang libfuzzer-14-dev)" >&2
  exit 2
fi

mkdir -p "$build"
# A unity build (16 sources a translation unit): the support library's headers parsed once a batch.
if ! CC=clang CXX=clang++ cmake -S . -B "$build" -DILLM_FUZZ=ON -DILLM_ENABLE_CUDA=OFF \
     -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
     -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DCMAKE_UNITY_BUILD=ON \
     -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 > "$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  exit 1
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}" > "$build/build.log" 2>&1 || {
  tail -n 40 "$build/build.log" >&2
  exit 1
}

for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t" "$build/crashes/$t" "$build/logs"
  log="$build/logs/$t.log"
  status=0
  dict=()
  case $t in openai_request | tokenizer_json | safetensors | json_schema) dict=(-dict=tests/fuzz/json.dict) ;; esac
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=1048576 \
    "${dict[@]}" -print_final_stats=1 -artifact_prefix="$build/crashes/$t/" "$build/corpus/$t" "tests/fuzz/corpus/$t" \
    > "$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  if [[ $status -ne 0 ]]; then
    echo "fuzz_$t: FAILED after ${runs:-?} runs (exit $status):" >&2
    grep -E "ERROR|SUMMARY|runtime error" "$log" | head -n 5 >&2 || true
    for crash in "$build/crashes/$t"/*; do
      [[ -e "$crash" ]] && echo "  replay: $build/tests/fuzz/fuzz_$t $crash" >&2
    done
    exit 1
  fi
  echo "fuzz_$t: ${runs:-?} runs in ${seconds} s, no crash, leak or undefined behaviour (corpus $(ls "$build/corpus/$t" | wc -l) found + $(ls "tests/fuzz/corpus/$t" | wc -l) seeds)"
done
