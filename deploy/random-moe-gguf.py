#!/usr/bin/env python3
"""random-moe-gguf.py SHAPE OUT.gguf: a GGUF file of random weights in a mixture of experts' real shape, written
directly in its quantized types (no F16 file first: Qwen3-30B-A3B's would be 61 GB), for speed and memory
measurements against llama.cpp on the same file.
- qwen3moe shapes: every matrix Q4_K (pure, as llama-quantize's Q4_K_S mostly is; its Q4_K_M would hold attn_v and
  half of ffn_down_exps in Q6_K, about 1.3 GB more), the routers and norms F32 as llama.cpp keeps them. A block's
  4-bit levels and 6-bit scales and mins are random bytes; its d and dmin are chosen so that weights spread about zero
  with variance of order 1 / fan_in, as illm's synthetic weights.
- gpt-oss shapes: llama-quantize's MXFP4_MOE (the experts MXFP4, every other matrix Q8_0, the routers, norms, sinks
  and biases F32), every other layer sliding over 128 positions, YaRN over 4096; a block's codes random bytes under
  an exponent that gives the same spread; a harmony-format chat template (gpt-oss's message markers).
Written tensor by tensor from one pool of random bytes (the memory this script needs is one tensor's). The vocabulary
is random-gguf-model.py's byte-level one, padded with control tokens to the shape's size.
Shapes: qwen3-30b-a3b (48 layers, 128 experts of 768, 8 a token, hidden 2048; 17.3 GB), gpt-oss-20b (24 layers, 32
experts of 2880, 4 a token, hidden 2880; 12.1 GB), tiny-qwen3moe and tiny-gpt-oss (a few MB)."""
import importlib.util
import os
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("random_gguf_model", os.path.join(here, "random-gguf-model.py"))
random_gguf_model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(random_gguf_model)

SHAPES = {
    "qwen3-30b-a3b": dict(arch="qwen3moe", hidden=2048, ffn=6144, expert_ffn=768, layers=48, heads=32, kv=4,
                          head_dim=128, experts=128, used=8, vocab=151936, theta=1000000.0, ctx=40960),
    "tiny-qwen3moe": dict(arch="qwen3moe", hidden=256, ffn=512, expert_ffn=256, layers=2, heads=4, kv=2, head_dim=64,
                          experts=8, used=2, vocab=1000, theta=1000000.0, ctx=4096),
    "gpt-oss-20b": dict(arch="gpt-oss", hidden=2880, ffn=2880, expert_ffn=2880, layers=24, heads=64, kv=8, head_dim=64,
                        experts=32, used=4, vocab=201088, theta=150000.0, ctx=131072),
    "tiny-gpt-oss": dict(arch="gpt-oss", hidden=256, ffn=256, expert_ffn=256, layers=2, heads=4, kv=2, head_dim=64,
                         experts=8, used=4, vocab=1000, theta=150000.0, ctx=131072),
}

F32, Q8_0, Q4_K, MXFP4 = 0, 8, 12, 39
BLOCKS = {Q8_0: (32, 34), Q4_K: (256, 144), MXFP4: (32, 17)}  # values and bytes of a block
Q4_K_BYTES = 144
POOL_BYTES = 1 << 26
# ChatML, the form of Qwen's chat template (its markers are byte-level text in this vocabulary).
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def gpt_oss_tensors(s):
    """(name, shape, ggml type) of a gpt-oss file, as llama-quantize's MXFP4_MOE leaves them."""
    d, hd, e, h = s["hidden"], s["head_dim"], s["experts"], s["expert_ffn"]
    out = [("token_embd.weight", (s["vocab"], d), Q8_0)]
    for l in range(s["layers"]):
        p = f"blk.{l}."
        out += [(p + "attn_norm.weight", (d,), F32), (p + "attn_q.weight", (s["heads"] * hd, d), Q8_0),
                (p + "attn_q.bias", (s["heads"] * hd,), F32), (p + "attn_k.weight", (s["kv"] * hd, d), Q8_0),
                (p + "attn_k.bias", (s["kv"] * hd,), F32), (p + "attn_v.weight", (s["kv"] * hd, d), Q8_0),
                (p + "attn_v.bias", (s["kv"] * hd,), F32), (p + "attn_output.weight", (d, s["heads"] * hd), Q8_0),
                (p + "attn_output.bias", (d,), F32), (p + "attn_sinks.weight", (s["heads"],), F32),
                (p + "post_attention_norm.weight", (d,), F32), (p + "ffn_gate_inp.weight", (e, d), F32),
                (p + "ffn_gate_inp.bias", (e,), F32), (p + "ffn_gate_exps.weight", (e, h, d), MXFP4),
                (p + "ffn_gate_exps.bias", (e, h), F32), (p + "ffn_up_exps.weight", (e, h, d), MXFP4),
                (p + "ffn_up_exps.bias", (e, h), F32), (p + "ffn_down_exps.weight", (e, d, h), MXFP4),
                (p + "ffn_down_exps.bias", (e, d), F32)]
    return out + [("output_norm.weight", (d,), F32), ("output.weight", (s["vocab"], d), Q8_0)]


