#!/usr/bin/env bash
# test_cli.sh - smoke tests of the attngrad program, as a user runs it:
# train on generated data (with --profile's op table), eval and predict from
# the checkpoint, resume == uninterrupted (parameters compared bit for bit),
# gradcheck and dump-step of every registered model (the dump reloaded and
# checked against a fresh in-process computation), and clean errors with a
# non-zero exit for bad data files, bad options and a corrupt checkpoint.
#
#   tests/test_cli.sh build/tools/attngrad build/tools/attngrad-f64 build/tests/test_train
set -u
AG=$1 AG64=$2 TT=$3
[ -x "$AG" ] && [ -x "$AG64" ] && [ -x "$TT" ] || { echo "usage: $0 attngrad attngrad-f64 test_train"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_cli

SMALL=(--synth-n 200 --dim 8 --batch 25 --progress none)

# ---- models, train, eval, predict ----
expect 0 '^mpsan ' "$AG" models
expect 0 'note: model mpsan does not read --heads, --attention: ignored' "$AG" train --model mpsan --heads 4 --attention none "${SMALL[@]}" --max-steps 1 --out "$T/unread"
expect 0 'note: model dual_axial does not read --max-len: ignored' "$AG" train --model dual_axial --max-len 5 "${SMALL[@]}" --max-steps 1 --out "$T/unread-da"
expect 0 'note: the generated task is not a cross-validation set \(mr, subj, cr, mpqa\): --folds ignored' \
  "$AG" train --folds 3 "${SMALL[@]}" --max-steps 1 --out "$T/unread-folds"
expect 2 'models: takes no arguments' "$AG" models --bogus
# every built-in optimizer as `models` lists it, every key written out: the spec trains as given
specs=$("$AG" models | sed -n 's/^(optimizer [a-z]*: --optim \(.*\))$/\1/p')
[ "$(wc -l <<<"$specs")" -eq 8 ] && ok || bad "models lists $(wc -l <<<"$specs") built-in optimizers, not 8: $specs"
for spec in $specs; do
  expect 0 "run folder" "$AG" train "${SMALL[@]}" --optim "$spec" --max-steps 2 --out "$T/optim-${spec%%:*}"
done
models=$("$AG" models | awk '$2 ~ /^(classify|pair|lm|relatedness)$/ && !seen[$1]++ { print $1 }')

expect 0 'done in .* 2 epochs, 16 steps' "$AG" train "${SMALL[@]}" --epochs 2 --out "$T/run"
for f in best.safetensors last.safetensors vocab.txt metrics.csv metrics.jsonl; do
  [ -s "$T/run/$f" ] && ok || bad "train wrote no $T/run/$f"
done
[ "$(wc -l < "$T/run/metrics.csv")" -eq 3 ] && ok || bad "metrics.csv: want a header and 2 rows"
grep -q '"dev":{"loss":' "$T/run/metrics.jsonl" && ok || bad "metrics.jsonl has no dev metrics"
if command -v python3 >/dev/null; then
  python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$T/run/metrics.jsonl" && ok ||
    bad "metrics.jsonl is not JSON lines"
fi
expect 0 'epoch 1/1  step 8/8  [0-9]+ tok/s  loss' "$AG" train "${SMALL[@]}" --epochs 1 --progress lines --out "$T/lines"

# --profile K: one op table of K steps after the warm-up on stderr (op name, file.c:line), training goes on
"$AG" train "${SMALL[@]}" --epochs 2 --profile 2 --out "$T/prof" >"$T/prof.out" 2>"$T/prof.err"
grep -q 'done in .* 2 epochs, 16 steps' "$T/prof.out" && ok || bad "train --profile 2: the run did not finish"
[ "$(grep -c '^ops per step (2 steps' "$T/prof.err")" -eq 1 ] && ok || bad "train --profile 2: want one table of 2 steps on stderr"
grep -Eq '^  ag_[a-z0-9_]+ +[A-Za-z0-9_]+\.c:[0-9]+ ' "$T/prof.err" && ok ||
  bad "train --profile 2: no row with an ag_ op and its file.c:line: $(head -c 600 "$T/prof.err")"
grep -q 'ops per step' "$T/prof.out" && bad "train --profile 2: the table went to stdout" || ok
expect 0 'no op table: the run ended after 2 training steps' "$AG" train "${SMALL[@]}" --max-steps 2 --profile 2 --out "$T/prof-short"
expect 0 '--profile K +time every op' "$AG" train --help
expect 0 '--micro-batch M +run each batch' "$AG" train --help
expect 0 '--eval-every N +also evaluate' "$AG" train --help
expect 0 '--label-smoothing EPS +train against' "$AG" train --help

expect 0 '^test +accuracy [0-9.]+%  loss [0-9.]+  \(50 examples\)' "$AG" eval --ckpt "$T/run/best.safetensors"
# subnormals flushed (the default) or kept: the same scores where the model has none
[ "$("$AG" eval --ckpt "$T/run/best.safetensors" --denormals keep)" = "$("$AG" eval --ckpt "$T/run/best.safetensors")" ] &&
  ok || bad "eval --denormals keep differs from the default"
expect 2 "option --denormals: 'zero': expected flush or keep" "$AG" eval --ckpt "$T/run/best.safetensors" --denormals zero
out=$(printf 'w1 A w2 B\n\nB w3 w4 w5 A w6\n' | "$AG" predict --ckpt "$T/run/best.safetensors")
lines=$(printf '%s\n' "$out" | wc -l)
[ "$lines" -eq 3 ] && ok || bad "predict: want 3 output lines, got $lines"
printf '%s\n' "$out" | sed -n 1p | grep -Eq '^[0-3]'$'\t''[0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+$' && ok ||
  bad "predict: want 'label<TAB>4 probabilities', got '$(printf '%s\n' "$out" | sed -n 1p)'"
# a NUL or a CR before the line end is an error for that line (a blank output line, stderr names the line),
# not a line cut there; a CRLF end is fine; a read error is not the end of the input
printf 'w1 A\000 w2 B\nw1 A\r w2 B\nw1 \001A\nw1 A w2 B\r\n' > "$T/bad-lines.txt"
out=$("$AG" predict --ckpt "$T/run/best.safetensors" < "$T/bad-lines.txt" 2>"$T/bad-lines.err"); rc=$?
[ "$rc" -eq 1 ] && ok || bad "predict of bad lines: exit $rc, want 1"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 4 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] &&
  printf '%s\n' "$out" | sed -n 4p | grep -Eq '^[0-3]'$'\t' && ok || bad "predict of bad lines: want 3 blank lines and a label, got '$out'"
grep -q '^attngrad predict: stdin:1: binary data (byte 0x00 at column 5)$' "$T/bad-lines.err" && ok ||
  bad "predict: a NUL byte: $(cat "$T/bad-lines.err")"
