#!/usr/bin/env python3
"""Tiny random Hugging Face checkpoints of every architecture the runtime loads, and their logits.

tiny_checkpoints.py OUT [LLAMA31_TOKENIZER_DIR] writes OUT/<name>/ (config.json, generation_config.json, safetensors, some sharded with
model.safetensors.index.json) for Llama (3.1-style scaled RoPE, 2-style, 3.2-style tied), Mistral, Qwen2 (q/k/v
biases) and Qwen3 (q/k norms, a head width of its own) in BF16, F16 and F32, the mixtures of experts (tiny_experts.py)
and gpt-oss (tiny_gpt_oss.py: MXFP4 experts, sliding layers, sinks, YaRN), and OUT/manifest.json: for each one
a prompt, the next 16 greedy ids and the logits of every step, computed by a float64 numpy reference that follows
transformers' modeling code (rotate_half RoPE on the checkpoint's own q/k layout, repeat_kv, the llama3 frequency
blend). Weights are scaled so that logits spread (std >= 1) and greedy outputs vary. Given a folder with Llama
3.1's tokenizer.json and tokenizer_config.json, it also writes llama31-chat: a tiny Llama 3.1 with that
vocabulary (128256 ids) and those files, a model the server can run end to end.
"""
import shutil
import struct
import json
import math
import os
import sys

import numpy as np

import tiny_experts
import tiny_gpt_oss

VOCAB = 320


# ---- Writing ----------------------------------------------------------------------------------------------

def to_bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def stored(a, dtype):
    """(bytes as the file stores them, the values the file holds as float64)."""
    if dtype == "F32":
        s = a.astype(np.float32)
        return s.tobytes(), s.astype(np.float64)
    if dtype == "F16":
        s = a.astype(np.float16)
        return s.tobytes(), s.astype(np.float64)
    bits = to_bf16_bits(a)
    return bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, bytes)."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)


def write_checkpoint(out, weights, dtype, shards, cfg):
    """Stores `weights` (name -> float64 array) in `dtype` (gpt-oss's experts as MXFP4 pairs); returns the values as
    stored."""
    raw, covered = tiny_gpt_oss.hf_tensors(cfg, weights) if tiny_gpt_oss.is_gpt_oss(cfg) else ({}, set())
    as_stored, files = {name: weights[name] for name in covered}, [dict() for _ in range(shards)]
    entries = [(name, stored(a, dtype), a.shape) for name, a in weights.items() if name not in covered]
    entries = [(name, dtype, shape, data, values) for name, (data, values), shape in entries]
    entries += [(name, kind, shape, data, None) for name, (kind, shape, data) in raw.items()]
    for i, (name, kind, shape, data, values) in enumerate(sorted(entries, key=lambda e: e[0])):
        if values is not None:
            as_stored[name] = values.reshape(shape)
        files[i * shards // len(entries)][name] = (kind, shape, data)
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), files[0])
        return as_stored
    index = {"metadata": {"total_size": sum(len(t[2]) for f in files for t in f.values())}, "weight_map": {}}
    for s, f in enumerate(files):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(out, file), f)
        for name in f:
            index["weight_map"][name] = file
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return as_stored


# ---- GGUF ----------------------------------------------------------------------------------------------------

def quantize_q8_0(a):
    """llama.cpp's Q8_0 of each row: blocks of 32 with an f16 scale; (bytes, the values it holds)."""
    rows = a.reshape(-1, 32).astype(np.float32)
    amax = np.abs(rows).max(axis=1)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0)
    q = np.clip(np.sign(rows * inv[:, None]) * np.floor(np.abs(rows * inv[:, None]) + 0.5), -128, 127).astype(np.int8)
    d16 = d.astype(np.float16)
    blocks = b"".join(d16[i].tobytes() + q[i].tobytes() for i in range(len(q)))
    return blocks, (d16.astype(np.float64)[:, None] * q.astype(np.float64)).reshape(a.shape)


GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight", "input_layernorm.weight": "attn_norm.weight",
              "post_attention_layernorm.weight": "ffn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
              "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
              "self_attn.o_proj.weight": "attn_output.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
              "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
              "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
              "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
              "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.router.weight": "ffn_gate_inp.weight"}


def gguf_name(name):
    if name.startswith("model.layers."):
        layer, rest = name[len("model.layers."):].split(".", 1)
        return f"blk.{layer}.{GGUF_NAMES[rest]}"
    return GGUF_NAMES[name]


def llama_permute(w, heads):
    """llama.cpp's converter: q/k rows of each head from rotate_half's halves to adjacent pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_kv(key, value):
    def string(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b
    out = string(key)
    if isinstance(value, bool):
        return out + struct.pack("<IB", 7, value)
    if isinstance(value, int):  # uint32, as llama.cpp writes counts, sizes and token ids
        return out + struct.pack("<II", 4, value)
    if isinstance(value, float):
        return out + struct.pack("<If", 6, value)
    if isinstance(value, str):
        return out + struct.pack("<I", 8) + string(value)
    kind = 8 if isinstance(value[0], str) else 5
    body = b"".join(string(v) if kind == 8 else struct.pack("<i", v) for v in value)
    return out + struct.pack("<IIQ", 9, kind, len(value)) + body


def write_gguf(path, arch, cfg, weights, dtype):
    """The weights (HF names, float64 as the reference holds them) as GGUF in `dtype` (F32, BF16 or Q8_0 for the
    matrices; norms and biases F32, as llama.cpp writes them) with a byte-level vocabulary; returns the values the
    file holds, by HF name (Q8_0 rounds them)."""
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    vocab = cfg["vocab_size"]
    tokens = [bytes([b]).decode("latin-1") for b in range(256)]  # placeholder, replaced below
    alphabet, n = {}, 256
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255
        alphabet[b] = chr(b) if printable else chr(n)
        n += 0 if printable else 1
    # The ASCII bytes of the byte alphabet, pieces of ASCII letters where the other bytes would be (so that every
    # output is valid UTF-8, as llama-server wants), two merged pieces (llama.cpp wants merges), then control tokens.
    tokens = [alphabet[b] for b in range(128)] + [f"x{b}" for b in range(128, 256)] + ["ab", "cd"] + \
        [f"<|t{i}|>" for i in range(258, vocab)]
    kv = [("general.architecture", arch), ("general.alignment", 32),
          (f"{arch}.embedding_length", cfg["hidden_size"]), (f"{arch}.feed_forward_length", cfg["intermediate_size"]),
          (f"{arch}.block_count", cfg["num_hidden_layers"]), (f"{arch}.attention.head_count", heads),
          (f"{arch}.attention.head_count_kv", kv_heads), (f"{arch}.context_length", cfg["max_position_embeddings"]),
          (f"{arch}.rope.freq_base", float(cfg["rope_theta"])),
          (f"{arch}.attention.layer_norm_rms_epsilon", float(cfg["rms_norm_eps"])),
          ("tokenizer.ggml.model", "gpt2"),
          ("tokenizer.ggml.pre", {"llama": "llama-bpe", "gpt-oss": "gpt-4o"}.get(arch, "qwen2")),
          ("tokenizer.ggml.tokens", tokens), ("tokenizer.ggml.token_type", [1] * 258 + [3] * (vocab - 258)),
          ("tokenizer.ggml.merges", ["a b", "c d"]), ("tokenizer.ggml.bos_token_id", 258),
          ("tokenizer.ggml.eos_token_id", 259), ("tokenizer.ggml.add_bos_token", False)]
    if "head_dim" in cfg:
        kv += [(f"{arch}.attention.key_length", cfg["head_dim"]), (f"{arch}.attention.value_length", cfg["head_dim"])]
    if tiny_experts.style(cfg):
        kv += tiny_experts.gguf_metadata(cfg, arch)
    groups, grouped = tiny_experts.gguf_groups(cfg, weights) if tiny_experts.style(cfg) else ([], set())
    raw = []
    if tiny_gpt_oss.is_gpt_oss(cfg):
        kv += tiny_gpt_oss.gguf_metadata(cfg, arch)
        raw, grouped = tiny_gpt_oss.gguf_tensors(cfg, weights, lambda a: stored(a, "F32")[0])
    groups += [(gguf_name(name), [name], False) for name in weights if name not in grouped]
    held, infos, blobs, offset = {name: weights[name] for name in grouped if name in weights}, [], [], 0
    for name, dims, ggml, data in raw:  # written as they are: values the reference holds exactly
        infos.append((name, dims, ggml, offset))
        blobs.append(data + b"\0" * (-len(data) % 32))
        offset += len(blobs[-1])
    for gguf, members, vector in sorted(groups):
        a = np.stack([weights[n] for n in members]) if len(members) > 1 else weights[members[0]]
        a = a.reshape(-1) if vector else a
        stored_a = a
        if arch == "llama" and gguf.endswith(("attn_q.weight", "attn_k.weight")):
            stored_a = llama_permute(a, heads if "attn_q" in gguf else kv_heads)
        matrix = a.ndim >= 2
        if dtype == "Q8_0" and matrix:
            data, values, ggml = *quantize_q8_0(stored_a), 8
        else:
            kind = dtype if matrix and dtype != "Q8_0" else "F32"
            data, values = stored(stored_a, kind)
            ggml = {"F32": 0, "F16": 1, "BF16": 30}[kind]
        values = values.reshape(a.shape)
        if arch == "llama" and gguf.endswith(("attn_q.weight", "attn_k.weight")):  # back to the HF layout
            n_heads = heads if "attn_q" in gguf else kv_heads
            values = values.reshape(n_heads, values.shape[0] // n_heads // 2, 2, -1).swapaxes(1, 2).reshape(a.shape)
        for i, name in enumerate(members):
            held[name] = (values[i] if len(members) > 1 else values).reshape(weights[name].shape)
        infos.append((gguf, list(reversed(a.shape)), ggml, offset))
        blobs.append(data + b"\0" * (-len(data) % 32))
        offset += len(blobs[-1])
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if scaling and (scaling.get("rope_type") or scaling.get("type")) == "llama3":  # llama.cpp's rope_freqs
        hd = cfg.get("head_dim", cfg["hidden_size"] // heads)
        base = cfg["rope_theta"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        factors = base / inverse_frequencies(cfg, hd)
        data = factors.astype(np.float32).tobytes()
        infos.append(("rope_freqs.weight", [len(factors)], 0, offset))
        blobs.append(data + b"\0" * (-len(data) % 32))
        offset += len(blobs[-1])
    header = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kv)) + b"".join(gguf_kv(k, v) for k, v in kv)
    for name, dims, ggml, off in infos:
        b = name.encode()
        header += struct.pack("<Q", len(b)) + b + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        header += struct.pack("<IQ", ggml, off)
    header += b"\0" * (-len(header) % 32)
    with open(path, "wb") as f:
        f.write(header)
        for blob in blobs:
            f.write(blob)
    return held


# GGUF files of some of the models: name, the model it is made from, architecture, dtype.
GGUF_MODELS = [
    ("llama-f32-gguf", "llama2-f32-sharded", "llama", "F32"),
    ("llama31-bf16-gguf", "llama31-bf16", "llama", "BF16"),
    ("llama-q8_0-gguf", "llama2-f32-sharded", "llama", "Q8_0"),
    ("qwen2-bf16-gguf", "qwen2-bf16", "qwen2", "BF16"),
    ("qwen3-q8_0-gguf", "qwen3-bf16", "qwen3", "Q8_0"),
    ("mixtral-bf16-gguf", "mixtral-bf16", "llama", "BF16"),
    ("qwen2moe-f32-gguf", "qwen2moe-bf16", "qwen2moe", "F32"),
    ("qwen3moe-bf16-gguf", "qwen3moe-bf16", "qwen3moe", "BF16"),
    ("gpt-oss-mxfp4-gguf", "gpt-oss-mxfp4", "gpt-oss", "BF16"),
]


# ---- The models ---------------------------------------------------------------------------------------------

def make_weights(cfg, rng):
    d, h, heads = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", d // heads)
    tied = cfg["tie_word_embeddings"]
    qwen2, qwen3 = cfg["architectures"][0].startswith("Qwen2"), cfg["architectures"][0].startswith("Qwen3")

    def matrix(rows, cols, scale=1.0):
        return rng.normal(0.0, scale / math.sqrt(cols), size=(rows, cols))

    def norm(n):
        return 1.0 + 0.1 * rng.normal(size=n)

    # Tied: the embedding is the classifier; std 0.3 gives logits of std ~2.4 at width 64.
    vocab = cfg["vocab_size"]
    w = {"model.embed_tokens.weight": rng.normal(0.0, 0.3 if tied else 1.0, size=(vocab, d)),
         "model.norm.weight": norm(d)}
    if not tied:
        w["lm_head.weight"] = matrix(vocab, d, 2.5)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        w[p + "self_attn.q_proj.weight"] = matrix(heads * hd, d)
        w[p + "self_attn.k_proj.weight"] = matrix(kv * hd, d, 2.0)
        w[p + "self_attn.v_proj.weight"] = matrix(kv * hd, d)
        # The layers' outputs outweigh the embedding in the residual, so a tied classifier does not echo its input.
        w[p + "self_attn.o_proj.weight"] = matrix(d, heads * hd, 3.0)
        if not tiny_experts.style(cfg) and not tiny_gpt_oss.is_gpt_oss(cfg):
            w[p + "mlp.gate_proj.weight"] = matrix(h, d)
            w[p + "mlp.up_proj.weight"] = matrix(h, d)
            w[p + "mlp.down_proj.weight"] = matrix(d, h, 3.0)
        if qwen2:
            for x, n in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
                w[p + f"self_attn.{x}_proj.bias"] = 0.2 * rng.normal(size=n)
        if qwen3:
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
    if tiny_experts.style(cfg):
        tiny_experts.make_expert_weights(cfg, rng, matrix, w)
    if tiny_gpt_oss.is_gpt_oss(cfg):
        tiny_gpt_oss.make_weights(cfg, rng, matrix, w)
    return w


def base_config(arch, **extra):
    cfg = {"architectures": [arch], "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": VOCAB, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2}
    cfg.update(extra)
    return cfg


MODELS = [
    # name, config, dtype, shards
    ("llama31-bf16", base_config("LlamaForCausalLM", rope_theta=500000.0, eos_token_id=[2, 3],
                                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                                 max_position_embeddings=131072), "BF16", 1),
    ("llama2-f32-sharded", base_config("LlamaForCausalLM", num_key_value_heads=4), "F32", 3),
    ("llama32-tied-f16", base_config("LlamaForCausalLM", tie_word_embeddings=True, rope_theta=500000.0,
                                     rope_parameters={"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 8192}), "F16", 1),
    ("mistral-bf16", base_config("MistralForCausalLM", sliding_window=None, rope_theta=1000000.0), "BF16", 1),
    ("qwen2-bf16", base_config("Qwen2ForCausalLM", tie_word_embeddings=True, use_sliding_window=False,
                               sliding_window=32768, rope_theta=1000000.0, rms_norm_eps=1e-6), "BF16", 2),
    ("qwen3-bf16", base_config("Qwen3ForCausalLM", head_dim=32, rope_theta=1000000.0, rms_norm_eps=1e-6), "BF16", 1),
]

# Mixtures of experts, seeded apart from the dense models (2000 + their index, tried again until ROUTER_MARGIN holds).
EXPERT_MODELS = [
    ("mixtral-bf16", base_config("MixtralForCausalLM", intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                                 sliding_window=None, rope_theta=1000000.0), "BF16", 1),
    ("qwen2moe-bf16", base_config("Qwen2MoeForCausalLM", moe_intermediate_size=32, num_experts=8, num_experts_per_tok=4,
                                  shared_expert_intermediate_size=64, norm_topk_prob=False, decoder_sparse_step=1,
                                  mlp_only_layers=[], use_sliding_window=False, rope_theta=1000000.0,
                                  rms_norm_eps=1e-6), "BF16", 2),
    ("qwen3moe-bf16", base_config("Qwen3MoeForCausalLM", head_dim=32, moe_intermediate_size=32, num_experts=8,
                                  num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                                  mlp_only_layers=[], rope_theta=1000000.0, rms_norm_eps=1e-6), "BF16", 1),
    # Its experts MXFP4 (the rest BF16), every other layer sliding over 8 positions, YaRN not rounded to whole pairs.
    ("gpt-oss-mxfp4", base_config("GptOssForCausalLM", intermediate_size=32, head_dim=32, num_local_experts=8,
                                  num_experts_per_tok=4, experts_per_token=4, sliding_window=8,
                                  layer_types=["sliding_attention", "full_attention"], attention_bias=True,
                                  rope_theta=150000.0, max_position_embeddings=131072, swiglu_limit=7.0,
                                  rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                                "beta_slow": 1.0, "original_max_position_embeddings": 4096,
                                                "truncate": False},
                                  quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": [
                                      "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                      "lm_head"]}), "BF16", 2),
]

# The least gap between a token's k-th and (k+1)-th router logits a mixture of experts' reference run may have: the
# engine's logits of 16-bit and fp32 weights differ from float64's by far less, so no expert flips between them.
ROUTER_MARGIN = 0.02


# ---- The reference: transformers' modeling code in float64 ----------------------------------------------------

def yarn_frequencies(cfg, hd, inv, scaling):
    """transformers' _compute_yarn_parameters: pairs turning more than beta_fast times over the original context kept,
    fewer than beta_slow divided by the factor, a linear ramp between (its ends rounded out unless truncate is false)."""
    base, factor, old = cfg["rope_theta"], scaling["factor"], scaling["original_max_position_embeddings"]

    def pair(turns):
        return hd * math.log(old / (turns * 2 * math.pi)) / (2 * math.log(base))
    low, high = pair(scaling.get("beta_fast", 32)), pair(scaling.get("beta_slow", 1))
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, hd - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(hd // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    return inv / factor * ramp + inv * (1 - ramp)


def rope_magnitude(cfg):
    """What YaRN scales cos and sin by (its attention factor), else 1."""
    scaling = cfg.get("rope_scaling") or {}
    if scaling.get("rope_type") != "yarn":
        return 1.0
    return 0.1 * math.log(scaling["factor"]) + 1.0


def inverse_frequencies(cfg, hd):
    inv = 1.0 / (cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    kind = scaling and (scaling.get("rope_type") or scaling.get("type"))
    if kind == "yarn":
        return yarn_frequencies(cfg, hd, inv, scaling)
    if kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        inv = np.where(medium, smoothed, scaled)
    return inv


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def quantized_activations(x, block):
    """x as the engine's products with block-type weights see it: each block of `block` values of a row quantized to
    int8 with scale max|x| / 127, in float32 arithmetic as the engine does it."""
    rows = x.astype(np.float32).reshape(-1, block)
    amax = np.abs(rows).max(axis=1, keepdims=True)
    inverse = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    t = (rows * inverse).astype(np.float32)
    q = np.trunc(t + np.where(t >= 0, np.float32(0.5), np.float32(-0.5)))
    return (q * (amax / np.float32(127))).astype(np.float64).reshape(x.shape)


def forward(cfg, w, ids, block=0, margins=None):
    """Logits [len(ids)][vocab] of the whole sequence; with `block`, every product's activations quantized in blocks
    of that many values first (the engine's products with block-type weights). A mixture of experts appends its
    router margins to `margins`."""
    def mm(x, m):
        return (quantized_activations(x, block) if block else x) @ m.T

    d, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, n = cfg.get("head_dim", d // heads), cfg["rms_norm_eps"], len(ids)
    freqs = np.outer(np.arange(n, dtype=np.float64), inverse_frequencies(cfg, hd))
    emb = np.concatenate([freqs, freqs], axis=-1)
    magnitude = rope_magnitude(cfg)
    cos, sin = magnitude * np.cos(emb)[:, None, :], magnitude * np.sin(emb)[:, None, :]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    # A sliding layer's query sees its last sliding_window positions.
    too_old = np.tril(np.full((n, n), -np.inf), -cfg["sliding_window"]) if tiny_gpt_oss.is_gpt_oss(cfg) else 0
    x = w["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        proj = {}
        for name in "qkv":
            proj[name] = mm(h, w[p + f"self_attn.{name}_proj.weight"])
            if p + f"self_attn.{name}_proj.bias" in w:
                proj[name] = proj[name] + w[p + f"self_attn.{name}_proj.bias"]
        q = proj["q"].reshape(n, heads, hd)
        k = proj["k"].reshape(n, kv, hd)
        v = proj["v"].reshape(n, kv, hd)
        if p + "self_attn.q_norm.weight" in w:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, heads // kv, axis=1)
        v = np.repeat(v, heads // kv, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask
        if tiny_gpt_oss.sliding(cfg, l):
            scores = scores + too_old
        sinks = p + "self_attn.sinks" in w  # a logit per head in the denominator (gpt-oss)
        if sinks:
            scores = np.concatenate([scores, np.broadcast_to(w[p + "self_attn.sinks"][:, None, None], (heads, n, 1))], -1)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        if sinks:
            scores = scores[..., :-1]
        o = np.einsum("hqk,khd->qhd", scores, v).reshape(n, heads * hd)
        x = x + mm(o, w[p + "self_attn.o_proj.weight"])
        if p + "self_attn.o_proj.bias" in w:
            x = x + w[p + "self_attn.o_proj.bias"]
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        if tiny_gpt_oss.is_gpt_oss(cfg):  # MXFP4 experts: their products see int8 activations
            x = x + tiny_gpt_oss.feed_forward(cfg, w, l, h, mm, lambda a, m: quantized_activations(a, 32) @ m.T,
                                              [] if margins is None else margins)
            continue
        if tiny_experts.style(cfg):
            x = x + tiny_experts.feed_forward(cfg, w, l, h, mm, [] if margins is None else margins)
            continue
        gate = mm(h, w[p + "mlp.gate_proj.weight"])
        up = mm(h, w[p + "mlp.up_proj.weight"])
        x = x + mm(gate / (1 + np.exp(-gate)) * up, w[p + "mlp.down_proj.weight"])
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return mm(x, head)


def prompt_logprobs(cfg, w, prompt):
    """The log probability of each prompt token after the first, given those before it (an echo's values), and how
    far each of those positions' log probabilities spread over the vocabulary (the mean of max - min)."""
    logits = forward(cfg, w, prompt)
    out, spread = [], []
    for p in range(1, len(prompt)):
        row = logits[p - 1]
        top = row.max()
        out.append(float(row[prompt[p]] - top - np.log(np.exp(row - top).sum())))
        spread.append(float(top - row.min()))
    return out, float(np.mean(spread))


def greedy(cfg, w, prompt, n_new, block=0, margins=None):
    ids, logits = list(prompt), []
    for _ in range(n_new):
        last = forward(cfg, w, ids, block, margins)[-1]
        logits.append(last)
        ids.append(int(np.argmax(last)))
    return ids[len(prompt):], logits


def seeded_weights(cfg, dtype, seed):
    """(weights, prompt) of a model drawn from `seed`; for a mixture of experts, from the first of seed, seed + 7919,
    ... whose reference run on the values `dtype` stores keeps every token's router margin at least ROUTER_MARGIN."""
    for attempt in range(200):
        rng = np.random.default_rng(seed + 7919 * attempt)
        weights = make_weights(cfg, rng)
        prompt = [int(t) for t in rng.integers(3, cfg["vocab_size"], size=11)]
        if not tiny_experts.style(cfg) and not tiny_gpt_oss.is_gpt_oss(cfg):
            return weights, prompt
        margins = []
        greedy(cfg, {n: stored(a, dtype)[1].reshape(a.shape) for n, a in weights.items()}, prompt, 16, 0, margins)
        if min(margins) >= ROUTER_MARGIN:
            return weights, prompt
    sys.exit(f"{cfg['architectures'][0]}: no seed keeps the router margins above {ROUTER_MARGIN}")


def listed_dtype(cfg, dtype):
    """The manifest's type of a model: MXFP4 where its experts are (the engine rounds their activations to 8 bits)."""
    return "MXFP4" if tiny_gpt_oss.is_gpt_oss(cfg) else dtype


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: tiny_checkpoints.py OUT [LLAMA31_TOKENIZER_DIR]")
    out = sys.argv[1]
    models = list(MODELS)
    if len(sys.argv) == 3:
        models.append(("llama31-chat", dict(MODELS[0][1], vocab_size=128256, bos_token_id=128000,
                                            eos_token_id=[128001, 128008, 128009]), "BF16", 1))
    seeds = [1000 + i for i in range(len(models))] + [2000 + i for i in range(len(EXPERT_MODELS))]
    manifest, held = [], {}
    for (name, cfg, dtype, shards), seed in zip(models + EXPERT_MODELS, seeds):
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        drawn, prompt = seeded_weights(cfg, dtype, seed)
        weights = write_checkpoint(folder, drawn, dtype, shards, cfg)
        cfg = dict(cfg, torch_dtype={"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype])
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        with open(os.path.join(folder, "generation_config.json"), "w") as f:
            eos = cfg["eos_token_id"] if isinstance(cfg["eos_token_id"], list) else [cfg["eos_token_id"]]
            extra = [7] if cfg["vocab_size"] == VOCAB else []  # an end id only generation_config.json names
            json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": eos + extra, "temperature": 0.6,
                       "top_p": 0.9}, f, indent=2)
        if name == "llama31-chat":
            for file in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(sys.argv[2], file), os.path.join(folder, file))
        ids, logits = greedy(cfg, weights, prompt, 16)
        spread = float(np.mean([np.std(row) for row in logits]))
        manifest.append({"name": name, "path": name, "format": "hf", "dtype": listed_dtype(cfg, dtype), "prompt": prompt, "ids": ids,
                         "logit_std": spread, "logits": [[round(float(v), 7) for v in row] for row in logits],
                         **dict(zip(("prompt_logprobs", "prompt_logprob_spread"), prompt_logprobs(cfg, weights, prompt)))})
        print(f"{name}: {dtype}, {shards} file(s), greedy {ids}, logit std {spread:.2f}")
        held[name] = (cfg, weights, prompt)
    for name, source, arch, dtype in GGUF_MODELS:
        cfg, weights, prompt = held[source]
        values = write_gguf(os.path.join(out, name + ".gguf"), arch, cfg, weights, dtype)
        ids, logits = greedy(cfg, values, prompt, 16, 32 if dtype == "Q8_0" else 0)
        spread = float(np.mean([np.std(row) for row in logits]))
        manifest.append({"name": name, "path": name + ".gguf", "format": "gguf", "dtype": listed_dtype(cfg, dtype), "prompt": prompt,
                         "ids": ids, "logit_std": spread, "logits": [[round(float(v), 7) for v in row] for row in logits]})
        print(f"{name}: GGUF {arch} {dtype}, greedy {ids}, logit std {spread:.2f}")
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f)


if __name__ == "__main__":
    main()
