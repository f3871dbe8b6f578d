#!/usr/bin/env bash
# test_optim_model.sh - optim_experiments on a registered model (--model):
# two optimizers on MPSAN at a tiny size for a few steps write the per-step
# and per-epoch CSV files and the three SVG plots; both runs start from the
# same parameters on the same batches (equal first loss and epoch-0 dev loss)
# and then differ; the LM reports perplexity; bad option mixes are refused.
#
#   tests/test_optim_model.sh build/tools/optim_experiments
set -u
OX=$1
[ -x "$OX" ] || { echo "usage: $0 optim_experiments"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_optim_model

# pretrained vectors are train's: refused by name, never taken and ignored
expect 2 "--embeddings is train's: every optimizer here starts from the same random initialisation" \
  "$OX" --model mpsan --embeddings /nonexistent.txt --out "$T/emb"
expect 2 "--freeze-embeddings is train's" "$OX" --model mpsan --freeze-embeddings --out "$T/emb"
# so are parameter groups: a train option --model would otherwise take and no run here read
expect 2 "--param-group is train's" "$OX" --model mpsan --param-group 'embed.*:lr_scale=0' --out "$T/emb"
expect 2 "--param-group is train's" "$OX" --param-group 'embed.*:lr_scale=0' --out "$T/emb"

# 200 examples in batches of 25: 8 steps per epoch, 2 epochs
expect 0 'model mpsan on synth-order: .* 200 train / 50 dev' "$OX" --model mpsan --dim 8 --synth-n 200 --batch 25 \
  --epochs 2 --optim sgd:lr=0.1 --optim adam:lr=1e-3 --out "$T/o"
for f in o_steps.csv o_epochs.csv o_loss.svg o_val_loss.svg o_accuracy.svg; do
  [ -s "$T/$f" ] && ok || bad "no $T/$f"
done
for f in "$T"/o_*.svg; do
  [ "$(head -c 4 "$f")" = "<svg" ] && [ "$(tail -n 1 "$f")" = "</svg>" ] && ok || bad "$f: not a complete SVG"
done
grep -q 'Training loss (mpsan on synth-order' "$T/o_loss.svg" && ok || bad "the loss plot does not name the model"
[ "$(head -n 1 "$T/o_steps.csv")" = "optimizer,step,epoch,lr,loss" ] && ok || bad "steps.csv header"
[ "$(wc -l < "$T/o_steps.csv")" -eq 33 ] && ok || bad "steps.csv: want a header and 2 x 16 steps"
[ "$(head -n 1 "$T/o_epochs.csv")" = "optimizer,epoch,step,lr,train_loss,val_loss,val_accuracy,seconds" ] && ok ||
  bad "epochs.csv header"
[ "$(wc -l < "$T/o_epochs.csv")" -eq 7 ] && ok || bad "epochs.csv: want a header and 2 x 3 epochs (0 = untrained)"
# same start: step 1's loss and the untrained dev loss agree across optimizers; then they differ
first=$(awk -F, '$(NF-3) == 1 && $(NF-2) == 1 { print $NF }' "$T/o_steps.csv" | sort -u | wc -l)
[ "$first" -eq 1 ] && ok || bad "the first step's loss differs between optimizers: not the same start"
dev0=$(awk -F, 'NR > 1 && $(NF-6) == 0 { print $(NF-2) }' "$T/o_epochs.csv" | sort -u | wc -l)
[ "$dev0" -eq 1 ] && ok || bad "the untrained dev loss differs between optimizers"
last=$(awk -F, '$(NF-3) == 16 { print $NF }' "$T/o_steps.csv" | sort -u | wc -l)
[ "$last" -eq 2 ] && ok || bad "after 16 steps sgd and adam should differ"
# the same command again gives the same numbers, bit for bit (seconds aside)
"$OX" --model mpsan --dim 8 --synth-n 200 --batch 25 --epochs 2 --optim sgd:lr=0.1 --optim adam:lr=1e-3 \
  --out "$T/again" >/dev/null 2>&1
cmp -s "$T/o_steps.csv" "$T/again_steps.csv" && ok || bad "a second run gives other step losses"

# the LM: perplexity per epoch
expect 0 'wrote .*lm_perplexity\.svg' "$OX" --model poslm --dim 8 --hidden 8 --synth-n 64 --batch 16 --epochs 1 \
  --optim adam:lr=3e-3 --out "$T/lm"
head -n 1 "$T/lm_epochs.csv" | grep -q 'val_perplexity' && ok || bad "LM epochs.csv has no val_perplexity column"
# relatedness (the task table once stopped at lm: an overread, then a segfault)
expect 0 'wrote .*rel_loss\.svg' "$OX" --model mpsan --task relatedness --dim 8 --synth-n 64 --batch 16 --epochs 1 --out "$T/rel"

# refused mixes
expect 2 'is an option of the MLP, not of --model mpsan' "$OX" --model mpsan --act relu
expect 2 "the MLP takes no option '--data'" "$OX" --data "$T/x.txt"
expect 2 "unknown or incomplete option '--max-steps'" "$OX" --model mpsan --max-steps 3
expect 2 "unknown model" "$OX" --model nope
# a two-valued option names both values
expect 2 "--denormals is flush or keep, got 'zero'" "$OX" --model mpsan --denormals zero
expect 2 "--act is tanh or relu, got 'gelu'" "$OX" --act gelu
expect 2 "--act is tanh or relu, got ''" "$OX" --act
expect 1 'nothere.txt' "$OX" --model mpsan --data "$T/nothere.txt" --out "$T/e"
# --dataset names a benchmark folder's data set: with a file, or no --data, it would be ignored (as train refuses it)
for i in $(seq 40); do echo "$((i % 2)) w$((i % 3)) A w$((i % 5)) B"; done > "$T/forty.txt"
expect 1 "option --dataset trec: --data .*forty.txt is a file, which would be read without it" \
  "$OX" --model mpsan --data "$T/forty.txt" --dataset trec --out "$T/e"
expect 1 "option --dataset sst2: there is no --data" "$OX" --model mpsan --dataset sst2 --out "$T/e"

# the output files: an empty prefix is refused (it wrote _steps.csv into the current folder), and a file that
# cannot be written or filled is named with the reason (the MLP: nothing to load first)
MLP=(--train 64 --val 32 --epochs 1 --optim sgd:lr=0.1)
ox_abs=$(realpath "$OX")
pushd "$T" >/dev/null  # where a regression would write _steps.csv
expect 2 "--out needs a file prefix, got ''" "$ox_abs" "${MLP[@]}" --out ''
popd >/dev/null
expect 1 "cannot write $T/nodir/o_steps\.csv: No such file or directory" "$OX" "${MLP[@]}" --out "$T/nodir/o"
if [ -w /dev/full ]; then
  ln -s /dev/full "$T/full_epochs.csv"
  expect 1 "cannot write $T/full_epochs\.csv: No space left on device" "$OX" "${MLP[@]}" --out "$T/full"
fi
# an optimizer that diverges is reported as diverged, with what was not finite, and the comparison goes on:
# a parameter that the update made infinite, and an LM whose validation perplexity overflows
expect 0 'adam:lr=1e300: diverged at step 1 \(the global parameter norm is [-a-z]+: parameter .* holds' "$OX" \
  --model mpsan --dim 8 --synth-n 200 --batch 25 --epochs 1 --optim adam:lr=1e300 --optim sgd:lr=0.1 --out "$T/div"
[ "$(grep -c '^"*sgd:lr=0.1"*,' "$T/div_steps.csv")" -eq 8 ] && ok || bad "sgd's steps after adam diverged: $(grep -c sgd "$T/div_steps.csv")"
expect 0 'sgd:lr=1e8: diverged at step 13 \(after epoch 1 the validation perplexity is inf' "$OX" --model poslm \
  --synth-n 400 --epochs 2 --optim sgd:lr=1e8 --optim sgd:lr=1 --out "$T/div-lm"
# --lr-steps: each step's rate is the schedule's times its factor, and the steps CSV has the rate used
# (a warm-up of 4 steps: adam's 1e-3 at a quarter, a half, ..., then cosine to 0 at step 16)
"$OX" --model mpsan --dim 8 --synth-n 200 --batch 25 --epochs 2 --optim adam:lr=1e-3 \
  --lr-steps cosine:warmup=4,total=16,min_ratio=0 --out "$T/cos" >/dev/null 2>&1 || bad "optim_experiments --lr-steps"
awk -F, 'NR == 2 && $4 == 0.00025 { a = 1 } NR == 5 && $4 == 0.001 { b = 1 } NR == 17 && $4 < 1e-5 { c = 1 }
  END { exit !(a && b && c) }' "$T/cos_steps.csv" && ok || bad "--lr-steps: the rates in cos_steps.csv: $(cut -d, -f4 "$T/cos_steps.csv" | tr '\n' ' ')"
# train's options that the tool would take and not apply are refused by name
expect 2 "--init is train's" "$OX" --model mpsan --init "$T/x.safetensors" --out "$T/e"
expect 2 "--profile is train's" "$OX" --model mpsan --profile 3 --out "$T/e"
# plateau:mode=max watches the validation accuracy: after each epoch the rate is halved exactly when the
# accuracy did not rise past the best so far (threshold 1e-4 relative, patience 0), as attngrad train does
"$OX" --model mpsan --dim 8 --synth-n 200 --batch 25 --epochs 5 --optim adam:lr=3e-3 \
  --sched plateau:mode=max,factor=0.5,patience=0 --out "$T/pmax" >/dev/null 2>&1 || bad "optim_experiments plateau max"
awk -F, 'NR > 2 { if (NR > 3) { want = better ? lr : lr / 2; if ($4 < 0.999 * want || $4 > 1.001 * want) bad = 1 }
  lr = $4; better = ($7 > best * 1.0001); if (better) best = $7 }
  NR == 2 { best = -1 } END { exit bad }' "$T/pmax_epochs.csv" && ok ||
  bad "plateau:mode=max: the rates do not follow the accuracy: $(cut -d, -f2,4,7 "$T/pmax_epochs.csv" | tr '\n' ' ')"
# sizes too big for memory end with a message, not a crash (skipped where the kernel grants any size)
if [ "$(cat /proc/sys/vm/overcommit_memory 2>/dev/null)" != 1 ]; then
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1" \
    expect 1 'out of memory allocating' "$OX" --train 100000000 --dim 100000 --epochs 1 --out "$T/big"
fi

summary