grep -q '^attngrad predict: stdin:2: carriage return inside the line (column 5)' "$T/bad-lines.err" && ok ||
  bad "predict: a CR inside the line: $(cat "$T/bad-lines.err")"
grep -q '^attngrad predict: stdin:3: binary data (byte 0x01 at column 4)$' "$T/bad-lines.err" && ok ||
  bad "predict: a control byte: $(cat "$T/bad-lines.err")"
# a UTF-8 byte order mark before the first line is dropped, as the data loaders drop it: the line predicts as
# it would without one (kept, its first word was another word, <unk>), in either input form
out=$(printf '\357\273\277w1 A w2 B\nw1 A w2 B\n' | "$AG" predict --ckpt "$T/run/best.safetensors" 2>&1); rc=$?
[ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | sed -n 1p)" = "$(printf '%s\n' "$out" | sed -n 2p)" ] && ok ||
  bad "predict of a line after a BOM: exit $rc, want the output of the same line without it: '$out'"
out=$(printf '\357\273\2771\tw1\t_\t_\t_\t_\t0\t_\t_\t_\n\n1\tw1\t_\t_\t_\t_\t0\t_\t_\t_\n' |
  "$AG" predict --ckpt "$T/run/best.safetensors" --input conllu 2>&1); rc=$?
[ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ] && [ "$(printf '%s\n' "$out" | sed -n 1p)" = "$(printf '%s\n' "$out" | sed -n 2p)" ] && ok ||
  bad "predict --input conllu after a BOM: exit $rc: '$out'"
# --device: an unknown one is refused by name; cuda trains where a GPU can run, and elsewhere fails with one line
# naming why (no device, driver and runtime versions), not a crash
expect 2 "attngrad train: option --device: 'tpu': expected cpu, cuda or cuda:N" "$AG" train --device tpu "${SMALL[@]}" --out "$T/tpu"
expect 2 "attngrad train: option --device: 'cuda:x': expected cpu, cuda or cuda:N" "$AG" train --device cuda:x "${SMALL[@]}" --out "$T/tpu"
# a GPU index past those visible: one line naming it (or, without a GPU, why there is none)
expect 1 "^attngrad train: --device cuda:99: (no cuda:99 here: [0-9]+ CUDA device|.*(no CUDA device|built without CUDA))" \
  "$AG" train --device cuda:99 "${SMALL[@]}" --out "$T/cuda99"
expect 1 "attngrad train: --cuda-graphs needs --device cuda" "$AG" train --cuda-graphs "${SMALL[@]}" --out "$T/graphs-cpu"
# ... and dump-step and gradcheck, which build their model before they take the device: a model left
# behind fails these in CI's sanitizer step (abort_on_error: LeakSanitizer alone keeps an exit status of 1)
for cmd in "dump-step --out $T/dump-cuda99.st" gradcheck; do
  # shellcheck disable=SC2086
  expect 1 "^attngrad ${cmd%% *}: --device cuda:99: (no cuda:99 here: [0-9]+ CUDA device|.*(no CUDA device|built without CUDA))" \
    "$AG64" $cmd --model mtsa --device cuda:99
done
# ... and the commands that read a checkpoint, which take the device after it (it is not part of the run's options)
for cmd in eval predict generate "heatmap --sentence w1 --out $T/maps-cuda99/"; do
  # shellcheck disable=SC2086
  expect 1 "^attngrad ${cmd%% *}: --device cuda:99: (no cuda:99 here: [0-9]+ CUDA device|.*(no CUDA device|built without CUDA))" \
    sh -c "echo w1 | '$AG' $cmd --ckpt '$T/run/best.safetensors' --device cuda:99"
done
out=$("$AG" train --device cuda "${SMALL[@]}" --max-steps 3 --out "$T/cuda" 2>&1); rc=$?
if [ "$rc" -eq 0 ]; then
  [ -s "$T/cuda/last.safetensors" ] && ok || bad "--device cuda trained but wrote no checkpoint"
  expect 0 '^[0-9]'$'\t' sh -c "echo 'w1 A w2 B' | '$AG' predict --ckpt '$T/cuda/last.safetensors'" # a GPU run's checkpoint on the CPU
  # eval and predict on the GPU give the CPU's figures (to the printed digits)
  printf 'w1 A w2 B\nw3 B\nA A w1 w4 w2 w5\n' > "$T/gpu-lines.txt"
  for cmd in eval predict; do
    "$AG" $cmd --ckpt "$T/cuda/last.safetensors" --device cuda < "$T/gpu-lines.txt" > "$T/$cmd-gpu.out" 2>&1 &&
      "$AG" $cmd --ckpt "$T/cuda/last.safetensors" < "$T/gpu-lines.txt" > "$T/$cmd-cpu.out" 2>&1 &&
      cmp -s "$T/$cmd-gpu.out" "$T/$cmd-cpu.out" && ok || bad "$cmd --device cuda: $(diff "$T/$cmd-gpu.out" "$T/$cmd-cpu.out" | head -5)"
  done
  # train's step on the GPU (one wait, a gated update) against the CPU's, in f64: 2 epochs of
  # every metric to 1e-9 relative (dropout draws the same masks on both devices)
  "$AG64" train --device cuda "${SMALL[@]}" --epochs 2 --out "$T/cuda64" >/dev/null 2>&1 &&
    "$AG64" train "${SMALL[@]}" --epochs 2 --out "$T/cpu64" >/dev/null 2>&1 &&
    python3 - "$T/cpu64/metrics.csv" "$T/cuda64/metrics.csv" <<'PY' && ok || bad "--device cuda f64 metrics differ from the CPU's"
import csv, sys
a, b = (list(csv.DictReader(open(f))) for f in sys.argv[1:3])
assert len(a) == len(b) and a, (len(a), len(b))
for ra, rb in zip(a, b):
    for k in ("train_loss", "dev_loss", "test_loss", "dev_acc", "test_acc"):
        x, y = float(ra[k]), float(rb[k])
        assert abs(x - y) <= 1e-9 * max(abs(x), 1e-300), (k, x, y)
