#!/usr/bin/env bash
# The prefix cache on a multi-turn load: `illm serve` with --prefix-cache off, local and cluster (a fresh process
# each, INSTANCES instances), each loaded by `illm bench --url URL --concurrency C --turns T`: C clients, each running
# conversations of T turns one after another, a turn's prompt the conversation so far (the last prompt and its
# answer) and NEW_TOKENS new ids, OUTPUT_TOKENS out. Prints each run's prompt tokens, those found in the cache,
# those computed, TTFT p50/p99 and output tok/s, then each cache's ratios to off. Measures only; asserts nothing.
#
# Usage: [INSTANCES=2] [CONCURRENCY=4] [TURNS=4] [SESSIONS=8] [NEW_TOKENS=48] [OUTPUT_TOKENS=16] [SERVE_ARGS=...]
#        deploy/bench-prefix-cache.sh
# SERVE_ARGS go to every `illm serve` (e.g. "--prefix-copy 0": remote history always read in place).
# A prompt stays within stories15M's 256 tokens: TURNS x (NEW_TOKENS + OUTPUT_TOKENS) <= 256. With INSTANCES > 1
# the front end routes a turn by its load and the history the caches hold; with local a turn that runs elsewhere
# computes its history again, with cluster it reads it where it lies.
set -euo pipefail
cd "$(dirname "$0")/.."
instances="${INSTANCES:-2}" concurrency="${CONCURRENCY:-4}" turns="${TURNS:-4}" sessions="${SESSIONS:-8}"
new_tokens="${NEW_TOKENS:-48}" output_tokens="${OUTPUT_TOKENS:-16}"
illm=build/illm
[ -x "$illm" ] || { echo "bench-prefix-cache: build $illm first (cmake -S . -B build && cmake --build build -j2)" >&2; exit 2; }
[ $((turns * (new_tokens + output_tokens))) -le 256 ] ||
  { echo "bench-prefix-cache: TURNS x (NEW_TOKENS + OUTPUT_TOKENS) must stay within the model's 256 tokens" >&2; exit 2; }
deploy/fetch-model.sh >/dev/null
source deploy/bench-common.sh bench-prefix-cache

for mode in off local cluster; do
  port=$(free_port)
  "$illm" serve --host 127.0.0.1 --port "$port" --instances "$instances" --prefix-cache "$mode" ${SERVE_ARGS:-} > "$work/serve-$mode.log" 2>&1 &
  server=$!
  wait_healthy "$port" "$work/serve-$mode.log"
  "$illm" bench --url "http://127.0.0.1:$port" --concurrency "$concurrency" --turns "$turns" \
    --limit $((sessions * turns)) --prompt-tokens "$new_tokens" --max-output-tokens "$output_tokens" \
    --csv "$work/$mode.csv" --json > "$work/$mode.json"
  kill -TERM "$server"
  wait "$server" || true
  server=0
done

python3 - "$work/off.json" "$work/local.json" "$work/cluster.json" <<'PY'
import json, sys
runs = {name: json.load(open(path)) for name, path in zip(("off", "local", "cluster"), sys.argv[1:])}
print(f"{'prefix cache':<13} {'prompt':>8} {'cached':>8} {'computed':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'out tok/s':>10}")
for name, r in runs.items():
    assert r["failed"] == 0, (name, r)
    print(f"{name:<13} {r['prompt_tokens']:>8} {r['cached_tokens']:>8} {r['prefill_tokens']:>9} "
          f"{r['ttft_s']['p50'] * 1e3:>7.1f}ms {r['ttft_s']['p99'] * 1e3:>7.1f}ms {r['output_tokens_per_second']:>10.1f}")
off = runs["off"]
for name in ("local", "cluster"):
    r = runs[name]
    print(f"{name}: {r['prefill_tokens'] / off['prefill_tokens']:.2f}x the prompt tokens computed, "
          f"TTFT p50 {off['ttft_s']['p50'] / r['ttft_s']['p50']:.2f}x lower, "
          f"output tok/s {r['output_tokens_per_second'] / off['output_tokens_per_second']:.2f}x")
PY
