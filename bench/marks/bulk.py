#!/usr/bin/env python3
# Where the time of one bulk copy goes (bench/marks/README.md): reads the same RIG_MARKS.PID files
# as marks.py, cuts them at each sample of rig.copy.to_remote.* / .from_remote.* (the patch marks
# 5xx with the copy's size as a power of two, then 301 for host and SIM, 401 for CUDA, and 302/402
# at its end), and prints per kind and size the p50 over samples of the first and last time of
# each step after the sample's start, and how many times it came: a bulk copy's steps repeat (a
# read callback per chunk), so sequences say little; first and last show what overlaps what.
#
#   python3 bench/marks/bulk.py RIG_MARKS
import sys, glob, struct, collections, statistics

names = {
    10: 'C.posted', 11: 'L.cmd', 12: 'W.begin', 13: 'W.end', 14: 'R.read', 15: 'C.publish',
    16: 'T.sleep', 17: 'T.woke', 20: 'A.sink', 22: 'A.hand', 23: 'A.handed', 24: 'A.submit',
    25: 'A.watch', 26: 'A.finish', 27: 'A.reached', 28: 'A.helper', 30: 'K.issued', 31: 'K.feeder',
    32: 'K.taken', 33: 'K.event', 34: 'K.published', 36: 'K.polled', 40: 'L.spinstop',
    41: 'L.spinstart', 42: 'L.async',
}
starts = {301: 'host/SIM', 401: 'CUDA'}
ends = {302, 402}

procs = {}
for f in glob.glob(sys.argv[1] + '.*'):
    data = open(f, 'rb').read()
    recs = []
    for i in range(0, len(data) - 15, 16):
        ns, tag, tid = struct.unpack_from('<QII', data, i)
        if ns == 0:
            break
        recs.append((ns, tag, tid))
    if recs:
        procs[f.rsplit('.', 1)[1]] = recs
# The workers in the order they started (one per placement).
controllers = sorted((r[0][0], p) for p, r in procs.items() if any(t in starts for _, t, _ in r))
worker = {p: i + 1 for i, (_, p) in enumerate(controllers)}
merged = sorted((ns, worker.get(p, 0), tag) for p, r in procs.items() for ns, tag, _ in r)

samples = collections.defaultdict(list)
current, size_log2 = None, None
for ns, w, tag in merged:
    role = 'C' if w else 'A'
    if w and 500 <= tag < 564:
        size_log2 = tag - 500
    elif w and tag in starts:
        current = {'key': (w, starts[tag], size_log2), 't0': ns, 'steps': []}
    elif current is not None and w and tag in ends:
        current['t1'] = ns
        samples[current['key']].append(current)
        current = None
    elif current is not None and tag in names:
        current['steps'].append((ns - current['t0'], role + ':' + names[tag]))

for key in sorted(samples):
    kept = samples[key][len(samples[key]) // 5:]  # the first fifth: warm-up
    if not kept:
        continue
    total = statistics.median(s['t1'] - s['t0'] for s in kept)
    print(f'\n== worker {key[0]}, {key[1]}, {1 << key[2]} B: {len(kept)} samples, '
          f'p50 {total / 1000:.1f} us')
    first, last, count = (collections.defaultdict(list) for _ in range(3))
    for s in kept:
        seen = {}
        for t, step in s['steps']:
            if step not in seen:
                seen[step] = [t, t, 0]
            seen[step][1] = t
            seen[step][2] += 1
        for step, (a, b, n) in seen.items():
            first[step].append(a)
            last[step].append(b)
            count[step].append(n)
    rows = sorted((statistics.median(first[k]), statistics.median(last[k]),
                   statistics.median(count[k]), k) for k in first if len(first[k]) * 2 >= len(kept))
    for a, b, n, step in rows:
        print(f'  {step:14s} first {a / 1000:9.1f}  last {b / 1000:9.1f} us  x{n:.0f}')