PY
  # a diverging run: the GPU's step (its update skipped on the device) stops where the CPU's does, with its
  # message, which value is inf or NaN aside (x86 makes -nan where CUDA makes nan; ops may differ on inf - inf)
  div_cpu=$("$AG64" train "${SMALL[@]}" --optim sgd:lr=1e9 --out "$T/div-cpu" 2>&1 >/dev/null | sed -E 's/-?(nan|inf)/NONFINITE/g')
  div_gpu=$("$AG64" train --device cuda "${SMALL[@]}" --optim sgd:lr=1e9 --out "$T/div-cuda" 2>&1 >/dev/null |
    sed -E 's/-?(nan|inf)/NONFINITE/g')
  [[ $div_cpu == *"training diverged at step"* ]] && [ "$div_cpu" = "$div_gpu" ] && ok ||
    bad "a diverging run on the GPU: '$div_gpu', on the CPU: '$div_cpu'"
  # generate on the GPU (the LM's last-position decoder there) draws the CPU's words from the same
  # seed: in f64, where the two devices' probabilities agree far closer than a draw could tell
  printf 't1 010 :\nt3\n101 t2 t7\n' > "$T/gen-prompts.txt" # words of the generated lookup task
  "$AG64" train --model poslm "${SMALL[@]}" --hidden 8 --max-steps 3 --out "$T/lm-cuda" >/dev/null 2>&1 &&
    "$AG64" generate --ckpt "$T/lm-cuda/last.safetensors" --device cuda --words 6 --seed 5 \
      < "$T/gen-prompts.txt" > "$T/gen-gpu.out" 2>&1 &&
    "$AG64" generate --ckpt "$T/lm-cuda/last.safetensors" --words 6 --seed 5 < "$T/gen-prompts.txt" \
      > "$T/gen-cpu.out" 2>&1 &&
    [ "$(grep -c . "$T/gen-cpu.out")" -ge 1 ] && cmp -s "$T/gen-gpu.out" "$T/gen-cpu.out" && ok ||
    bad "generate --device cuda: $(diff "$T/gen-gpu.out" "$T/gen-cpu.out" 2>&1 | head -5)"
  # CUDA graphs: the same run, the same losses and accuracies to the bit
  # cuda:0 is the GPU that cuda takes: the same run, the same metrics
  "$AG" train --device cuda:0 "${SMALL[@]}" --max-steps 3 --out "$T/cuda0" >/dev/null 2>&1 &&
    cmp -s <(cut -d, -f1-8 "$T/cuda/metrics.csv") <(cut -d, -f1-8 "$T/cuda0/metrics.csv") && ok ||
    bad "--device cuda:0: the run failed or differs from --device cuda's"
  "$AG" train --device cuda --cuda-graphs "${SMALL[@]}" --max-steps 3 --out "$T/cuda-graphs" >/dev/null 2>&1 &&
    cmp -s <(cut -d, -f1-8 "$T/cuda/metrics.csv" 2>/dev/null) <(cut -d, -f1-8 "$T/cuda-graphs/metrics.csv" 2>/dev/null) && ok ||
    bad "--cuda-graphs: the run failed or its training losses differ from the eager run's"
