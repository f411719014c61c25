#!/usr/bin/env python3
# The performance targets of issues 14 and 15, read from rig-bench results files: for each target
# the figure of each placement, its ratio to the same run's baseline, and whether it is met. Prints
# one Markdown table per file (bench/README.md, "Where each target stands").
#
#   python3 bench/targets.py bench/results/FILE.json ...
#
# A figure the file lacks (an older tree, a skipped scenario) reads "n/a". The CUDA row has no
# verdict here: its bound adds the driver-alone figure, which tools/gpu.sh measures, not rig-bench.
import json
import sys

ONE, ACROSS = 'same-core', 'cross-core'
MIB = 1 << 20


def result(by, sid, placement):
    s = by.get(sid)
    if not s or 'results' not in s:
        return None
    return s['results'].get(placement)


def p50(by, sid, placement):
    r = result(by, sid, placement)
    return r['stats']['p50'] if r and 'stats' in r else None


def ratios(by, sid, placement, smallest):
    """Each size's p50 ratio to the baseline, from `smallest` bytes up."""
    r = result(by, sid, placement)
    if not r or 'points' not in r:
        return []
    return [p['ratio']['p50'] for p in r['points']
            if 'bytes' in p and p['bytes'] >= smallest and 'ratio' in p]


def span(xs):
    return '%.2f-%.2fx' % (min(xs), max(xs)) if xs else 'n/a'


def verdict(pairs):
    """pairs: (placement name, met or None)."""
    met = [name for name, ok in pairs if ok]
    if any(ok is None for _, ok in pairs) and not met:
        return 'n/a'
    return ', '.join(met) if met else 'no'


def latency(x, base):
    return ('%.1f us, %.2fx' % (x, x / base)) if x and base else 'n/a'


def table(path):
    j = json.load(open(path))
    by = {s['id']: s for s in j['scenarios']}
    machine, versions = j['machine'], j['versions']
    print('%s (%s), git %s, %s samples' % (machine.get('name'), machine.get('cpu_model'),
                                           versions.get('git'), j['run']['plan']['samples']))
    print()
    print('| target | one core | across cores | met |')
    print('|---|---:|---:|---|')

    def row(name, one, across, met):
        print('| %s | %s | %s | %s |' % (name, one, across, met))

    def ok(x, bound, below=True):
        if x is None:
            return None
        return x <= bound if below else x >= bound

    # Pipelined empty submissions against the TCP echo pipeline.
    cells, pairs = [], []
    for name, pl in (('one core', ONE), ('across', ACROSS)):
        rate, base = p50(by, 'rig.host.pipeline', pl), p50(by, 'tcp.pipeline', pl)
        r = rate / base if rate and base else None
        cells.append('%.0fk/s, %.2fx' % (rate / 1e3, r) if r else 'n/a')
        pairs.append((name, ok(r, 0.5, below=False)))
    row('pipelined >= 0.5x `tcp.pipeline`', cells[0], cells[1], verdict(pairs))

    # Four threads together against one: ops/s of the four, times one submit's p50.
    cells, pairs = [], []
    for name, pl in (('one core', ONE), ('across', ACROSS)):
        four, one = result(by, 'rig.host.empty.threads4', pl), p50(by, 'rig.host.empty', pl)
        r = four['ops_per_s'] * one / 1e6 if four and one and 'ops_per_s' in four else None
        cells.append('%.2fx' % r if r else 'n/a')
        pairs.append((name, ok(r, 2, below=False)))
    row('4 threads >= 2x one thread', cells[0], cells[1], verdict(pairs))

    blocking = p50(by, 'tcp.pingpong.blocking', ONE)
    spinning = p50(by, 'tcp.pingpong.spinning', ACROSS)
    blocking_across = p50(by, 'tcp.pingpong.blocking', ACROSS)

    def small(sid, name, bound, across_base):
        one, across = p50(by, sid, ONE), p50(by, sid, ACROSS)
        r1 = one / blocking if one and blocking else None
        r2 = across / across_base if across and across_base else None
        row(name, latency(one, blocking), latency(across, across_base),
            verdict((('one core', ok(r1, bound)), ('across', ok(r2, bound)))))

    small('rig.host.empty', 'empty submit <= 1.5x (blocking on one core, spinning across)', 1.5,
          spinning)
    small('rig.sim.copy64', '64 B copy to SIM <= 2x (the same baselines)', 2, spinning)

    one, across = p50(by, 'rig.cuda', ONE), p50(by, 'rig.cuda', ACROSS)
    if one or across:
        row('64 B copy to `CUDA:0@`, agent pinned: round trip + driver alone + 5 us',
            '%.1f us (blocking %.1f)' % (one, blocking) if one and blocking else 'n/a',
            '%.1f us (spinning %.1f, blocking %.1f)' % (across, spinning, blocking_across)
            if across and spinning and blocking_across else 'n/a', 'with gpu.sh')

    for kind in ('host', 'sim', 'cuda'):
        ids = ('rig.copy.to_remote.' + kind, 'rig.copy.from_remote.' + kind)
        if not any(sid in by for sid in ids):
            continue
        one = [r for sid in ids for r in ratios(by, sid, ONE, MIB)]
        across = [r for sid in ids for r in ratios(by, sid, ACROSS, MIB)]
        if not one and not across:
            continue  # skipped: no such device where the run was made
        row('bulk to and from %s >= 0.9x `tcp.stream`, 1 MiB .. 1 GiB' % kind.upper()
            if kind != 'host' else 'bulk to and from host memory >= 0.9x `tcp.stream`, 1 MiB .. 1 GiB',
            span(one), span(across),
            verdict((('one core', ok(min(one), 0.9, below=False) if one else None),
                     ('across', ok(min(across), 0.9, below=False) if across else None))))

    for sid in ('rig.rail.agents', 'rig.rail.to_agent'):
        one, across = ratios(by, sid, ONE, 4096), ratios(by, sid, ACROSS, 4096)
        row('`%s` >= 0.9x `tcp.stream`, 4 KiB .. 1 GiB' % sid, span(one), span(across),
            verdict((('one core', ok(min(one), 0.9, below=False) if one else None),
                     ('across', ok(min(across), 0.9, below=False) if across else None))))

    one, across = p50(by, 'rig.rail.pingpong', ONE), p50(by, 'rig.rail.pingpong', ACROSS)
    r1 = one / blocking if one and blocking else None
    r2 = across / blocking_across if across and blocking_across else None
    row('host-code rail ping-pong <= 1.25x blocking TCP', latency(one, blocking),
        latency(across, blocking_across),
        verdict((('one core', ok(r1, 1.25)), ('across', ok(r2, 1.25)))))
    print()


def main():
    if len(sys.argv) < 2:
        print('usage: targets.py RESULTS.json ...', file=sys.stderr)
        return 2
    for path in sys.argv[1:]:
        table(path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
