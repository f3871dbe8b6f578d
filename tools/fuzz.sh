#!/usr/bin/env bash
# fuzz.sh - coverage-guided fuzzing of attngrad's parsers with libFuzzer, as
# OSS-Fuzz projects do: one harness per input surface (tests/fuzz/), built
# with clang under ASan+UBSan in build-fuzz/ (the main build stays gcc).
#
#   tools/fuzz.sh [SECONDS]   fuzz every harness for SECONDS (default 60) after
#                             replaying its corpus; inputs it finds go to
#                             build-fuzz/corpus/<harness>, crashes to build-fuzz/crashes/
#   tools/fuzz.sh --replay    run every checked-in corpus file once (what CI does first)
#   FUZZ_ONLY="conllu vocab" tools/fuzz.sh 600    some harnesses only
#
# A crash found this way becomes a file of tests/fuzz/corpus/<harness>/ (and
# a test of the code it hit): every build replays the corpus in its meson
# tests (suite fuzz, tests/fuzz/replay.c), clang or not.  Ends with "fuzz: N passed, M failed"; exits
# 77 (skipped) where clang with libFuzzer is missing (Debian: clang and
# libclang-rt-<version>-dev).
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${FUZZ_BUILD_DIR:-build-fuzz}
CORPUS=tests/fuzz/corpus
read -r -a HARNESSES <<< "${FUZZ_ONLY:-checkpoint run_config options vocab predict labeled sick conllu lm vectors trees}"

mode=fuzz seconds=60
case "${1:-}" in
  --replay) mode=replay ;;
  '') ;;
  *[!0-9]*|0) echo "usage: $0 [SECONDS | --replay]" >&2; exit 2 ;;
  *) seconds=$1 ;;
esac

# clang that links a libFuzzer target (the runtime is a separate package)
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! command -v clang >/dev/null ||
   ! printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
     clang -fsanitize=fuzzer,address -x c - -o "$probe/t" 2>/dev/null; then
  echo "fuzz: skipped (no clang with libFuzzer: install clang and libclang-rt-dev)"
  exit 77
fi

if [ ! -f "$DIR/build.ninja" ]; then
  CC=clang meson setup "$DIR" -Dfuzz=true -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dc_args="-fsanitize=fuzzer-no-link -g1" >/dev/null || exit 1
fi
targets=()
for h in "${HARNESSES[@]}"; do targets+=("tests/fuzz/fuzz_$h"); done
ninja -C "$DIR" "${targets[@]}" >/dev/null || { ninja -C "$DIR" "${targets[@]}"; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# libFuzzer's limits: a slow input (10 s) or 2.5 GB is a finding too
FLAGS=(-timeout=10 -rss_limit_mb=2560 -max_len=8192 -print_final_stats=0)
log=$DIR/fuzz-logs
mkdir -p "$log" "$DIR/crashes"
# one harness: replay its corpus, then fuzz it; its report lines go to
# $log/$h.result, its count of failures is its exit status
fuzz_one() {
  local h=$1 exe=$DIR/tests/fuzz/fuzz_$1 failures=0 n
  n=$(find "$CORPUS/$h" -type f | wc -l)
  {
    if "$exe" "${FLAGS[@]}" -runs=0 -artifact_prefix="$DIR/crashes/$h-" "$CORPUS/$h" >"$log/$h-replay.log" 2>&1; then
      echo "fuzz: $h: replayed $n corpus files"
    else
      echo "fuzz: $h: FAILED replaying its corpus (log: $log/$h-replay.log)"
      tail -n 20 "$log/$h-replay.log"
      failures=$((failures + 1))
    fi
    if [ "$mode" = fuzz ]; then
      mkdir -p "$DIR/corpus/$h"
      if "$exe" "${FLAGS[@]}" -max_total_time="$seconds" -artifact_prefix="$DIR/crashes/$h-" \
           "$DIR/corpus/$h" "$CORPUS/$h" >"$log/$h.log" 2>&1; then
        echo "fuzz: $h: $seconds s, $(grep -o 'Done [0-9]* runs' "$log/$h.log" | tail -n 1 | cut -d' ' -f2) runs, no finding"
      else
        echo "fuzz: $h: FOUND a crash, leak or hang (log: $log/$h.log; input: $(ls -t "$DIR/crashes/$h-"* 2>/dev/null | head -n 1))"
        tail -n 30 "$log/$h.log"
        failures=$((failures + 1))
      fi
    fi
  } >"$log/$h.result"
  return $failures
}

# the harnesses run FUZZ_JOBS at a time (one per core): each is one process
# on one core, so N cores fuzz N times as much in the same minutes
jobs=${FUZZ_JOBS:-$(nproc)}
rm -f "$log"/*.result
for h in "${HARNESSES[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  fuzz_one "$h" &
done
wait
passed=0 failed=0
runs=1; [ "$mode" = fuzz ] && runs=2
for h in "${HARNESSES[@]}"; do
  cat "$log/$h.result"
  f=$(grep -c -E "^fuzz: $h: (FAILED|FOUND)" "$log/$h.result")
  passed=$((passed + runs - f)) failed=$((failed + f))
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
