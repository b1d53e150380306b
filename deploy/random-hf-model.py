#!/usr/bin/env python3
"""random-hf-model.py SHAPE OUT [TOKENIZER_DIR]: a Hugging Face folder of random BF16 weights in a real model's
shape, for load-time, memory and speed measurements (no real weights are reachable here). SHAPE: llama3.2-1b,
llama3.2-3b, llama3-8b, qwen2.5-0.5b, tiny-llama3. Weights are written tensor by tensor (the memory this script needs is
one pool's), in shards of about 2 GB with model.safetensors.index.json; TOKENIZER_DIR's tokenizer.json and
tokenizer_config.json are copied beside them when given (its vocabulary must fit the shape's).

Each weight is uniform in magnitude within [2^e, 2^(e+1)) (e: the exponent of 1/sqrt(fan-in); norms in [1, 2)),
with a random sign and mantissa: slices of one pool of random BF16 bits at random offsets, written as they are
sliced, so an 8B checkpoint is written at the speed of the disk (about 16 GB), not of a random number generator.
Shape "tiny-llama3" (2 layers, hidden 256, Llama 3's vocabulary) stands in for llama3-8b where a test runs on a
CPU."""
import json
import os
import shutil
import sys

import numpy as np

SHAPES = {
    "llama3.2-1b": dict(arch="LlamaForCausalLM", hidden=2048, ffn=8192, layers=16, heads=32, kv=8, vocab=128256,
                        tied=True, theta=500000.0, ctx=131072,
                        scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192}),
    "llama3.2-3b": dict(arch="LlamaForCausalLM", hidden=3072, ffn=8192, layers=28, heads=24, kv=8, vocab=128256,
                        tied=True, theta=500000.0, ctx=131072,
                        scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192}),
    "llama3-8b": dict(arch="LlamaForCausalLM", hidden=4096, ffn=14336, layers=32, heads=32, kv=8, vocab=128256,
                      tied=False, theta=500000.0, ctx=8192, scaling=None),
    "tiny-llama3": dict(arch="LlamaForCausalLM", hidden=256, ffn=512, layers=2, heads=8, kv=2, vocab=128256,
                        tied=False, theta=500000.0, ctx=8192, scaling=None),
    "qwen2.5-0.5b": dict(arch="Qwen2ForCausalLM", hidden=896, ffn=4864, layers=24, heads=14, kv=2, vocab=151936,
                         tied=True, theta=1000000.0, ctx=32768, scaling=None),
}


POOL_ELEMENTS = 1 << 25  # 64 MiB of random BF16 bits


class RandomBf16:
    """Random BF16 weights of a given magnitude, sliced from one pool of random bits."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.bits = self.rng.integers(0, 1 << 16, POOL_ELEMENTS, dtype=np.uint16)
        self.pools = {}  # exponent -> the pool with that exponent: sign and 7 mantissa bits random

    def pool(self, exponent):
        if exponent not in self.pools:
            self.pools[exponent] = (self.bits & np.uint16(0x807F)) | np.uint16((127 + exponent) << 7)
        return self.pools[exponent]

    def write(self, f, n, scale, positive=False):
        """Writes n weights of magnitude in [2^e, 2^(e+1)), e = floor(log2(scale)); positive: no sign bit."""
        pool = self.pool(int(np.floor(np.log2(scale))))
        if positive:
            pool = pool & np.uint16(0x7FFF)
        at = int(self.rng.integers(0, POOL_ELEMENTS))
        while n > 0:
            k = min(n, POOL_ELEMENTS - at)
            f.write(pool[at:at + k].tobytes())
            n -= k
            at = 0


def tensors(s):
    d, h, hd = s["hidden"], s["ffn"], s["hidden"] // s["heads"]
    yield "model.embed_tokens.weight", (s["vocab"], d)
    for l in range(s["layers"]):
        p = f"model.layers.{l}."
        yield p + "input_layernorm.weight", (d,)
        yield p + "self_attn.q_proj.weight", (s["heads"] * hd, d)
        yield p + "self_attn.k_proj.weight", (s["kv"] * hd, d)
        yield p + "self_attn.v_proj.weight", (s["kv"] * hd, d)
        if s["arch"] == "Qwen2ForCausalLM":
            yield p + "self_attn.q_proj.bias", (s["heads"] * hd,)
            yield p + "self_attn.k_proj.bias", (s["kv"] * hd,)
            yield p + "self_attn.v_proj.bias", (s["kv"] * hd,)
        yield p + "self_attn.o_proj.weight", (d, s["heads"] * hd)
        yield p + "post_attention_layernorm.weight", (d,)
        yield p + "mlp.gate_proj.weight", (h, d)
        yield p + "mlp.up_proj.weight", (h, d)
        yield p + "mlp.down_proj.weight", (d, h)
    yield "model.norm.weight", (d,)
    if not s["tied"]:
        yield "lm_head.weight", (s["vocab"], d)


def main():
    shape, out = sys.argv[1], sys.argv[2]
    s = SHAPES[shape]
    os.makedirs(out, exist_ok=True)
    weights = RandomBf16(0)
    shards, current, size = [], [], 0
    for name, dims in tensors(s):
        n = int(np.prod(dims))
        if current and size + 2 * n > 2 << 30:
            shards.append(current)
            current, size = [], 0
        current.append((name, dims))
        size += 2 * n
    shards.append(current)
    index = {"metadata": {}, "weight_map": {}}
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {}, 0
        for name, dims in shard:
            header[name] = {"dtype": "BF16", "shape": list(dims), "data_offsets": [offset, offset + 2 * int(np.prod(dims))]}
            offset += 2 * int(np.prod(dims))
            index["weight_map"][name] = file
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(out, file), "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            for name, dims in shard:
                norm = name.endswith("norm.weight")
                weights.write(f, int(np.prod(dims)), 1.0 if norm else 1.0 / np.sqrt(dims[-1]), positive=norm)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    config = {"architectures": [s["arch"]], "hidden_size": s["hidden"], "intermediate_size": s["ffn"],
              "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"], "num_key_value_heads": s["kv"],
              "vocab_size": s["vocab"], "max_position_embeddings": s["ctx"], "rms_norm_eps": 1e-5,
              "rope_theta": s["theta"], "rope_scaling": s["scaling"], "hidden_act": "silu",
              "tie_word_embeddings": s["tied"], "torch_dtype": "bfloat16"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if len(sys.argv) > 3:
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(sys.argv[3], file), os.path.join(out, file))


if __name__ == "__main__":
    main()
