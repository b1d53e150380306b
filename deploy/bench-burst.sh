#!/usr/bin/env bash
# A burst of queued prompts, served against the engine's own speed, in one run on this machine: `illm serve
# --instances 2 --max-requests 512` (stories15M) under `illm bench --trace TRACE --limit 600 --rate-scale 60
# --max-input-tokens 200 --max-output-tokens 56` (600 requests in about 10 s: most wait in the queues), then
# llama-server -np 64 (the same model as an F32 GGUF, llama.cpp built as deploy/bench-vs-llama.sh builds it) under
# the same burst. `illm bench engine --model-only` in the same run gives the engine's prefill rate (one 512-token
# prompt) and its decode at batch 64, hence the time the burst's tokens need at the engine's speed:
#   bound = prompt tokens / prefill rate + output tokens / batch-64 decode rate
# and the step time at batch 64 (64 / its rate). Printed beside the run: wall time against bound / 0.7; the
# inter-token latency p50 against 1.5 x that step; the longest time an instance sat idle (nothing running, nothing
# queued) while the other had requests queued, from GET /v1/cluster polled every 10 ms, against one heartbeat
# (20 ms; the figures are a heartbeat old). illm runs once per configuration of CONFIGS (flags of `illm serve`,
# separated by ";"; default: as it comes, stall-free mixed steps of 256 tokens, and prefill every 4 steps in chunks
# of 2048). Every process gets the same THREADS (default 2): the engine bench, each illm
# server (THREADS / 2 for each of its two instances) and llama-server. Measures only; asserts nothing about speed.
#
# LLAMA=0 leaves llama-server out; ILLM names another illm binary.
#
# Usage: [THREADS=2] [CONFIGS="FLAGS;FLAGS..."] [TRACE=../shared/traces/azure2023_conv.csv] [LLAMA=1]
#        [ILLM=build/illm] deploy/bench-burst.sh
set -euo pipefail
cd "$(dirname "$0")/.."
threads="${THREADS:-2}"
configs="${CONFIGS-;--mixed-step-tokens 256;--max-batch-tokens 2048 --prefill-every-steps 4}"
trace="${TRACE:-../shared/traces/azure2023_conv.csv}"
illm="${ILLM:-build/illm}"
[ -x "$illm" ] || { echo "bench-burst: build $illm first (cmake -S . -B build && cmake --build build -j2)" >&2; exit 2; }
[ -s "$trace" ] || { echo "bench-burst: no trace at $trace (TRACE=...)" >&2; exit 2; }
deploy/fetch-model.sh >/dev/null
cache="${ILLM_CACHE:-$HOME/.cache/illm}"
model_dir="${ILLM_MODELS:-$cache/models}/stories15M"
source deploy/bench-common.sh bench-burst
who=bench-burst
source deploy/llama-cpp.sh
per_instance=$(( threads > 1 ? threads / 2 : 1 ))  # the two instances share THREADS
burst=(--trace "$trace" --limit 600 --rate-scale 60 --max-input-tokens 200 --max-output-tokens 56)

"$illm" bench engine --model-only --threads "$threads" --json >"$work/engine.json"

# One burst against a fresh server: ENGINE (illm or llama), LABEL, then the server's own flags.
burst_once() {  # engine label flags...
  local engine=$1 label=$2 port
  shift 2
  port=$(free_port)
  if [ "$engine" = illm ]; then
    "$illm" serve --host 127.0.0.1 --port "$port" --instances 2 --threads "$per_instance" --max-requests 512 "$@" \
      >"$work/server.log" 2>&1 &
  else
    "$llama/build/bin/llama-server" -m "$gguf" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" \
      -np 64 -c $((256 * 64)) --no-webui >"$work/server.log" 2>&1 &
  fi
  server=$!
  wait_healthy "$port" "$work/server.log"
  : >"$work/poll.jsonl"
  if [ "$engine" = illm ]; then
    python3 - "$port" "$work/poll.jsonl" <<'EOF' &
import json, sys, time, urllib.request
port, out = sys.argv[1], open(sys.argv[2], "w")
while True:
    try:
        status = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/cluster", timeout=5))
    except Exception:
        break
    members = [(m["running"], m["waiting"]) for m in status["instances"]]
    out.write(json.dumps([time.monotonic(), members]) + "\n")
    out.flush()
    time.sleep(0.01)
EOF
  fi
  local poller=$!
  "$illm" bench --url "http://127.0.0.1:$port" "${burst[@]}" --csv "$work/run.csv" --json >"$work/run.json"
  kill -TERM "$server"
  wait "$server" 2>/dev/null || true
  server=0
  [ "$engine" = illm ] && { wait "$poller" 2>/dev/null || true; }
  python3 - "$work/run.json" "$work/engine.json" "$work/poll.jsonl" "$engine" "$label" <<'EOF' | tee -a "$work/results"
import json, sys
run, eng = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
engine, label = sys.argv[4], sys.argv[5]
decode64 = next(d["tokens_per_second"] for d in eng["decode"] if d["batch"] == 64)
prefill = eng["prefill"]["tokens_per_second"]
bound = run["prompt_tokens"] / prefill + run["output_tokens"] / decode64
step64 = 64 / decode64
# The longest stretch an instance had nothing while another had requests queued.
idle_worst, since = 0.0, {}
for line in open(sys.argv[3]):
    t, members = json.loads(line)
    queued = any(w > 0 for _, w in members)
    for i, (running, waiting) in enumerate(members):
        if running == 0 and waiting == 0 and queued:
            since.setdefault(i, t)
            idle_worst = max(idle_worst, t - since[i])
        else:
            since.pop(i, None)
idle = f"{idle_worst * 1000:.0f}" if engine == "illm" else "-"
print(f"{engine}{label} {run['completed']} {run['failed']} {run['prompt_tokens']} {run['output_tokens']} "
      f"{run['duration_s']:.1f} {bound / 0.7:.1f} {run['itl_s']['p50'] * 1000:.1f} {1.5 * step64 * 1000:.1f} "
      f"{run['ttft_s']['p50']:.2f} {run['output_tokens_per_second']:.0f} {idle}")
EOF
}

machine_line
python3 - "$work/engine.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
d = {x["batch"]: x["tokens_per_second"] for x in r["decode"]}
print(f"engine (illm bench engine --model-only): prefill 512 {r['prefill']['tokens_per_second']:.0f} tok/s, "
      f"decode batch 1 {d[1]:.0f}, 16 {d[16]:.0f}, 64 {d[64]:.0f} tok/s (step at 64: {64 / d[64] * 1000:.1f} ms)")
EOF
echo "server [flags] completed refused prompt_tokens output_tokens wall_s target_wall_s itl_p50_ms target_itl_ms" \
  "ttft_p50_s output_tok_s longest_idle_ms"
: >"$work/results"
IFS=';' read -r -a config_list <<<"$configs"
[ "${configs: -1}" = ";" ] && config_list+=("")  # a trailing empty configuration
for config in "${config_list[@]}"; do
  read -r -a flags <<<"$config"
  burst_once illm "${config:+ $config}" "${flags[@]}"
done
if [ "${LLAMA:-1}" = 1 ]; then
  build_llama
  convert_model >/dev/null
  burst_once llama " -np 64"
fi
