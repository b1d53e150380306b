#!/usr/bin/env bash
# The run command: installs the dependencies, fetches the model, builds, then runs the main job: the
# embedded default of `illm serve` (a gManager and its instances in one process, on the real model)
# behind the OpenAI-compatible API on 127.0.0.1:8000. It shows how to call the service with a
# completion and a streamed chat completion, then serves until Ctrl-C (or SIGTERM), which drains it.
# Extra arguments go to `illm serve` (e.g. --port 9000 --instances 4 --config deploy/configs/serve.json).
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
deploy/fetch-model.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="80;90" >/dev/null  # test.sh makes 90 only
cmake --build build -j2

# The port to show the calls on: the one given, else the default (passed on only when not given).
port=8000
args=("$@")
port_given=0
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[$i]}" in
    --port) if [ $((i + 1)) -lt ${#args[@]} ]; then port="${args[$((i + 1))]}"; port_given=1; fi ;;
    --port=*) port="${args[$i]#--port=}"; port_given=1 ;;
  esac
done
if [ $port_given -eq 0 ]; then args=(--port "$port" "${args[@]}"); fi

build/illm serve "${args[@]}" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null; wait "$server"' INT TERM
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 "$server" 2>/dev/null || { wait "$server"; exit 1; }
  sleep 0.1
done

echo
echo "== curl http://127.0.0.1:$port/v1/completions"
curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 60, "temperature": 0}'
echo
echo
echo "== curl -N http://127.0.0.1:$port/v1/chat/completions (stream)"
curl -sN "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "stories15M", "messages": [{"role": "user", "content": "Lily and Ben"}], "max_tokens": 24, "stream": true}'
echo
echo "Serving on http://127.0.0.1:$port (OpenAI API under /v1, /health, /metrics). Ctrl-C stops it."
echo "Replay a trace against it: build/illm bench --url http://127.0.0.1:$port --trace tests/data/traces/azure2023_conv.csv --limit 50 --max-input-tokens 256"
wait "$server"