def tensors(s):
    """(name, shape outermost first, ggml type) of every tensor, in file order."""
    if s["arch"] == "gpt-oss":
        return gpt_oss_tensors(s)
    d, hd = s["hidden"], s["head_dim"]
    out = [("token_embd.weight", (s["vocab"], d), Q4_K)]
    for l in range(s["layers"]):
        p = f"blk.{l}."
        out += [(p + "attn_norm.weight", (d,), F32), (p + "attn_q.weight", (s["heads"] * hd, d), Q4_K),
                (p + "attn_k.weight", (s["kv"] * hd, d), Q4_K), (p + "attn_v.weight", (s["kv"] * hd, d), Q4_K),
                (p + "attn_q_norm.weight", (hd,), F32), (p + "attn_k_norm.weight", (hd,), F32),
                (p + "attn_output.weight", (d, s["heads"] * hd), Q4_K), (p + "ffn_norm.weight", (d,), F32),
                (p + "ffn_gate_inp.weight", (s["experts"], d), F32),
                (p + "ffn_gate_exps.weight", (s["experts"], s["expert_ffn"], d), Q4_K),
                (p + "ffn_up_exps.weight", (s["experts"], s["expert_ffn"], d), Q4_K),
                (p + "ffn_down_exps.weight", (s["experts"], d, s["expert_ffn"]), Q4_K)]
    out += [("output_norm.weight", (d,), F32), ("output.weight", (s["vocab"], d), Q4_K)]
    return out


def nbytes(shape, kind):
    n = int(np.prod(shape))
    return n // BLOCKS[kind][0] * BLOCKS[kind][1] if kind in BLOCKS else 4 * n


