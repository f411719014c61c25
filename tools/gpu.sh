#!/usr/bin/env bash
# The GPU suite: the CUDA backend's tests and figures on this machine's GPUs, run straight from a
# build folder (no meson needed, so it also runs on a GPU machine that has only the built files).
#
#   tools/gpu.sh [BUILD]    BUILD defaults to build; exit 0 when every part passed or skipped
#
# Parts: the fake-driver tests (as CI runs them, locally and through a rigd), the GPU tests, the
# trapping kernel (in a process of its own: it breaks its context for good), the figures twice:
# with the completion poll budget in force, and with RIG_CUDA_POLL_NS=0 (every completion found by
# the looks between sleeps); then the GPU tests and figures through a rigd on 127.0.0.1 (port 0),
# which this process uses as the controller, each remote figure beside the local one of the same
# run.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$rig_root"

build="${1:-build}"
tests="$build/test/backends"
remote_tests="$build/test/remote"
for f in "$tests/test_cuda_gpu" "$remote_tests/test_remote_gpu" "$build/tools/rigd/rigd"; do
  if [[ ! -x "$f" ]]; then
    echo "gpu.sh: $f is missing: build $build first" >&2
    exit 2
  fi
done
export RIG_RIGD="$build/tools/rigd/rigd"
export RIG_TEST_CUDA_PTX="$rig_root/test/backends/cuda/kernels.ptx"
if [[ -f "$tests/saxpy_cu.rig" ]]; then
  export RIG_TEST_SAXPY_CU_RIG="$tests/saxpy_cu.rig"
fi

summary=()
failed=0
part() {
  local name="$1"
  shift
  echo "== $name"
  local start=$SECONDS status
  "$@"
  status=$?
  local outcome=ok
  ((status == 77)) && outcome=skipped
  ((status != 0 && status != 77)) && outcome="FAILED ($status)" && failed=1
  summary+=("$(printf '%-34s %-12s %4ss' "$name" "$outcome" $((SECONDS - start)))")
}

part "fake driver" env RIG_CUDA_LIB="$tests/libfake_cuda.so" \
  RIG_TEST_KERNELS="$build/test/rig_test_kernels.so" "$tests/test_cuda"
part "fake driver through rigd" env RIG_TEST_FAKE_CUDA="$tests/libfake_cuda.so" \
  "$remote_tests/test_remote_cuda"
part "gpu" "$tests/test_cuda_gpu" --test-case-exclude='*trap*,*figures*'
part "gpu trap" "$tests/test_cuda_gpu" --test-case='*trap*'
part "gpu figures" "$tests/test_cuda_gpu" --test-case='*figures*'
part "gpu figures, no poll" env RIG_CUDA_POLL_NS=0 "$tests/test_cuda_gpu" \
  --test-case='*figures*'
part "gpu through rigd" "$remote_tests/test_remote_gpu" --test-case-exclude='*figures*'
part "gpu through rigd, figures" "$remote_tests/test_remote_gpu" --test-case='*figures*'

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
((failed)) && echo "FAILED" && exit 1
echo "all passed"
