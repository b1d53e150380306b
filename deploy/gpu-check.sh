#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU and nothing but a C++ compiler, CMake (>= 3.25) and the
# CUDA toolkit: configures the GPU-only build (ILLM_GPU_ONLY: gpu/, its parity tests, illm-gpu-bench),
# builds it on every core, runs the cuda parity tests on the GPU, then illm-gpu-bench (memory yardsticks,
# decode MicroAttention up to 1M tokens, DistAttention over 4 pools, decode throughput at batch 1..256, and
# the runtime part: a 64K-token request moved device to device into 4 device pools, prefilled and decoded
# there through the engine's attention_router, against the same request in one pool) and, where PyTorch is
# installed, its scaled_dot_product_attention on the same decode shapes. Prints every number; about 6
# minutes on an H200. Exits non-zero when a parity test or the runtime part fails, or nothing could run on
# a GPU.
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

step "summary"
echo "parity tests: $([[ $parity -eq 0 ]] && echo passed || echo "FAILED (exit $parity)")"
echo "illm-gpu-bench: $([[ $bench -eq 0 ]] && echo done || echo "FAILED (exit $bench)")"
grep -E "^acceptance:|ids over 4 pools|moves: " "$build/gpu-bench.txt" || true
[[ $parity -eq 0 && $bench -eq 0 ]]
