#!/usr/bin/env bash
# check.sh BUILD_DIR CONSUMER_SOURCE LIBDIR INCLUDEDIR BINDIR
#
# Installs BUILD_DIR into a scratch folder with `meson install --destdir` and uses the result the
# way a user would, through pkg-config only: each public header compiles on its own; the consumer
# program links against the shared library (when the build has one) and against the static one,
# and runs. LIBDIR, INCLUDEDIR and BINDIR are the configured install paths. From the environment:
# CXX and CC (the build's compilers), RIG_SANITIZE (the build's b_sanitize, so that programs link
# with an instrumented librig), RIG_STATIC_DEPS, RIG_VERSION.
set -euo pipefail

build="$1" consumer="$2" libdir="$3" includedir="$4" bindir="$5"
read -r -a cxx <<<"${CXX:-c++}"
read -r -a cc <<<"${CC:-cc}"
flags=()
[[ "${RIG_SANITIZE:-none}" != none ]] && flags+=("-fsanitize=$RIG_SANITIZE")

fail() {
  echo "install check: $*" >&2
  exit 1
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dest="$work/dest"

# --no-rebuild: the test depends on what is installed (rig_installed), so meson has built it; a
# second ninja here, beside the one of another test or of a user, would fight it for the folder.
meson install -C "$build" --quiet --no-rebuild --destdir "$dest" >"$work/install.log" 2>&1 ||
  fail "meson install failed: $(cat "$work/install.log")"

# The sysroot makes pkg-config put the scratch folder in front of the installed paths it prints.
export PKG_CONFIG_PATH="$dest$libdir/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$dest"

[[ -f "$dest$libdir/pkgconfig/rig.pc" ]] || fail "no rig.pc in $libdir/pkgconfig"
[[ -f "$dest$libdir/librig.a" ]] || fail "no librig.a in $libdir"
shared=1
[[ "${RIG_STATIC_DEPS:-false}" == true ]] && shared=0
if ((shared)); then
  [[ -e "$dest$libdir/librig.so" ]] || fail "no librig.so in $libdir"
elif [[ -e "$dest$libdir/librig.so" ]]; then
  fail "a static_deps build installed librig.so, which would need a shared libsodium"
fi
pkg-config --exists --print-errors rig 2>"$work/pc.log" ||
  fail "pkg-config cannot use the installed rig.pc: $(cat "$work/pc.log")"
version="$(pkg-config --modversion rig)"
[[ "$version" == "${RIG_VERSION:-$version}" ]] || fail "rig.pc says version $version"

read -r -a cflags <<<"$(pkg-config --cflags rig)"
read -r -a static_libs <<<"$(pkg-config --static --libs rig)"

headers=("$dest$includedir"/rig/*)
[[ -e "${headers[0]}" ]] || fail "no headers in $includedir/rig"
for h in "${headers[@]}"; do
  name="rig/$(basename "$h")"
  echo "#include <$name>" >"$work/header.cpp"
  "${cxx[@]}" -std=c++20 -Wall -Wextra -Werror -fsyntax-only "${cflags[@]}" "$work/header.cpp" ||
    fail "$name does not compile on its own as C++"
  if [[ "$name" == *.h ]]; then
    echo "#include <$name>" >"$work/header.c"
    "${cc[@]}" -std=c11 -Wall -Wextra -Werror -fsyntax-only "${cflags[@]}" "$work/header.c" ||
      fail "$name does not compile on its own as C"
  fi
done

# needed BINARY: the shared objects BINARY names in its dynamic section, one a line.
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

if ((shared)); then
  read -r -a libs <<<"$(pkg-config --libs rig)"
  "${cxx[@]}" -std=c++20 "${flags[@]}" "${cflags[@]}" "$consumer" -o "$work/consumer-shared" \
    "${libs[@]}" || fail "the consumer does not link against librig.so"
  needed "$work/consumer-shared" | grep -q '^librig\.so' ||
    fail "the consumer linked with -lrig does not use librig.so"
  LD_LIBRARY_PATH="$dest$libdir" "$work/consumer-shared" || fail "the consumer (shared) failed"
  # librig.a beside librig.so: ask for the archive; --as-needed drops the -lrig that follows.
  static_link=(-Wl,--as-needed -Wl,-Bstatic -lrig -Wl,-Bdynamic "${static_libs[@]}")
else
  static_link=("${static_libs[@]}")
fi
"${cxx[@]}" -std=c++20 "${flags[@]}" "${cflags[@]}" "$consumer" -o "$work/consumer-static" \
  "${static_link[@]}" || fail "the consumer does not link against librig.a"
if needed "$work/consumer-static" | grep -q '^librig\.so'; then
  fail "the consumer linked with librig.a still needs librig.so"
fi
env -u LD_LIBRARY_PATH "$work/consumer-static" || fail "the consumer (static) failed"

if ((!shared)); then
  # What static_deps is for: binaries that run where neither library is installed.
  binaries=("$work/consumer-static")
  for b in "$dest$bindir"/*; do
    [[ -f "$b" && "$(head -c 4 "$b")" == $'\x7fELF' ]] && binaries+=("$b")
  done
  for b in "${binaries[@]}"; do
    if needed "$b" | grep -E '^lib(uv|sodium)\.so'; then
      fail "$(basename "$b") needs the shared library above although static_deps is on"
    fi
  done
  echo "install check: no shared libuv or libsodium in ${#binaries[@]} binaries"
fi
echo "install check: ok"
