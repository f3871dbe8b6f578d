#!/usr/bin/env bash
# test_arena_asan.sh EXE: the step arena's ASan poisoning (tests/test_arena_asan.c):
# a write past a tensor and a write into a finished step are reported, at
# the test's line, and a write in bounds is not.
exe=$1 fails=0
out=$("$exe" inside 2>&1); rc=$?
if [ $rc -eq 0 ]; then echo "ok: in bounds, no report"; else echo "FAIL: in bounds: exit $rc"; echo "$out" | head -20; fails=1; fi
for mode in past-end after-step; do
  out=$("$exe" $mode 2>&1); rc=$?
  if [ $rc -ne 0 ] && echo "$out" | grep -q "use-after-poison" && echo "$out" | grep -q "test_arena_asan.c"; then
    echo "ok: $mode reported ($(echo "$out" | grep -m1 -o 'use-after-poison.*' | cut -c1-60))"
  else
    echo "FAIL: $mode: exit $rc, want ASan's use-after-poison at test_arena_asan.c"; echo "$out" | head -20; fails=1
  fi
done
exit $fails
