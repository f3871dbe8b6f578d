#!/usr/bin/env bash
# --micro-batch (train/step.c): a batch run in parts, their gradients
# summed, takes the whole batch's step.  Usage:
#
#   test_micro_batch.sh ATTNGRAD_F64 ST_COMPARE
#
# Every model (and the relatedness and pair heads), 30 steps on generated
# data with dropout on, in batches of 8 cut into parts of 3 rows (3, 3 and
# 2; the last batch's one row whole): the same checkpoint (parameters,
# optimizer state, dropout generator), metrics.csv and steps.csv (each
# step's loss, gradient norm, examples and tokens) as whole batches.  Then
# what runs once on the summed gradient (clipping, L2, lazy rows, the
# plateau schedule and early stopping), parts of one row, and a run
# stopped with whole batches and resumed in parts.  The ranks of mpirun,
# each with its share in parts, are test_mpi.sh's.
set -uo pipefail
AG=$(realpath "$1") compare=$(realpath "$2")
. "$(dirname "$0")/cli_lib.sh" test_micro_batch
. "$(dirname "$0")/same_run.sh"
cd "$T" || exit 1

COMMON=(--max-steps 30 --keep 0.8 --batch 8 --synth-n 57 --seed 5 --progress none --quiet --log-steps 1)
# f64: the parts add their gradients in another order, and BLAS picks its
# kernels by the rows it gets, so the runs differ by rounding, which most
# runs keep near 1e-15 over 30 steps.  Two carry it further, as 2 ranks
# against one process do (test_mpi.sh): MS-SAN (its gradient norm reaches
# 50), 4e-8 at worst, and Adam, whose update divides a gradient near 0 by
# the root of its square, 2e-8.  A mask or a weight wrong moves tensors by
# 1e-2.
tol_of() { case $1 in ms_san* | *adam*) echo 1e-6 ;; *) echo 1e-9 ;; esac; }

# same CASE ROWS: CASE in whole batches, then in parts of ROWS rows.
same() {
  local case=$1 rows=$2 whole=whole-${1// /_} parts=parts$2-${1// /_} tol res
  tol=$(tol_of "$case")
  # shellcheck disable=SC2086
  [ -d "$whole" ] || "$AG" train --model $case "${COMMON[@]}" --out "$whole" >"$whole.log" 2>&1 ||
    { bad "$case: whole batches failed: $(tail -3 "$whole.log")"; return; }
  # shellcheck disable=SC2086
  "$AG" train --model $case "${COMMON[@]}" --micro-batch "$rows" --out "$parts" >"$parts.log" 2>&1 ||
    { bad "$case: parts of $rows rows failed: $(tail -3 "$parts.log")"; return; }
  res=$("$compare" "$whole/last.safetensors" "$parts/last.safetensors" "$tol") || { bad "$case, parts of $rows: $res"; return; }
  same_metrics "$whole/metrics.csv" "$parts/metrics.csv" "$tol" || { bad "$case, parts of $rows: metrics.csv"; return; }
  same_steps "$whole" "$parts" "$tol" || { bad "$case, parts of $rows: steps.csv"; return; }
  echo "ok $case, parts of $rows rows: $res"
  ok
}

for case in "mpsan --dim 12" "mpsan --task relatedness --dim 12" "dual_axial --dim 12" "ms_san --dim 12 --hidden 12" \
            "ms_san --task pair --dim 12 --hidden 12" "mtsa --dim 12 --hidden 12" "poslm --dim 12 --hidden 12"; do
  same "$case" 3
done
# once on the summed gradient: clipping (tight enough to clip every step)
# and L2; lazy rows (a word in one part only is a row the update skips in
# the others' gradients, not in the sum); the plateau schedule and early
# stopping on the dev metric; the LM's parts weighed by their targets, one
# row a part
for case in "mtsa --dim 12 --hidden 12 --clip 0.01 --l2 1e-3" "mtsa --dim 12 --hidden 12 --optim adam:lr=0.01,lazy=1" \
            "mpsan --dim 12 --sched plateau:factor=0.5,patience=0 --patience 2"; do
  same "$case" 3
done
same "poslm --dim 12 --hidden 12" 1
same "mpsan --dim 12" 8 # as many rows as the batch: whole batches, the same bits
res=$("$compare" whole-mpsan_--dim_12/last.safetensors parts8-mpsan_--dim_12/last.safetensors 0) && ok ||
  bad "--micro-batch 8 with --batch 8 is not the whole batch's bits: $res"

# --micro-batch is not the run's: a run stopped after 13 steps in whole
# batches resumes in parts of 3, and ends where whole batches do
case="mtsa --dim 12 --hidden 12"
# shellcheck disable=SC2086
"$AG" train --model $case "${COMMON[@]}" --max-steps 13 --out resumed >resumed.log 2>&1 &&
  "$AG" train --resume --out resumed --max-steps 30 --micro-batch 3 --progress none --quiet >>resumed.log 2>&1 ||
  bad "stopped and resumed in parts: $(tail -3 resumed.log)"
res=$("$compare" "whole-${case// /_}/last.safetensors" resumed/last.safetensors 1e-9) && same_steps "whole-${case// /_}" resumed 1e-9 &&
  { echo "ok 13 steps whole, resumed in parts of 3 to 30: $res"; ok; } || bad "resumed in parts: $res"

expect 2 "micro-batch" "$AG" train --model mpsan --micro-batch -1 --out bad
summary