class RandomBlocks:
    """Random Q4_K blocks cut from one pool of random bytes, each with d and dmin for weights of a given spread."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.pool = self.rng.integers(0, 256, POOL_BYTES, dtype=np.uint8)

    def random(self, blocks, block_bytes):
        start = int(self.rng.integers(0, POOL_BYTES))
        return np.resize(np.roll(self.pool, -start), blocks * block_bytes).reshape(blocks, block_bytes)

    def q8_0(self, blocks, amplitude):
        # int8 levels uniform in [-128, 127]: d * 128 spans the amplitude.
        raw = self.random(blocks, 34)
        raw[:, 0:2] = np.frombuffer(np.float16(amplitude / 128).tobytes(), np.uint8)
        return raw.tobytes()

    def mxfp4(self, blocks, amplitude):
        # Codes uniform: twice-E2M1 levels up to 12 times 2^(e - 128), the exponent that reaches the amplitude.
        raw = self.random(blocks, 17)
        raw[:, 0] = 128 + int(np.round(np.log2(amplitude / 12)))
        return raw.tobytes()

    def q4_k(self, blocks, amplitude):
        raw = self.random(blocks, Q4_K_BYTES)
        # value = d * scale * level - dmin * min, scale and min 0..63 and level 0..15 uniform: d * 945 spans
        # 2 * amplitude, and dmin = 7.5 d centres the values on zero.
        d = np.float16(2 * amplitude / 945)
        raw[:, 0:2] = np.frombuffer(d.tobytes(), np.uint8)
        raw[:, 2:4] = np.frombuffer(np.float16(7.5 * float(d)).tobytes(), np.uint8)
        return raw.tobytes()


# The harmony format's messages (gpt-oss's markers: byte-level text in this vocabulary), the answer on the final
# channel.
HARMONY_TEMPLATE = ("{% for message in messages %}{{ '<|start|>' + message['role'] + '<|message|>' + message['content'] "
                    "+ '<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start|>assistant<|channel|>final"
                    "<|message|>' }}{% endif %}")


def metadata(s, tokens):
    """The file's keys: the shape, the experts, and (gpt-oss) its window and YaRN."""
    d, vocab, a = s["hidden"], s["vocab"], s["arch"]
    oss = a == "gpt-oss"
    meta = [("general.architecture", a), ("general.alignment", 32), ("general.file_type", 38 if oss else 14),
            (f"{a}.embedding_length", d), (f"{a}.feed_forward_length", s["ffn"]),
            (f"{a}.expert_feed_forward_length", s["expert_ffn"]), (f"{a}.block_count", s["layers"]),
            (f"{a}.attention.head_count", s["heads"]), (f"{a}.attention.head_count_kv", s["kv"]),
            (f"{a}.attention.key_length", s["head_dim"]), (f"{a}.attention.value_length", s["head_dim"]),
            (f"{a}.context_length", s["ctx"]), (f"{a}.rope.freq_base", float(s["theta"])),
            (f"{a}.attention.layer_norm_rms_epsilon", 1e-5 if oss else 1e-6), (f"{a}.expert_count", s["experts"]),
            (f"{a}.expert_used_count", s["used"]), ("tokenizer.ggml.model", "gpt2"),
            ("tokenizer.ggml.pre", "gpt-4o" if oss else "qwen2"),
            ("tokenizer.ggml.tokens", tokens), ("tokenizer.ggml.token_type", [1] * 258 + [3] * (vocab - 258)),
            ("tokenizer.ggml.merges", ["a b", "c d"]), ("tokenizer.ggml.bos_token_id", 258),
            ("tokenizer.ggml.eos_token_id", 259), ("tokenizer.ggml.add_bos_token", False),
            ("tokenizer.chat_template", HARMONY_TEMPLATE if oss else CHAT_TEMPLATE)]
    if oss:
        meta += [(f"{a}.attention.sliding_window", 128), (f"{a}.rope.scaling.type", "yarn"),
                 (f"{a}.rope.scaling.factor", 32.0), (f"{a}.rope.scaling.original_context_length", 4096)]
    return meta


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit(f"usage: random-moe-gguf.py {{{','.join(SHAPES)}}} OUT.gguf")
    s = SHAPES[sys.argv[1]]
    meta = metadata(s, random_gguf_model.byte_tokens(s["vocab"]))
    infos = [(name, shape, kind, nbytes(shape, kind)) for name, shape, kind in tensors(s)]
    header = random_gguf_model.gguf_header(meta, infos)
    blocks = RandomBlocks(2026)
    rng = np.random.default_rng(7)
    with open(sys.argv[2], "wb") as out:
        out.write(header)
        for name, shape, kind, _ in infos:
            amplitude = 1.0 if name == "token_embd.weight" else np.sqrt(3.0 / shape[-1])
            if kind in BLOCKS:
                write = {Q4_K: blocks.q4_k, Q8_0: blocks.q8_0, MXFP4: blocks.mxfp4}[kind]
                data = write(nbytes(shape, kind) // BLOCKS[kind][1], amplitude)
            elif "ffn_gate_inp.weight" in name:
                data = rng.uniform(-1, 1, size=shape).astype(np.float32).tobytes()
            elif "norm" in name:
                data = (1.0 + 0.1 * rng.uniform(-1, 1, size=shape)).astype(np.float32).tobytes()
            else:  # biases and sinks
                data = (0.1 * rng.uniform(-1, 1, size=shape)).astype(np.float32).tobytes()
            out.write(data + b"\0" * (-len(data) % 32))
    kinds = "MXFP4 experts, Q8_0" if s["arch"] == "gpt-oss" else "Q4_K"
    print(f"random-moe-gguf: {sys.argv[2]}: {sys.argv[1]}, {kinds}, {os.path.getsize(sys.argv[2]) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
