#!/usr/bin/env bash
# test_run_folder.sh - a run folder survives any crash, and checkpoints are
# trusted only once checked, through the attngrad program:
#  - a run killed (SIGKILL) between any two of its writes - after the best
#    checkpoint, after last.safetensors' rename and before the metrics,
#    between metrics.csv and metrics.jsonl (AG_CRASH_AT, a test-only hook),
#    and at random moments - then resumed, ends with the parameters (bit
#    for bit), the metrics rows and the steps.csv rows (--log-steps) of a
#    run never interrupted, and no temporary file left;
#  - metrics files a full disk emptied come back, header included;
#  - a flipped bit in a weight or in optimizer state is refused, naming the
#    tensor; a file without checksums loads with a note;
#  - a small checkpoint whose config asks for an enormous model is refused
#    from its names and shapes, listing them, before anything is allocated;
#  - train --init: from a file (all its tensors used), every missing, extra
#    and mis-shaped tensor listed;
#  - one writer per folder: a --resume or --force into a folder another
#    process trains into stops naming it, having removed nothing, and the
#    lock dies with its holder;
#  - --resume of a run recorded on a GPU, where none can run, is refused
#    naming --device cpu.
#
#   tests/test_run_folder.sh build/tools/attngrad
set -u
AG=$1
[ -x "$AG" ] || { echo "usage: $0 attngrad"; exit 2; }
command -v python3 >/dev/null || { echo "python3 is not installed: skipping"; exit 77; }
. "$(dirname "$0")/cli_lib.sh" test_run_folder
ED="python3 $(dirname "$0")/st_edit.py"

RUN=(--model mpsan --synth-n 64 --dim 8 --batch 16 --epochs 4 --progress none --quiet --log-steps 1)
"$AG" train "${RUN[@]}" --out "$T/ref" >/dev/null || bad "the reference run failed"

# metrics and step rows without their seconds column/field, which timing changes
rows() { cut -d, -f1-8,10- "$1/metrics.csv"; sed 's/"seconds":[0-9.]*,//' "$1/metrics.jsonl"; cut -d, -f1-7 "$1/steps.csv"; }

# The folder of an interrupted run, once resumed to the end, against the
# reference: same rows, same parameters and optimizer state, no leftovers.
check_folder() {
  local dir=$1 what=$2 k
  for k in 1 2 3 4 5 6; do # resume until it completes (a kill may come before the first checkpoint)
    if [ -e "$dir/last.safetensors" ]; then "$AG" train --out "$dir" --resume --progress none --quiet >/dev/null 2>&1 && break
    else "$AG" train "${RUN[@]}" --out "$dir" --force >/dev/null 2>&1 && break; fi
  done
  if [ "$(rows "$T/ref")" == "$(rows "$dir")" ]; then ok; else bad "$what: metrics differ"; diff <(rows "$T/ref") <(rows "$dir") | head -5 >&2; fi
  $ED same-tensors "$T/ref/last.safetensors" "$dir/last.safetensors" && ok || bad "$what: last.safetensors differs"
  $ED same-tensors "$T/ref/best.safetensors" "$dir/best.safetensors" && ok || bad "$what: best.safetensors differs"
  local left; left=$(ls "$dir" | grep -c '\.tmp\.')
  [ "$left" -eq 0 ] && ok || bad "$what: $left temporary files left: $(ls "$dir")"
}

# ---- kills between the writes of an epoch ----
for point in best last csv jsonl; do
  for n in 1 2 3; do
    dir="$T/crash-$point-$n"
    exec 3>&2 2>/dev/null # bash's "Killed" line is expected here
    AG_CRASH_AT=$point:$n "$AG" train "${RUN[@]}" --out "$dir" >/dev/null
    rc=$?
    exec 2>&3 3>&-
    # "best" may be passed fewer than n times; every other point is, and kills
    [ "$rc" -eq 137 ] || { [ "$point" == best ] && [ "$rc" -eq 0 ]; } && ok || bad "AG_CRASH_AT=$point:$n: exit $rc, want 137"
    if [ "$point" == last ]; then # epoch n's row is not written yet: header and n - 1 rows
      lines=$(cat "$dir/metrics.csv" 2>/dev/null | wc -l)
      [ "$lines" -eq $((n > 1 ? n : 0)) ] && ok || bad "killed after last.safetensors of epoch $n: metrics.csv has $lines lines"
    fi
    check_folder "$dir" "killed at $point:$n"
  done
