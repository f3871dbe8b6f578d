#!/usr/bin/env bash
# test_arena_checks.sh EXE: the step arena's marks for ASan or valgrind
# (tests/test_arena_checks.c): a write past a tensor and a write into a
# finished step are reported in the test's main, a write in bounds is not.
# Skips (77) where the library was built for neither, or valgrind is missing.
exe=$1
case $("$exe" checker) in
  asan) run=("$exe") want="use-after-poison" ;;
  valgrind)
    command -v valgrind >/dev/null || { echo "SKIP: built with valgrind's marks, but no valgrind here"; exit 77; }
    # the suppression: glibc's loader under cuBLAS's load-time dlopen, in a CUDA build
    run=(valgrind --error-exitcode=1 --quiet --suppressions="$(dirname "$0")/valgrind.supp" "$exe") want="Invalid write" ;;
  *) echo "SKIP: built without ASan and without valgrind's header: the arena marks nothing"; exit 77 ;;
esac
fails=0
out=$("${run[@]}" inside 2>&1); rc=$?
if [ $rc -eq 0 ]; then echo "ok: in bounds, no report"; else echo "FAIL: in bounds: exit $rc"; echo "$out" | head -20; fails=1; fi
for mode in past-end after-step; do
  out=$("${run[@]}" $mode 2>&1); rc=$?
  # the first frame: main of this test (its source line where the build has debug information)
  if [ $rc -ne 0 ] && echo "$out" | grep -q "$want" && echo "$out" | grep -Eq "main.*test_arena_checks"; then
    echo "ok: $mode reported ($(echo "$out" | grep -m1 -o "$want.*" | cut -c1-50))"
  else
    echo "FAIL: $mode: exit $rc, want '$want' in main of test_arena_checks"; echo "$out" | head -20; fails=1
  fi
done
exit $fails
