#!/usr/bin/env python3
"""convert_llama2c.py MODEL.bin TOKENIZER.bin OUT: a llama2.c model (stories15M) as a Hugging Face folder (OUT/hf:
config.json, model.safetensors with q/k rows in transformers' rotate_half layout, and the tokenizer.json that
transformers' LlamaConverter makes of its SentencePiece vocabulary: BPE with merges from the pieces' scores, byte
fallback, the Prepend/Replace normalizer and the Replace/ByteFallback/Fuse/Strip decoders) and as a GGUF file
(OUT/model.gguf: llama architecture, F32, q/k rows as llama.cpp stores them, the vocabulary with its scores), as the
converters of transformers and llama.cpp write them."""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_checkpoints import gguf_kv, write_safetensors  # noqa: E402


def read_llama2c(path):
    with open(path, "rb") as f:
        dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", f.read(28))
        data = np.frombuffer(f.read(), dtype=np.float32)
    shared = vocab > 0
    vocab = abs(vocab)
    hd = dim // heads
    sizes = [("embed", vocab * dim), ("rms_att", layers * dim), ("wq", layers * dim * dim),
             ("wk", layers * kv_heads * hd * dim), ("wv", layers * kv_heads * hd * dim), ("wo", layers * dim * dim),
             ("rms_ffn", layers * dim), ("w1", layers * hidden * dim), ("w2", layers * dim * hidden),
             ("w3", layers * hidden * dim), ("rms_final", dim), ("rope", seq * hd)]
    t, at = {}, 0
    for name, n in sizes:
        t[name] = data[at:at + n]
        at += n
    t["classifier"] = t["embed"] if shared else data[at:at + vocab * dim]
    cfg = dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab, seq=seq, shared=shared)
    return cfg, t


