#!/usr/bin/env bash
# Weights at the sizes people run, illm against llama.cpp on the same files: a Llama-3.2-1B-shaped model of random
# weights written as GGUF F16 (deploy/random-gguf-model.py), quantized by llama.cpp's own llama-quantize to Q8_0 and
# Q4_K_M; both engines load each file as it is. Per file and round: decode at batch 1, 16 and 64 and a 512-token
# prefill (`illm bench engine --model-only` against llama-bench -p 512 -n 32 and llama-batched-bench at 16 and 64
# sequences), each engine's weight bytes read per second at batch 1 against the memory read bandwidth illm's bench
# measured in the same run (the bound at batch 1); then served output tok/s at concurrency 16 and 64, `illm serve
# --instances 1 --kv-type f16` against `llama-server -np C` (f16 KV too), a fresh server per file (and per C for
# llama-server), loaded by `illm bench --url` (a closed loop of C streaming clients, 2C requests of PROMPT_TOKENS
# random token ids and OUTPUT_TOKENS tokens out with ignore_eos; the usage counts checked whole), which engine goes
# first alternating by round; and the ratios illm / llama.cpp, then the machine (processor, SIMD, cores). The files
# are cached in
# ${ILLM_CACHE:-~/.cache/illm}/bench-weights (2.3 + 1.3 + 0.8 GB, written once, about a minute); illm serve keeps
# each file's placement profile in its profile cache after its first start. About 20 minutes a round.
# Usage: [ROUNDS=3] [THREADS=2] [SHAPE=llama3.2-1b] [PROMPT_TOKENS=16] [OUTPUT_TOKENS=32]
#        deploy/bench-weights-vs-llama.sh   (llama.cpp built once, deploy/llama-cpp.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${ROUNDS:-3}"
threads="${THREADS:-2}"
shape="${SHAPE:-llama3.2-1b}"
prompt_tokens="${PROMPT_TOKENS:-16}"
output_tokens="${OUTPUT_TOKENS:-32}"
source deploy/bench-common.sh bench-weights-vs-llama
against_llama bench-weights
f16="$dir/$shape-F16.gguf"
[ -s "$f16" ] || "$py" deploy/random-gguf-model.py "$shape" "$f16"
files=(F16 Q8_0 Q4_K_M)
for q in Q8_0 Q4_K_M; do
  [ -s "$dir/$shape-$q.gguf" ] || llama_run llama-quantize "$f16" "$dir/$shape-$q.gguf" "$q" >"$work/quantize-$q.log" 2>&1
done

results="$work/results"
: >"$results"

# Loads the server at PORT with C clients; prints its output tok/s, or fails unless every token came back.
load_server() {  # port c seed
  local limit=$((2 * $2))
  "$illm" bench --url "http://127.0.0.1:$1" --concurrency "$2" --limit "$limit" --seed "$3" \
    --prompt-tokens "$prompt_tokens" --max-output-tokens "$output_tokens" --json >"$work/run.json"
  python3 - "$work/run.json" "$((limit * output_tokens))" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if r["failed"] or r["output_tokens"] != int(sys.argv[2]):
    sys.exit(f"bench-weights-vs-llama: {r['failed']} failed, {r['output_tokens']} output tokens of {sys.argv[2]}")
print(f"{r['output_tokens_per_second']:.3f}")
PY
}

# Stops the server the script started.
stop_server() {
  kill -TERM "$server"
  wait "$server" 2>/dev/null || true
  server=0
}

# Served output tok/s of ENGINE on FILE at C = 16 and 64: appends "ROUND NAME served_cC ENGINE tok/s" lines.
serve_file() {  # engine file round name
  local engine=$1 file=$2 round=$3 name=$4 port
  if [ "$engine" = illm ]; then
    port=$(free_port)
    "$illm" serve --model "$file" --host 127.0.0.1 --port "$port" --instances 1 --threads "$threads" \
      --kv-type f16 --max-requests 1024 >"$work/server.log" 2>&1 &
    server=$!
    wait_healthy "$port" "$work/server.log" 1800
    for c in 16 64; do echo "$round $name served_c$c illm $(load_server "$port" "$c" "$round$c")" >>"$work/served"; done
    stop_server
    return
  fi
  for c in 16 64; do
    port=$(free_port)
    # The binary itself in the background (not through llama_run, a function: $! would be the subshell running it,
    # and stopping that left the server running).
    LD_LIBRARY_PATH="$llama/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$llama/build/bin/llama-server" -m "$file" \
      --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" -np "$c" \
      -c $((c * (prompt_tokens + output_tokens + 16))) --no-webui >"$work/server.log" 2>&1 &
    server=$!
    wait_healthy "$port" "$work/server.log"
    echo "$round $name served_c$c llama $(load_server "$port" "$c" "$round$c")" >>"$work/served"
    stop_server
  done
}

