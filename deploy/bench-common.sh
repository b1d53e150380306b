# What the benchmark scripts share (sourced, not run): a work folder and a server that go away with the script,
# a free port, and the wait for a server's /health.
#   source deploy/bench-common.sh NAME   (NAME prefixes the messages)

bench_name="$1"
work=$(mktemp -d)
server=0
cleanup() {
  [ "$server" -ne 0 ] && kill -TERM "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Waits up to SECONDS (default 120) for the server $server at PORT to answer /health; shows LOG and exits 1 if it
# dies or never does.
wait_healthy() {  # port log [seconds]
  local seconds=${3:-120}
  for _ in $(seq $((seconds * 5))); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null && return
    kill -0 "$server" 2>/dev/null || { cat "$2" >&2; exit 1; }
    sleep 0.2
  done
  echo "$bench_name: no /health after $seconds s" >&2
  exit 1
}
