#!/usr/bin/env bash
# test_cuda_resume.sh - a run on the GPU (or the CUDA emulator) stopped and
# resumed with --device cuda ends with the parameters, optimizer state,
# step and dropout generator of the run never stopped, bit for bit, as on
# the CPU (test_run_folder.sh): stopped by --max-steps, by a signal
# (AG_SIGNAL_AT) and by a crash (AG_CRASH_AT); Adam (lazy, AMSGrad) and
# Adadelta; f64 and f32; with --cuda-graphs.  And the case that looked
# like a GPU resume that is not exact: a GPU run resumed with --device cpu
# goes on on the CPU, whose sums round in other orders, so it ends near,
# not on, the run's bits - --resume says so, and st_compare names the
# parameters that differ (it once scaled them by sched.state's inf and saw
# the optimizer state alone differ).  Without --device a resume goes on
# where the run trained, on the GPU, to the bit.  Exit 77 where no GPU can
# run.
#
#   test_cuda_resume.sh ATTNGRAD ATTNGRAD_F64 ST_COMPARE
set -u
[ $# -eq 3 ] || { echo "usage: $0 attngrad attngrad-f64 st_compare" >&2; exit 2; }
AG=$1 AG64=$2 CMP=$3
. "$(dirname "$0")/cli_lib.sh" test_cuda_resume

out=$("$AG64" dump-step --model mpsan --device cuda --out "$T/probe.st" 2>&1) || {
  echo "SKIP: $out"
  exit 77
}

BASE=(--dim 16 --synth-n 64 --batch 16 --seed 5 --device cuda --progress none --quiet)

# resume_case NAME EXE STOP RC 'RUN OPTIONS' [RESUME OPTIONS...]: EXE trains
# 30 steps; again with STOP ("max:N": --max-steps N; else an AG_SIGNAL_AT or
# AG_CRASH_AT setting), which exits RC; resumed to 30 with --device cuda and
# RESUME OPTIONS; the two last.safetensors compared exactly.
resume_case() {
  local name=$1 exe=$2 stop=$3 want=$4 run=$5; shift 5
  local dir="$T/$name" rc res
  # shellcheck disable=SC2086 # the run's options are words
  "$exe" train $run "${BASE[@]}" --max-steps 30 --out "$dir/ref" >/dev/null 2>&1 || { bad "$name: the 30-step run failed"; return; }
  exec 3>&2 2>/dev/null # bash's "Killed" line is expected for a crash
  # shellcheck disable=SC2086
  case $stop in
    max:*) "$exe" train $run "${BASE[@]}" --max-steps "${stop#max:}" --out "$dir/run" >/dev/null 2>&1 ;;
    *) env "$stop" "$exe" train $run "${BASE[@]}" --max-steps 30 --out "$dir/run" >/dev/null 2>&1 ;;
  esac
  rc=$?
  exec 2>&3 3>&-
  [ "$rc" -eq "$want" ] && ok || { bad "$name: stopping ($stop) exited $rc, want $want"; return; }
  "$exe" train --resume --out "$dir/run" --device cuda --max-steps 30 --progress none --quiet "$@" >/dev/null ||
    { bad "$name: the resume failed"; return; }
  if res=$("$CMP" "$dir/ref/last.safetensors" "$dir/run/last.safetensors" 0); then ok; echo "ok $name: $res"
  else bad "$name: stopped and resumed on the GPU, not the run never stopped:"; echo "$res" | tail -5 >&2; fi
}

resume_case adam-f64-max "$AG64" max:8 0 "--model mtsa --optim adam"
resume_case adam-f32-max "$AG" max:11 0 "--model mtsa --optim adam"
resume_case adadelta-f64-signal "$AG64" AG_SIGNAL_AT=step:11 143 "--model mpsan --optim adadelta"
resume_case adadelta-f32-signal "$AG" AG_SIGNAL_AT=step:11 143 "--model mpsan --optim adadelta"
resume_case lazy-amsgrad-graphs-crash "$AG64" AG_CRASH_AT=step:11 137 "--model mtsa --optim adam:lazy=1,amsgrad=1 --cuda-graphs" --cuda-graphs

# Resumed without --device: where the run trained (its state.device), on
# the GPU, with no note, to the bit.
dir="$T/own-device"
"$AG64" train --model mtsa --optim adam "${BASE[@]}" --max-steps 12 --out "$dir/ref" >/dev/null 2>&1 &&
  "$AG64" train --model mtsa --optim adam "${BASE[@]}" --max-steps 8 --out "$dir/run" >/dev/null 2>&1 ||
  bad "own-device: the GPU runs failed"
"$AG64" train --resume --out "$dir/run" --max-steps 12 --progress none --quiet >"$T/own.out" 2>&1 ||
  bad "own-device: the resume without --device failed: $(tail -3 "$T/own.out")"
grep -q "note:.*--device" "$T/own.out" && bad "own-device: a note though it stayed on the GPU: $(cat "$T/own.out")" || ok
if res=$("$CMP" "$dir/ref/last.safetensors" "$dir/run/last.safetensors" 0); then ok
else bad "own-device: resumed without --device, not the run never stopped:"; echo "$res" | tail -5 >&2; fi

# Resumed with --device cpu: on the CPU.  A note says the device changed,
# and the result is not the GPU run's (gradients 1e-16 apart from the
# first step on), parameters included.
dir="$T/on-cpu"
"$AG64" train --model mtsa --optim adam "${BASE[@]}" --max-steps 12 --out "$dir/ref" >/dev/null 2>&1 &&
  "$AG64" train --model mtsa --optim adam "${BASE[@]}" --max-steps 8 --out "$dir/run" >/dev/null 2>&1 ||
  bad "on-cpu: the GPU runs failed"
expect 0 "the run trained on cuda, this command trains on cpu \(--device\).*--device cuda keeps the run on cuda" \
  "$AG64" train --resume --out "$dir/run" --device cpu --max-steps 12 --progress none --quiet
res=$("$CMP" "$dir/ref/last.safetensors" "$dir/run/last.safetensors" 0)
[ $? -eq 1 ] && ok || bad "on-cpu: resumed on the CPU, st_compare found no difference: $res"
grep -Eq '^(embed|cls|pool|head)[^ ]*: differs' <<<"$res" && ok ||
  bad "on-cpu: st_compare names no parameter that differs: $(head -3 <<<"$res")"
# ... and within rounding of it (the optimizer state's floor: a thousandth of the slot's largest)
res=$("$CMP" "$dir/ref/last.safetensors" "$dir/run/last.safetensors" 1e-9) && ok || bad "on-cpu: beyond rounding: $res"
# the same device again: no note
"$AG64" train --resume --out "$dir/run" --device cpu --max-steps 13 --progress none --quiet >"$T/same.out" 2>&1
grep -q "note:.*--device" "$T/same.out" && bad "on-cpu: a note though the device is the run's: $(cat "$T/same.out")" || ok

summary
