#!/usr/bin/env bash
# A soak of `illm serve` (embedded, simple placement, up to 1024 requests in flight so that the trace's bursts
# queue rather than being refused with 429: it measures memory, not overload shedding): the azure2023_conv trace replayed against it at RATE_SCALE times its rate (default 3; prompts clamped to
# 200 tokens, outputs to 56), again and again for MINUTES minutes (default 10), while the server's resident
# memory is sampled every 10 s. Prints the samples (elapsed s, requests answered, RSS MB), the failed
# requests, and the slope of resident memory per 1000 requests after the first minute (a least-squares
# line; memory that stays flat has a slope near 0). Exits 1 when a request failed.
# Usage: [RATE_SCALE=X] deploy/soak.sh [MINUTES] [extra illm serve options]; build first (deploy/run.sh or cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-10}"
shift || true
illm=build/illm
# 3x the trace's rate is about 17 requests/s, which the service sustains on a 2-core machine (it serves about
# 23/s of these); at 20x (110/s) most requests would be refused with 429 by the 64-in-flight limit.
rate_scale="${RATE_SCALE:-3}"
trace=tests/data/traces/azure2023_conv.csv
[ -x "$illm" ] || { echo "soak: build $illm first (cmake -S . -B build && cmake --build build -j2)" >&2; exit 2; }
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

"$illm" serve --port "$port" --policy simple --max-requests 1024 "$@" >"$work/serve.log" 2>&1 &
server=$!
replay=0
cleanup() {
  kill -TERM "$replay" 2>/dev/null || true
  kill -TERM "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.2
done

rss_mb() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$server/status"; }
# Requests the server has answered so far, by its own counter (every finish reason).
answered() {
  curl -sf "http://127.0.0.1:$port/metrics" | awk '/^illm:request_success_total/ {n += $NF} END {printf "%d", n}'
}

# The replays, one after another, each adding its answered count to a done file of its own.
(
  bench=0
  trap 'kill "$bench" 2>/dev/null; exit 0' TERM
  round=0
  while :; do
    round=$((round + 1))
    "$illm" bench --url "http://127.0.0.1:$port" --trace "$trace" --rate-scale "$rate_scale" --max-input-tokens 200 \
      --max-output-tokens 56 --csv "$work/round.$round.csv" --json >"$work/round.$round.json" 2>>"$work/bench.log" &
    bench=$!
    wait "$bench" || true
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["completed"], r["failed"])' \
      "$work/round.$round.json" >"$work/done.$round" 2>/dev/null || echo "0 0" >"$work/done.$round"
  done
) &
replay=$!

start=$(date +%s)
echo "elapsed_s requests_answered rss_mb"
while [ $(( $(date +%s) - start )) -lt $((minutes * 60)) ]; do
  echo "$(( $(date +%s) - start )) $(answered) $(rss_mb)" | tee -a "$work/samples"
  sleep 10
done
kill -TERM "$replay" 2>/dev/null || true  # it stops the replay under way
wait "$replay" 2>/dev/null || true

failed=$( (cat "$work"/done.* 2>/dev/null || true) | awk '{n += $2} END {print n + 0}')
# The server's own count of requests that ended with an error (every round, the last one too).
server_failed=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^illm:requests_failed_total/ {n += $NF} END {printf "%d", n}')
python3 - "$work/samples" "$failed" "$server_failed" "$work" <<'PY'
import collections, csv, glob, os, sys
rows = [tuple(map(float, line.split())) for line in open(sys.argv[1]) if line.strip()]
late = [r for r in rows if r[0] >= 60 and r[1] > 0]
failed = int(sys.argv[2]) + int(sys.argv[3] or 0)
print(f"failed requests: {sys.argv[2]} seen by the client in completed rounds, {sys.argv[3] or 0} counted by the server")
why = collections.Counter()  # the client's failures by HTTP status and error, from every round's CSV
for path in glob.glob(os.path.join(sys.argv[4], "round.*.csv")):
    for row in csv.DictReader(open(path)):
        if row["status"] != "200" or row["error"]:
            why[f"HTTP {row['status']} {row['error'][:80]}".strip()] += 1
for reason, n in why.most_common(5):
    print(f"  {n} x {reason}")
if len(late) >= 2 and late[-1][1] > late[0][1]:
    n = len(late)
    mx = sum(r[1] for r in late) / n
    my = sum(r[2] for r in late) / n
    slope = sum((r[1] - mx) * (r[2] - my) for r in late) / sum((r[1] - mx) ** 2 for r in late)
    print(f"resident memory after the first minute: {late[0][2]:.1f} MB -> {late[-1][2]:.1f} MB over "
          f"{late[-1][1] - late[0][1]:.0f} requests; slope {slope * 1000:.3f} MB per 1000 requests "
          f"({slope * 10000:.2f} MB per 10,000)")
else:
    print("too few samples after the first minute for a slope: run longer")
sys.exit(1 if failed else 0)
PY
