#!/usr/bin/env python3
"""random-gguf-model.py SHAPE OUT.gguf: a GGUF file (architecture llama) of random F16 weights in a real model's shape
(deploy/random-hf-model.py's shapes: llama3.2-1b, llama3.2-3b, llama3-8b), for speed and memory measurements against
llama.cpp on the same file (no real weights are reachable here); llama.cpp's llama-quantize makes its Q8_0 and
Q4_K_M. Written tensor by tensor (the memory this script needs is one tensor's); matrices are uniform with variance
1 / fan_in as illm's synthetic weights, norms near one. The vocabulary is tiny_checkpoints.py's byte-level one,
padded with control tokens to the shape's size."""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
import importlib.util  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("random_hf_model", os.path.join(here, "random-hf-model.py"))
random_hf_model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(random_hf_model)
from tiny_checkpoints import gguf_kv  # noqa: E402


def byte_tokens(vocab):
    alphabet, n = {}, 256
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255
        alphabet[b] = chr(b) if printable else chr(n)
        n += 0 if printable else 1
    return [alphabet[b] for b in range(128)] + [f"x{b}" for b in range(128, 256)] + ["ab", "cd"] + \
        [f"<|t{i}|>" for i in range(258, vocab)]


def gguf_header(meta, tensors):
    """The GGUF header of `meta` (key, value) and `tensors` (name, shape outermost first, ggml type, bytes) laid out
    one after another, each 32-byte aligned; padded to 32 bytes."""
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(gguf_kv(k, v) for k, v in meta)
    offset = 0
    for name, shape, kind, size in tensors:
        b = name.encode()
        header += struct.pack("<Q", len(b)) + b + struct.pack("<I", len(shape))
        header += b"".join(struct.pack("<Q", n) for n in reversed(shape)) + struct.pack("<IQ", kind, offset)
        offset += size + (-size % 32)
    return header + b"\0" * (-len(header) % 32)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in random_hf_model.SHAPES:
        sys.exit(f"usage: random-gguf-model.py {{{','.join(random_hf_model.SHAPES)}}} OUT.gguf")
    s = random_hf_model.SHAPES[sys.argv[1]]
    if s["arch"] != "LlamaForCausalLM":
        sys.exit("random-gguf-model.py writes llama shapes")
    d, f, heads, kv, vocab = s["hidden"], s["ffn"], s["heads"], s["kv"], s["vocab"]
    hd = d // heads
    tokens = byte_tokens(vocab)
    meta = [("general.architecture", "llama"), ("general.alignment", 32), ("llama.embedding_length", d),
            ("llama.feed_forward_length", f), ("llama.block_count", s["layers"]), ("llama.attention.head_count", heads),
            ("llama.attention.head_count_kv", kv), ("llama.context_length", min(s["ctx"], 8192)),
            ("llama.rope.freq_base", float(s["theta"])), ("llama.attention.layer_norm_rms_epsilon", 1e-5),
            ("general.file_type", 1), ("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "llama-bpe"),
            ("tokenizer.ggml.tokens", tokens), ("tokenizer.ggml.token_type", [1] * 258 + [3] * (vocab - 258)),
            ("tokenizer.ggml.merges", ["a b", "c d"]), ("tokenizer.ggml.bos_token_id", 258),
            ("tokenizer.ggml.eos_token_id", 259), ("tokenizer.ggml.add_bos_token", False)]
    tensors = [("token_embd.weight", (vocab, d))]
    for l in range(s["layers"]):
        p = f"blk.{l}."
        tensors += [(p + "attn_norm.weight", (d,)), (p + "attn_q.weight", (heads * hd, d)),
                    (p + "attn_k.weight", (kv * hd, d)), (p + "attn_v.weight", (kv * hd, d)),
                    (p + "attn_output.weight", (d, heads * hd)), (p + "ffn_norm.weight", (d,)),
                    (p + "ffn_gate.weight", (f, d)), (p + "ffn_up.weight", (f, d)), (p + "ffn_down.weight", (d, f))]
    tensors.append(("output_norm.weight", (d,)))
    if not s["tied"]:
        tensors.append(("output.weight", (vocab, d)))
    infos = []
    for name, shape in tensors:
        kind = 1 if len(shape) == 2 else 0  # F16 matrices, F32 norms
        infos.append((name, shape, kind, int(np.prod(shape)) * (2 if kind == 1 else 4)))
    header = gguf_header(meta, infos)
    rng = np.random.default_rng(2024)
    with open(sys.argv[2], "wb") as out:
        out.write(header)
        for name, shape, kind, _ in infos:
            if kind == 0:
                data = (1.0 + 0.1 * rng.uniform(-1, 1, size=shape)).astype(np.float32).tobytes()
            else:
                scale = 1.0 if name == "token_embd.weight" else np.sqrt(3.0 / shape[1])
                data = (rng.uniform(-scale, scale, size=shape).astype(np.float32)).astype(np.float16).tobytes()
            out.write(data + b"\0" * (-len(data) % 32))
    print(f"random-gguf-model: {sys.argv[2]}: {sys.argv[1]}, F16, {os.path.getsize(sys.argv[2]) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
