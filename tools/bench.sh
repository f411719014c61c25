#!/usr/bin/env bash
# The benchmark: builds what it needs, starts its own rigd agents on loopback (or uses given
# hosts), runs every scenario of bench/ beside its raw-TCP baseline, and writes
# bench/results/MACHINE-DATE.json and .png. Progress goes to stderr, the summary to stdout.
#
#   tools/bench.sh                 the full run (about 5-10 minutes on a 2-vCPU VM)
#   tools/bench.sh --quick         a smoke run with tiny counts (seconds)
#   tools/bench.sh --samples N     latency samples per measurement (default 100000)
#   tools/bench.sh --hosts H:P,... --key FILE [--echo H:P]   agents already running elsewhere
#
# Every other argument goes to rig-bench (bench/README.md lists them).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$rig_root"

case "${1:-}" in
  -h | --help)
    sed -n '2,12s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac

build=build
tools/deps.sh
rig_configure "$build" "${rig_build_options[@]}"
ninja -C "$build" bench/rig-bench bench/rig_bench_kernels.so tools/rigd/rigd >"$build/bench-compile.log" 2>&1 || {
  cat "$build/bench-compile.log" >&2
  echo "bench.sh: the build failed (output above, also in $build/bench-compile.log)" >&2
  exit 1
}
exec "$build/bench/rig-bench" --rigd "$build/tools/rigd/rigd" --out bench/results "$@"