: >"$work/served"
for round in $(seq "$rounds"); do
  for name in "${files[@]}"; do
    file="$dir/$shape-$name.gguf"
    echo "bench-weights-vs-llama: round $round, $name" >&2
    "$illm" bench engine --model-only --model "$file" --threads "$threads" --json 2>/dev/null >"$work/illm.json"
    llama_run llama-bench -m "$file" -t "$threads" -p 512 -n 32 -r 1 -o json 2>/dev/null >"$work/lb.json"
    llama_run llama-batched-bench -m "$file" -t "$threads" -tb "$threads" -c 8192 -b 2048 -ub 512 -npp 8 -ntg 32 \
      -npl 16,64 --output-format jsonl 2>/dev/null | grep '^{' >"$work/bb.jsonl"
    python3 - "$work/illm.json" "$work/lb.json" "$work/bb.jsonl" "$round" "$name" "$(stat -c %s "$file")" <<'PY' >>"$results"
import sys
sys.path.insert(0, "deploy")
from bench_figures import engine_figures
illm, lb, bb, round_, name, file_bytes = sys.argv[1:7]
r, decode, tg, pp, batched = engine_figures(illm, lb, bb)
memory = r["memory"]["bytes_per_second"]
rows = [("decode_b1", decode[1], tg), ("decode_b16", decode[16], batched[16]), ("decode_b64", decode[64], batched[64]),
        ("prefill512", r["prefill"]["tokens_per_second"], pp),
        ("GB/s_b1", decode[1] * r["weight_bytes"] / 1e9, tg * int(file_bytes) / 1e9), ("memory_GB/s", memory / 1e9, memory / 1e9)]
for metric, ours, theirs in rows:
    print(round_, name, metric, f"{ours:.3f}", f"{theirs:.3f}")
PY
    order=$([ $((round % 2)) -eq 1 ] && echo "illm llama" || echo "llama illm")
    for engine in $order; do serve_file "$engine" "$file" "$round" "$name"; done
  done
done
python3 - "$work/served" <<'PY' >>"$results"
import collections, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    round_, name, metric, engine, value = line.split()
    runs[(round_, name, metric)][engine] = value
for (round_, name, metric), by in runs.items():
    print(round_, name, metric, by["illm"], by["llama"])
PY

python3 - "$results" "$rounds" "$threads" "$shape" "$prompt_tokens" "$output_tokens" <<'PY'
import collections, sys
path, rounds, threads, shape = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
by = collections.defaultdict(list)
for line in open(path):
    round_, name, metric, ours, theirs = line.split()
    by[(name, metric)].append((float(ours), float(theirs)))
print(f"\n{shape}-shaped GGUF files, {threads} threads, {rounds} round(s): means; ratio illm / llama.cpp (range over rounds)")
print(f"{'file':<8} {'metric':<12} {'illm':>10} {'llama.cpp':>10} {'ratio':>7} {'range':>13}")
for (name, metric), runs in by.items():
    ours = sum(o for o, _ in runs) / len(runs)
    theirs = sum(t for _, t in runs) / len(runs)
    ratios = [o / t for o, t in runs if t > 0]
    if metric == "memory_GB/s":
        print(f"{name:<8} {metric:<12} {ours:10.2f} {'':>10} {'':>7} {'':>13}  (read bandwidth, illm's bench)")
        continue
    print(f"{name:<8} {metric:<12} {ours:10.2f} {theirs:10.2f} {ours / theirs:7.2f} {min(ratios):6.2f}-{max(ratios):<6.2f}")
print(f"served_cC: output tok/s of illm serve and llama-server under C streaming clients ({sys.argv[5]} prompt tokens, "
      f"{sys.argv[6]} out).")
print("GB/s_b1: weight bytes read per second at batch 1 (the file's bytes for llama.cpp, illm's held weights for illm);"
      " the bound is memory_GB/s.")
PY
machine_line
