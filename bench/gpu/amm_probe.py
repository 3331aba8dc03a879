#!/usr/bin/env python3
"""amm_probe.py NAME < bench.log: the median phases of attention=mma's decode from a probe build's
lines (attention_mma.cu built with -DMC_AMM_PROBE: the merging block of kv head 0 prints, every 17th
launch, its start, the return of its grid wait, the end of its spans, its ticket (mc_amm_last) and
the merge's end, in ns from the first start among kv head 0's blocks). One line: X (blocks a kv
head), the active blocks, the samples, and each phase's median in us."""
import statistics
import sys

name = sys.argv[1] if len(sys.argv) > 1 else ''
rows = [l.split() for l in sys.stdin if l.startswith('amm-probe')]
if not rows:
    print(name, 'no probe lines')
    sys.exit(0)
cols = [(k, [int(r[i]) / 1000 for r in rows]) for k, i in (('start', 6), ('wait', 8), ('spans', 10), ('last', 12),
                                                           ('merged', 14))]
print('%-52s X=%s act=%s n=%d med(us):' % (name, rows[-1][2], rows[-1][4], len(rows)) +
      ''.join(' %s %.2f' % (k, statistics.median(v)) for k, v in cols))
