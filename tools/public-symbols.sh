#!/usr/bin/env bash
# public-symbols.sh HEADER... - the linker version script of the installed
# shared libraries: the functions and variables the public headers declare
# (ag_ names outside #define lines and comments), plus what their macros
# reference (ag__item_at, the real-type link guard); everything else is
# local.  Run by meson at build time; the exported list is checked by
# tests/test_exports.sh.
set -euo pipefail
{
  echo "{"
  echo "  global:"
  # strip comments and #define lines; take the ag_<lower> names that a "(",
  # ";" or "[" follows (declarations), less the function pointer types "(*ag_x)"
  code=$(sed -e 's://.*$::' "$@" | perl -0pe 's:/\*.*?\*/::gs' | grep -v '^\s*#')
  pointers=$(grep -oE '\(\*\s*ag_[a-z][a-z0-9_]*' <<<"$code" | grep -oE 'ag_[a-z0-9_]*' | sort -u)
  grep -oE 'ag_[a-z][a-z0-9_]*\s*[(;\[]' <<<"$code" | grep -oE 'ag_[a-z][a-z0-9_]*' | sort -u |
    grep -vxF -f <(echo "${pointers:-ag_none}") | sed 's/.*/    &;/'
  echo "    ag__item_at;"
  echo "    ag_link_with_attngrad_*;"
  echo "  local:"
  echo "    *;"
  echo "};"
}
