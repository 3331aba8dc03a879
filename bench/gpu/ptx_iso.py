#!/usr/bin/env python3
# ptx_iso.py OLD.ptx NEW.ptx: whether each kernel of OLD has, under the same name in NEW, the same
# instruction sequence up to one consistent renaming of its registers (labels, the local depot and
# the kernels' static shared names canonicalised as ptx_same.py does). Where ptx_same.py (which
# numbers registers by first appearance) reports DIFF only because the register allocator swapped
# the names of two registers that one `mov` pair sets from the same source (two loop counters both
# started at 0: interchangeable), this still matches. Used for postnorm=next (branch pnext):
# gemv_q8.cu's 42 old kernels after the body took a PD template parameter.
import re, sys
PAT = re.compile(r'%(?:rs|rd|r|fd|f|p)\d+\b')
MOV = re.compile(r'^\s*mov\.\w+\s+(%\w+), (%\w+);$')
def body(s, name):
    start = s.index('.entry ' + name + '(')
    end = s.index('\n}\n', start) + 3
    b = re.sub(r'\$L__BB\d+_', 'L_', s[start:end].replace(name, 'FN'))
    b = re.sub(r'__local_depot\d+', 'DEPOT', b)
    b = re.sub(r'_ZZ\w+?E(\d+[A-Za-z_]\w*)', r'LOCALSTATIC_\1', b)
    return [l for l in b.split('\n') if not l.strip().startswith('.reg')]
def iso(A, B):
    if len(A) != len(B) or [PAT.sub('R', x) for x in A] != [PAT.sub('R', x) for x in B]:
        return False
    twin = {}  # line -> the pair of registers one source is copied into, on adjacent identical lines
    for i in range(len(A) - 1):
        m1, m2 = MOV.match(A[i]), MOV.match(A[i + 1])
        if m1 and m2 and m1.group(2) == m2.group(2) and A[i] == B[i] and A[i + 1] == B[i + 1]:
            twin[i] = twin[i + 1] = {m1.group(1), m2.group(1)}
    f, g = {}, {}
    for i, (x, y) in enumerate(zip(A, B)):
        if i in twin:
            continue
        for u, v in zip(PAT.findall(x), PAT.findall(y)):
            if f.setdefault(u, v) != v or g.setdefault(v, u) != u:
                return False
    return all(f.get(MOV.match(A[i]).group(1), MOV.match(A[i]).group(1)) in twin[i] for i in twin)
o, n = open(sys.argv[1]).read(), open(sys.argv[2]).read()
names = re.findall(r'\.entry (\S+)\(', o)
ok = 0
for nm in names:
    if ('.entry ' + nm + '(') in n and iso(body(o, nm), body(n, nm)):
        ok += 1
    else:
        print('DIFF', nm)
print(f'{sys.argv[1]}: {ok} of {len(names)} old kernels match the new up to register names; new file has '
      f'{len(re.findall(r"[.]entry ", n))}')