done

# ---- kills at random moments (bounded) ----
# Any moment must leave a folder that resumes to the same run; the moments
# come from a fixed seed, so a failure names a delay that can be tried again.
RANDOM=20261128
for i in 1 2 3 4 5 6; do
  dir="$T/random-$i"
  "$AG" train "${RUN[@]}" --out "$dir" >/dev/null 2>&1 &
  pid=$!
  delay="0.$((RANDOM % 4))$((RANDOM % 10))"
  sleep "$delay"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  check_folder "$dir" "killed at random ($i, after ${delay} s)"
done

# ---- SIGTERM: the step in progress finishes, is saved, and the run says how to go on ----
dir="$T/sigterm"
"$AG" train "${RUN[@]}" --epochs 1000000 --out "$dir" >"$T/sigterm.out" 2>"$T/sigterm.err" &
pid=$!
for i in $(seq 3000); do [ -e "$dir/last.safetensors" ] && break; sleep 0.1; done # a bound for a hang, not a speed
kill -TERM "$pid"
wait "$pid"; rc=$?
[ "$rc" -eq 143 ] && ok || bad "SIGTERM: exit $rc, want 143"
step=$(grep -o 'stopped by SIGTERM after step [0-9]*' "$T/sigterm.err" | grep -o '[0-9]*$')
[ -n "$step" ] && grep -q "which the last checkpoint holds: continue with --resume --out $dir" "$T/sigterm.err" && ok ||
  bad "SIGTERM: $(cat "$T/sigterm.err")"
saved=$(grep -a -o 'state\.step=[0-9]*' "$dir/last.safetensors" | head -1 | cut -d= -f2)
[ -n "$step" ] && [ "$saved" = "$step" ] && ok || bad "SIGTERM: the message says step $step, last.safetensors holds step $saved"
expect 0 'done in' "$AG" train --out "$dir" --resume --epochs 2 --progress none

# a signal before the first step of a fresh run: no checkpoint to resume from, and the message says so
dir="$T/sigterm-start"
expect 143 'stopped by SIGTERM before its first step: nothing to resume, .* holds no checkpoint; run it again' \
  env AG_SIGNAL_AT=start:1 "$AG" train "${RUN[@]}" --out "$dir"
[ ! -e "$dir/last.safetensors" ] && ok || bad "a stop before the first step left a checkpoint"
expect 0 'done in' "$AG" train "${RUN[@]}" --epochs 1 --out "$dir" --progress none

# ---- temporary files: a dead writer's go, a live one's stay ----
dir="$T/crash-last-2"
sleep 30 & live=$!
: > "$dir/last.safetensors.tmp.$live.0"
: > "$dir/best.safetensors.tmp.2147483646.7"  # no such process
: > "$dir/vocab.txt.tmp.2147483646.3"         # a kill while the run wrote its vocabulary
: > "$dir/notes.txt.tmp.2147483646.7"         # not the run's: kept
expect 0 'removed 2 temporary files' "$AG" train --out "$dir" --resume --progress none
[ -e "$dir/last.safetensors.tmp.$live.0" ] && [ ! -e "$dir/best.safetensors.tmp.2147483646.7" ] &&
  [ ! -e "$dir/vocab.txt.tmp.2147483646.3" ] && [ -e "$dir/notes.txt.tmp.2147483646.7" ] \
  && ok || bad "stale temporary files: $(ls "$dir")"
kill "$live"; wait "$live" 2>/dev/null

