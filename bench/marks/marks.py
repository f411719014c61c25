#!/usr/bin/env python3
# Where the time of a small remote operation goes (bench/marks/README.md): reads the files
# RIG_MARKS.PID that a build with bench/marks/marks.patch applied writes, merges the marks of every
# process by time (they share CLOCK_MONOTONIC), cuts them at each sample's start, and prints for
# each scenario and worker (one worker per placement) the commonest sequences of steps with the
# p50 of each step, the first fifth of the samples left out as warm-up.
#
#   python3 bench/marks/marks.py RIG_MARKS
import sys, glob, struct, collections, statistics

# The tags the patch marks, by the process that marks them: B the bench's sample, C the
# controller, L either process's loop, W/R either's socket writes and reads, T the controller's
# waiter, A the agent's work, K a CUDA engine's threads, S the process's spin rule. Tags 40-99 are
# side events: counted per sample, left out of the sequences.
names = {
    1: 'B.start', 2: 'B.end', 101: 'B.start', 102: 'B.end', 201: 'B.start', 202: 'B.end',
    10: 'C.posted', 11: 'L.cmd', 12: 'W.begin', 13: 'W.end', 14: 'R.read', 15: 'C.publish',
    16: 'T.sleep', 17: 'T.woke', 20: 'A.sink', 22: 'A.hand', 23: 'A.handed', 24: 'A.submit',
    25: 'A.watch', 26: 'A.finish', 27: 'A.reached', 28: 'A.helper', 30: 'K.issued', 31: 'K.feeder',
    32: 'K.taken', 33: 'K.event', 34: 'K.published', 35: 'K.cvsleep', 36: 'K.polled', 40: 'L.spinstop',
    41: 'L.spinstart', 42: 'L.async', 44: 'K.linger', 45: 'K.lingered', 48: 'L.spinoff',
    49: 'L.lateyield', 50: 'S.spinsoff',
}
base = sys.argv[1]
procs = {}
for f in glob.glob(base + '.*'):
    pid = f.rsplit('.',1)[1]
    data = open(f,'rb').read()
    recs = []
    for i in range(0, len(data) - 15, 16):
        ns, tag, tid = struct.unpack_from('<QII', data, i)
        if ns == 0: break
        recs.append((ns, tag, tid))
    if recs: procs[pid] = recs
# roles: worker = has tag 1; agent = has tag 24
workers = [p for p, r in procs.items() if any(t % 100 == 1 and t < 1000 for _, t, _ in r)]
agents = [p for p, r in procs.items() if any(t == 24 for _, t, _ in r)]
print('files', len(procs), 'workers', workers, 'agents', agents)
allm = []
for p, r in procs.items():
    role = 'C' if p in workers else ('A' if p in agents else 'X' + p)
    for ns, tag, tid in r: allm.append((ns, role, tag, tid))
allm.sort()
def analyze(label, allm, lo, hi):
    seg = [m for m in allm if lo <= m[0] <= hi]
    iters = []
    cur = None
    for ns, role, tag, tid in seg:
        if role == 'C' and tag % 100 == 1:
            if cur: iters.append(cur)
            cur = [(ns, role, tag, tid)]
        elif cur is not None:
            cur.append((ns, role, tag, tid))
    iters = iters[len(iters)//5:]
    if len(iters) < 20: return
    pats = collections.Counter()
    bypat = collections.defaultdict(list)
    side = collections.Counter()
    sidet = collections.defaultdict(list)
    full = iters
    iters = []
    for it in full:
        t0 = it[0][0]
        for ns, r, t, _ in it:
            if 40 <= t < 100:
                side[(r, t)] += 1
                sidet[(r, t)].append(ns - t0)
        iters.append([m for m in it if not 40 <= m[2] < 100])
    for it in iters:
        key = tuple((r, t) for _, r, t, _ in it)
        pats[key] += 1
        bypat[key].append(it)
    totals = [it[-1][0]-it[0][0] for it in iters]
    print(f'\n== {label}: {len(iters)} iterations, p50 total {statistics.median(totals)/1000:.1f} us')
    for (r, t), n in sorted(side.items()):
        print(f'   side {r}:{names.get(t,t)}: {n/len(iters):.2f} per iteration, p50 at {statistics.median(sidet[(r,t)])/1000:.1f} us')
    for key, n in pats.most_common(2):
        its = bypat[key]
        tot = statistics.median([it[-1][0]-it[0][0] for it in its])
        print(f'-- pattern seen {n} times ({100*n/len(iters):.0f}%), p50 {tot/1000:.1f} us')
        for k in range(1, len(key)):
            d = statistics.median([it[k][0]-it[k-1][0] for it in its])
            print(f'   {key[k-1][0]}:{names.get(key[k-1][1],key[k-1][1]):11s}-> {key[k][0]}:{names.get(key[k][1],key[k][1]):11s} {d/1000:7.2f}')
for w in workers:
    for kind, label in ((1, 'host.empty'), (101, 'sim.copy64'), (201, 'cuda')):
        starts = [ns for ns, t, _ in procs[w] if t == kind]
        if starts: analyze(f'worker {w} {label}', allm, starts[0], starts[-1])
