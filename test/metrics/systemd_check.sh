#!/usr/bin/env bash
# systemd_check.sh BUILD_DIR BINDIR UNITDIR SYSUSERSDIR
#
# Installs BUILD_DIR into a scratch folder with `meson install --destdir`, then checks the rigd
# units as installed there with `systemd-analyze verify`: rigd.service, and the template as an
# instance (rigd@main.service). Only the path of rigd in ExecStart is pointed into the scratch
# folder, since verify checks that the command exists. A unit broken on purpose must fail the
# same verify, or the check proves nothing. Skipped (77) without systemd-analyze.
set -euo pipefail

build="$1" bindir="$2" unitdir="$3" sysusersdir="$4"

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd check: skipped: systemd-analyze is missing (Debian's systemd package)"
  exit 77
fi

fail() {
  echo "systemd check: $*" >&2
  exit 1
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dest="$work/dest"
# --no-rebuild: the test depends on what is installed (rig_installed), so meson has built it; a
# rebuild here would run a second ninja in the build folder beside the install test's, and a
# sanitizer build, which leaves the harness and the launch tests unbuilt, had the two fight past
# their time limit.
meson install -C "$build" --quiet --no-rebuild --destdir "$dest" >"$work/install.log" 2>&1 ||
  fail "meson install failed: $(cat "$work/install.log")"

[[ -x "$dest$bindir/rigd" ]] || fail "no rigd in $bindir"
[[ -f "$dest$sysusersdir/rig.conf" ]] || fail "no rig.conf in $sysusersdir"
units="$work/units"
mkdir "$units"
for unit in rigd.service rigd@.service; do
  [[ -f "$dest$unitdir/$unit" ]] || fail "no $unit in $unitdir"
  grep -q "^ExecStart=$bindir/rigd " "$dest$unitdir/$unit" ||
    fail "$unit does not start $bindir/rigd"
  grep -q '^RestartPreventExitStatus=2$' "$dest$unitdir/$unit" ||
    fail "$unit restarts after a configuration error (exit 2)"
  grep -Eq '^(PrivateDevices=yes|DevicePolicy=)' "$dest$unitdir/$unit" &&
    fail "$unit hides /dev/nvidia* (PrivateDevices= or DevicePolicy=)"
  sed "s|^ExecStart=$bindir/rigd |ExecStart=$dest$bindir/rigd |" "$dest$unitdir/$unit" \
    >"$units/${unit/@./@main.}"
done
systemd-analyze verify "$units/rigd.service" "$units/rigd@main.service" ||
  fail "systemd-analyze verify failed"

# The same verify fails a unit that is wrong: one whose rigd is not there.
sed "s|^ExecStart=$dest$bindir/rigd |ExecStart=$work/missing/rigd |" "$units/rigd.service" \
  >"$work/broken.service"
if systemd-analyze verify "$work/broken.service" >"$work/broken.log" 2>&1; then
  fail "systemd-analyze verify passed a unit whose ExecStart does not exist"
fi
echo "systemd check: rigd.service and rigd@main.service verified"