# ---- one writer per folder ----
dir="$T/locked"
"$AG" train "${RUN[@]}" --epochs 1000000 --out "$dir" >/dev/null 2>&1 &
holder=$!
for i in $(seq 3000); do [ -e "$dir/last.safetensors" ] && break; sleep 0.1; done # a bound for a hang, not a speed
[ -e "$dir/last.safetensors" ] && ok || bad "the long run wrote no checkpoint in 300 s"
expect 1 "$dir is in use: process $holder is training into it" "$AG" train --out "$dir" --resume --progress none
expect 1 "$dir is in use: process $holder" "$AG" train "${RUN[@]}" --out "$dir" --force
kill -0 "$holder" 2>/dev/null && ok || bad "the first run stopped while a second one was refused"
[ -e "$dir/last.safetensors" ] && [ -e "$dir/vocab.txt" ] && [ -e "$dir/metrics.csv" ] && ok \
  || bad "a refused second writer removed the run's files: $(ls "$dir")"
exec 3>&2 2>/dev/null
kill -9 "$holder"; wait "$holder" 2>/dev/null
exec 2>&3 3>&-
if command -v flock >/dev/null; then # a holder that is no attngrad: the dead run's pid is not named
  exec 9>>"$dir/.lock"
  flock -n 9 && ok || bad "the dead run's lock outlived it"
  expect 1 "$dir is in use: another process holds $dir/.lock" "$AG" train --out "$dir" --resume --progress none
  exec 9>&-
fi
expect 0 'done in' "$AG" train --out "$dir" --resume --epochs 1 --progress none # the lock went with its holder

# ---- a full disk: the metrics append lost the header and rows ----
cp -r "$T/ref" "$T/full"
: > "$T/full/metrics.csv"
head -n 1 "$T/ref/metrics.jsonl" > "$T/full/metrics.jsonl"
"$AG" train --out "$T/full" --resume --progress none --quiet >/dev/null 2>&1 || bad "resume after a full disk failed"
cmp -s "$T/ref/metrics.csv" "$T/full/metrics.csv" && cmp -s "$T/ref/metrics.jsonl" "$T/full/metrics.jsonl" \
  && ok || bad "metrics after a full disk: $(head -c 300 "$T/full/metrics.csv")"

