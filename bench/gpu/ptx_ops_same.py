#!/usr/bin/env python3
# ptx_ops_same.py: for kernels that ptx_same.py finds different, how different: the instruction
# multiset of each kernel (registers and labels canonicalised, jumps and labels set aside: block
# layout), and within it the float, memory, MMA, shuffle and barrier operations alone. Used when a
# refactor moves code into inline helpers, which can change the compiler's block layout and which
# integer values it keeps or recomputes without changing what is computed.
#   bench/gpu/ptx_ops_same.py OLD NEW attention_mma    # OLD/attention_mma.ptx, NEW/attention_mma.ptx
# Prints a line for each kernel whose operations differ, then the counts: identical, same
# multiset but for layout, same float/memory/sync operations, other.
import collections, re, subprocess, sys

def entries(path):
    s = open(path).read()
    out = {}
    for m in re.finditer(r'\.entry (\S+)\(', s):
        name = m.group(1)
        end = s.index('\n}\n', m.start()) + 3
        body = s[m.start():end].replace(name, 'FN')
        lines = [re.sub(r'%\w+', 'R', re.sub(r'\$L__BB\d+_\d+', 'L', l)).strip() for l in body.split('\n')]
        out[name] = [l for l in lines if l and not l.startswith('.reg') and not l.startswith('//')]
    return out

def ops(lines):
    return collections.Counter(l for l in lines if l not in ('bra.uni \tL;', 'L:'))

FLOATMEM = re.compile(r'\.(f32|f16|bf16|f16x2|bf16x2|f64)\b|mma|ldmatrix|ex2|\.shared|\.global|cp\.async|atom|bar\.|shfl')

def floatmem(c):  # (address conversions aside: integer work)
    return collections.Counter({k: v for k, v in c.items() if FLOATMEM.search(k) and not k.startswith('cvta')})

def demangle(n):
    return subprocess.run(['c++filt'], input=n, capture_output=True, text=True).stdout.strip()

for f in sys.argv[3:]:
    a = entries(f'{sys.argv[1]}/{f}.ptx')
    b = entries(f'{sys.argv[2]}/{f}.ptx')
    n = collections.Counter()
    for k in a:
        if k not in b:
            print('NO MATCH', demangle(k)[:120])
            n['no match'] += 1
        elif a[k] == b[k]:
            n['identical'] += 1
        elif ops(a[k]) == ops(b[k]):
            n['same operations, other layout'] += 1
        elif floatmem(ops(a[k])) == floatmem(ops(b[k])):
            n['same float/memory/sync operations'] += 1
            print('INTEGER', demangle(k)[:120])
        else:
            n['other'] += 1
            fa, fb = floatmem(ops(a[k])), floatmem(ops(b[k]))
            print('OTHER', demangle(k)[:120], '| old only:', list((fa - fb).items())[:4], '| new only:',
                  list((fb - fa).items())[:4])
    print(f, dict(n), 'of', len(a))
