#!/usr/bin/env bash
# README command 1: install what is missing, build, run the main job.
#
# The main job: first the local example (docs/examples/local.cpp: saxpy on this machine's host and
# SIM devices, every element checked), then a job across machines on this one: `rig run` starts two
# rigd agents on loopback with a fresh key and the remote example controller
# (docs/examples/remote.cpp), which makes round trips to each agent's host, runs saxpy on each
# agent's SIM devices through their proxies, checks every element and closes the job.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$rig_root"

build=build
job="$build/docs/examples/rig-example-local"
program="$build/docs/examples/saxpy.rig"
remote="$build/docs/examples/rig-example-remote"
rig="$build/tools/rig"

tools/deps.sh
rig_configure "$build" "${rig_build_options[@]}"
meson compile -C "$build" >"$build/demo-compile.log" 2>&1 || {
  cat "$build/demo-compile.log" >&2
  echo "demo.sh: the build failed (output above, also in $build/demo-compile.log)" >&2
  exit 1
}

for f in "$job" "$program" "$remote" "$rig"; do
  if [[ ! -f "$f" ]]; then
    echo "demo.sh: the build made no $f (docs/examples/meson.build and tools/ build them)" >&2
    exit 1
  fi
done
echo "== local devices: $job $program"
"$job" "$program"
echo
echo "== a job on two local agents: rig run --local 2 -- $remote $program"
exec "$rig" run --local 2 -- "$remote" "$program"
