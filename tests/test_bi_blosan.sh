#!/usr/bin/env bash
# test_bi_blosan.sh - the plugin model of examples/bi_blosan.c (Bi-BloSAN, Shen et al. 2018): attngrad gradcheck
# (f64, in attngrad-f64 with bi_blosan-f64.so) on the tiny batch (lengths 5 and 3) at the automatic block length
# and at 1, 2 and 4 (padded blocks, blocks longer than a sentence), on a CoNLL-U batch of lengths 5, 1 and 3 (a
# length-1 sentence) and on a random padded batch; bad block lengths refused by name; a short training run on the
# generated task, checked on its run folder's metrics.csv (the training loss falls by half, dev accuracy well
# above the 25% of a bag of words); eval rebuilds the model, its block length included, from the checkpoint.
# (tests/test_bi_blosan_model.c checks its gradients in depth and its memory.)
#
#   tests/test_bi_blosan.sh attngrad bi_blosan.so
set -u
AG=$1 P=$2
[ -x "$AG" ] && [ -f "$P" ] || { echo "usage: $0 attngrad bi_blosan.so"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_bi_blosan

expect 0 '^\(bi_blosan: --hparams block\)$' "$AG" --plugin "$P" models
for hp in block=0 block=1 block=2 block=4; do
  expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model bi_blosan --hparams $hp
done
expect 1 "bi_blosan: --hparams block=2.5: want a whole number" "$AG" --plugin "$P" gradcheck --model bi_blosan --hparams block=2.5
expect 1 "bi_blosan: --hparams block=-1: want a whole number" "$AG" --plugin "$P" gradcheck --model bi_blosan --hparams block=-1
printf '%s\n' "1	the	_	_	_	_	2	_	_	_" "2	cat	_	_	_	_	3	_	_	_" "3	sat	_	_	_	_	0	_	_	_" \
  "4	on	_	_	_	_	5	_	_	_" "5	mats	_	_	_	_	3	_	_	_" "" "1	hi	_	_	_	_	0	_	_	_" "" \
  "1	a	_	_	_	_	2	_	_	_" "2	dog	_	_	_	_	3	_	_	_" "3	ran	_	_	_	_	0	_	_	_" "" > "$T/batch.conllu"
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model bi_blosan --hparams block=2 --parses "$T/batch.conllu"
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model bi_blosan --parses "$T/batch.conllu"
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model bi_blosan --batch 4 --len 11

# it learns the generated order task: judged on the run's own record, metrics.csv, by column name
"$AG" --plugin "$P" train --model bi_blosan --dim 16 --hidden 16 --keep 1 --optim adam:lr=3e-3 --hparams block=3 \
  --synth-n 800 --epochs 10 --progress none --out "$T/run" >"$T/train.log" 2>&1 || bad "train: $(tail -n 3 "$T/train.log")"
col() { awk -F, -v name="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next } c { print $c }' "$T/run/metrics.csv"; }
first=$(col train_loss | head -n 1) last=$(col train_loss | tail -n 1) best=$(col dev_acc | sort -g | tail -n 1)
if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN { exit !($last < 0.5 * $first) }"; then ok
else bad "the training loss did not halve: metrics.csv train_loss $first -> $last"; fi
if [ -n "$best" ] && awk "BEGIN { exit !($best >= 0.6) }"; then ok
else bad "best dev accuracy '$best' (a bag of words: 0.25)"; fi
# the block length is part of the run: eval rebuilds it (block=3 is in the checkpoint's config) and scores again
grep -aq 'hparams=block=3' "$T/run/best.safetensors" && ok || bad "the checkpoint's config holds no hparams=block=3"
expect 0 'test +accuracy' "$AG" --plugin "$P" eval --ckpt "$T/run/best.safetensors"
# without block=, a run's --max-len sets the block length: eval scores the same one sentence at a time as in
# batches (the blocks followed each batch's width, and the scores its batching: a 3-word sentence alone took
# blocks of 2, beside a 16-word one blocks of 4)
for i in $(seq 60); do
  if [ $((i % 2)) = 0 ]; then echo "$((i % 3 % 2)) a$((i % 5)) b$((i % 7)) c"
  else echo "$((i % 3 % 2)) $(for k in $(seq 16); do printf 'w%d ' $(((i * k) % 9)); done)"; fi
done >"$T/mixed.txt"
"$AG" --plugin "$P" train --model bi_blosan --data "$T/mixed.txt" --dev-frac 0.5 --dim 8 --hidden 8 --keep 1 \
  --max-len 30 --max-steps 10 --progress none --out "$T/ml" >"$T/ml.log" 2>&1 || bad "train --max-len: $(tail -n 3 "$T/ml.log")"
one=$("$AG" --plugin "$P" eval --ckpt "$T/ml/best.safetensors" --batch 1 2>&1 | grep '^dev')
all=$("$AG" --plugin "$P" eval --ckpt "$T/ml/best.safetensors" --batch 100 2>&1 | grep '^dev')
[ -n "$one" ] && [ "$one" = "$all" ] && ok || bad "eval depends on the batch under --max-len: '$one' against '$all'"
summary
