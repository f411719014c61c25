#!/usr/bin/env bash
# README command 1: install what is missing, build, run the main job.
#
# The main job is, for now, the demo controller of docs/examples/local.cpp: it drives this
# machine's host and SIM devices and prints what it did. Arguments are passed on to it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$rig_root"

build=build
job="$build/docs/examples/rig-example-local"

tools/deps.sh
rig_configure "$build" "${rig_build_options[@]}"
meson compile -C "$build" >"$build/demo-compile.log" 2>&1 || {
  cat "$build/demo-compile.log" >&2
  echo "demo.sh: the build failed (output above, also in $build/demo-compile.log)" >&2
  exit 1
}

if [[ ! -x "$job" ]]; then
  echo "demo.sh: the build has no $job; docs/meson.build must build the target" \
    "rig-example-local from docs/examples/local.cpp" >&2
  exit 1
fi
exec "$job" "$@"
