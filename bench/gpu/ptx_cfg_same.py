#!/usr/bin/env python3
# ptx_cfg_same.py: ptx_same.py's comparison, but blind to the order in which the compiler lays out
# a kernel's basic blocks: each kernel's body is cut into blocks at its labels, the blocks are
# visited depth-first from the entry (a block's branch targets in order, then its fall-through),
# labels renamed in that order, fall-throughs made explicit, and registers renamed by first use in
# that order. Two kernels match when their control-flow graphs hold the same instructions. Used
# when a refactor moves code into inline helpers (a helper's early exit can change the layout).
#   bench/gpu/ptx_cfg_same.py OLD NEW attention_mma      # OLD/attention_mma.ptx, NEW/attention_mma.ptx
import re, subprocess, sys

def canon_kernel(name, body):
    body = body.replace(name, 'FN')
    body = re.sub(r'__local_depot\d+', 'DEPOT', body)
    body = re.sub(r'_ZZ\w+?E(\d+[A-Za-z_]\w*)', r'LOCALSTATIC_\1', body)
    lines = [l.strip() for l in body.split('\n')]
    lines = [l for l in lines if l and not l.startswith('.reg') and not l.startswith('//')]
    lab = re.compile(r'^(\$L__BB\d+_\d+):$')
    blocks, order, cur = {}, [], '__entry'
    blocks[cur] = []
    order.append(cur)
    for l in lines:
        m = lab.match(l)
        if m:
            cur = m.group(1)
            blocks[cur] = []
            order.append(cur)
        else:
            blocks[cur].append(l)
    nxt = {order[i]: (order[i + 1] if i + 1 < len(order) else None) for i in range(len(order))}
    ref = re.compile(r'\$L__BB\d+_\d+')
    def ends(last):  # an unconditional transfer: no fall-through
        return last.startswith('bra.uni') or last.startswith('ret') or last.startswith('exit') or \
            bool(re.match(r'^bra\s', last))
    def succ(b):
        out = []
        for l in blocks[b]:
            out += ref.findall(l)
        last = blocks[b][-1] if blocks[b] else ''
        if not ends(last) and nxt[b]:
            out.append(nxt[b])
        return out
    seen, visit = {}, []
    stack = ['__entry']
    while stack:
        b = stack.pop()
        if b in seen:
            continue
        seen[b] = 'B%d' % len(seen)
        visit.append(b)
        s = succ(b)
        for t in reversed(s):
            if t not in seen:
                stack.append(t)
    out = []
    for b in visit:
        out.append(seen[b] + ':')
        ins = [ref.sub(lambda m: seen.get(m.group(0), 'UNREACHED'), l) for l in blocks[b]]
        out += ins
        last = blocks[b][-1] if blocks[b] else ''
        if nxt[b] and not ends(last):
            out.append('FALLTHRU ' + seen.get(nxt[b], 'UNREACHED'))
    text = '\n'.join(out)
    seenr = {}
    def canon(m):
        k = m.group(0)
        if k not in seenr:
            seenr[k] = '%' + m.group(1) + '_' + str(len(seenr))
        return seenr[k]
    return re.sub(r'%(rs|rd|r|fd|f|p)(\d+)\b', canon, text)

def entries(path):
    s = open(path).read()
    out = {}
    for m in re.finditer(r'\.entry (\S+)\(', s):
        name = m.group(1)
        end = s.index('\n}\n', m.start()) + 3
        out[name] = canon_kernel(name, s[m.start():end])
    return out

for f in sys.argv[3:]:
    a = entries(f'{sys.argv[1]}/{f}.ptx')
    b = entries(f'{sys.argv[2]}/{f}.ptx')
    same = sum(1 for k in a if k in b and a[k] == b[k])
    for k in a:
        if k not in b:
            print('NO MATCH', k)
        elif a[k] != b[k]:
            print('DIFF', subprocess.run(['c++filt'], input=k, capture_output=True, text=True).stdout.strip())
    print(f, 'old kernels with a same-CFG new one:', same, 'of', len(a), '; new file has', len(b))
