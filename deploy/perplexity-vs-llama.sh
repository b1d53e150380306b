#!/usr/bin/env bash
# Perplexity of stories15M on tests/data/simple_stories.txt by illm and by llama.cpp's llama-perplexity on the same
# files: the model converted to an F32 GGUF (tests/models/convert_llama2c.py), then quantized by llama.cpp's own
# llama-quantize to Q8_0, Q6_K, Q5_0 and Q4_K_M (rows of 288 are not whole super-blocks of 256: llama-quantize falls
# back to Q8_0 and Q5_0 for most matrices, as illm's --weight-type does); and illm's --weight-type conversions of the
# F32 file. Prints a table; with OUT=FILE writes the llama-perplexity figures as JSON (tests/data/
# llama_cpp_perplexity.json is this output, which the tests compare illm with: each figure, its running value after
# each chunk, and the tolerance the tests hold illm to), and beside it the quantized files' tensors as the tests make
# the files again (stories15M_quantized.json, stories15M_kquants.bin: tests/models/quantized_stories.py).
# llama-perplexity prints four decimals: its Q8_0 and F32 figures both read 6.7513, though their running values
# differ from the first chunk on (3.6579 and 3.6728).
# Usage: [CTX=256] [THREADS=2] [OUT=FILE] deploy/perplexity-vs-llama.sh   (builds llama.cpp once, see llama-cpp.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
ctx="${CTX:-256}"
threads="${THREADS:-2}"
illm=build/illm
text=tests/data/simple_stories.txt
[ -x "$illm" ] || { echo "perplexity-vs-llama: build $illm first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
who=perplexity-vs-llama
source deploy/llama-cpp.sh
build_llama
deploy/fetch-model.sh >/dev/null
model_dir="${ILLM_MODELS:-$cache/models}/stories15M"
/usr/bin/python3 tests/models/convert_llama2c.py "$model_dir/stories15M.bin" "$model_dir/tokenizer.bin" "$work/f32" >/dev/null
declare -A files=([F32]="$work/f32/model.gguf")
for q in Q8_0 Q6_K Q5_0 Q4_K_M; do
  llama_run llama-quantize "$work/f32/model.gguf" "$work/$q.gguf" "$q" >"$work/quantize-$q.log" 2>&1
  files[$q]="$work/$q.gguf"
done

illm_ppl() {  # MODEL [illm flags...]: "perplexity chunks"
  "$illm" perplexity --model "$1" --file "$text" --ctx "$ctx" --threads "$threads" --json "${@:2}" 2>/dev/null |
    python3 -c 'import json, sys; j = json.load(sys.stdin); print(j["perplexity"], j["chunks"], j["weights"].replace(" ", "~"))'
}
llama_ppl() {  # MODEL: "perplexity running,values,per,chunk"
  llama_run llama-perplexity -m "$1" -f "$text" -c "$ctx" -b "$ctx" -t "$threads" >"$work/ppl.log" 2>&1
  echo "$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$work/ppl.log") $(grep -o '\[[0-9]*\][0-9.]*' "$work/ppl.log" |
    sed 's/.*\]//' | paste -sd,)"
}

rows="$work/rows"
: >"$rows"
for name in F32 Q8_0 Q6_K Q5_0 Q4_K_M; do
  read -r ours chunks types < <(illm_ppl "${files[$name]}")
  read -r theirs running < <(llama_ppl "${files[$name]}")
  echo "$name $ours $theirs $chunks $types $running" >>"$rows"
done
for wt in bf16 f16 q8_0 q6_k q5_0 q4_k; do
  read -r ours chunks types < <(illm_ppl "${files[F32]}" --weight-type "$wt")
  echo "--weight-type_$wt $ours - $chunks $types -" >>"$rows"
done
python3 - "$rows" "$ctx" "${OUT:-}" <<'PY'
import json, sys
rows, ctx, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"perplexity of stories15M on tests/data/simple_stories.txt, chunks of {ctx} tokens (second halves scored)")
print(f"{'file':<24} {'illm':>9} {'llama.cpp':>10} {'illm/llama':>11}  illm's matrices")
# What the tests allow: the F32 products of the two engines differ by rounding alone; a quantized file's figure moves
# by a tenth of a percent or more with any difference of rounding in the activations' 8-bit levels, and Q5_0's and
# Q6_K's by more (docs/models.md says what was measured).
tolerance = {"F32": 0.001, "Q8_0": 0.002, "Q5_0": 0.004, "Q4_K_M": 0.002, "Q6_K": 0.005}
files = {}
for line in open(rows):
    name, ours, theirs, chunks, types, running = line.split()
    ours = float(ours)
    if theirs == "-":
        print(f"{name.replace('_', ' ', 1):<24} {ours:9.4f} {'':>10} {'':>11}  {types.replace('~', ' ')}")
        continue
    theirs = float(theirs)
    files[name] = {"llama_perplexity": theirs, "illm_perplexity": ours, "chunks": int(chunks),
                   "llama_running": [float(v) for v in running.split(",")], "tolerance": tolerance[name]}
    print(f"{name:<24} {ours:9.4f} {theirs:10.4f} {100 * (ours / theirs - 1):+10.2f}%  {types.replace('~', ' ')}")
if out:
    with open(out, "w") as f:
        json.dump({"model": "stories15M", "text": "tests/data/simple_stories.txt", "n_ctx": ctx, "files": files}, f, indent=2)
        f.write("\n")
    print(f"wrote {out}")
PY
if [ -n "${OUT:-}" ]; then  # the quantized files' tensors, as the tests make the files again
  data=$(dirname "$OUT")
  /usr/bin/python3 tests/models/quantized_stories.py extract "$llama/src/gguf-py" "$work" "$data/stories15M_quantized.json" \
    "$data/stories15M_kquants.bin"
fi
