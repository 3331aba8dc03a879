#!/usr/bin/env python3
# cmp.py A.bin B.bin N_VOCAB: per-step NMSE of logits dump A against B (little-endian float32,
# steps x n_vocab, as `memra run --dump-logits` and lcdump write), its maximum and how many
# steps' argmax agree. No numpy needed.
import sys, array
def load(p):
    a = array.array('f')
    a.frombytes(open(p, 'rb').read())
    return a
a, b, nv = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
n = min(len(a), len(b)) // nv
worst, agree = 0.0, 0
for i in range(n):
    x, y = a[i * nv:(i + 1) * nv], b[i * nv:(i + 1) * nv]
    num = sum((p - q) * (p - q) for p, q in zip(x, y))
    den = sum(q * q for q in y)
    worst = max(worst, num / den if den else 0.0)
    agree += int(max(range(nv), key=x.__getitem__) == max(range(nv), key=y.__getitem__))
print(f"steps {n} max_nmse {worst:.3e} argmax agree {agree}/{n}")
