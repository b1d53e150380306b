"""The mixture-of-experts half of tiny_checkpoints.py: the experts' random weights, their feed-forward in the float64
reference (transformers' MixtralSparseMoeBlock and Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock: softmax of the
router's logits, the top k, their weights renormalised where the model says, each expert a SwiGLU, Qwen2-MoE's shared
expert scaled by the sigmoid of its gate), and the GGUF layout of the experts (one [experts][rows][cols] tensor per
kind, as llama.cpp's converter writes them)."""
import numpy as np


def style(cfg):
    """'mixtral', 'qwen' or None (a dense model)."""
    arch = cfg["architectures"][0]
    return "mixtral" if arch == "MixtralForCausalLM" else "qwen" if "Moe" in arch else None


def experts(cfg):
    return cfg["num_local_experts"] if style(cfg) == "mixtral" else cfg["num_experts"]


def expert_width(cfg):
    return cfg["intermediate_size"] if style(cfg) == "mixtral" else cfg["moe_intermediate_size"]


def names(cfg, layer):
    """(router, [(gate, up, down) per expert], shared (gate, up, down, gate vector) or None) of a layer."""
    p = f"model.layers.{layer}."
    if style(cfg) == "mixtral":
        moe = p + "block_sparse_moe."
        each = [tuple(f"{moe}experts.{e}.{w}.weight" for w in ("w1", "w3", "w2")) for e in range(experts(cfg))]
        return moe + "gate.weight", each, None
    each = [tuple(f"{p}mlp.experts.{e}.{w}.weight" for w in ("gate_proj", "up_proj", "down_proj"))
            for e in range(experts(cfg))]
    shared = None
    if cfg.get("shared_expert_intermediate_size", 0):
        shared = tuple(f"{p}mlp.shared_expert.{w}.weight" for w in ("gate_proj", "up_proj", "down_proj")) + \
            (f"{p}mlp.shared_expert_gate.weight",)
    return p + "mlp.gate.weight", each, shared


def make_expert_weights(cfg, rng, matrix, w):
    """Adds each layer's router (logits of std ~4, so that the k-th and (k+1)-th stay apart), experts and shared
    expert to `w`."""
    d, h = cfg["hidden_size"], expert_width(cfg)
    for layer in range(cfg["num_hidden_layers"]):
        router, each, shared = names(cfg, layer)
        w[router] = matrix(experts(cfg), d, 4.0)
        for gate, up, down in each:
            w[gate], w[up], w[down] = matrix(h, d), matrix(h, d), matrix(d, h, 3.0)
        if shared:
            sh = cfg["shared_expert_intermediate_size"]
            w[shared[0]], w[shared[1]], w[shared[2]] = matrix(sh, d), matrix(sh, d), matrix(d, sh, 3.0)
            w[shared[3]] = matrix(1, d, 2.0)


def feed_forward(cfg, w, layer, h, mm, margins):
    """The layer's mixture of experts on rows h [n][dim]; appends each row's gap between its k-th and (k+1)-th router
    logits to `margins`."""
    router, each, shared = names(cfg, layer)
    k, n = cfg["num_experts_per_tok"], h.shape[0]
    norm = True if style(cfg) == "mixtral" else cfg.get("norm_topk_prob", False)
    logits = mm(h, w[router])
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(n):
        order = np.argsort(-logits[t], kind="stable")
        if k < len(order):
            margins.append(logits[t][order[k - 1]] - logits[t][order[k]])
        chosen = order[:k]
        weights = probs[t][chosen] / (probs[t][chosen].sum() if norm else 1.0)
        for e, weight in zip(chosen, weights):
            gate, up, down = each[e]
            g, u = mm(h[t:t + 1], w[gate]), mm(h[t:t + 1], w[up])
            out[t] += weight * mm(g / (1 + np.exp(-g)) * u, w[down])[0]
    if shared:
        g, u = mm(h, w[shared[0]]), mm(h, w[shared[1]])
        gate = 1 / (1 + np.exp(-mm(h, w[shared[3]])))
        out += gate * mm(g / (1 + np.exp(-g)) * u, w[shared[2]])
    return out


def gguf_groups(cfg, weights):
    """The GGUF tensors of a model's experts: (GGUF name, the HF names stacked in it in order, as a vector) for each;
    the names they cover."""
    groups = []
    for layer in range(cfg["num_hidden_layers"]):
        router, each, shared = names(cfg, layer)
        groups.append((f"blk.{layer}.ffn_gate_inp.weight", [router], False))
        for i, kind in enumerate(("gate", "up", "down")):
            groups.append((f"blk.{layer}.ffn_{kind}_exps.weight", [e[i] for e in each], False))
        if shared:
            for i, kind in enumerate(("gate", "up", "down")):
                groups.append((f"blk.{layer}.ffn_{kind}_shexp.weight", [shared[i]], False))
            groups.append((f"blk.{layer}.ffn_gate_inp_shexp.weight", [shared[3]], True))
    return groups, {n for _, group, _ in groups for n in group}


def gguf_metadata(cfg, arch):
    """The experts' GGUF keys."""
    kv = [(f"{arch}.expert_count", experts(cfg)), (f"{arch}.expert_used_count", cfg["num_experts_per_tok"])]
    if style(cfg) == "qwen":
        kv.append((f"{arch}.expert_feed_forward_length", expert_width(cfg)))
        if cfg.get("shared_expert_intermediate_size", 0):
            kv.append((f"{arch}.expert_shared_feed_forward_length", cfg["shared_expert_intermediate_size"]))
    return kv


