#!/usr/bin/env bash
# Installs the Debian packages rig needs to build and test, and nothing that is already there.
#
#   tools/deps.sh             install the missing required packages
#   tools/deps.sh --format    also clang-format (tools/format.sh, the CI format check)
#   tools/deps.sh --fuzz      also clang and its sanitizer runtimes (the libFuzzer targets)
#   tools/deps.sh --optional  both; the build itself never needs either
#   tools/deps.sh --check     install nothing: list what is missing, exit 1 if anything is
#
# Quiet when nothing is missing. Runs apt-get as root, through sudo otherwise. The package index
# is refreshed only when an install fails without it (a fresh image often ships with none).
set -euo pipefail

required=(libuv1-dev libsodium-dev nlohmann-json3-dev doctest-dev meson ninja-build pkg-config g++)
# The launch suite's engines (test/launch): a real sshd and a real Slurm (slurmctld, slurmd,
# munged) in network namespaces it makes. On
# a machine with systemd, installing openssh-server also starts and enables its ssh service.
required+=(openssh-client openssh-server iproute2 slurm-wlm munge nftables)
# The metrics suite (test/metrics): promtool checks rigd's /metrics, the slow suite's Prometheus
# server scrapes it; systemd-analyze verifies the installed units.
required+=(prometheus systemd)
# Optional ones are taken only where the distribution has them (libclang-rt-14-dev is a package of
# its own on Debian 12; elsewhere clang carries its runtimes).
format=(clang-format)
fuzz=(clang libclang-rt-14-dev)

optional=()
check_only=0
for arg in "$@"; do
  case "$arg" in
    --format) optional+=("${format[@]}") ;;
    --fuzz) optional+=("${fuzz[@]}") ;;
    --optional) optional+=("${format[@]}" "${fuzz[@]}") ;;
    --check) check_only=1 ;;
    -h | --help)
      sed -n '2,12s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *)
      echo "deps.sh: unknown argument '$arg' (try --help)" >&2
      exit 2
      ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1; then
  # Not Debian: meson names whatever is missing, and subprojects/ holds fallbacks for some of it.
  echo "deps.sh: no dpkg here; install by hand the equivalents of: ${required[*]}" >&2
  exit 0
fi

installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]
}

# Whether apt can install the package (it has a candidate version in the current index).
known() {
  local candidate
  candidate="$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p')"
  [[ -n "$candidate" && "$candidate" != "(none)" ]]
}

missing_required=()
for p in "${required[@]}"; do installed "$p" || missing_required+=("$p"); done
missing_optional=()
for p in $(printf '%s\n' "${optional[@]}" | sort -u); do
  installed "$p" || missing_optional+=("$p")
done

if ((check_only)); then
  if ((${#missing_required[@]} + ${#missing_optional[@]} == 0)); then
    echo "deps.sh: nothing to install"
    exit 0
  fi
  ((${#missing_required[@]})) && echo "deps.sh: would install: ${missing_required[*]}"
  ((${#missing_optional[@]})) && echo "deps.sh: would install if available: ${missing_optional[*]}"
  exit 1
fi

((${#missing_required[@]} + ${#missing_optional[@]} == 0)) && exit 0

sudo=()
if [[ "$(id -u)" != 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "deps.sh: missing ${missing_required[*]} ${missing_optional[*]}; run as root or install sudo" >&2
    exit 1
  fi
  sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
refreshed=0
refresh() {
  ((refreshed)) && return 1
  echo "deps.sh: apt-get update"
  "${sudo[@]}" apt-get update -qq
  refreshed=1
}

# Installs the given packages; on failure refreshes the index once and tries again.
apt_install() {
  echo "deps.sh: installing $*"
  local log
  log="$(mktemp)"
  if "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >"$log" 2>&1; then
    rm -f "$log"
    return 0
  fi
  if refresh && "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >"$log" 2>&1; then
    rm -f "$log"
    return 0
  fi
  cat "$log" >&2
  rm -f "$log"
  return 1
}

if ((${#missing_required[@]})); then
  apt_install "${missing_required[@]}" || {
    echo "deps.sh: could not install ${missing_required[*]}" >&2
    exit 1
  }
fi

if ((${#missing_optional[@]})); then
  # An empty index knows no package; refresh it before deciding what this distribution lacks.
  for p in "${missing_optional[@]}"; do
    known "$p" || { refresh || true; break; }
  done
  available=()
  for p in "${missing_optional[@]}"; do
    if known "$p"; then available+=("$p"); else echo "deps.sh: $p is not available here; skipped"; fi
  done
  if ((${#available[@]})); then
    apt_install "${available[@]}" || echo "deps.sh: optional ${available[*]} not installed" >&2
  fi
fi
