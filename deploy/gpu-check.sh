#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU and nothing but a C++ compiler, CMake (>= 3.25) and the
# CUDA toolkit: configures the GPU-only build (ILLM_GPU_ONLY: gpu/, its parity tests, illm-gpu-bench),
# builds it on every core, runs the cuda parity tests on the GPU, then illm-gpu-bench (memory yardsticks,
# decode MicroAttention up to 1M tokens, DistAttention over 4 pools, decode throughput at batch 1..256, and
# the runtime part: a 64K-token request moved device to device into 4 device pools, prefilled and decoded
# there through the engine's attention_router, against the same request in one pool) and, where PyTorch is
# installed, its scaled_dot_product_attention on the same decode shapes. Prints every number; about 6
# minutes on an H200. Exits non-zero when a parity test or the runtime part fails, or nothing could run on
# a GPU. With deploy/gpu-bundle (deploy/gpu-bundle.sh), it then builds the whole illm with CUDA on those packages,
# unpacked into a prefix of its own, and generates with it on the GPU the ids of the cpu backend (a tiny random model).
#
# Environment: ILLM_GPU_BUILD (build folder, default build-gpu), CMAKE_CUDA_ARCHITECTURES (default 90: the
# H100/H200; 80;90 for the A100 too), ILLM_BENCH_LAYERS (layers of the llama2-7b model of the decode
# throughput and the runtime part, default 32).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ILLM_GPU_BUILD:-build-gpu}
start=$(date +%s)
step() { printf '\n== %s (at %ds)\n' "$1" $(( $(date +%s) - start )); }

step "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "nvidia-smi: not available"

step "configure $build (GPU-only build)"
cmake -S . -B "$build" -DILLM_GPU_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}"

step "build"
cmake --build "$build" -j"$(nproc)"

step "parity tests on the GPU: every op against the cpu reference, the whole model's greedy tokens"
parity=0
"$build"/tests/gpu/cuda/test_cuda || parity=$?
if [[ $parity -eq 77 ]]; then
  echo "gpu-check: no CUDA device here; nothing was checked"
  exit 77
fi

step "illm-gpu-bench"
bench=0
set +e
"$build"/illm-gpu-bench --layers "${ILLM_BENCH_LAYERS:-32}" --json "$build/gpu-bench.json" | tee "$build/gpu-bench.txt"
bench=${PIPESTATUS[0]}
set -e

step "PyTorch scaled_dot_product_attention on the same decode shapes"
python3 deploy/gpu-sdpa-bench.py --illm-json "$build/gpu-bench.json" ||
  echo "gpu-check: the PyTorch comparison did not run to its end (the figures above stand)"

# The whole illm with CUDA, on the Debian packages deploy/gpu-bundle.sh fetched (the image lacks CAF, UCX and the
# rest): deploy/gpu-whole.sh unpacks them into a prefix of the build's own, finds them there first, runs from there.
whole=skipped
if compgen -G "deploy/gpu-bundle/*.deb" >/dev/null; then
  step "the whole illm on the bundle's packages (unpacked into $build-whole/deps-root)"
  whole=failed
  if bash deploy/gpu-whole.sh "$build-whole"; then
    python3 tests/models/tiny_checkpoints.py "$build-whole/models" >/dev/null  # numpy: tiny random models
    for backend in cuda cpu; do  # the same greedy text on the GPU and on the cpu backend
      "$build-whole/illm" generate --backend $backend --model "$build-whole/models/llama-f32-gguf.gguf" \
        --prompt "Hello there" --max-tokens 12 --temperature 0 --ignore-eos --json | tee "$build-whole/$backend.json"
    done
    python3 -c "import json,sys; a,b=(json.load(open(f'$build-whole/{x}.json'))['token_ids'] for x in ('cuda','cpu')); \
print('the same ids on cuda and cpu:', a == b); sys.exit(a != b)" && whole=built
  fi
else
  echo "gpu-check: no deploy/gpu-bundle (run deploy/gpu-bundle.sh on a Debian 12 machine first): the whole illm is not built"
fi

step "summary"
echo "parity tests: $([[ $parity -eq 0 ]] && echo passed || echo "FAILED (exit $parity)")"
echo "illm-gpu-bench: $([[ $bench -eq 0 ]] && echo done || echo "FAILED (exit $bench)")"
echo "the whole illm with CUDA: $whole"
grep -E "^acceptance:|ids over 4 pools|moves: " "$build/gpu-bench.txt" || true
[[ $parity -eq 0 && $bench -eq 0 && $whole != failed ]]
