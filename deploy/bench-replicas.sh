#!/usr/bin/env bash
# What replicas cost when nothing fails: `illm serve` (embedded, 4 instances, simple placement) replays the first
# LIMIT requests of claudecode_sessions_t0 (long prompts, clamped to MAX_INPUT tokens; outputs clamped to 32), all
# at once, with replicas on (--replica-min-tokens 512: every request gets copies) and off (0), alternating, ROUNDS
# rounds, in two memory settings: plentiful (pools of 2048 blocks, room for a copy of every block) and short
# (pools of 256 blocks: requests queue for memory, and copies are given up first). Each run is a fresh server.
# Prints every run's output tok/s and completed requests, then per setting the mean of on/off over the rounds
# and the spread of the rounds (the lowest and highest ratio of a round). Measures only; asserts nothing.
# Usage: [ROUNDS=3] [LIMIT=40] [MAX_INPUT=3000] deploy/bench-replicas.sh; build first (deploy/run.sh or cmake).
# It takes about 10 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
illm=build/illm
rounds="${ROUNDS:-3}"
limit="${LIMIT:-40}"
max_input="${MAX_INPUT:-3000}"
trace=tests/data/traces/claudecode_sessions_t0.csv
[ -x "$illm" ] || { echo "bench-replicas: build $illm first (cmake -S . -B build && cmake --build build -j2)" >&2; exit 2; }
source deploy/bench-common.sh bench-replicas

# One run: a fresh server with BLOCKS blocks per pool and replicas from MIN_TOKENS tokens (0: off); prints
# "tok/s completed failed".
run_once() {
  local blocks=$1 min_tokens=$2 port
  port=$(free_port)
  "$illm" serve --port "$port" --instances 4 --policy simple --kv-blocks-per-instance "$blocks" \
    --replica-min-tokens "$min_tokens" --max-requests 1024 >"$work/serve.log" 2>&1 &
  server=$!
  wait_healthy "$port" "$work/serve.log"
  "$illm" bench --url "http://127.0.0.1:$port" --trace "$trace" --limit "$limit" --rate-scale 1000000 \
    --max-input-tokens "$max_input" --max-output-tokens 32 --csv "$work/run.csv" --json >"$work/run.json"
  kill -TERM "$server"
  wait "$server" 2>/dev/null || true
  server=0
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.1f %d %d" % (r["output_tokens_per_second"], r["completed"], r["failed"]))' \
    "$work/run.json"
}

echo "memory      round replicas  output_tok/s completed failed"
for setting in plentiful:2048 short:256; do
  name=${setting%%:*}
  blocks=${setting##*:}
  : >"$work/$name"
  for round in $(seq "$rounds"); do
    for min_tokens in 512 0; do
      read -r tps done failed < <(run_once "$blocks" "$min_tokens")
      label=$([ "$min_tokens" -eq 0 ] && echo off || echo on)
      printf "%-11s %5d %8s %13s %9s %6s\n" "$name" "$round" "$label" "$tps" "$done" "$failed"
      echo "$round $label $tps" >>"$work/$name"
    done
  done
done
python3 - "$work" <<'PY'
import collections, os, sys
for name in ["plentiful", "short"]:
    runs = collections.defaultdict(dict)
    for line in open(os.path.join(sys.argv[1], name)):
        rnd, label, tps = line.split()
        runs[rnd][label] = float(tps)
    ratios = [r["on"] / r["off"] for r in runs.values() if r.get("off")]
    on = sum(r["on"] for r in runs.values()) / len(runs)
    off = sum(r["off"] for r in runs.values()) / len(runs)
    print(f"{name}: replicas on {on:.1f} output tok/s, off {off:.1f} (on/off {on / off:.3f}); rounds' on/off "
          f"{min(ratios):.3f} to {max(ratios):.3f}")
PY