# ---- a disk that fills up while a run writes ----
# simulated with a file size limit (ulimit -f; SIGXFSZ ignored, so a write
# past it fails with EFBIG as on a full disk): a resumed run stops naming
# the file and why, and the checkpoints it had are there byte for byte, with
# no temporary file left; a new run says which file it could not write
cp -r "$T/ref" "$T/disk-full"
out=$( (trap '' XFSZ; ulimit -f 8; "$AG" train --out "$T/disk-full" --resume --epochs 5 --progress none --quiet) 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q "disk-full/\(best\|last\).safetensors: write failed: File too large" <<<"$out" && ok ||
  bad "a full disk on resume: exit $rc, want 1 naming the checkpoint and why: $out"
cmp -s "$T/ref/last.safetensors" "$T/disk-full/last.safetensors" && cmp -s "$T/ref/best.safetensors" "$T/disk-full/best.safetensors" &&
  ok || bad "a full disk on resume changed the run's checkpoints"
[ "$(ls "$T/disk-full" | grep -c '\.tmp\.')" -eq 0 ] && ok || bad "a full disk left temporary files: $(ls "$T/disk-full")"
out=$( (trap '' XFSZ; ulimit -f 0; "$AG" train "${RUN[@]}" --out "$T/disk-full-new") 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q "disk-full-new/vocab.txt: write failed: File too large" <<<"$out" && ok ||
  bad "a full disk on a new run: exit $rc, want 1 naming vocab.txt and why: $out"

# ---- integrity: flipped bits, files without checksums ----
CK=$T/ref/last.safetensors
for t in embed.weight unit2.dense.weight cls.out.bias optim.adadelta.v.fusion.weight optim.adadelta.u.pool.w1; do
  $ED flip "$CK" "$T/flip.safetensors" "$t" 5 3
  expect 1 "tensor '$t' \([^)]*\) is damaged" "$AG" eval --ckpt "$T/flip.safetensors"
done
cp -r "$T/ref" "$T/flipped-run"
$ED flip "$CK" "$T/flipped-run/last.safetensors" optim.adadelta.v.embed.weight 0 0
expect 1 "tensor 'optim.adadelta.v.embed.weight' .* is damaged" "$AG" train --out "$T/flipped-run" --resume --epochs 5
$ED strip-crc "$CK" "$T/ref/nocrc.safetensors"
expect 0 "note: .*nocrc.safetensors: [0-9]+ of its [0-9]+ tensors carry no checksum" "$AG" eval --ckpt "$T/ref/nocrc.safetensors"
# the header is sealed too (attngrad.file_crc32c over the whole file): a bit
# flipped in the config, in the metrics history or in a checksum's key, and
# a config edited by hand to other valid values, are refused by eval,
# predict and resume alike, never loaded as they read
changed="was changed after it was written \(damaged, or edited by hand\)"
for flip in 'l2=|3|1' '\"loss\"|4|6' '"crc32c.|4|1' 'model=|7|0'; do # l2=1e-07 -> 3e-07, "lo3s" in the history, "cra32c.", the model
  IFS='|' read -r text off bit <<<"$flip"
  $ED flip-header "$CK" "$T/hflip.safetensors" "$text" "$off" "$bit" || bad "flip-header $flip"
  expect 1 "$changed" "$AG" eval --ckpt "$T/hflip.safetensors"
done
$ED stale-config "$CK" "$T/edited.safetensors" keep=0.6 l2=3e-07
expect 1 "edited.safetensors: the file $changed" "$AG" eval --ckpt "$T/edited.safetensors"
expect 1 "$changed" sh -c "echo w1 A w2 B | '$AG' predict --ckpt '$T/edited.safetensors'"
cp -r "$T/ref" "$T/edited-run"
cp "$T/edited.safetensors" "$T/edited-run/last.safetensors"
expect 1 "last.safetensors: the file $changed" "$AG" train --out "$T/edited-run" --resume --epochs 5
$ED config "$CK" "$T/ref/resealed.safetensors" keep=0.6
expect 0 '^test +accuracy' "$AG" eval --ckpt "$T/ref/resealed.safetensors"

# ---- a config asking for far more than the file holds ----
# 65536-wide weights would take 32 GiB each: only a check of names and
# shapes before allocating can answer with the list
$ED config "$CK" "$T/ref/huge.safetensors" dim=65536 hidden=65536
expect 1 "huge.safetensors does not fit the model's 31 parameters: 26 of another shape" "$AG" eval --ckpt "$T/ref/huge.safetensors"
expect 1 "'fusion.weight' is \[8,40\] in the file, \[65536,327680\] in the model" "$AG" predict --ckpt "$T/ref/huge.safetensors"
cp -r "$T/ref" "$T/huge-run"
cp "$T/ref/huge.safetensors" "$T/huge-run/last.safetensors"
expect 1 "does not fit the model's 31 parameters" "$AG" train --out "$T/huge-run" --resume

# ---- --resume with other settings: only the keys given change ----
MOM=(--model mpsan --synth-n 64 --dim 8 --batch 16 --progress none --quiet --optim sgd:lr=0.1,momentum=0.9)
"$AG" train "${MOM[@]}" --epochs 2 --out "$T/mom" >/dev/null || bad "the momentum run failed"
for k in 1 2 3; do "$AG" train "${MOM[@]}" --epochs 1 --out "$T/mom$k" >/dev/null || bad "momentum run $k failed"; done
# the lr, or the momentum, given again: the run goes on as if never stopped (before: momentum 0, silently)
expect 0 'sgd:lr=0.1,momentum=0.9,' "$AG" train --resume --out "$T/mom1" --epochs 2 --optim sgd:lr=0.1 --progress none
expect 0 'sgd:lr=0.1,momentum=0.9,' "$AG" train --resume --out "$T/mom2" --epochs 2 --optim sgd:momentum=0.9 --progress none
for k in 1 2; do
  $ED same-tensors "$T/mom/last.safetensors" "$T/mom$k/last.safetensors" && ok || bad "--resume --optim (run $k) lost the run's state"
done
# a new rate stands (before: the file's rate, silently): lr 0 moves nothing
cp "$T/mom3/last.safetensors" "$T/mom3-epoch1.safetensors"
expect 0 "lr 0, this command's, is the rate from here on \(the run's was 0.1" "$AG" train --resume --out "$T/mom3" --epochs 2 --optim sgd:lr=0
for p in embed unit fusion pool cls; do
  $ED same-tensors "$T/mom3-epoch1.safetensors" "$T/mom3/last.safetensors" $p && ok || bad "lr=0 on --resume moved '$p*'"
done
expect 0 "its 'momentum' state is not carried on: this command's sgd keeps none" "$AG" train --resume --out "$T/mom3" --epochs 3 --optim sgd:momentum=0
expect 0 "the run's sgd kept no 'momentum' state: it starts at zero" "$AG" train --resume --out "$T/mom3" --epochs 4 --optim sgd:lr=0.1,momentum=0.5
expect 2 "'sgd:dampening=0.5' over 'sgd:lr=0.1,momentum=0.5.*nesterov=1.*: .*dampening" "$AG" train --resume --out "$T/mom3" --epochs 5 --optim sgd:nesterov=1 --optim sgd:dampening=0.5
expect 1 "the file holds 'sgd' optimizer state, this run uses 'adam'" "$AG" train --resume --out "$T/mom3" --epochs 5 --optim adam

# ---- train --init ----
INIT=(--model mpsan --synth-n 64 --dim 8 --batch 16 --epochs 1 --progress none --optim sgd:lr=0 --l2 0)
expect 0 'done in' "$AG" train "${INIT[@]}" --init "$CK" --out "$T/init"
# lr 0: the parameters are still the file's
$ED same-tensors "$CK" "$T/init/last.safetensors" unit && $ED same-tensors "$CK" "$T/init/last.safetensors" embed \
  && ok || bad "--init did not start from the file's parameters"
$ED rename "$CK" "$T/renamed.safetensors" pool.w1 pooling.w1
$ED rename "$T/renamed.safetensors" "$T/renamed.safetensors" cls.out.bias head.bias
expect 1 "renamed.safetensors does not fit the model's 31 parameters: 2 missing, 2 extra" "$AG" train "${INIT[@]}" --init "$T/renamed.safetensors" --out "$T/init2"
expect 1 "missing:  'cls.out.bias' \[4\] is not in the file" "$AG" train "${INIT[@]}" --init "$T/renamed.safetensors" --out "$T/init2"
expect 1 "extra:    'pooling.w1' F32 \[8,8\] is no parameter of the model" "$AG" train "${INIT[@]}" --init "$T/renamed.safetensors" --out "$T/init2"
expect 1 "26 of another shape" "$AG" train "${INIT[@]}" --dim 12 --init "$CK" --out "$T/init2"
[ -e "$T/init2" ] && bad "a refused --init left a run folder" || ok
expect 1 "--init starts a run from a file, --resume continues one" "$AG" train --init "$CK" --resume --out "$T/ref"
expect 1 "nothing.safetensors: cannot open" "$AG" train "${INIT[@]}" --init "$T/nothing.safetensors" --out "$T/init3"

# --resume goes on where the run trained (state.device): a run recorded on
# cuda, where no GPU can run, is refused naming --device cpu, and moves
# nowhere; with --device cpu it goes on, noting the change of device.  (A
# GPU, or the emulator: test_cuda_resume.sh resumes on it.)
if "$AG" dump-step --model mpsan --device cuda --out "$T/probe.st" >/dev/null 2>&1; then
  echo "ok # a GPU runs here: the refusal is for a machine without one"
else
  "$AG" train "${RUN[@]}" --epochs 1 --out "$T/gpu-run" >/dev/null || bad "the run to mark as a GPU's failed"
  $ED config "$T/gpu-run/last.safetensors" "$T/gpu.st" state.device=cuda && mv "$T/gpu.st" "$T/gpu-run/last.safetensors" ||
    bad "st_edit config state.device failed"
  cp "$T/gpu-run/last.safetensors" "$T/gpu.before"
  expect 1 "--resume: the run in $T/gpu-run trained on cuda, where it goes on, but .*: give --device cpu to continue it on the CPU" \
    "$AG" train --resume --out "$T/gpu-run" --epochs 2 --progress none --quiet
  cmp -s "$T/gpu.before" "$T/gpu-run/last.safetensors" && ok || bad "a refused --resume changed last.safetensors"
  expect 0 "the run trained on cuda, this command trains on cpu \(--device\)" \
    "$AG" train --resume --out "$T/gpu-run" --epochs 2 --device cpu --progress none --quiet
fi

summary
