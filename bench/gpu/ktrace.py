#!/usr/bin/env python3
"""ktrace.py TRACE.tsv [top]: what each kernel costs a decode token, from ktrace.c's records.

Groups the kernels by the graph launch that ran them (the correlation id of cudaGraphLaunch),
keeps the graph replayed most often with the most kernels (the decode token of cuda-graph), and
within each replay orders the kernels by start: a kernel's cost is its end less the previous
kernel's end (the first one's: its own duration), so the costs add up to the replay's span.
Prints, per kernel name and grid, the launches a token, the mean cost a token and the mean
duration (start to end: longer than the cost where the kernel started early under the previous
one's drain), then the token's span."""
import collections, subprocess, sys


def demangle(names):
    try:
        out = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True, check=True).stdout
        d = out.split('\n')
        return {n: d[i] for i, n in enumerate(names)} if len(d) >= len(names) else {n: n for n in names}
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def short(name):
    name = name.split('(')[0]
    if name.startswith('void '):
        name = name[5:]
    return name[:90]


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    groups = collections.defaultdict(list)
    for line in open(path):
        f = line.rstrip('\n').split('\t')
        if len(f) < 8:
            continue
        start, end, corr, gid = int(f[0]), int(f[1]), int(f[2]), int(f[3])
        if gid == 0:
            continue
        groups[(gid, corr)].append((start, end, f[7], f[5], f[6], int(f[4])))
    if not groups:
        sys.exit('ktrace.py: no graph-launched kernels in ' + path)
    if max(len(ks) for ks in groups.values()) == 1:  # no shared correlation id: a replay ends where a node repeats
        flat = collections.defaultdict(list)
        for (gid, corr), ks in groups.items():
            flat[gid] += ks
        groups = {}
        for gid, ks in flat.items():
            ks.sort()
            cur, seen = [], set()
            for k in ks:
                if k[5] in seen:
                    groups[(gid, len(groups))] = cur
                    cur, seen = [], set()
                cur.append(k)
                seen.add(k[5])
            if cur:
                groups[(gid, len(groups))] = cur
    by_graph = collections.defaultdict(list)
    for (gid, corr), ks in groups.items():
        by_graph[gid].append(ks)
    gid, reps = max(by_graph.items(), key=lambda kv: (len(kv[1]) * min(len(k) for k in kv[1]), len(kv[1])))
    reps = reps[len(reps) // 5:] if len(reps) >= 5 else reps  # leave the first fifth (warm-up)
    names = demangle(sorted({k[2] for ks in reps for k in ks}))
    cost = collections.defaultdict(float)
    dur = collections.defaultdict(float)
    cnt = collections.defaultdict(int)
    spans = []
    for ks in reps:
        ks.sort()
        prev = None
        for start, end, name, grid, block, _node in ks:
            key = short(names[name]) + ' <<<%s,%s>>>' % (grid, block)
            cost[key] += end - (prev if prev is not None else start)
            dur[key] += end - start
            cnt[key] += 1
            prev = end if prev is None else max(prev, end)
        spans.append(ks[-1][1] - ks[0][0])
    n = len(reps)
    span = sum(spans) / n / 1e3
    print('graph %d: %d replays of %d kernels; span %.1f us a token (%.1f tok/s if nothing else ran)' %
          (gid, n, len(reps[0]), span, 1e6 / span if span else 0))
    print('%10s %8s %10s  %s' % ('cost us', 'x/token', 'dur us', 'kernel <<<grid,block>>>'))
    for key in sorted(cost, key=lambda k: -cost[k])[:top]:
        print('%10.2f %8.1f %10.2f  %s' % (cost[key] / n / 1e3, cnt[key] / n, dur[key] / cnt[key] / 1e3, key))


if __name__ == '__main__':
    main()
