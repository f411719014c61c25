#!/usr/bin/env bash
# README command 2: install what is missing, build, run the whole test suite.
#
#   tools/test.sh              build/ (-O2 -g, warnings are errors), every suite
#   tools/test.sh --sanitize   build-asan/ (ASan+UBSan), every suite but bench and gpu; then
#                              build-tsan/ (TSan), the concurrency suite
#   tools/test.sh --static     build-static/ (-Dstatic_deps=true, no tests compiled): checks that
#                              the installed tree works and links no shared libuv or libsodium
#   tools/test.sh ... -- ARGS  passes ARGS on to meson test (e.g. -- --suite unit)
#
# Every stage runs even when an earlier one fails; a summary follows; the exit status is non-zero
# when any stage failed to build, any test failed, or a stage ran no test at all.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$rig_root"

mode=plain
meson_test_args=()
while (($#)); do
  case "$1" in
    --sanitize) mode=sanitize ;;
    --static) mode=static ;;
    --)
      shift
      meson_test_args=("$@")
      break
      ;;
    -h | --help)
      sed -n '2,12s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *)
      echo "test.sh: unknown argument '$1' (try --help)" >&2
      exit 2
      ;;
  esac
  shift
done

tools/deps.sh || exit 1

summary=()
failed=0

# Counts the results in DIR's test log: "12 ok, 1 skipped" and the names of the failures, each
# with the start of its first sanitizer report (or its last lines): CI shows only the end of its
# output, and the summary is there.
count_results() {
  python3 - "$1/meson-logs/testlog.json" <<'EOF'
import json, re, sys
counts, bad = {}, []
report = re.compile(r"WARNING: ThreadSanitizer|ERROR: AddressSanitizer|ERROR: LeakSanitizer|"
                    r"runtime error:|ERROR: .*fail|TEST CASE:")
try:
    lines = open(sys.argv[1]).read().splitlines()
except FileNotFoundError:
    lines = []
for line in lines:
    if not line.strip():
        continue
    t = json.loads(line)
    r = t["result"]
    counts[r] = counts.get(r, 0) + 1
    if r not in ("OK", "SKIP", "EXPECTEDFAIL"):
        out = ((t.get("stdout") or "") + (t.get("stderr") or "")).splitlines()
        first = next((i for i, l in enumerate(out) if report.search(l)), None)
        shown = out[first:first + 30] if first is not None else out[-15:]
        bad.append(f'{t["name"]} ({r.lower()})' +
                   "".join("\n        | " + l[:300] for l in shown))
names = {"OK": "ok", "SKIP": "skipped", "FAIL": "failed", "TIMEOUT": "timed out",
         "EXPECTEDFAIL": "failed as expected", "UNEXPECTEDPASS": "passed unexpectedly",
         "ERROR": "errors"}
total = sum(counts.values())
parts = [f"{n} {names.get(r, r.lower())}" for r, n in sorted(counts.items())]
print(f"{total} tests: " + ", ".join(parts) if total else "0 tests")
for b in bad:
    print("    " + b)
EOF
}

# stage NAME DIR SUITE MULTIPLIER MESON_OPTION...: configure DIR, build it, run SUITE ("" is every
# suite) with timeouts scaled by MULTIPLIER, and record one summary line. For one suite only what
# its tests need is built (meson test does that).
stage() {
  local name="$1" dir="$2" suite="$3" multiplier="$4"
  shift 4
  local start=$SECONDS status=ok counts=""
  echo "== $name: $dir"
  if ! rig_configure "$dir" "$@"; then
    status="configure failed"
  elif [[ -z "$suite" ]] && ! meson compile -C "$dir"; then
    status="build failed"
  else
    local args=(--num-processes 2 --print-errorlogs --timeout-multiplier "$multiplier")
    if [[ -n "$suite" ]]; then
      local one
      for one in ${suite//,/ }; do args+=(--suite "$one"); done
    else
      args+=(--no-rebuild)
    fi
    rm -f "$dir/meson-logs/testlog.json"
    meson test -C "$dir" "${args[@]}" "${meson_test_args[@]}" || status="tests failed"
    if [[ ! -f "$dir/meson-logs/testlog.json" && "$status" != ok ]]; then
      status="build failed"
    else
      counts="$(count_results "$dir")"
      [[ "$status" == ok && "$counts" == "0 tests" ]] && status="no tests ran"
    fi
  fi
  [[ "$status" == ok ]] || failed=1
  summary+=("$(printf '%-12s %-12s %-14s %8s  %s' "$name" "${suite:-all suites}" "$status" \
    "$(rig_duration $((SECONDS - start)))" "$counts")")
}

# The sanitizer builds use -O1, as the sanitizers' authors advise, and line tables only (-g1):
# reports still name file and line, and the builds take a quarter less time. GCC's
# maybe-uninitialized analysis misfires on instrumented code (std::optional under TSan, for one);
# the plain build keeps that warning an error. The static_deps build only proves how binaries
# link, so it is built without optimizing.
sanitized_flags="-g1 -Wno-maybe-uninitialized"
sanitized=(-Dwerror=true -Doptimization=1 -Ddebug=false "-Dc_args=$sanitized_flags"
  "-Dcpp_args=$sanitized_flags" -Dstatic_deps=false -Dtests=true -Db_lundef=false)
case "$mode" in
  plain)
    stage plain build "" 1 "${rig_build_options[@]}"
    ;;
  sanitize)
    # halt_on_error turns the first report into a failure instead of a line in a passing log.
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:check_initialization_order=1
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    # Every suite but the benchmark's smoke run and the GPU tests (which skip without a GPU): meson
    # then builds neither, which keeps this stage's compile time down.
    stage asan+ubsan build-asan unit,integration,concurrency,slow 2 "${sanitized[@]}" \
      -Db_sanitize=address,undefined
    stage tsan build-tsan concurrency 3 "${sanitized[@]}" -Db_sanitize=thread
    ;;
  static)
    stage static build-static "" 1 -Dwerror=true -Doptimization=0 -Ddebug=false \
      -Db_sanitize=none -Dstatic_deps=true -Dtests=false
    ;;
esac

echo
echo "== summary"
for line in "${summary[@]}"; do echo "$line"; done
if ((failed)); then
  echo "FAILED (logs: <build folder>/meson-logs/testlog.txt)"
  exit 1
fi
echo "all passed"
