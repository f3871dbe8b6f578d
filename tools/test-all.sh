#!/usr/bin/env bash
# Builds attngrad twice (release, and address+undefined sanitizers) and runs
# every test in both.  Ends with the line "tests: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh || exit 1

run_suite() { # build-dir, extra meson options...
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >/dev/null || return 1
  fi
  ninja -C "$dir" >/dev/null || { ninja -C "$dir"; return 1; }
  meson test -C "$dir" --print-errorlogs --num-processes 2 "${MESON_TEST_ARGS[@]}"
}

MESON_TEST_ARGS=()
run_suite build; rc1=$?
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
run_suite build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized; rc2=$?

# ---- fuzzing: the seed corpora replayed, then each libFuzzer harness for ----
# ---- FUZZ_SECONDS (15) under ASan+UBSan, in a clang build dir (build-fuzz) --
# Skipped where clang with libFuzzer is missing.  Its last line is
# "fuzz: N passed, M failed" (a replay or a run per harness each).
bash tools/fuzz.sh "${FUZZ_SECONDS:-15}"; rc_fuzz=$?
if [ "$rc_fuzz" -eq 77 ]; then echo "fuzz: 0 passed, 0 failed"; fi
# ---- end of fuzzing -----------------------------------------------------------

count() { # testlog -> "passed failed"
  python3 - "$1" <<'PY' 2>/dev/null || echo "0 1"
import json, sys
p = f = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["result"] in ("OK", "SKIP", "EXPECTEDFAIL"): p += 1
    else: f += 1
print(p, f)
PY
}
read -r p1 f1 < <(count build/meson-logs/testlog.json)
read -r p2 f2 < <(count build-asan/meson-logs/testlog.json)
echo "release build: $p1 passed, $f1 failed; sanitizer build: $p2 passed, $f2 failed"
echo "tests: $((p1 + p2)) passed, $((f1 + f2 + (rc1 != 0 && f1 == 0) + (rc2 != 0 && f2 == 0))) failed"
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]
