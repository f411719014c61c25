#!/usr/bin/env bash
# Formats our C and C++ sources with clang-format and the root .clang-format.
#
#   tools/format.sh           rewrite the files in place
#   tools/format.sh --check   change nothing; list the files that are not formatted, exit 1 if any
#
# Our sources are the C and C++ files git knows of (committed or not ignored) under src, include,
# tools, test, bench and docs/examples; subprojects and build folders are never touched.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$rig_root"

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  -h | --help)
    sed -n '2,8s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  *)
    echo "format.sh: unknown argument '$1' (try --help)" >&2
    exit 2
    ;;
esac

clang_format=""
for candidate in clang-format clang-format-14; do
  if command -v "$candidate" >/dev/null 2>&1; then
    clang_format="$candidate"
    break
  fi
done
if [[ -z "$clang_format" ]]; then
  echo "format.sh: no clang-format; tools/deps.sh --format installs it" >&2
  exit 1
fi

folders=(src include tools test bench docs/examples)
files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  while IFS= read -r -d '' f; do
    [[ -f "$f" ]] && files+=("$f")
  done < <(git ls-files -z --cached --others --exclude-standard -- "${folders[@]}")
else
  while IFS= read -r -d '' f; do files+=("$f"); done < <(find "${folders[@]}" -type f -print0 2>/dev/null)
fi
sources=()
for f in "${files[@]}"; do
  case "$f" in
    *.c | *.cc | *.cpp | *.h | *.hpp) sources+=("$f") ;;
  esac
done
((${#sources[@]})) || exit 0

if ((!check)); then
  "$clang_format" -i --style=file "${sources[@]}"
  exit 0
fi

unformatted=()
for f in "${sources[@]}"; do
  "$clang_format" --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done
if ((${#unformatted[@]})); then
  echo "format.sh: ${#unformatted[@]} of ${#sources[@]} files need tools/format.sh:" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi
echo "format.sh: ${#sources[@]} files formatted"
