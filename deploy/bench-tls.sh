#!/usr/bin/env bash
# What mutual TLS costs the control plane: the request of tests/integration/test_cluster_ucx.py (a prompt of about
# 2900 tokens, three pools of 64 blocks, 12 tokens; UCX over tcp on lo) on deploy/cluster.sh's four instance
# processes with TLS and without (--no-tls), alternating, ROUNDS rounds, each a fresh cluster on one measured
# profile. Prints each run's time to the answer (illm generate --gmanager, wall clock) and its prefill and decode
# tok/s, then the mean ratios TLS / clear text. The data plane is UCX either way. Measures only; asserts nothing.
# Usage: [ROUNDS=3] deploy/bench-tls.sh; build first. About 2 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
illm=$PWD/build/illm
rounds="${ROUNDS:-3}"
[ -x "$illm" ] || { echo "bench-tls: build $illm first (cmake -S . -B build && cmake --build build -j2)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c 'import sys; sys.path.insert(0, "tests/integration"); from common import make_prompt; print(make_prompt())' \
  >"$work/prompt.txt"
"$illm" profile --out "$work/profile.json" --repeats 1 --threads 1 >/dev/null 2>&1

# One run: a fresh cluster (TLS or not), the request on it; prints "seconds prefill_tok/s decode_tok/s".
run_once() {
  local tls=$1 flags=()
  [ "$tls" = off ] && flags=(--no-tls)
  deploy/cluster.sh --instances 4 --kv-blocks-per-instance 64 --threads 1 --port 0 --no-frontend \
    --profile "$work/profile.json" "${flags[@]}" -- bash -c '
      start=$(date +%s.%N)
      # shellcheck disable=SC2086 # ILLM_TLS_ARGS is a list of flags
      "$0" generate --prompt-file "$1" --max-tokens 12 --temperature 0 --ignore-eos --json \
        --gmanager "$ILLM_GMANAGER" $ILLM_TLS_ARGS >"$2"
      end=$(date +%s.%N)
      echo "$start $end" >"$3"' "$illm" "$work/prompt.txt" "$work/out.json" "$work/times" >"$work/cluster.log" 2>&1 ||
    { cat "$work/cluster.log" >&2; exit 1; }
  python3 - "$work/out.json" "$work/times" <<'PY'
import json, sys
out = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
start, end = map(float, open(sys.argv[2]).read().split())
print(f"{end - start:.3f} {out['stats']['prefill_tok_s']:.1f} {out['stats']['decode_tok_s']:.1f}")
PY
}

echo "round control_plane seconds prefill_tok/s decode_tok/s"
: >"$work/runs"
for round in $(seq "$rounds"); do
  for tls in on off; do
    read -r secs prefill decode < <(run_once "$tls")
    printf "%5d %13s %7s %13s %12s\n" "$round" "tls-$tls" "$secs" "$prefill" "$decode"
    echo "$tls $secs $prefill $decode" >>"$work/runs"
  done
done
python3 - "$work/runs" <<'PY'
import sys
runs = {"on": [], "off": []}
for line in open(sys.argv[1]):
    tls, *vals = line.split()
    runs[tls].append([float(v) for v in vals])
mean = lambda rows, i: sum(r[i] for r in rows) / len(rows)
for i, what in enumerate(["seconds to the answer", "prefill tok/s", "decode tok/s"]):
    on, off = mean(runs["on"], i), mean(runs["off"], i)
    print(f"{what}: TLS {on:.2f}, clear text {off:.2f} (TLS / clear {on / off:.3f})")
PY
