# cli_lib.sh - the harness the shell tests share, sourced after their
# argument checks:
#
#   . "$(dirname "$0")/cli_lib.sh" test_name
#
# gives a scratch directory $T (removed on exit), the counters behind ok and
# bad, expect RC PATTERN CMD... (CMD exits with RC and its output matches
# the extended regex PATTERN), and summary, which prints the closing line
# "test_name: N passed, M failed" and returns non-zero on any failure.
CLI_TEST_NAME=$1
T=$(mktemp -d "${TMPDIR:-/tmp}/$CLI_TEST_NAME.XXXXXX")
trap 'rm -rf "$T"' EXIT
passed=0 failed=0

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }

expect() {
  local want=$1 pattern=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && grep -Eq -- "$pattern" <<<"$out"; then ok; else
    bad "$* -> exit $rc (want $want), output (want /$pattern/):"; printf '%s\n' "$out" | tail -n 8 >&2
  fi
}

summary() {
  echo "$CLI_TEST_NAME: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