else
  [ "$rc" -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && grep -q '^attngrad train: --device cuda: ' <<<"$out" && ok ||
    bad "--device cuda without a usable GPU: exit $rc, want 1 and one line: $out"
fi
# CI's CUDA-emulator build runs this script for the --device checks above; the rest is the same C as the
# release and sanitizer builds', which run all of it
if [ -n "${AG_CLI_DEVICE_ONLY:-}" ]; then summary; exit; fi
# --detect-anomaly: the first op that makes an inf or NaN stops the run, named with its shapes and model line
expect 1 '^attngrad: ag_[a-z_]+: anomaly mode: .* holds (-?inf|nan) at element [0-9]+.* \(at [^ ]*models/mpsan\.c:[0-9]+\)$' \
  "$AG" train "${SMALL[@]}" --optim sgd:lr=1e30 --detect-anomaly --out "$T/anomaly"
[ ! -e "$T/anomaly/last.safetensors" ] && ok || bad "--detect-anomaly: a checkpoint of the broken state"
# a line too long for the memory the process may take (20,000 words: a 1.6 GB attention map under a 1.5 GB
# ulimit -v; --max-line-words 0 lets it reach the model) fails alone and the next line is predicted; sanitizer
# builds reserve terabytes of address space, which no ulimit -v allows
if ! nm -u "$AG" 2>/dev/null | grep -q __asan_init; then
  { echo 'w1 A w2 B'; yes w1 | head -n 20000 | tr '\n' ' '; echo; echo 'B w3 w4 w5 A w6'; } > "$T/long-line.txt"
  out=$(ulimit -v 1500000; AG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$AG" predict --ckpt "$T/run/best.safetensors" --max-line-words 0 < "$T/long-line.txt" 2>"$T/long-line.err"); rc=$?
  [ "$rc" -eq 1 ] && ok || bad "predict of a line too long for memory: exit $rc, want 1"
  [ "$(printf '%s\n' "$out" | wc -l)" -eq 3 ] && printf '%s\n' "$out" | sed -n 2p | grep -q '^$' &&
    printf '%s\n' "$out" | sed -n 3p | grep -Eq '^[0-3]'$'\t' && ok || bad "predict after a refused line: got '$out'"
  grep -q '^attngrad predict: stdin:2: arena: .*too large' "$T/long-line.err" && ok ||
    bad "predict of a line too long: $(cat "$T/long-line.err")"
fi
expect 1 'attngrad predict: stdin: read error after line 0' sh -c "'$AG' predict --ckpt '$T/run/best.safetensors' < '$T'"
# a checkpoint whose config is wrong, or data with more classes than the model: the message names the files
mkdir "$T/badcfg" && cp "$T/run/vocab.txt" "$T/badcfg/"
LC_ALL=C sed -E 's/(\\u000a|\\n)vocab=/\1state./' "$T/run/best.safetensors" > "$T/badcfg/novocab.safetensors" # a skipped key
LC_ALL=C sed -E 's/"config":"model=mpsan/"config":"model=poslm/' "$T/run/best.safetensors" > "$T/badcfg/poslm.safetensors"
for f in novocab poslm; do
  cmp -s "$T/run/best.safetensors" "$T/badcfg/$f.safetensors" && bad "$f.safetensors: the config edit did not apply" || ok
  # as edited, the file's seal (its whole-file checksum) refuses it; sealed again, the config's own checks speak
  expect 1 "$f.safetensors: the file was changed after it was written" "$AG" eval --ckpt "$T/badcfg/$f.safetensors"
  python3 "$(dirname "$0")/st_edit.py" reseal "$T/badcfg/$f.safetensors" "$T/badcfg/$f.safetensors"
done
expect 1 'novocab.safetensors: its .config. metadata has no vocab entry' "$AG" eval --ckpt "$T/badcfg/novocab.safetensors"
expect 1 'poslm.safetensors: bad .config. metadata: model poslm has no head for the classify task' "$AG" eval --ckpt "$T/badcfg/poslm.safetensors"
# another vocab.txt of the same size (two words swapped): refused, not read with the wrong ids
mkdir "$T/swapped" && cp "$T/run/best.safetensors" "$T/swapped/"
awk 'NR == 3 { third = $0; next } NR == 4 { print; print third; next } { print }' "$T/run/vocab.txt" > "$T/swapped/vocab.txt"
expect 1 'swapped/vocab.txt is not the vocabulary .* was trained with' "$AG" eval --ckpt "$T/swapped/best.safetensors"
for i in 0 1 2 3 4 5 6 7 8 9; do echo "$i w1 A w2 B"; done > "$T/ten.txt"
expect 1 "data $T/ten.txt has 10 classes, but the model in $T/run/best.safetensors knows 4" "$AG" eval --ckpt "$T/run/best.safetensors" --data "$T/ten.txt"

# ---- resume == uninterrupted ----
"$AG" train "${SMALL[@]}" --epochs 3 --out "$T/full" >/dev/null 2>&1
expect 0 'limit reached' "$AG" train "${SMALL[@]}" --epochs 3 --max-steps 11 --out "$T/cut"
expect 1 'already holds a run.*--resume' "$AG" train "${SMALL[@]}" --out "$T/cut"
expect 0 'done in .* 3 epochs, 24 steps' "$AG" train --resume --out "$T/cut" --progress none
"$TT" compare "$T/full/last.safetensors" "$T/cut/last.safetensors" && ok || bad "resumed run differs from the uninterrupted one"
expect 2 'needs --out' "$AG" train --resume
# a run stopped early goes on when resumed with a larger --patience, as if it had had it from the start
expect 0 'done in .* 2 epochs, 16 steps' "$AG" train "${SMALL[@]}" --epochs 6 --patience 1 --out "$T/pat"
expect 0 'done in .* 2 epochs, 16 steps' "$AG" train --resume --out "$T/pat" --progress none
expect 0 'done in .* 6 epochs, 48 steps' "$AG" train --resume --out "$T/pat" --patience 10 --progress none
expect 0 'done in .* 6 epochs, 48 steps' "$AG" train "${SMALL[@]}" --epochs 6 --patience 10 --out "$T/pat-full"
"$TT" compare "$T/pat-full/last.safetensors" "$T/pat/last.safetensors" && ok || bad "a run resumed with a larger patience differs from one that had it from the start"

# ---- gradcheck and dump-step of every registered model ----
for m in $models; do
  expect 0 'PASS' "$AG" gradcheck --model "$m"
  expect 0 'wrote' "$AG" dump-step --model "$m" --out "$T/dump-$m.safetensors"
  "$TT" verify-dump "$T/dump-$m.safetensors" "$m" >/dev/null && ok || bad "dump-step of $m does not reload bit-exactly"
done
# a random batch of the user's size (more rows, lengths 1 to N) for the check too
expect 0 'PASS' "$AG" gradcheck --model mpsan --batch 4 --len 6
# every model trains a few steps on its generated task (LM: lookup, pairs with
# --task pair), and its checkpoint evaluates and predicts
TINY=(--synth-n 64 --dim 12 --hidden 8 --fixed-len 24 --batch 16 --epochs 1 --max-steps 3 --progress none)
for m in $models; do
  expect 0 'stopped in|done in' "$AG" train --model "$m" "${TINY[@]}" --out "$T/m-$m"
  expect 0 '^test +(accuracy|perplexity) ' "$AG" eval --ckpt "$T/m-$m/best.safetensors"
  expect 0 '^([0-9]+'$'\t''|ppl )' sh -c "echo 'w1 A w2 B' | '$AG' predict --ckpt '$T/m-$m/best.safetensors'"
done
if grep -qx ms_san <<<"$models"; then
  expect 0 'synth-pair' "$AG" train --model ms_san --task pair "${TINY[@]}" --out "$T/pair"
  expect 0 '^(NEUTRAL|ENTAILMENT|CONTRADICTION)'$'\t' sh -c "printf 'w1 w2 w3\tw2 w3\n' | '$AG' predict --ckpt '$T/pair/best.safetensors'"
  expect 1 'two sentences separated by a tab' sh -c "echo 'w1 w2' | '$AG' predict --ckpt '$T/pair/best.safetensors'"
fi
# relatedness (MPSAN's SICK head) on the generated pairs' scores: train, eval, predict a score
expect 0 'mpsan on synth-pair: .*relatedness scores 1-5' "$AG" train --task relatedness "${TINY[@]}" --out "$T/rel"
expect 0 '^dev pearson r -?[0-9.]+, spearman rho -?[0-9.]+, mse [0-9.]+; test pearson r' "$AG" train --task relatedness "${TINY[@]}" --out "$T/rel" --force
head -1 "$T/rel/metrics.csv" | grep -q '^epoch,step,lr,train_loss,dev_loss,dev_pearson,dev_spearman,dev_mse,test_loss,test_pearson,test_spearman,test_mse,' &&
  ok || bad "relatedness metrics.csv header: $(head -1 "$T/rel/metrics.csv")"
grep -q '"dev":{"loss":[0-9.e-]*,"pearson":' "$T/rel/metrics.jsonl" && ok || bad "relatedness metrics.jsonl"
expect 0 '^test +pearson -?[0-9.]+  spearman -?[0-9.]+  mse [0-9.]+  loss [0-9.]+  \(16 examples\)' "$AG" eval --ckpt "$T/rel/best.safetensors"
expect 0 '^[1-5]\.[0-9]{4}'$'\t''[0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+$' sh -c "printf 'w1 w2 w3\tw2 w3\n' | '$AG' predict --ckpt '$T/rel/best.safetensors'"
expect 1 'two sentences separated by a tab' sh -c "echo 'w1 w2' | '$AG' predict --ckpt '$T/rel/best.safetensors'"
expect 1 'stdin:1: more than one tab' sh -c "printf 'w1 w2\tw2\tw3\n' | '$AG' predict --ckpt '$T/rel/best.safetensors'"
expect 0 'PASS' "$AG" gradcheck --model mpsan --task relatedness
expect 0 'wrote' "$AG" dump-step --model mpsan --task relatedness --out "$T/dump-rel.safetensors"
"$TT" verify-dump "$T/dump-rel.safetensors" mpsan "" relatedness >/dev/null && ok || bad "dump-step of mpsan/relatedness"
# a task without a head is refused, not run on sentence A alone
expect 1 'model mpsan has no head for the pair task \(it does: classify, relatedness\)' "$AG" train --task pair "${TINY[@]}" --out "$T/refused"
expect 1 "poslm: without attention the tied decoder reads h_t, so hidden \(8\) must equal dim \(16\)" "$AG" train --model poslm --attention none --dim 16 --hidden 8 --max-steps 1 --progress none --out "$T/bad-lm"
expect 1 "mtsa: heads = 3, want an even number" "$AG" train --model mtsa --heads 3 --dim 16 --hidden 8 --max-steps 1 --progress none --out "$T/bad-mtsa"
# ms_san's 6 heads are its structure (one per direction and distance prior): --heads cannot change them
expect 1 "ms_san: heads = 4, but MS-SAN has 6 heads" "$AG" train --model ms_san --heads 4 --dim 12 --synth-n 64 --max-steps 1 --progress none --out "$T/bad-ms"
expect 1 "ms_san: dim = 8 must be a multiple of its 6 heads" "$AG" train --model ms_san --dim 8 --synth-n 64 --max-steps 1 --progress none --out "$T/bad-ms2"
expect 1 "ms_san: dim = 8 must be a multiple of its 6 heads" "$AG" dump-step --model ms_san --dim 8 --out "$T/bad-ms.safetensors"
[ ! -e "$T/bad-ms" ] && [ ! -e "$T/bad-ms2" ] && ok || bad "a run that failed to start left its empty run folder"
# --fold on a CV folder without its data file says that, not "not a cross-validation data set"
mkdir -p "$T/cr" && echo "1 fine" > "$T/cr/custrev.pos"
expect 1 "cr: no cr data here \\(looked for .*custrev.all\\)" "$AG" train --data "$T/cr" --fold 1 --out "$T/cr-run"
# a dev share that rounds to no example says so
expect 1 'ten.txt: 10 examples at --dev-frac 0.001 leave 0 for dev' "$AG" train --data "$T/ten.txt" --dev-frac 0.001 --dim 8 --max-steps 1 --progress none --out "$T/df"
# a cross-validation run stopped early resumes every fold, each against its own vocabulary
for i in $(seq 30); do echo "$((i % 2)) word$i good$((i % 7)) bad$((i % 5)) w$((i % 3))"; done > "$T/cr/custrev.all"
expect 0 'limit reached' "$AG" train --data "$T/cr" --folds 3 --dim 8 --max-steps 2 --progress none --out "$T/cv"
expect 0 'stopped in .*: 4 epochs, 12 steps' "$AG" train --resume --out "$T/cv" --max-steps 4 --progress none
# a benchmark's files in a folder of any name, named by --dataset; the message names both places it looked
mkdir -p "$T/my-cr" && cp "$T/cr/custrev.all" "$T/my-cr/"
expect 0 'mpsan on cr: 18 train / 2 dev / 10 test' "$AG" train --data "$T/my-cr" --dataset cr --folds 3 --dim 8 --max-steps 1 --progress none --out "$T/my-cv"
expect 1 "my-cr: no trec data here \\(looked for .*my-cr/trec/TREC.train.all and .*my-cr/TREC.train.all\\)" "$AG" train --data "$T/my-cr" --dataset trec --out "$T/my-trec"
# --dataset names a folder's data set: train refuses it where the run would not read it (a file, no
# --data), naming the option, instead of training without it; eval still reads a config holding it
for i in $(seq 40); do echo "$((i % 2)) w$((i % 3)) A w$((i % 5)) B"; done > "$T/forty.txt"
expect 1 "option --dataset trec: --data .*forty.txt is a file, which would be read without it" \
  "$AG" train --data "$T/forty.txt" --dataset trec --out "$T/ds-file"
[ ! -e "$T/ds-file" ] && ok || bad "a refused --dataset left a run folder"
expect 1 "option --dataset sst2: there is no --data, so the data would be the generated task" \
  "$AG" train --dataset sst2 --out "$T/ds-none"
expect 0 'stopped in .* 1 steps' "$AG" train --dataset synth "${SMALL[@]}" --max-steps 1 --out "$T/ds-synth" # the generated task's name
if command -v python3 >/dev/null; then # a run saved with --dataset beside a file, before train refused it
  "$AG" train --data "$T/forty.txt" --dim 8 --batch 8 --epochs 1 --progress none --out "$T/ds-old" >/dev/null || bad "the file run failed"
  for f in best last; do python3 "$(dirname "$0")/st_edit.py" config "$T/ds-old/$f.safetensors" "$T/ds-old/$f.safetensors" dataset=trec; done
  expect 0 '^dev +accuracy' "$AG" eval --ckpt "$T/ds-old/best.safetensors"
  # given with new data on the command line, eval refuses it as train does, instead of scoring the file without it
  expect 2 "attngrad eval: option --dataset trec: --data .*forty.txt is a file, which would be read without it" \
    "$AG" eval --ckpt "$T/ds-old/best.safetensors" --data "$T/forty.txt" --dataset trec
  expect 0 '^dev +accuracy' "$AG" eval --ckpt "$T/ds-old/best.safetensors" --data "$T/forty.txt"
  expect 1 "option --dataset trec: --data .*forty.txt is a file.*\(on --resume, --dataset '' clears the run's own\)" \
    "$AG" train --resume --out "$T/ds-old" --epochs 2 --progress none
  expect 0 'done in' "$AG" train --resume --out "$T/ds-old" --epochs 2 --dataset '' --progress none
fi
expect 1 'model mtsa has no head for the relatedness task' "$AG" train --model mtsa --task relatedness "${TINY[@]}" --out "$T/refused"
expect 1 'no head for the relatedness task' "$AG" gradcheck --model poslm --task relatedness
expect 2 "option --task: 'regression': expected classify, pair, relatedness or lm" "$AG" train --task regression
expect 0 'PASS' "$AG64" gradcheck --model mpsan --flags elu_score
expect 0 'wrote' "$AG" dump-step --model mpsan --flags linear_dist --out "$T/dump-flag.safetensors"
"$TT" verify-dump "$T/dump-flag.safetensors" mpsan linear_dist >/dev/null && ok || bad "dump-step with flags"

# ---- the benchmarks, where AG_DATA_DIR names a folder of tools/get-data.sh's ----
D=${AG_DATA_DIR:-}
if [ -n "$D" ] && [ -d "$D/trec" ]; then
  B=(--dim 12 --hidden 8 --max-steps 2 --progress none)
  expect 0 'mpsan on trec: 4907 train / 545 dev / 500 test' "$AG" train --data "$D/trec" "${B[@]}" --out "$T/trec"
  expect 0 '^test +accuracy .*\(500 examples\)' "$AG" eval --ckpt "$T/trec/best.safetensors"
  expect 0 'mpsan on cr: .* 378 test' "$AG" train --data "$D" --dataset cr --fold 0 "${B[@]}" --out "$T/cr"
  expect 0 'ms_san on sick: 4500 train / 500 dev / 4927 test' "$AG" train --model ms_san --data "$D/sick" "${B[@]}" --out "$T/sick"
  expect 0 'mpsan on sick: 4500 train / 500 dev / 4927 test examples, vocab [0-9]+, relatedness scores 1-5' "$AG" train --data "$D/sick" "${B[@]}" --out "$T/sick-rel"
  expect 0 '^test +pearson .*\(4927 examples\)' "$AG" eval --ckpt "$T/sick-rel/best.safetensors"
  expect 1 'sick holds sentence pairs, but model mtsa does classification only' "$AG" train --model mtsa --data "$D/sick" "${B[@]}" --out "$T/sick-mtsa"
  expect 1 'ptb is language-model text' "$AG" train --data "$D/ptb" --out "$T/ptb"
  # WikiText-2's paragraphs are cut into sentences, as its LM paper trains them; --lm-split line keeps lines
  expect 0 'poslm on wikitext2: 83533 train / 8734 dev / 10112 test' "$AG" train --model poslm --data "$D/wikitext2" "${B[@]}" --max-steps 1 --out "$T/wt2"
  expect 0 'poslm on wikitext2: 23767 train / 2461 dev / 2891 test' "$AG" train --model poslm --data "$D/wikitext2" --lm-split line "${B[@]}" --max-steps 1 --out "$T/wt2-lines"
  expect 1 'add --dataset sst5 or --dataset sst2' "$AG" train --data "$D/sst" --out "$T/sst"
fi

# ---- LM text: a line an example, or (--lm-split sentence) a sentence an example ----
for i in $(seq 20); do echo " w$((i % 5)) saw w$((i % 3)) . then w$((i % 4)) left ! "; done > "$T/paras.txt"
expect 0 'poslm on paras.txt: 36 train / 4 dev' "$AG" train --model poslm --data "$T/paras.txt" --format lm --lm-split sentence --dim 8 --hidden 8 --max-steps 1 --progress none --out "$T/lm-sent"
expect 0 'poslm on paras.txt: 18 train / 2 dev' "$AG" train --model poslm --data "$T/paras.txt" --format lm --dim 8 --hidden 8 --max-steps 1 --progress none --out "$T/lm-line"
expect 0 '^test|^dev' "$AG" eval --ckpt "$T/lm-sent/best.safetensors"
# eval on a file of the user's scores all of it (the 40 sentences, as one "file" row, not a 10% dev share),
# read as LM text for an LM run without --format; a classifier's file likewise, whole
cp "$T/paras.txt" "$T/other.txt"
expect 0 '^file +perplexity [0-9.]+ .*\([0-9]+ tokens\)' "$AG" eval --ckpt "$T/lm-sent/best.safetensors" --data "$T/other.txt"
"$AG" eval --ckpt "$T/lm-sent/best.safetensors" --data "$T/other.txt" --format lm --lm-split sentence | grep -q '^dev' &&
  bad "eval of a file of the user's printed a dev row" || ok
# the run's own file named again keeps the run's dev split
expect 0 '^dev +perplexity' "$AG" eval --ckpt "$T/lm-sent/best.safetensors" --data "$T/paras.txt"
# a run on a folder named wikitext2 (sentences by the data set's rule, nothing recorded): eval on a
# file of the user's cuts it the same way, unless --lm-split says otherwise
mkdir -p "$T/wikitext2" && for f in train valid test; do cp "$T/paras.txt" "$T/wikitext2/$f.txt"; done
expect 0 'poslm on wikitext2: 40 train / 40 dev / 40 test' "$AG" train --model poslm --data "$T/wikitext2" --dim 8 --hidden 8 --max-steps 1 --progress none --out "$T/lm-wt2"
for split in "" sentence line; do
  "$AG" eval --ckpt "$T/lm-wt2/best.safetensors" --data "$T/paras.txt" --format lm ${split:+--lm-split $split} > "$T/ev-$split.txt" 2>&1 || bad "eval --lm-split '$split' failed: $(cat "$T/ev-$split.txt")"
done
cmp -s "$T/ev-.txt" "$T/ev-sentence.txt" && ! cmp -s "$T/ev-.txt" "$T/ev-line.txt" && ok ||
  bad "eval of a user's LM file does not follow the run's sentences: $(cat "$T/ev-.txt" "$T/ev-sentence.txt" "$T/ev-line.txt")"
# generate: a line of drawn words for every prompt line, the same again for the same --seed
printf 'w1 saw\n\nthen w2 . w3\n' > "$T/prompts.txt"
"$AG" generate --ckpt "$T/lm-sent/best.safetensors" --words 4 --seed 3 < "$T/prompts.txt" > "$T/gen1.txt" 2>"$T/gen.err" &&
  [ "$(wc -l < "$T/gen1.txt")" -eq 3 ] && [ -z "$(sed -n 2p "$T/gen1.txt")" ] &&
  awk 'NR != 2 && NF > 4 { exit 1 }' "$T/gen1.txt" && ok || bad "generate: not one line of at most 4 words per prompt line: $(cat "$T/gen1.txt" "$T/gen.err")"
"$AG" generate --ckpt "$T/lm-sent/best.safetensors" --words 4 --seed 3 < "$T/prompts.txt" > "$T/gen2.txt" 2>&1 &&
  cmp -s "$T/gen1.txt" "$T/gen2.txt" && ok || bad "generate --seed 3 drew differently twice"
expect 1 'generate continues text with a language model' sh -c "echo w1 | '$AG' generate --ckpt '$T/run/best.safetensors'"
expect 2 "option --temperature: .*-1" "$AG" generate --ckpt "$T/lm-sent/best.safetensors" --temperature -1
# --top-k 1 is the likeliest word, as --temperature 0; a nucleus of one word likewise (at T 1e-3 the likeliest
# takes all but ~0 of the mass); whatever --top-k K draws at a seed is among its K likeliest (checked in
# test_train's draw test); bad values are refused by name
"$AG" generate --ckpt "$T/lm-sent/best.safetensors" --words 4 --temperature 0 < "$T/prompts.txt" > "$T/gen-t0.txt" 2>&1 &&
  "$AG" generate --ckpt "$T/lm-sent/best.safetensors" --words 4 --top-k 1 --seed 9 < "$T/prompts.txt" > "$T/gen-k1.txt" 2>&1 &&
  "$AG" generate --ckpt "$T/lm-sent/best.safetensors" --words 4 --top-p 1e-9 --seed 9 < "$T/prompts.txt" > "$T/gen-p0.txt" 2>&1 &&
  cmp -s "$T/gen-t0.txt" "$T/gen-k1.txt" && cmp -s "$T/gen-t0.txt" "$T/gen-p0.txt" && ok ||
  bad "generate --top-k 1 / --top-p 1e-9 differ from --temperature 0: $(paste "$T/gen-t0.txt" "$T/gen-k1.txt" "$T/gen-p0.txt" | head -3)"
expect 2 "option --top-p: .*0" "$AG" generate --ckpt "$T/lm-sent/best.safetensors" --top-p 0
expect 2 "option --top-k: .*-2" "$AG" generate --ckpt "$T/lm-sent/best.safetensors" --top-k -2
expect 1 "stdin:1: binary data" sh -c "printf 'w1\001\n' | '$AG' generate --ckpt '$T/lm-sent/best.safetensors'"
expect 1 '--lm-split sentence: .*ten.txt is labeled data, not LM text' "$AG" train --data "$T/ten.txt" --lm-split sentence --out "$T/lm-bad"
expect 2 "option --lm-split: 'word': expected line or sentence" "$AG" train --lm-split word

# ---- bad data files ----
printf '0 a good line\nno label here\n' > "$T/nolabel.txt"
printf '0 a good line\n1\n' > "$T/empty.txt"
printf '0 a good line\n1 bin\001\002ary\n' > "$T/junk.txt"
head -c 3000 /dev/urandom > "$T/random.bin"
printf '\n\n' > "$T/blank.txt"
expect 1 'nolabel.txt:2: label' "$AG" train "${SMALL[@]}" --data "$T/nolabel.txt" --out "$T/e1"
expect 1 'empty.txt:2: empty sentence' "$AG" train "${SMALL[@]}" --data "$T/empty.txt" --out "$T/e2"
expect 1 'junk.txt:2: binary data' "$AG" train "${SMALL[@]}" --data "$T/junk.txt" --out "$T/e3"
expect 1 'random.bin:[0-9]+: ' "$AG" train "${SMALL[@]}" --data "$T/random.bin" --out "$T/e4"
expect 1 'blank.txt: no examples' "$AG" train "${SMALL[@]}" --data "$T/blank.txt" --out "$T/e5"
# labels number the classes from 0: a file labelled 1-2 (or with a stray large label) trains outputs no example
# has, said in the header rather than hidden in the class count
for i in $(seq 30); do echo "$((i % 2 + 1)) w$((i % 5)) w1"; done > "$T/labels12.txt"
expect 0 'note: 1 of the 3 classes has no training example \(the first: label 0\)' \
  "$AG" train "${SMALL[@]}" --data "$T/labels12.txt" --epochs 1 --out "$T/labels12"
out=$("$AG" train "${SMALL[@]}" --epochs 1 --out "$T/all-classes" 2>&1)
grep -q 'has no training example\|have no training example' <<<"$out" && bad "a note of empty classes on the generated task: $out" || ok
expect 1 'nothere.txt: no such file' "$AG" train --data "$T/nothere.txt" --out "$T/e6"
expect 1 'not a known benchmark folder' "$AG" train --data "$T" --out "$T/e7"

# ---- --max-len: a very long line is cut in training, eval and predict alike ----
{ for i in $(seq 60); do echo "$((i % 2)) w$((i % 5)) w$((i % 3)) w1"; done
  printf '1'; for i in $(seq 3000); do printf ' w%d' $((i % 7)); done; echo; } > "$T/long.txt"
out=$("$AG" train "${SMALL[@]}" --model ms_san --dim 12 --data "$T/long.txt" --max-len 8 --epochs 2 --out "$T/maxlen" 2>&1)
grep -q 'note: --max-len 8 cuts 1 sentences of train, dev and test (the longest as read: 3000 tokens)' <<<"$out" && ok || bad "--max-len note: $out"
dev=$(grep -Eo 'dev accuracy [0-9.]+%' <<<"$out" | tail -1 | grep -Eo '[0-9.]+%')
expect 0 "dev +accuracy $dev" "$AG" eval --ckpt "$T/maxlen/best.safetensors" --data "$T/long.txt"
expect 0 '^[01]'$'\t' sh -c "sed -n 61p '$T/long.txt' | cut -d' ' -f2- | '$AG' predict --ckpt '$T/maxlen/best.safetensors'"

# a line longer than --max-line-bytes (default 1 MiB) is refused before it is
# held in memory, or cut to its last whole word with --long-lines cut; the
# lines after it are predicted as usual
{ echo 'w1 A w2 B'; head -c 3000000 /dev/zero | tr '\0' 'w'; echo; echo 'B w3 A'; } > "$T/huge-line.txt"
out=$("$AG" predict --ckpt "$T/run/best.safetensors" < "$T/huge-line.txt" 2>"$T/huge-line.err"); rc=$?
[ "$rc" -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 3 ] && [ -z "$(printf '%s\n' "$out" | sed -n 2p)" ] &&
  printf '%s\n' "$out" | sed -n 3p | grep -Eq '^[0-3]'$'\t' && ok || bad "predict of a 3 MB line: exit $rc, output '$out'"
grep -q '^attngrad predict: stdin:2: line longer than 1048576 bytes (1951425 more): refused before reading it into memory' \
  "$T/huge-line.err" && ok || bad "predict of a 3 MB line: $(head -c 400 "$T/huge-line.err")"
out=$(printf 'w1 A w2 B w3 w4 w5\n' | "$AG" predict --ckpt "$T/run/best.safetensors" --max-line-bytes 12 --long-lines cut 2>&1); rc=$?
[ "$rc" -eq 0 ] && grep -q 'stdin:1: note: a line of more than 12 bytes, cut to its first 10 (--long-lines cut)' <<<"$out" &&
  grep -Eq '^[0-3]'$'\t' <<<"$out" && ok || bad "predict --long-lines cut: exit $rc: $out"
expect 1 'stdin:1: line longer than 12 bytes' sh -c "printf 'w1 A w2 B w3 w4 w5\n' | '$AG' predict --ckpt '$T/run/best.safetensors' --max-line-bytes 12"
expect 2 "option --long-lines: 'trim': expected refuse or cut" "$AG" predict --ckpt "$T/run/best.safetensors" --long-lines trim
{ for i in $(seq 40); do echo "$((i % 2)) w$((i % 5)) w1"; done; echo "1 $(head -c 300 /dev/zero | tr '\0' 'w')"; } > "$T/wide.txt"
expect 1 "wide.txt:41: line longer than 200 bytes \(--max-line-bytes N reads longer lines\)" \
  "$AG" train "${SMALL[@]}" --data "$T/wide.txt" --max-line-bytes 200 --out "$T/wide"

# a sentence too long for memory stops the run at its own width's warm-up
# step, before the full batch: the message must still name its file and line
{ for i in $(seq 60); do echo "$((i % 2)) w$((i % 5)) w$((i % 3)) w1"; done
  awk 'BEGIN { printf "1"; for (i = 1; i <= 400000; i++) printf " w%d", i % 7; print "" }'; } > "$T/huge.txt"
expect 1 "the longest sentence: $T/huge.txt line 61, 400000 tokens\); --max-len N cuts longer sentences" \
  "$AG" train "${SMALL[@]}" --data "$T/huge.txt" --max-line-bytes 4000000 --max-line-words 0 --out "$T/huge"

# diverged with every value finite: the summary, then the verdict on stderr and exit 1
expect 1 'the run diverged: its training loss ended at .* times its first step.s \([0-9.]+\); lower the learning rate \(--optim adam:lr=1e6\)' \
  "$AG" train "${SMALL[@]}" --epochs 3 --optim adam:lr=1e6 --out "$T/diverged"
[ -s "$T/diverged/best.safetensors" ] && ok || bad "a diverged run lost its checkpoints"

# text is bytes: a line that is not UTF-8 trains and predicts, with a note naming the first place
{ printf '0 caf\xe9 w1\n1 \xc0\xaf w2\n'; for i in $(seq 30); do echo "$((i % 2)) w$((i % 5)) w1"; done; } > "$T/latin1.txt"
expect 0 'note: 2 lines are not UTF-8, read as bytes \(the first: .*latin1.txt:1: byte 0xe9 at column 6\)' \
  "$AG" train "${SMALL[@]}" --data "$T/latin1.txt" --epochs 1 --out "$T/latin1"
expect 0 'stdin:1: note: not UTF-8 \(byte 0xff at column 4\), read as bytes' \
  sh -c "printf 'w1 \377\376 w2\nw1 w2\n' | '$AG' predict --ckpt '$T/latin1/best.safetensors'"

# the engine's threads for gradcheck and dump-step too: the same check at 1 thread
expect 0 'worst relative error .*: PASS' "$AG" gradcheck --model ms_san --threads 1

# gradcheck and dump-step on rows of chosen lengths: a one-word sentence, a pair's second sentence wider
# than the first (its own width), and the refusals
expect 0 'worst relative error .*: PASS' "$AG" gradcheck --model mpsan --lengths 5,1,3
expect 0 'worst relative error .*: PASS' "$AG" gradcheck --model ms_san --task pair --lengths 4,1,3 --lengths-b 1,5,2 --strict
expect 0 'wrote ' "$AG" dump-step --model poslm --lengths 1,6 --out "$T/dump-lengths.safetensors"
expect 2 "option --lengths: '5,x': expected 1 to 64 lengths in \[1, 4096\]" "$AG" gradcheck --model mpsan --lengths 5,x
expect 2 "option --lengths: '0,3'" "$AG" gradcheck --model mpsan --lengths 0,3
expect 1 '--lengths-b gives 1 lengths for the 2 rows of --lengths' "$AG" gradcheck --model ms_san --task pair --lengths 4,1 --lengths-b 1

# gradcheck's second pass, every parameter drawn from U(-1, 1): MPSAN's query
# vectors unit*.v reach a softmax over keys only through the tanh's curvature,
# so at the init their gradients (~1e-10) are too small for finite differences
# and any value would pass ("ok, weak"); drawn wide, each is resolved ("ok",
# |g| >= 1e-6), and no parameter is left weak
"$AG" gradcheck --model mpsan >"$T/gc-mpsan.txt" 2>&1
if grep -q ': PASS$' "$T/gc-mpsan.txt" && ! grep -q 'weak in the last pass' "$T/gc-mpsan.txt" &&
   awk '/^ at the model.s init:/ { pass = 1 } /^ every parameter drawn from U\(-1, 1\)/ { pass = 2 }
        $1 ~ /^unit[0-3]\.v$/ { if (pass == 1 && / ok, weak$/) init++; if (pass == 2 && / ok$/ && $10 + 0 >= 1e-6) wide++ }
        END { exit !(init == 4 && wide == 4) }' "$T/gc-mpsan.txt"; then ok; else
  bad "gradcheck --model mpsan: want unit0-3.v weak at the init and resolved drawn wide"; tail -n 20 "$T/gc-mpsan.txt" >&2
fi
expect 0 'wrote ' "$AG" dump-step --model mtsa --threads 1 --out "$T/dump-1t.safetensors"

# ---- bad options and checkpoints ----
expect 2 "option --model: 'nope': unknown model" "$AG" train --model nope
expect 2 "option --optim: .*lr" "$AG" train --optim adam:lr=fast
expect 2 "option --optim: .adam:ema=0.9,swa=10.: optimizer .adam.: ema=0.9 and swa=10: one average at a time" "$AG" train --optim adam:ema=0.9,swa=10
expect 2 "option --sched: .*factor" "$AG" train --sched plateau:factor=7
expect 2 "option --dim: -3 is out of range" "$AG" train --dim -3
expect 2 "option --epochs: 'many' is not an integer" "$AG" train --epochs many
expect 2 "option --epochs needs a value" "$AG" train --epochs
expect 2 "option --profile: -1 is out of range" "$AG" train --profile -1
expect 2 "option --profile: 'x' is not an integer" "$AG" train --profile x
expect 2 "unknown flag 'shiny'" "$AG" gradcheck --model mpsan --flags shiny
expect 1 "model mtsa does not read flag strict \\(its flags: exp_score\\)" "$AG" train "${SMALL[@]}" --model mtsa --flags strict --out "$T/foreign-flag"
[ ! -e "$T/foreign-flag" ] && ok || bad "a refused flag left a run folder"
expect 1 "'bigram.weight' \\[2000000000,65536\\] would take .* GiB" "$AG" train "${SMALL[@]}" --model dual_axial --dim 65536 --bigrams 2000000000 --out "$T/too-big"
[ ! -e "$T/too-big" ] && ok || bad "a model too big for memory left a run folder"
expect 2 "unknown option --bogus" "$AG" train --bogus 1
# the last --out is the run resumed, with its own options: they were read from the first, so run B went on with
# run A's L2
"$AG" train "${SMALL[@]}" --epochs 1 --l2 0.5 --out "$T/resume-a" >/dev/null 2>&1 &&
  "$AG" train "${SMALL[@]}" --epochs 1 --l2 0.25 --out "$T/resume-b" >/dev/null 2>&1 || bad "the runs to resume failed"
expect 0 'l2 0\.25, (no clipping|clip [0-9.e-]+), schedule' "$AG" train --resume --out "$T/resume-a" --out "$T/resume-b" --epochs 2
# another model cannot go on from a run: said so, not as that model's check of the run's sizes
expect 2 "option --model: 'mtsa', but the run in $T/resume-b is mpsan: --resume goes on with its own model" \
  "$AG" train --resume --out "$T/resume-b" --model mtsa --epochs 3
# nor another size or variant of its model (the checkpoint's tensors would not fit)
expect 2 "option --dim: '24', but the run has '[0-9]+' in $T/resume-b: --resume goes on with the run's own model" \
  "$AG" train --resume --out "$T/resume-b" --dim 24 --epochs 3
expect 2 "option --flags: 'elu_score', but the run has '' in $T/resume-b" "$AG" train --resume --out "$T/resume-b" \
  --flags elu_score --epochs 3
expect 0 'done in' "$AG" train --resume --out "$T/resume-b" --model mpsan --epochs 3
expect 1 "training diverged at step [0-9]+: the training loss is (-?nan|-?inf); lower the learning rate \(now 1e\+09, --optim sgd\)" "$AG" train "${SMALL[@]}" --optim sgd:lr=1e9 --out "$T/nan"
expect 1 "not a cross-validation data set" "$AG" train "${SMALL[@]}" --fold 3 --out "$T/fold"
expect 2 "takes no option --epochs" "$AG" eval --ckpt "$T/run/best.safetensors" --epochs 2
expect 2 "unknown command 'fly'" "$AG" fly
expect 2 "--ckpt FILE is required" "$AG" eval
expect 2 "--out FILE is required" "$AG" dump-step --model mpsan
head -c 200 /dev/urandom > "$T/corrupt.safetensors"
expect 1 "corrupt.safetensors: " "$AG" eval --ckpt "$T/corrupt.safetensors"
head -c 1000 "$T/run/best.safetensors" > "$T/cut.safetensors"
expect 1 "cut.safetensors: " "$AG" predict --ckpt "$T/cut.safetensors"
expect 1 "nothing.safetensors: cannot open" "$AG" eval --ckpt "$T/nothing.safetensors"

summary
