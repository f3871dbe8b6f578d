#!/usr/bin/env bash
# test_headers_alone.sh INCLUDE_DIR CC... - every public header compiles on
# its own, first in a translation unit, in float and in double, as C11 (and
# attngrad.h as C++): a user may include any one of them alone.
set -uo pipefail
inc=$1
shift
fail=0
for h in "$inc"/attngrad.h "$inc"/attngrad/*.h; do
  name=${h#"$inc"/}
  for real in "" -DAG_REAL_DOUBLE; do
    if ! echo "#include <$name>" | "$@" -std=c11 -Wall -Wextra -Werror -fsyntax-only -I"$inc" $real -x c - 2>/tmp/ag-headers.$$; then
      echo "FAIL: $name alone ${real:-(float)}:"; cat /tmp/ag-headers.$$; fail=1
    fi
  done
done
rm -f /tmp/ag-headers.$$
[ $fail -eq 0 ] && echo "ok: every public header compiles alone"
exit $fail
