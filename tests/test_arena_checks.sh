#!/usr/bin/env bash
# test_arena_checks.sh EXE: the step arena's marks for ASan or valgrind
# (tests/test_arena_checks.c): one run, whose checks ask the checker
# (poisoned or not; memcheck's error count) and decide its exit status.
# Skips (77) where the library was built for neither, or valgrind is missing.
exe=$1
case $("$exe" checker) in
  asan) exec "$exe" check ;;
  valgrind)
    command -v valgrind >/dev/null || { echo "SKIP: built with valgrind's marks, but no valgrind here"; exit 77; }
    # the suppression: glibc's loader under cuBLAS's load-time dlopen, in a CUDA build
    echo "memcheck reports the two faulty writes below: they are the checks"
    exec valgrind --quiet --suppressions="$(dirname "$0")/valgrind.supp" "$exe" check ;;
  *) echo "SKIP: built without ASan and without valgrind's header: the arena marks nothing"; exit 77 ;;
esac
