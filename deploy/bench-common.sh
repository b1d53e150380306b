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

# The machine a benchmark ran on: the processor's model, the SIMD extensions illm's kernels can use, the cores.
machine_line() {
  local model flags simd=()
  model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2-) "
  for f in avx2:AVX2 fma:FMA f16c:F16C avx_vnni:AVX-VNNI avx512f:AVX-512 avx512_vnni:AVX-512-VNNI avx512_bf16:AVX-512-BF16; do
    [[ "$flags" == *" ${f%%:*} "* ]] && simd+=("${f##*:}")
  done
  echo "machine: ${model:-unknown processor}; SIMD: ${simd[*]:-none beyond SSE}; $(nproc) cores"
}

# For a script that runs illm against llama.cpp on the same files: build/illm must exist ($illm), llama.cpp is built
# once (deploy/llama-cpp.sh: llama_run), $dir is the cache folder SUBDIR for the model files and $py a python3 with
# numpy (Debian's python3-numpy).
against_llama() {  # subdir
  illm=build/illm
  [ -x "$illm" ] || { echo "$bench_name: build $illm first" >&2; exit 2; }
  who=$bench_name
  source deploy/llama-cpp.sh
  build_llama
  dir="$cache/$1"
  mkdir -p "$dir"
  py=$(command -v /usr/bin/python3 || command -v python3)
}
