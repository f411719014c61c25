# Sourced by the scripts in tools/ (not run): where the tree is, and how a build folder is set up.
# The README commands and CI configure through rig_configure so that every build folder is made
# the same way.

rig_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# build/, shared by both README commands (so neither rebuilds after the other): -O2 -g with
# assertions, warnings are errors, the test suite built.
rig_build_options=(-Dwerror=true -Dbuildtype=debugoptimized -Db_sanitize=none -Dstatic_deps=false
  -Dtests=true)

# rig_configure DIR -DNAME=VALUE...: makes DIR a meson build folder of this tree with these
# options. Idempotent: an existing folder whose options already match is left alone (meson
# regenerates on the next build if meson.build changed), one whose options differ has them set,
# and one meson cannot read (an interrupted set-up, another meson version) is set up again.
rig_configure() {
  local dir="$1"
  shift
  if [[ -f "$dir/build.ninja" ]]; then
    rig_options_match "$dir" "$@" && return 0
    meson configure "$dir" "$@" >/dev/null && return 0
  fi
  local wipe=()
  [[ -f "$dir/meson-private/coredata.dat" ]] && wipe=(--wipe)
  local out
  out="$(meson setup "${wipe[@]}" "$dir" "$rig_root" "$@" 2>&1)" || {
    printf '%s\n' "$out" >&2
    echo "meson setup of $dir failed (above; details in $dir/meson-logs/meson-log.txt)" >&2
    return 1
  }
}

# rig_options_match DIR -DNAME=VALUE...: whether DIR's build options already have these values.
rig_options_match() {
  python3 - "$@" <<'PY'
import json, sys
folder, wanted = sys.argv[1], sys.argv[2:]
try:
    with open(folder + "/meson-info/intro-buildoptions.json") as f:
        have = {o["name"]: o["value"] for o in json.load(f)}
except (OSError, ValueError):
    sys.exit(1)
def text(v):
    if isinstance(v, bool):
        return str(v).lower()
    return " ".join(v) if isinstance(v, list) else str(v)
for option in wanted:
    name, _, value = option[2:].partition("=")
    if name not in have or text(have[name]) != value:
        sys.exit(1)
PY
}

# Human-readable seconds: 75 -> 1m15s.
rig_duration() {
  local s="$1"
  if ((s >= 60)); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}
