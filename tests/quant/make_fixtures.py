#!/usr/bin/env python3
"""Writes tests/quant/fixtures/<type>.bin: a few blocks of each quant type followed by their
float32 dequantization as the `gguf` Python package (gguf.quants.dequantize) computes it.

Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 blocks come from gguf.quants.quantize of random floats; the
K-quants (which the package does not quantize) are random bytes with finite random f16 scales.
File layout: the block bytes (n_blocks * block_bytes), then n_blocks * block_elems float32,
little-endian. Run: python3 make_fixtures.py (needs `pip install gguf numpy`)."""
import os
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
rng = np.random.default_rng(17)

def f16(x):
    return np.array([x], dtype=np.float16).view(np.uint8)

def k_blocks(t, n_blocks):
    _, nbytes = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    for b in range(n_blocks):
        d = rng.uniform(1e-3, 2e-2) * (1 if b % 2 == 0 else -1)
        if t == T.Q6_K:
            raw[b, 208:210] = f16(d)
        else:
            raw[b, 0:2] = f16(d)
            raw[b, 2:4] = f16(rng.uniform(1e-3, 2e-2))
    return raw.reshape(-1)

def main():
    os.makedirs(OUT, exist_ok=True)
    for t, n_blocks in [(T.Q4_0, 4), (T.Q4_1, 4), (T.Q5_0, 4), (T.Q5_1, 4), (T.Q8_0, 4),
                        (T.Q4_K, 2), (T.Q5_K, 2), (T.Q6_K, 2)]:
        elems, _ = GGML_QUANT_SIZES[t]
        if t in (T.Q4_K, T.Q5_K, T.Q6_K):
            blocks = k_blocks(t, n_blocks)
        else:
            x = rng.standard_normal(n_blocks * elems).astype(np.float32) * np.float32(0.3)
            x[:elems] += np.float32(0.5)  # one block with a nonzero mean (exercises the Q4_1/Q5_1 min)
            blocks = gguf.quants.quantize(x.reshape(1, -1), t).reshape(-1)
        y = gguf.quants.dequantize(blocks.reshape(1, -1), t).astype(np.float32).reshape(-1)
        assert y.size == n_blocks * elems and np.all(np.isfinite(y))
        with open(os.path.join(OUT, t.name.lower() + ".bin"), "wb") as f:
            f.write(blocks.astype(np.uint8).tobytes())
            f.write(y.astype("<f4").tobytes())
        print(t.name, n_blocks, "blocks")

if __name__ == "__main__":
    main()
