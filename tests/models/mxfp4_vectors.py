#!/usr/bin/env python3
"""Writes MXFP4 blocks as llama.cpp's gguf-py quantizes and dequantizes them (tests/data/mxfp4_gguf_py.json), so
that test_weight_types holds gpu/quant/blocks.cpp to the outside implementation without needing llama.cpp at test
time. Usage: mxfp4_vectors.py GGUF_PY_DIR OUT.json (GGUF_PY_DIR: llama.cpp's gguf-py folder, e.g. from the npm
package node-llama-cpp that deploy/llama-cpp.sh unpacks)."""
import json
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
from gguf import quants  # noqa: E402
from gguf.constants import GGMLQuantizationType  # noqa: E402

MXFP4 = GGMLQuantizationType.MXFP4


def cases():
    rng = np.random.default_rng(20260907)
    yield "normal", rng.standard_normal(32 * 8).astype(np.float32)
    # Magnitudes across the exponent's range, each block a different power of two.
    yield "scales", np.concatenate([rng.standard_normal(32) * np.float32(2.0 ** p) for p in (-120, -20, -3, 0, 7, 60)
                                    ]).astype(np.float32)
    # Values on and between the levels (ties go to the first code), zeros and a block of zeros.
    levels = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
    between = (levels[1:] + levels[:-1]) / 2
    on = np.concatenate([levels, -levels, between, -between, [0.0]]).astype(np.float32)
    yield "levels", np.concatenate([on, np.zeros(32 - len(on) % 32 if len(on) % 32 else 0, np.float32),
                                    np.zeros(32, np.float32)])


def main():
    out = []
    for name, values in cases():
        blocks = quants.quantize(values.reshape(1, -1), MXFP4)
        back = quants.dequantize(blocks, MXFP4).reshape(-1)
        out.append({"name": name, "values": [float(v) for v in values], "blocks": bytes(blocks.reshape(-1)).hex(),
                    "dequantized": [float(v) for v in back]})
    # Every code under exponents at both ends and in the middle, as written by hand, read back by gguf-py.
    raw = bytearray()
    for e in (0, 1, 2, 100, 127, 128, 200, 250):
        raw += bytes([e]) + bytes((c & 15) | (((c + 5) & 15) << 4) for c in range(16))
    blocks = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(1, -1)
    out.append({"name": "codes", "blocks": raw.hex(),
                "dequantized": [float(v) for v in quants.dequantize(blocks, MXFP4).reshape(-1)]})
    with open(sys.argv[2], "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
