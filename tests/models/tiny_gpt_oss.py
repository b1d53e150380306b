"""The gpt-oss half of tiny_checkpoints.py: its random weights (the experts in MXFP4, as the released checkpoints hold
them: each block's codes drawn with one of +-12 among them, so that gguf-py's quantizer picks the same exponent back
and the values are exact), its feed-forward in the float64 reference (transformers' GptOssTopKRouter and GptOssExperts:
the router's logits plus its bias, a softmax over the top k, each expert's interleaved gate and up rows with biases,
the gate clamped above at swiglu_limit and the up value to [-limit, limit], gate * sigmoid(1.702 gate) * (up + 1),
the down rows with a bias; the experts' products see activations rounded to int8 in blocks of 32, as the engine's
and llama.cpp's MXFP4 products do), and its two file layouts: transformers' _blocks/_scales pairs (value 2j in the
low nibble of byte j) and GGUF's MXFP4 blocks (exponent byte, then value j in the low nibble of byte j and j + 16 in
the high one) with llama.cpp's gpt-oss names."""
import numpy as np

# Twice the E2M1 values of the 16 codes (ggml's kvalues); a block's values are 2^(e - 128) times these.
LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float64)


def is_gpt_oss(cfg):
    return cfg["architectures"][0] == "GptOssForCausalLM"


def sliding(cfg, layer):
    return is_gpt_oss(cfg) and cfg["layer_types"][layer] == "sliding_attention"


def mxfp4_values(rng, shape, std):
    """Random MXFP4 values of `shape` (the last a multiple of 32) of about `std`: random codes with a +-12 in every
    block, and an exponent per block within one of the one that gives `std`."""
    codes = rng.integers(0, 16, size=shape).reshape(-1, 32)
    codes[np.arange(len(codes)), rng.integers(0, 32, size=len(codes))] = rng.choice([7, 15], size=len(codes))
    base = 128 + int(np.round(np.log2(std / np.sqrt(np.mean(LEVELS ** 2)))))
    exponents = base + rng.integers(-1, 2, size=len(codes))
    return (np.ldexp(1.0, exponents - 128)[:, None] * LEVELS[codes]).reshape(shape)


def mxfp4_encode(values):
    """(codes [..., n], exponents [..., n / 32]) of values that MXFP4 holds exactly, the exponent as gguf-py picks it."""
    blocks = values.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    exponents = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - 2 + 127, 0).astype(np.int64)
    levels = blocks / np.ldexp(1.0, exponents - 128)[:, None]
    codes = np.argmin(np.abs(levels[..., None] - LEVELS), axis=-1)
    assert np.array_equal(LEVELS[codes], levels), "values that MXFP4 does not hold"
    return codes.reshape(values.shape).astype(np.uint8), exponents.reshape(values.shape[:-1] + (-1,)).astype(np.uint8)


def hf_pair(values):
    """transformers' (_blocks [..., groups, 16], _scales [..., groups]) bytes of MXFP4 values [..., n]."""
    codes, exponents = mxfp4_encode(values)
    pairs = codes.reshape(values.shape[:-1] + (-1, 16, 2))
    return (pairs[..., 0] | (pairs[..., 1] << 4)).astype(np.uint8), exponents


def gguf_blocks(values):
    """GGUF's MXFP4 bytes of values [..., n]: per block its exponent, then codes j | codes j + 16 << 4."""
    codes, exponents = mxfp4_encode(values)
    blocks = codes.reshape(-1, 2, 16)
    packed = (blocks[:, 0] | (blocks[:, 1] << 4)).astype(np.uint8)
    return np.concatenate([exponents.reshape(-1, 1), packed], axis=1).tobytes()


def names(layer):
    p = f"model.layers.{layer}."
    return {"router": p + "mlp.router.weight", "router_bias": p + "mlp.router.bias",
            "gate_up": p + "mlp.experts.gate_up_proj", "gate_up_bias": p + "mlp.experts.gate_up_proj_bias",
            "down": p + "mlp.experts.down_proj", "down_bias": p + "mlp.experts.down_proj_bias",
            "o_bias": p + "self_attn.o_proj.bias", "sinks": p + "self_attn.sinks"}


def make_weights(cfg, rng, matrix, w):
    """Adds each layer's q/k/v/o biases, sinks, router and experts to `w` (experts [experts][out][in], MXFP4)."""
    d, h, e = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_local_experts"]
    heads, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    for layer in range(cfg["num_hidden_layers"]):
        n, p = names(layer), f"model.layers.{layer}."
        for x, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
            w[p + f"self_attn.{x}_proj.bias"] = 0.2 * rng.normal(size=rows)
        w[n["o_bias"]] = 0.2 * rng.normal(size=d)
        w[n["sinks"]] = rng.normal(size=heads)
        w[n["router"]] = matrix(e, d, 4.0)
        w[n["router_bias"]] = 0.5 * rng.normal(size=e)
        w[n["gate_up"]] = mxfp4_values(rng, (e, 2 * h, d), 1.5 / np.sqrt(d))
        w[n["gate_up_bias"]] = 0.2 * rng.normal(size=(e, 2 * h))
        w[n["down"]] = mxfp4_values(rng, (e, d, h), 3.0 / np.sqrt(h))
        w[n["down_bias"]] = 0.2 * rng.normal(size=(e, d))


