#!/usr/bin/env python3
"""ktrace.py TRACE.tsv [top]: what each kernel costs a decode token, from ktrace.c's records.

Groups the kernels by the graph launch that ran them (the correlation id of cudaGraphLaunch),
keeps the graph replayed most often with the most kernels (the decode token of cuda-graph), and
within each replay orders the kernels by start: a kernel's cost is its end less the previous
kernel's end (the first one's: its own duration), so the costs add up to the replay's span.
Prints, per kernel name and grid, the launches a token, the mean cost a token and the mean
duration (start to end: longer than the cost where the kernel started early under the previous
one's drain), then the token's span. `ktrace.py --seq TRACE.tsv FIRST COUNT` prints kernels FIRST
.. FIRST + COUNT - 1 of a replay in order instead (the embedding is 0, then each layer's launches:
with five a layer, layer 5's are 26 to 30), so two launches of one kernel (a layer's output and
down projections) are told apart, with each one's start against the previous kernel's end."""
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


def replays(path):
    """The graph replayed most often with the most kernels, as its replays (each a list of (start,
    end, name, grid, block, node)), the first fifth (warm-up) left out; and its id."""
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
    for ks in reps:
        ks.sort()
    return gid, reps


def sequence(path, first, count, out=sys.stdout):
    """Kernels first .. first + count - 1 of the replay in start order (the embedding is 0, then
    each layer's launches): per position, the mean cost (end less the previous end), duration,
    and start less the previous kernel's end (negative: it started under its predecessor)."""
    gid, reps = replays(path)
    n = min(len(ks) for ks in reps)
    names = demangle(sorted({k[2] for ks in reps for k in ks}))
    rows = []
    for i in list(range(first, min(first + count, n))):
        cost = dur = lead = 0.0
        for ks in reps:
            prev = max(k[1] for k in ks[:i]) if i else ks[0][0]
            cost += ks[i][1] - prev
            dur += ks[i][1] - ks[i][0]
            lead += ks[i][0] - prev if i else 0
        r = len(reps) * 1e3
        rows.append((i, cost / r, dur / r, lead / r, short(names[reps[0][i][2]])))
        print('%4d cost %8.2f us  dur %8.2f  start-prev_end %8.2f  %s' % rows[-1], file=out)
    return rows


def analyse(path, top, out=sys.stdout):
    gid, reps = replays(path)
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
          (gid, n, len(reps[0]), span, 1e6 / span if span else 0), file=out)
    # from one replay's last end to the next one's first start (what a token costs outside its
    # span: the host's hand-over, kernels outside the graph); gaps over 200 us (a repetition's
    # restore, the timed loop's end) are left out
    order = sorted(reps, key=lambda ks: ks[0][0])
    gaps = sorted(b[0][0] - max(k[1] for k in a) for a, b in zip(order, order[1:]))
    gaps = [g for g in gaps if g < 200000]
    if gaps:
        print('between replays: median %.2f us, mean %.2f us (%d gaps under 200 us)' %
              (gaps[len(gaps) // 2] / 1e3, sum(gaps) / len(gaps) / 1e3, len(gaps)), file=out)
    print('%10s %8s %10s  %s' % ('cost us', 'x/token', 'dur us', 'kernel <<<grid,block>>>'), file=out)
    rows = []
    for key in sorted(cost, key=lambda k: -cost[k])[:top]:
        rows.append((key, cost[key] / n / 1e3, cnt[key] / n))
        print('%10.2f %8.1f %10.2f  %s' % (cost[key] / n / 1e3, cnt[key] / n, dur[key] / cnt[key] / 1e3, key), file=out)
    return span, rows


def self_test():
    """Six replays of foo (2 us), bar (3 us, starting 0.5 us after foo's end), foo (1.5 us, starting
    0.5 us before bar's end: an early start under its drain); the first fifth is left out. foo must
    cost 2 + 1 = 3 us a token, bar 3.5, the span 6.5; in both groupings (shared correlation ids,
    and one id a kernel, split where a node repeats)."""
    import io, os, tempfile
    for shared in (True, False):
        fd, path = tempfile.mkstemp(suffix='.tsv')
        with os.fdopen(fd, 'w') as f:
            cid = 1000
            for rep in range(6):
                t = rep * 100000
                spans = [(t, t + 2000, '_Z3fooi'), (t + 2500, t + 5500, '_Z3bari'), (t + 5000, t + 6500, '_Z3fooi')]
                for node, (s, e, name) in enumerate(spans):
                    f.write('%d\t%d\t%d\t7\t%d\t132\t512\t%s\n' % (s, e, cid, node, name))
                    cid += 0 if shared else 1
                cid += 1 if shared else 0
        span, rows = analyse(path, 10, io.StringIO())
        seq = [(r[0], round(r[1], 6), round(r[3], 6)) for r in sequence(path, 0, 3, io.StringIO())]
        os.unlink(path)
        if seq != [(0, 2.0, 0.0), (1, 3.5, 0.5), (2, 1.0, -0.5)]:
            sys.exit('ktrace.py self-test FAILED (shared ids %s): sequence %s' % (shared, seq))
        got = {r[0].split(' ')[0]: round(r[1], 6) for r in rows}
        want = {'foo': 3.0, 'bar': 3.5}
        if abs(span - 6.5) > 1e-9 or got != want:
            sys.exit('ktrace.py self-test FAILED (shared ids %s): span %s, costs %s, want 6.5 and %s' %
                     (shared, span, got, want))
    print('ktrace.py self-test passed')


def main():
    if len(sys.argv) > 1 and sys.argv[1] == '--self-test':
        self_test()
        return
    if len(sys.argv) >= 3 and sys.argv[1] == '--seq':
        sequence(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0, int(sys.argv[4]) if len(sys.argv) > 4 else 8)
        return
    if len(sys.argv) < 2:
        sys.exit('usage: ktrace.py TRACE.tsv [top] | --seq TRACE.tsv [first [count]] | --self-test')
    analyse(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30)


if __name__ == '__main__':
    main()
