#!/usr/bin/env bash
# The whole runtime on a GPU machine (an H100 or H200), every figure printed: builds the whole illm with CUDA on the
# packages of deploy/gpu-bundle (deploy/gpu-whole.sh; run deploy/gpu-bundle.sh on a Debian 12 machine first, the
# device tool carries the bundle with the working tree), then deploy/gpu-runtime.py: a Llama-3-8B-shaped BF16
# checkpoint of random weights written here, one request spread over 4 instances' pools on the GPU against one
# instance (the same greedy ids), `illm serve --backend cuda --instances 4` at concurrency 16 and 64, moves device to
# device against moves staged through pinned host memory over UCX, a cluster of processes on the GPU whose holder and
# owner are SIGKILLed (recovery time, books), and transformers as the reference of the tiny checkpoints.
# Exits non-zero when a check fails. Extra arguments go to deploy/gpu-runtime.py (e.g. --requests 32).
#
# Environment: ILLM_GPU_BUILD (build folder prefix, default build-gpu: the whole build is build-gpu-whole, shared with
# deploy/gpu-check.sh), ILLM_GPU_WORK (checkpoints and prompts, default build-gpu-whole/runtime),
# CMAKE_CUDA_ARCHITECTURES (default 90).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ILLM_GPU_BUILD:-build-gpu}-whole
work=${ILLM_GPU_WORK:-$build/runtime}
start=$(date +%s)
printf '== GPU\n'
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "nvidia-smi: not available"
printf '\n== the whole illm with CUDA on the bundle (%s)\n' "$build"
bash deploy/gpu-whole.sh "$build"
echo "built in $(( $(date +%s) - start )) s"
tokenizer="$build/llama3_1"
mkdir -p "$tokenizer"
cp deploy/gpu-bundle/llama3_1/tokenizer_config.json "$tokenizer/"
gzip -dc deploy/gpu-bundle/llama3_1/tokenizer.json.gz >"$tokenizer/tokenizer.json"
python3 deploy/gpu-runtime.py "$build/illm" "$work" --tokenizer "$tokenizer" "$@"
