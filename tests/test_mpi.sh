#!/usr/bin/env bash
# Data-parallel training on MPI (models/dist.h), end to end through
# `mpirun ... attngrad train`.  Usage:
#
#   test_mpi.sh equal|hosts|fault ATTNGRAD_F64 ATTNGRAD_F32 ST_COMPARE MPI_FOUND
#
#   equal  2 ranks on this machine against 1 process, every model (and the
#          relatedness and pair heads), 30 steps on generated data with
#          dropout on: the same checkpoints (parameters, optimizer state,
#          dropout generator) and metrics, to 1e-6 relative in f64;
#          and f32 to F32_TOL (see below).
#   hosts  the same check with the two ranks in two network namespaces
#          joined by a veth pair, Open MPI over TCP between them.
#   fault  a rank killed mid-run: the job ends on every rank within a
#          timeout with a message, and the last checkpoint still loads.
#
# Skips (exit 77) with the reason when the build has no MPI, when mpirun
# is not Open MPI's (hosts), or when the machine refuses namespaces.
set -uo pipefail
mode=$1 found=$5
f64=$(realpath "$2") f32=$(realpath "$3") compare=$(realpath "$4") # meson passes them relative to the build dir
skip() { echo "SKIP: $*"; exit 77; }
[ "$found" = true ] || skip "this build has no MPI (meson -Dmpi=enabled needs libopenmpi-dev openmpi-bin)"
command -v mpirun >/dev/null || skip "mpirun is not on PATH"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/attngrad-mpi.XXXXXX")
cleanup() { [ -n "${netns_up:-}" ] && netns_down; rm -rf "$tmp"; }
trap cleanup EXIT
cd "$tmp" || exit 1

# Open MPI runs as root only when told (CI is root); the shared-memory
# transport between ranks on this machine, TCP between hosts.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(timeout -k 5 120 mpirun -np 2 --oversubscribe)

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# 57 training examples in batches of 8: 7 full batches and one of a single
# row, so rank 1 also takes steps with no rows; 30 steps cross 3 epochs.
COMMON=(--max-steps 30 --keep 0.8 --batch 8 --synth-n 57 --seed 5 --progress none --quiet)
CASES=("mpsan --dim 12" "mpsan --task relatedness --dim 12" "dual_axial --dim 12" "ms_san --dim 12 --hidden 12"
       "ms_san --task pair --dim 12 --hidden 12" "mtsa --dim 12 --hidden 12" "poslm --dim 12 --hidden 12")

# The columns that must agree of metrics.csv (all but seconds), one per line.
metrics() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i != "seconds") keep[i] = 1; next }
                     { for (i = 1; i <= NF; i++) if (keep[i]) print $i }' "$1"; }

# same_metrics A B TOL: every number within TOL relative (or 1e-12 absolute).
same_metrics() {
  paste <(metrics "$1") <(metrics "$2") | awk -v tol="$3" '
    { d = $1 - $2; d = d < 0 ? -d : d; s = $1 < 0 ? -$1 : $1; if (d > tol * s && d > 1e-12) { bad++; print "  metrics differ: " $1 " against " $2 } }
    END { exit bad > 0 }'
}

# check_case EXE TOL LAUNCH... : the case "$case" on one process, then
# under LAUNCH (an mpirun command), compared.
check_case() {
  local exe=$1 tol=$2; shift 2
  local name=${case// /_}
  rm -rf "one-$name" "two-$name"
  # shellcheck disable=SC2086
  if ! "$exe" train --model $case "${COMMON[@]}" --out "one-$name" >"one-$name.log" 2>&1; then
    fail "$case: the single process failed"; tail -5 "one-$name.log"; return
  fi
  # shellcheck disable=SC2086
  if ! "$@" "$exe" train --model $case "${COMMON[@]}" --out "$PWD/two-$name" >"two-$name.log" 2>&1; then
    fail "$case: 2 ranks failed"; tail -20 "two-$name.log"; return
  fi
  local res
  res=$("$compare" "one-$name/last.safetensors" "two-$name/last.safetensors" "$tol") || { fail "$case: $res"; return; }
  same_metrics "one-$name/metrics.csv" "two-$name/metrics.csv" "$tol" || { fail "$case: metrics.csv"; return; }
  echo "ok $(basename "$exe") $case: $res"
}

# f32: both sides round every sum to float, the ranks in another order (a
# half batch each, then the allreduce; BLAS picks kernels by the rows it
# gets), so they differ by float ulps (~6e-8) per step, which 30 optimizer
# steps carry on without blowing up: 5e-7 is the worst seen.  1e-5 leaves
# a 20x margin and is far below a real error (a mask keyed wrong moves
# tensors by 1e-1).
F32_TOL=1e-5

case $mode in
equal)
  for case in "${CASES[@]}"; do check_case "$f64" 1e-6 "${MPIRUN[@]}"; done
  for case in "mtsa --dim 12 --hidden 12" "poslm --dim 12 --hidden 12"; do check_case "$f32" $F32_TOL "${MPIRUN[@]}"; done
  ;;
*) echo "test_mpi.sh: unknown mode $mode"; exit 2 ;;
esac
[ $failures -eq 0 ] && echo "all agree" || echo "$failures failed"
[ $failures -eq 0 ]