def layer_tensors(cfg, t):
    """HF names -> arrays in llama2.c's layout (q/k rows pairing adjacent elements)."""
    d, h, L, kvd = cfg["dim"], cfg["hidden"], cfg["layers"], cfg["kv_heads"] * (cfg["dim"] // cfg["heads"])
    out = {"model.embed_tokens.weight": t["embed"].reshape(cfg["vocab"], d), "model.norm.weight": t["rms_final"]}
    if not cfg["shared"]:
        out["lm_head.weight"] = t["classifier"].reshape(cfg["vocab"], d)
    per = {"input_layernorm.weight": ("rms_att", (d,)), "self_attn.q_proj.weight": ("wq", (d, d)),
           "self_attn.k_proj.weight": ("wk", (kvd, d)), "self_attn.v_proj.weight": ("wv", (kvd, d)),
           "self_attn.o_proj.weight": ("wo", (d, d)), "post_attention_layernorm.weight": ("rms_ffn", (d,)),
           "mlp.gate_proj.weight": ("w1", (h, d)), "mlp.down_proj.weight": ("w2", (d, h)),
           "mlp.up_proj.weight": ("w3", (h, d))}
    for l in range(L):
        for name, (kind, shape) in per.items():
            n = int(np.prod(shape))
            out[f"model.layers.{l}.{name}"] = t[kind][l * n:(l + 1) * n].reshape(shape)
    return out


def to_rotate_half(w, heads):
    """transformers' convert_llama_weights_to_hf permute: adjacent pairs -> rotate_half's halves."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def read_vocab(path, vocab):
    pieces, scores = [], []
    with open(path, "rb") as f:
        f.read(4)
        for _ in range(vocab):
            score, length = struct.unpack("<fi", f.read(8))
            pieces.append(f.read(length).decode("utf-8", "replace"))
            scores.append(score)
    return pieces, scores


def tokenizer_json(pieces, scores):
    """transformers' LlamaConverter: merges of every piece that two others make, ranked by the piece's score."""
    tokens = [p.replace(" ", "\u2581") for p in pieces]
    tokens[3:259] = [f"<0x{b:02X}>" for b in range(256)]
    tokens[0], tokens[1], tokens[2] = "<unk>", "<s>", "</s>"
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for piece, score in sorted(zip(tokens, scores), key=lambda x: -x[1]):
        local = [(piece[:i], piece[i:], score) for i in range(1, len(piece)) if piece[:i] in vocab and piece[i:] in vocab]
        merges.extend(sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]])))
    merges = sorted(merges, key=lambda x: -x[2])
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(tokens[:3])]
    return {"version": "1.0", "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                               {"type": "Replace", "pattern": {"String": " "},
                                                                "content": "\u2581"}]},
            "pre_tokenizer": None,
            "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                        {"Sequence": {"id": "A", "type_id": 0}}],
                               "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True, "vocab": vocab,
                      "merges": [f"{a} {b}" for a, b, _ in merges]}}


GGML_TYPES = {"F32": 0, "Q5_0": 6, "Q8_0": 8, "Q4_K": 12, "Q6_K": 14}
GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight"}
GGUF_LAYER = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
              "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
              "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
              "mlp.down_proj.weight": "ffn_down.weight"}


def gguf_metadata(cfg, pieces):
    """The GGUF key/values of the model (llama architecture, its SentencePiece vocabulary; scores apart)."""
    tokens = [p.replace(" ", "\u2581") for p in pieces]
    tokens[3:259] = [f"<0x{b:02X}>" for b in range(256)]
    return [("general.architecture", "llama"), ("general.alignment", 32), ("llama.embedding_length", cfg["dim"]),
            ("llama.feed_forward_length", cfg["hidden"]), ("llama.block_count", cfg["layers"]),
            ("llama.attention.head_count", cfg["heads"]), ("llama.attention.head_count_kv", cfg["kv_heads"]),
            ("llama.context_length", cfg["seq"]), ("llama.rope.freq_base", 10000.0),
            ("llama.attention.layer_norm_rms_epsilon", 1e-5), ("tokenizer.ggml.model", "llama"),
            ("tokenizer.ggml.tokens", tokens), ("tokenizer.ggml.bos_token_id", 1), ("tokenizer.ggml.eos_token_id", 2)]


def gguf_tensors(tensors):
    """(GGUF name, array) in the order of the Hugging Face names, q/k rows as llama.cpp stores them (llama2.c's
    adjacent pairs)."""
    out = []
    for name, a in sorted(tensors.items()):
        if name.startswith("model.layers."):
            layer, rest = name[len("model.layers."):].split(".", 1)
            out.append((f"blk.{layer}.{GGUF_LAYER[rest]}", a))
        else:
            out.append((GGUF_NAMES[name], a))
    return out


def write_gguf(path, kv, scores, tensors):
    """A GGUF file: the key/values `kv`, the vocabulary's `scores` (a float array), and `tensors`: (name, array of
    the tensor's shape, GGML type name, its bytes in that type), each aligned to 32 bytes."""
    score_kv = struct.pack("<Q", len("tokenizer.ggml.scores")) + b"tokenizer.ggml.scores" + \
        struct.pack("<IIQ", 9, 6, len(scores)) + b"".join(struct.pack("<f", s) for s in scores)
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv) + 1) + b"".join(gguf_kv(k, v) for k, v in kv) + \
        score_kv
    offset, blobs = 0, []
    for name, a, kind, data in tensors:
        b = name.encode()
        header += struct.pack("<Q", len(b)) + b + struct.pack("<I", a.ndim)
        header += b"".join(struct.pack("<Q", x) for x in reversed(a.shape)) + struct.pack("<IQ", GGML_TYPES[kind], offset)
        blobs.append(data + b"\0" * (-len(data) % 32))
        offset += len(blobs[-1])
    header += b"\0" * (-len(header) % 32)
    with open(path, "wb") as f:
        f.write(header)
        for blob in blobs:
            f.write(blob)


def main():
    model, tokenizer, out = sys.argv[1:4]
    cfg, t = read_llama2c(model)
    tensors = layer_tensors(cfg, t)
    hf = os.path.join(out, "hf")
    os.makedirs(hf, exist_ok=True)
    hf_tensors = {}
    for name, a in tensors.items():
        if name.endswith("q_proj.weight"):
            a = to_rotate_half(a, cfg["heads"])
        elif name.endswith("k_proj.weight"):
            a = to_rotate_half(a, cfg["kv_heads"])
        data = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        hf_tensors[name] = ("F32", a.shape, data)
    write_safetensors(os.path.join(hf, "model.safetensors"), hf_tensors)
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": cfg["dim"], "intermediate_size": cfg["hidden"],
              "num_hidden_layers": cfg["layers"], "num_attention_heads": cfg["heads"],
              "num_key_value_heads": cfg["kv_heads"], "vocab_size": cfg["vocab"], "max_position_embeddings": cfg["seq"],
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": cfg["shared"],
              "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    pieces, scores = read_vocab(tokenizer, cfg["vocab"])
    with open(os.path.join(hf, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(pieces, scores), f, ensure_ascii=False)
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}, f)

    write_gguf(os.path.join(out, "model.gguf"), gguf_metadata(cfg, pieces), scores,
               [(name, a, "F32", np.ascontiguousarray(a, dtype=np.float32).tobytes()) for name, a in gguf_tensors(tensors)])

if __name__ == "__main__":
    main()
