#!/usr/bin/env bash
# A mixture of experts at the size people run, illm against llama.cpp on the same file: a Qwen3-30B-A3B-shaped GGUF of
# random weights written directly in Q4_K (17.3 GB), or with SHAPE=gpt-oss-20b a gpt-oss-20b-shaped one in
# llama-quantize's MXFP4_MOE (MXFP4 experts, Q8_0 elsewhere; 12.1 GB) (deploy/random-moe-gguf.py; cached in
# ${ILLM_CACHE:-~/.cache/illm}/bench-moe, written once), one round (at this size one is what the time allows). illm:
# `illm bench engine --model-only` (decode at batch 1, 16 and 64, a 512-token prefill) under /usr/bin/time, for the
# most memory it held (one copy of the weights: the file's pages are dropped as they are copied); llama.cpp:
# llama-bench -p 512 -n 32 and llama-batched-bench at 16 sequences (and 64 with BATCH64=1). Prints the ratios illm /
# llama.cpp, the bytes a token reads at batch 1 (its chosen experts and the rest) against the memory read bandwidth,
# and the machine; then `illm serve` of the file answers a chat completion through the file's template.
# Usage: [THREADS=2] [SHAPE=qwen3-30b-a3b] [BATCH64=0] deploy/bench-moe-vs-llama.sh   (llama.cpp: deploy/llama-cpp.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/bench-common.sh bench-moe-vs-llama
against_llama bench-moe
threads="${THREADS:-2}"
shape="${SHAPE:-qwen3-30b-a3b}"
file="$dir/$shape.gguf"
[ -s "$file" ] || "$py" deploy/random-moe-gguf.py "$shape" "$file"

echo "bench-moe-vs-llama: illm bench engine" >&2
/usr/bin/time -v "$illm" bench engine --model-only --model "$file" --threads "$threads" --json 2>"$work/time.log" \
  >"$work/illm.json"
echo "bench-moe-vs-llama: llama-bench, llama-batched-bench" >&2
llama_run llama-bench -m "$file" -t "$threads" -p 512 -n 32 -r 1 -o json 2>/dev/null >"$work/lb.json"
npl=16
[ "${BATCH64:-0}" = 1 ] && npl=16,64
llama_run llama-batched-bench -m "$file" -t "$threads" -tb "$threads" -c 4096 -b 2048 -ub 512 -npp 8 -ntg 32 \
  -npl "$npl" --output-format jsonl >"$work/bb.out" 2>"$work/bb.log" || { echo "llama-batched-bench failed:" >&2; tail -5 "$work/bb.log" >&2; }
grep '^{' "$work/bb.out" >"$work/bb.jsonl" || true

python3 - "$work/illm.json" "$work/lb.json" "$work/bb.jsonl" "$work/time.log" "$shape" "$threads" \
  "$(stat -c %s "$file")" <<'PY'
import re, sys
sys.path.insert(0, "deploy")
from bench_figures import engine_figures
illm, lb, bb, time_log, shape, threads, file_bytes = sys.argv[1:8]
r, decode, tg, pp, batched = engine_figures(illm, lb, bb)
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(time_log).read()).group(1)) * 1024
kinds = "MXFP4 experts, Q8_0" if shape.startswith("gpt-oss") else "Q4_K"
print(f"\n{shape}-shaped GGUF ({kinds}, {int(file_bytes) / 1e9:.1f} GB), {threads} threads, one round; ratio illm / llama.cpp")
print(f"{'metric':<12} {'illm':>10} {'llama.cpp':>10} {'ratio':>7}")
rows = [("decode_b1", decode[1], tg), ("decode_b16", decode[16], batched.get(16, 0)),
        ("decode_b64", decode[64], batched.get(64, 0)), ("prefill512", r["prefill"]["tokens_per_second"], pp)]
for metric, ours, theirs in rows:
    ratio = f"{ours / theirs:7.2f}" if theirs else f"{'':>7}"
    print(f"{metric:<12} {ours:10.2f} {f'{theirs:10.2f}' if theirs else '':>10} {ratio}")
# A token at batch 1 reads the attention, router and norms of every layer, its chosen experts, and a row of the
# embedding and the classifier: the file's bytes less the experts it does not choose and the embedding (Q4_K: 4.5
# bits a weight; MXFP4 4.25, Q8_0 8.5).
memory = r["memory"]["bytes_per_second"]
layout = {"qwen3-30b-a3b": (48 * 3 * 128 * 768 * 2048 * 4.5 / 8, 8 / 128, 151936 * 2048 * 4.5 / 8),
          "gpt-oss-20b": (24 * 3 * 32 * 2880 * 2880 * 4.25 / 8, 4 / 32, 201088 * 2880 * 8.5 / 8)}
if shape in layout:
    experts, chosen, embedding = layout[shape]
    per_token = int(file_bytes) - experts * (1 - chosen) - embedding
    print(f"bytes a token reads at batch 1: {per_token / 1e9:.2f} GB; at illm's {decode[1]:.2f} tok/s "
          f"{decode[1] * per_token / 1e9:.1f} GB/s, llama.cpp's {tg * per_token / 1e9:.1f} GB/s; memory read "
          f"{memory / 1e9:.1f} GB/s")
print(f"illm bench engine held at most {rss / 2**30:.2f} GiB (the file: {int(file_bytes) / 2**30:.2f} GiB)")
PY
machine_line

echo "bench-moe-vs-llama: illm serve, one chat completion" >&2
port=$(free_port)
# One instance: no placement to decide (--policy simple measures no profile), and a pool of 256 blocks of f16 KV.
"$illm" serve --model "$file" --instances 1 --policy simple --kv-blocks-per-instance 256 --kv-type f16 --port "$port" \
  --threads "$threads" >"$work/serve.log" 2>&1 &
server=$!
wait_healthy "$port" "$work/serve.log" 900
curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$(basename "$file")\",\"messages\":[{\"role\":\"user\",\"content\":\"ab cd\"}],\"max_tokens\":8,\"temperature\":0}" \
  >"$work/chat.json"
kill -TERM "$server"
wait "$server" 2>/dev/null || true
server=0

python3 - "$work/chat.json" <<'PY'
import json, sys
answer = json.load(open(sys.argv[1]))
print(f"illm serve chat completion: {answer['choices'][0]['finish_reason']}, "
      f"{answer['usage']['completion_tokens']} tokens: {answer['choices'][0]['message']['content']!r}")
PY
