#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on illm-gpu-bench's decode shapes: one query token against
fp16 K and V of a llama2-7b or llama3-8b layer at 4K..1M tokens of context. With --illm-json (the file
`illm-gpu-bench --json` writes) illm's MicroAttention figures are printed on the same rows. Exits 0,
saying why, when PyTorch or a CUDA device is missing."""

import argparse
import json
import sys

SHAPES = {"llama2-7b": (32, 32, 128), "llama3-8b": (32, 8, 128)}  # query heads, kv heads, head_dim
CONTEXTS = [4096, 16384, 65536, 262144, 1048576]


def load_illm(path):
    """(shape, context) -> (best us, best GB/s) from illm-gpu-bench --json, or {}."""
    if not path:
        return {}
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"(no illm figures: {e})")
        return {}
    return {(a["shape"], a["context"]): (a["best_us"], a["best_gbps"]) for a in data.get("attention", [])}


def time_call(torch, fn, repeats, per_sample):
    """Best time of one call in seconds, by CUDA events around per_sample back-to-back calls (as
    illm-gpu-bench times its own), after warming up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(repeats):
        start.record()
        for _ in range(per_sample):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / per_sample)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--illm-json", help="illm-gpu-bench --json output, for the side-by-side columns")
    parser.add_argument("--contexts", default=",".join(map(str, CONTEXTS)), help="comma-separated token counts")
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("PyTorch not installed: no scaled_dot_product_attention figures")
        return 0
    if not torch.cuda.is_available():
        print("PyTorch found no CUDA device: no scaled_dot_product_attention figures")
        return 0
    illm = load_illm(args.illm_json)
    contexts = [int(c) for c in args.contexts.split(",") if c]
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}; one query token, fp16 K and V; "
          "GB/s = K and V bytes (unrepeated) / best time")
    print(f"{'shape':<10} {'context':>8} {'KV MiB':>9} {'sdpa us':>10} {'sdpa GB/s':>10} "
          f"{'illm us':>10} {'illm GB/s':>10} {'illm/sdpa':>10}")
    for shape, (heads, kv_heads, dim) in SHAPES.items():
        for context in contexts:
            kv_bytes = context * 2 * kv_heads * dim * 2
            free, _ = torch.cuda.mem_get_info()
            repeat = heads // kv_heads
            if kv_bytes * (1 + repeat) > free * 0.8:
                print(f"{shape:<10} {context:>8}  (left out: does not fit in free device memory)")
                continue
            q = torch.randn(1, heads, 1, dim, device="cuda", dtype=torch.float16)
            k = torch.randn(1, kv_heads, context, dim, device="cuda", dtype=torch.float16)
            v = torch.randn(1, kv_heads, context, dim, device="cuda", dtype=torch.float16)
            try:  # PyTorch >= 2.5 reads grouped K and V directly
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
            except TypeError:  # older: K and V repeated per query head
                k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
                fn = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
            per_sample = max(1, min(64, int((4 << 30) // kv_bytes)))
            repeats = max(5, min(50, int(8e9 // (kv_bytes * per_sample))))
            seconds = time_call(torch, fn, repeats, per_sample)
            row = f"{shape:<10} {context:>8} {kv_bytes / 2**20:>9.1f} {seconds * 1e6:>10.1f} {kv_bytes / seconds / 1e9:>10.0f}"
            if (shape, context) in illm:
                us, gbps = illm[(shape, context)]
                row += f" {us:>10.1f} {gbps:>10.0f} {gbps / (kv_bytes / seconds / 1e9):>10.2f}"
            print(row)
            del q, k, v
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
