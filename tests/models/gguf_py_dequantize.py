#!/usr/bin/env python3
"""gguf_py_dequantize.py LLAMA_QUANTIZE GGUF_PY_DIR OUT.json: the block layouts of the quantized types checked
against an outside decoder. A tiny llama model of random F32 weights (rows of 512 and 256: whole super-blocks of
256) is written with llama.cpp's own gguf-py, quantized by llama.cpp's llama-quantize (--pure) to Q8_0, Q5_0, Q6_K
and Q4_K, and gguf-py's quants.py (numpy) dequantizes two rows of one matrix of each file. OUT.json keeps, per
type, the tensor's bytes as llama-quantize wrote them and gguf-py's values (float32 bits): tests/data/
gguf_py_dequantized.json is this file, committed, and test_gpu decodes the same bytes with the loader's readers,
which must give the same bits. Needs numpy and PyYAML (Debian's python3-numpy, python3-yaml) for gguf-py."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

TYPES = ["Q8_0", "Q5_0", "Q6_K", "Q4_K"]
TENSOR = "blk.0.ffn_down.weight"  # rows of 512: two super-blocks of 256 per row
ROWS = 2


def write_model(gguf, path):
    rng = np.random.default_rng(7)
    dim, hidden, vocab = 256, 512, 256
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(64)
    w.add_embedding_length(dim)
    w.add_block_count(1)
    w.add_feed_forward_length(hidden)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    def matrix(rows, cols):  # values spread over magnitudes, with outliers, as trained weights have
        m = rng.standard_normal((rows, cols)).astype(np.float32) * np.float32(0.05)
        m[rng.random((rows, cols)) < 0.01] *= np.float32(8)
        return m

    w.add_tensor("token_embd.weight", matrix(vocab, dim))
    w.add_tensor("output_norm.weight", np.ones(dim, dtype=np.float32))
    w.add_tensor("output.weight", matrix(vocab, dim))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(dim, dtype=np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(dim, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(f"blk.0.{name}.weight", matrix(dim, dim))
    w.add_tensor("blk.0.ffn_gate.weight", matrix(hidden, dim))
    w.add_tensor("blk.0.ffn_up.weight", matrix(hidden, dim))
    w.add_tensor("blk.0.ffn_down.weight", matrix(dim, hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    quantize, gguf_py, out = sys.argv[1:4]
    sys.path.insert(0, gguf_py)
    import gguf  # llama.cpp's own, from its source
    result = {}
    with tempfile.TemporaryDirectory(prefix="illm-gguf-py-") as work:
        f32 = os.path.join(work, "f32.gguf")
        write_model(gguf, f32)
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(quantize))
        for qtype in TYPES:
            path = os.path.join(work, f"{qtype}.gguf")
            subprocess.run([quantize, "--pure", f32, path, qtype], check=True, capture_output=True, env=env)
            tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == TENSOR)
            assert tensor.tensor_type.name == qtype, (qtype, tensor.tensor_type.name)
            row_length = int(tensor.shape[0])
            block_elements, block_bytes = gguf.GGML_QUANT_SIZES[tensor.tensor_type]
            raw = np.asarray(tensor.data).reshape(-1).view(np.uint8)[: ROWS * row_length // block_elements * block_bytes]
            values = gguf.quants.dequantize(raw, tensor.tensor_type).astype(np.float32).reshape(-1)
            assert values.size == ROWS * row_length
            result[qtype] = {"tensor": TENSOR, "row_length": row_length, "rows": ROWS, "bytes": raw.tobytes().hex(),
                             "float32_bits": [int(b) for b in values.view(np.uint32)]}
            print(f"{qtype}: {TENSOR}, {ROWS} rows of {row_length}: {raw.size} bytes, values {values[:3]}...")
    with open(out, "w") as f:
        json.dump({"source": "llama-quantize --pure, then gguf-py's quants.dequantize (llama.cpp of node-llama-cpp "
                             "3.21.1)", "types": result}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