def feed_forward(cfg, w, layer, h, mm, expert_mm, margins):
    """The layer's experts on rows h [n][dim]; appends each row's gap between its k-th and (k+1)-th router logits."""
    n, k, limit = names(layer), cfg["num_experts_per_tok"], cfg.get("swiglu_limit", 7.0)
    logits = mm(h, w[n["router"]]) + w[n["router_bias"]]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        order = np.argsort(-logits[t], kind="stable")
        margins.append(logits[t][order[k - 1]] - logits[t][order[k]])
        chosen = order[:k]
        weights = np.exp(logits[t][chosen] - logits[t][chosen].max())
        weights /= weights.sum()
        for e, weight in zip(chosen, weights):
            gate_up = expert_mm(h[t:t + 1], w[n["gate_up"]][e]) + w[n["gate_up_bias"]][e]
            gate, up = np.minimum(gate_up[:, ::2], limit), np.clip(gate_up[:, 1::2], -limit, limit)
            glu = gate / (1 + np.exp(-1.702 * gate)) * (up + 1)
            out[t] += weight * (expert_mm(glu, w[n["down"]][e]) + w[n["down_bias"]][e])[0]
    return out


def hf_tensors(cfg, weights):
    """The checkpoint's tensors (name -> (dtype, shape, bytes)) of the experts, as MXFP4 pairs, and the names they
    cover; the rest is stored as the other models' tensors are."""
    out, covered = {}, set()
    for layer in range(cfg["num_hidden_layers"]):
        n = names(layer)
        for kind in ("gate_up", "down"):
            blocks, scales = hf_pair(weights[n[kind]])
            out[n[kind] + "_blocks"] = ("U8", blocks.shape, blocks.tobytes())
            out[n[kind] + "_scales"] = ("U8", scales.shape, scales.tobytes())
            covered.add(n[kind])
    return out, covered


def gguf_metadata(cfg, arch):
    scaling = cfg["rope_scaling"]
    return [(f"{arch}.expert_count", cfg["num_local_experts"]), (f"{arch}.expert_used_count", cfg["num_experts_per_tok"]),
            (f"{arch}.expert_feed_forward_length", cfg["intermediate_size"]),
            (f"{arch}.attention.sliding_window", cfg["sliding_window"]),
            (f"{arch}.rope.scaling.type", "yarn"), (f"{arch}.rope.scaling.factor", float(scaling["factor"])),
            (f"{arch}.rope.scaling.original_context_length", scaling["original_max_position_embeddings"])]


def gguf_tensors(cfg, weights, stored_f32):
    """llama.cpp's gpt-oss tensors that are not the other models' (GGUF name, dims innermost first, ggml type,
    bytes): the experts in MXFP4, their biases, the router's, the sinks and o_proj's bias in F32, the feed-forward's
    norm under its gpt-oss name; and the HF names they cover."""
    out, covered = [], set()
    for layer in range(cfg["num_hidden_layers"]):
        n, b = names(layer), f"blk.{layer}."
        gate, up = weights[n["gate_up"]][:, ::2], weights[n["gate_up"]][:, 1::2]
        bias_gate, bias_up = weights[n["gate_up_bias"]][:, ::2], weights[n["gate_up_bias"]][:, 1::2]
        for name, a in (("ffn_gate_exps.weight", gate), ("ffn_up_exps.weight", up), ("ffn_down_exps.weight", weights[n["down"]])):
            out.append((b + name, list(reversed(a.shape)), 39, gguf_blocks(np.ascontiguousarray(a))))
        norm = f"model.layers.{layer}.post_attention_layernorm.weight"
        for name, a in (("ffn_gate_exps.bias", bias_gate), ("ffn_up_exps.bias", bias_up),
                        ("ffn_down_exps.bias", weights[n["down_bias"]]), ("ffn_gate_inp.bias", weights[n["router_bias"]]),
                        ("attn_sinks.weight", weights[n["sinks"]]), ("attn_output.bias", weights[n["o_bias"]]),
                        ("post_attention_norm.weight", weights[norm])):
            out.append((b + name, list(reversed(a.shape)), 0, stored_f32(np.ascontiguousarray(a))))
        covered |= {n["gate_up"], n["down"], n["gate_up_bias"], n["down_bias"], n["router_bias"], n["sinks"],
                    n["o_bias"], norm}
    return out, covered
