#!/usr/bin/env bash
# README command 1: install what is missing, build, run the main job.
#
# The main job is, for now, the demo controller of docs/examples/local.cpp: it runs the saxpy
# program the build packs from docs/examples/saxpy.c on this machine's host and SIM devices and
# prints what it did.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$rig_root"

build=build
# The job: a program the build makes, and the files it makes for it to read.
job=("$build/docs/examples/rig-example-local" "$build/docs/examples/saxpy.rig")

tools/deps.sh
rig_configure "$build" "${rig_build_options[@]}"
meson compile -C "$build" >"$build/demo-compile.log" 2>&1 || {
  cat "$build/demo-compile.log" >&2
  echo "demo.sh: the build failed (output above, also in $build/demo-compile.log)" >&2
  exit 1
}

for f in "${job[@]}"; do
  if [[ ! -f "$f" ]]; then
    echo "demo.sh: the build made no $f (docs/examples/meson.build builds it)" >&2
    exit 1
  fi
done
exec "${job[@]}"
