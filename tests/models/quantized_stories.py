#!/usr/bin/env python3
"""quantized_stories.py: stories15M quantized by llama.cpp's llama-quantize (Q8_0, Q6_K, Q5_0, Q4_K_M), kept in the
repository small enough to commit, and made again where llama.cpp is absent (CI).

  quantized_stories.py extract GGUF_PY_DIR QUANTIZED_DIR MANIFEST.json BLOB.bin
      reads llama-quantize's files (QUANTIZED_DIR/TYPE.gguf; deploy/perplexity-vs-llama.sh writes them) with gguf-py
      and writes each file's tensors (name, type, sha256) to MANIFEST.json and the bytes of the tensors of the K
      types (Q6_K, Q4_K: their quantizer searches, so they are kept as llama-quantize wrote them) to BLOB.bin.
  quantized_stories.py rebuild MODEL.bin TOKENIZER.bin MANIFEST.json BLOB.bin OUT_DIR
      writes OUT_DIR/TYPE.gguf for each file of the manifest: stories15M as tests/models/convert_llama2c.py converts
      it, each tensor in its type: F32 as it is, Q8_0 and Q5_0 quantized here as GGML's reference quantizers do (the
      formulas of ggml-quants.c's quantize_row_q8_0_ref and quantize_row_q5_0_ref, which llama-quantize runs without
      an importance matrix), the K types from BLOB.bin. Every tensor must match the manifest's sha256: the files hold
      llama-quantize's tensors bit for bit (their headers are this converter's).
"""
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_llama2c import gguf_metadata, gguf_tensors, layer_tensors, read_llama2c, read_vocab, write_gguf  # noqa

FILES = ["Q8_0", "Q6_K", "Q5_0", "Q4_K_M"]
KEPT_TYPES = ("Q6_K", "Q4_K")


def fp16_bytes(values):
    return values.astype(np.float16).view(np.uint8).reshape(-1, 2)  # round to nearest even, as F16C


def inverse(d):
    with np.errstate(divide="ignore"):
        return np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)


def quantize_q8_0(x):
    """d = max |x| / 127 (stored fp16), q = round(x / d), halves away from zero (roundf)."""
    x = x.reshape(-1, 32).astype(np.float32)
    d = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32)
    v = (x * inverse(d)[:, None]).astype(np.float32)
    q = np.trunc(v + np.copysign(np.float32(0.5), v)).astype(np.int8)
    return np.concatenate([fp16_bytes(d), q.view(np.uint8)], axis=1).tobytes()


def quantize_q5_0(x):
    """d = (the value of largest magnitude, the first of equals) / -16 (stored fp16), q = min(31, trunc(x / d +
    16.5)); the low nibbles of elements j and j + 16 share a byte, their fifth bits go to a 32-bit word."""
    x = x.reshape(-1, 32).astype(np.float32)
    extreme = x[np.arange(len(x)), np.argmax(np.abs(x), axis=1)]
    d = (extreme / np.float32(-16)).astype(np.float32)
    v = ((x * inverse(d)[:, None]).astype(np.float32) + np.float32(16.5)).astype(np.float32)
    q = np.minimum(31, np.trunc(v).astype(np.int32)).astype(np.uint32)
    lo, hi = q[:, :16], q[:, 16:]
    nibbles = ((lo & 0x0F) | ((hi & 0x0F) << 4)).astype(np.uint8)
    fifth = (((lo & 0x10) >> 4) << np.arange(16, dtype=np.uint32)).sum(axis=1) | \
        (((hi & 0x10) >> 4) << np.arange(16, 32, dtype=np.uint32)).sum(axis=1)
    return np.concatenate([fp16_bytes(d), fifth.astype(np.uint32).view(np.uint8).reshape(-1, 4), nibbles],
                          axis=1).tobytes()


def extract(gguf_py, quantized_dir, manifest_path, blob_path):
    sys.path.insert(0, gguf_py)
    import gguf  # llama.cpp's own reader
    manifest, kept, blob = {"files": {}, "kept": {}}, {}, bytearray()
    for name in FILES:
        tensors = {}
        for t in gguf.GGUFReader(os.path.join(quantized_dir, f"{name}.gguf")).tensors:
            data = np.asarray(t.data).view(np.uint8).tobytes()
            digest = hashlib.sha256(data).hexdigest()
            tensors[t.name] = {"type": t.tensor_type.name, "sha256": digest}
            if t.tensor_type.name in KEPT_TYPES and digest not in kept:
                kept[digest] = [len(blob), len(data)]
                blob += data
        manifest["files"][name] = tensors
    manifest["kept"] = kept
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(blob_path, "wb") as f:
        f.write(blob)
    print(f"{len(FILES)} files, {len(kept)} tensors of the K types kept ({len(blob)} bytes)")


def rebuild(model, tokenizer, manifest_path, blob_path, out):
    cfg, t = read_llama2c(model)
    tensors = gguf_tensors(layer_tensors(cfg, t))
    pieces, scores = read_vocab(tokenizer, cfg["vocab"])
    with open(manifest_path) as f:
        manifest = json.load(f)
    with open(blob_path, "rb") as f:
        blob = f.read()
    os.makedirs(out, exist_ok=True)
    quantizers = {"F32": lambda a: np.ascontiguousarray(a, dtype=np.float32).tobytes(), "Q8_0": quantize_q8_0,
                  "Q5_0": quantize_q5_0}
    for name, listed in manifest["files"].items():
        written = []
        for gname, a in tensors:
            entry = listed[gname]
            if entry["type"] in quantizers:
                data = quantizers[entry["type"]](a)
            else:
                at, size = manifest["kept"][entry["sha256"]]
                data = blob[at:at + size]
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                sys.exit(f"quantized_stories: {name} {gname} ({entry['type']}) is not llama-quantize's")
            written.append((gname, a, entry["type"], data))
        if len(written) != len(listed):
            sys.exit(f"quantized_stories: {name} lists tensors this model has not")
        write_gguf(os.path.join(out, f"{name}.gguf"), gguf_metadata(cfg, pieces), scores, written)
    print(f"wrote {', '.join(manifest['files'])} into {out}")


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "extract":
        extract(*sys.argv[2:6])
    elif len(sys.argv) == 7 and sys.argv[1] == "rebuild":
        rebuild(*sys.argv[2:7])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
