#!/usr/bin/env bash
# test_step_log.sh - train --log-steps N (<out>/steps.csv), through the
# attngrad program:
#  - a row every N steps: step, epoch, the rate of that step's update
#    (--lr-steps' warm-up included), the loss the epoch's train_loss
#    averages, the gradient norm before clipping, examples and tokens;
#  - a run stopped mid-epoch, killed right after a checkpoint, or leaving
#    rows of steps after its checkpoint and a row cut off mid-line, ends
#    once resumed with the rows of a run never stopped: none twice, none
#    missing;
#  - --resume keeps the run's N; --log-steps 0 there stops the log and
#    keeps its rows; a run that did not log gets a note of where the rows
#    start; --force without it removes an older run's file; a file that is
#    not a step log stops --resume naming it.
# The seconds column is never compared: timing changes it.
#
#   tests/test_step_log.sh build/tools/attngrad
set -u
AG=$1
[ -x "$AG" ] || { echo "usage: $0 attngrad"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_step_log

# 64 examples in batches of 16: 4 steps an epoch, 16 in all
RUN=(--model mpsan --synth-n 64 --dim 8 --batch 16 --epochs 4 --progress none --quiet)
HEADER=step,epoch,lr,loss,grad_norm,examples,tokens,seconds
cols() { cut -d, -f1-7 "$1/steps.csv"; } # every column but seconds
same_rows() { # same_rows DIR WHAT: DIR's rows are the reference's
  if [ "$(cols "$T/ref")" == "$(cols "$1")" ]; then ok; else bad "$2: steps.csv differs"; diff <(cols "$T/ref") <(cols "$1") | head -6 >&2; fi
}
steps() { tail -n +2 "$1/steps.csv" | cut -d, -f1 | tr '\n' ' '; }

# ---- the rows of a run ----
"$AG" train "${RUN[@]}" --log-steps 1 --out "$T/ref" >/dev/null || bad "the reference run failed"
[ "$(head -n 1 "$T/ref/steps.csv")" == "$HEADER" ] && ok || bad "steps.csv header: $(head -n 1 "$T/ref/steps.csv")"
[ "$(steps "$T/ref")" == "$(seq -s ' ' 16) " ] && ok || bad "--log-steps 1: rows of steps $(steps "$T/ref")"
# each step in its epoch, each epoch's examples all seen once
awk -F, 'NR > 1 { if ($2 != int(($1 - 1) / 4) + 1 || $6 < 1 || $7 < $6) bad++; n[$2] += $6 }
         END { for (e = 1; e <= 4; e++) if (n[e] != 64) bad++; exit bad > 0 }' "$T/ref/steps.csv" && ok ||
  bad "steps.csv: epochs or examples wrong: $(head -n 6 "$T/ref/steps.csv")"
# the loss is the one the epoch's train_loss averages (metrics.csv: 6 decimals); the rate is the run's
awk -F, 'FNR == 1 { next } NR == FNR { sum[$2] += $4; n[$2]++; lr[$2] = $3; next }
         { d = sum[$1] / n[$1] - $4; if (d > 2e-6 || d < -2e-6 || lr[$1] != $3) { bad++; print "epoch " $1 ": rows " sum[$1] / n[$1] " lr " lr[$1] ", metrics " $4 " lr " $3 } }
         END { exit bad > 0 || length(n) != 4 }' "$T/ref/steps.csv" "$T/ref/metrics.csv" && ok ||
  bad "steps.csv's losses do not average to metrics.csv's train_loss"
expect 0 '^test +accuracy' "$AG" eval --ckpt "$T/ref/best.safetensors" # a config that holds log-steps

# every N steps, counted over the run (not the epoch)
"$AG" train "${RUN[@]}" --log-steps 3 --out "$T/every3" >/dev/null || bad "--log-steps 3 failed"
[ "$(steps "$T/every3")" == "3 6 9 12 15 " ] && ok || bad "--log-steps 3: rows of steps $(steps "$T/every3")"
# the rate each update ran at: --lr-steps' warm-up, not --sched's rate (metrics.csv's lr)
"$AG" train "${RUN[@]}" --epochs 2 --log-steps 1 --lr-steps constant:warmup=4 --out "$T/warm" >/dev/null || bad "--lr-steps run failed"
[ "$(tail -n +2 "$T/warm/steps.csv" | cut -d, -f3 | tr '\n' ' ')" == "0.125 0.25 0.375 0.5 0.5 0.5 0.5 0.5 " ] && ok ||
  bad "--lr-steps warm-up: lr column $(tail -n +2 "$T/warm/steps.csv" | cut -d, -f3 | tr '\n' ' ')"
# total=run: the decay ends at the run's last planned step, --epochs x batches (8 here) or --max-steps
# where fewer; the header says the count; a --resume plans its own (one more epoch: 12) from the saved spec,
# a warm-up given over it keeping total=run
lrs() { tail -n +2 "$1/steps.csv" | cut -d, -f3 | tr '\n' ' '; }
expect 0 'per step linear:total=run \(total 8 steps\)' "$AG" train "${RUN[@]:0:10}" --epochs 2 --log-steps 1 \
  --lr-steps linear:total=run --out "$T/run-total"
[ "$(lrs "$T/run-total")" == "0.4375 0.375 0.3125 0.25 0.1875 0.125 0.0625 0 " ] && ok ||
  bad "--lr-steps linear:total=run over 8 steps: lr column $(lrs "$T/run-total")"
"$AG" train "${RUN[@]}" --epochs 2 --max-steps 5 --log-steps 1 --lr-steps linear:total=run --out "$T/run-max" >/dev/null ||
  bad "total=run with --max-steps failed"
[ "$(lrs "$T/run-max")" == "0.4 0.3 0.2 0.1 0 " ] && ok || bad "total=run, --max-steps 5: lr column $(lrs "$T/run-max")"
expect 0 'per step linear:warmup=2,total=run,min_ratio=0 \(total 12 steps\)' "$AG" train --resume --out "$T/run-total" \
  --epochs 3 --lr-steps linear:warmup=2 --progress none
[ "$(lrs "$T/run-total" | cut -d' ' -f9-)" == "0.15 0.1 0.05 0 " ] && ok ||
  bad "total=run resumed to 12 steps: lr column $(lrs "$T/run-total")"
expect 1 "option --lr-steps 'linear:warmup=100,total=run': total=run is the run's 4 planned steps \(--epochs 1 x 4 batches\), not above its warmup 100" \
  "$AG" train "${RUN[@]}" --epochs 1 --lr-steps linear:warmup=100,total=run --out "$T/run-short"
expect 2 "option --lr-steps: 'inv_sqrt:total=run': schedule 'inv_sqrt': unknown key 'total'" "$AG" train "${RUN[@]}" --lr-steps inv_sqrt:total=run --out "$T/run-bad"
# the norm before clipping: the first step's is the unclipped run's, far above the clip
"$AG" train "${RUN[@]}" --epochs 1 --log-steps 1 --clip 1e-4 --out "$T/clip" >/dev/null || bad "--clip run failed"
n1=$(sed -n 2p "$T/ref/steps.csv" | cut -d, -f5) n2=$(sed -n 2p "$T/clip/steps.csv" | cut -d, -f5)
[ -n "$n1" ] && [ "$n1" == "$n2" ] && awk -v n="$n2" 'BEGIN { exit !(n > 1e-3) }' && ok ||
  bad "--clip 1e-4: step 1's grad_norm $n2, unclipped $n1"
# no log: no file
"$AG" train "${RUN[@]}" --epochs 1 --out "$T/none" >/dev/null || bad "a run without --log-steps failed"
[ ! -e "$T/none/steps.csv" ] && ok || bad "a run without --log-steps wrote steps.csv"

# ---- resuming: every row once ----
# stopped mid-epoch (step 6 of 16), resumed with no option given: the run's N goes on
"$AG" train "${RUN[@]}" --log-steps 1 --max-steps 6 --out "$T/stop" >/dev/null || bad "--max-steps 6 failed"
[ "$(steps "$T/stop")" == "1 2 3 4 5 6 " ] && ok || bad "--max-steps 6: rows of steps $(steps "$T/stop")"
"$AG" train --resume --out "$T/stop" --progress none --quiet >/dev/null || bad "resume after --max-steps failed"
same_rows "$T/stop" "stopped at step 6, resumed"
"$AG" train "${RUN[@]}" --log-steps 3 --max-steps 7 --out "$T/stop3" >/dev/null &&
  "$AG" train --resume --out "$T/stop3" --progress none --quiet >/dev/null || bad "--log-steps 3, stopped at 7, resumed: failed"
[ "$(steps "$T/stop3")" == "3 6 9 12 15 " ] && ok || bad "--log-steps 3, stopped at 7, resumed: rows of steps $(steps "$T/stop3")"

# killed (SIGKILL) right after the checkpoint of epoch 2: every row up to its step is there
exec 3>&2 2>/dev/null # bash's "Killed" line is expected here
AG_CRASH_AT=last:2 "$AG" train "${RUN[@]}" --log-steps 1 --out "$T/killed" >/dev/null
rc=$?
exec 2>&3 3>&-
[ "$rc" -eq 137 ] && ok || bad "AG_CRASH_AT=last:2: exit $rc, want 137"
[ "$(steps "$T/killed")" == "$(seq -s ' ' 8) " ] && ok || bad "killed after step 8's checkpoint: rows of steps $(steps "$T/killed")"
"$AG" train --resume --out "$T/killed" --progress none --quiet >/dev/null || bad "resume after the kill failed"
same_rows "$T/killed" "killed after a checkpoint, resumed"

# what a crash after the checkpoint (step 4) leaves: rows of steps 5 and 6
# that the resumed run takes again, and step 7's row cut off mid-line
"$AG" train "${RUN[@]}" --log-steps 1 --max-steps 4 --out "$T/torn" >/dev/null || bad "--max-steps 4 failed"
printf '5,2,0.5,999,1,16,100,0.1\n6,2,0.5,999,1,16,100,0.1\n7,2,0.5,1.38' >> "$T/torn/steps.csv"
: > "$T/torn/steps.csv.tmp.2147483646.7" # a crashed rewrite's temporary (no such process)
"$AG" train --resume --out "$T/torn" --progress none --quiet >/dev/null || bad "resume after a torn row failed"
same_rows "$T/torn" "rows after the checkpoint and a torn row, resumed"
[ ! -e "$T/torn/steps.csv.tmp.2147483646.7" ] && ok || bad "a crashed rewrite's temporary file stayed: $(ls "$T/torn")"

# --log-steps 0 on resume: the rows after the checkpoint go, those up to it stay, none is added
"$AG" train "${RUN[@]}" --log-steps 1 --max-steps 6 --out "$T/off" >/dev/null || bad "--max-steps 6 failed"
printf '7,2,0.5,999,1,16,100,0.1\n' >> "$T/off/steps.csv"
"$AG" train --resume --out "$T/off" --log-steps 0 --progress none --quiet >/dev/null || bad "resume --log-steps 0 failed"
[ "$(steps "$T/off")" == "1 2 3 4 5 6 " ] && ok || bad "resume --log-steps 0: rows of steps $(steps "$T/off")"

# a run that did not log, resumed with the log: a note says where its rows start
"$AG" train "${RUN[@]}" --max-steps 6 --out "$T/late" >/dev/null || bad "--max-steps 6 failed"
expect 0 "note: .*late/steps.csv: the run logged no steps before this one: its rows start after step 6" \
  "$AG" train --resume --out "$T/late" --log-steps 2 --progress none
[ "$(steps "$T/late")" == "8 10 12 14 16 " ] && ok || bad "--log-steps 2 from step 6: rows of steps $(steps "$T/late")"

# a new run over an old one: no rows of the old run stay
cp -r "$T/ref" "$T/forced"
"$AG" train "${RUN[@]}" --epochs 1 --out "$T/forced" --force >/dev/null || bad "--force failed"
[ ! -e "$T/forced/steps.csv" ] && ok || bad "--force without --log-steps kept the old run's steps.csv"

# a file that is not a step log: which of its rows to keep is unknown, so --resume stops naming it
cp -r "$T/stop" "$T/foreign"
printf 'iteration,loss\n1,0.5\n' > "$T/foreign/steps.csv"
expect 1 "foreign/steps.csv: its first line is not '$HEADER'.*move it away to resume" \
  "$AG" train --resume --out "$T/foreign" --epochs 5 --progress none
[ "$(cat "$T/foreign/steps.csv")" == "$(printf 'iteration,loss\n1,0.5')" ] && ok || bad "a refused resume changed the foreign steps.csv"

summary
