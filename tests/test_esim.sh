#!/usr/bin/env bash
# test_esim.sh - the plugin model of examples/esim.c (ESIM, Chen et al. 2017) on the sentence-pair task: attngrad
# gradcheck (f64, in attngrad-f64 with esim-f64.so) on the tiny pair batch, on random padded pair batches (sentence
# b of its own lengths and width) and on a CoNLL-U batch holding a length-1 sentence, each passing with no
# parameter weak in the pass with parameters drawn wide; a short training run on the generated pair task, judged on
# its run folder's metrics.csv (the training loss falls by half, and dev accuracy passes the 2/3 that an order-free
# model such as decomposable attention cannot pass there); its alignment heatmap; eval from the checkpoint.
# (tests/test_esim_pairs.c checks pairs with a length-1 sentence on either side, and padding invariance.)
#
#   tests/test_esim.sh attngrad esim.so
set -u
AG=$1 P=$2
[ -x "$AG" ] && [ -f "$P" ] || { echo "usage: $0 attngrad esim.so"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_esim

# PASS, and no parameter left weak (|g| under 1e-6) once every parameter is drawn from U(-1, 1)
gradcheck() {
  local out rc
  out=$("$AG" --plugin "$P" gradcheck --model esim "$@" 2>&1); rc=$?
  if [ "$rc" -eq 0 ] && grep -q 'worst relative error .*: PASS$' <<<"$out" && ! grep -q 'weak in the last pass' <<<"$out" &&
     awk '/^ every parameter drawn from U\(-1, 1\)/ { wide = 1; next } wide && / ok$/ { n++ } wide && /weak$/ { w++ }
          END { exit !(n == 23 && w == 0) }' <<<"$out"; then ok
  else bad "gradcheck --model esim $* -> exit $rc, want PASS with 23 parameters resolved drawn wide:"; tail -n 8 <<<"$out" >&2; fi
}
gradcheck --task pair
gradcheck --task pair --batch 4 --len 6
gradcheck --task pair --batch 3 --len 7 --dim 5 --hidden 4 --seed 7
gradcheck --task pair --batch 6 --len 3 --seed 2
# a batch with a length-1 sentence (the CoNLL-U batch's pairs are a sentence and itself: lengths 5, 1 and 3)
printf '%s\n' "1	the	_	_	_	_	2	_	_	_" "2	cat	_	_	_	_	3	_	_	_" "3	sat	_	_	_	_	0	_	_	_" \
  "4	on	_	_	_	_	5	_	_	_" "5	mats	_	_	_	_	3	_	_	_" "" "1	hi	_	_	_	_	0	_	_	_" "" \
  "1	a	_	_	_	_	2	_	_	_" "2	dog	_	_	_	_	3	_	_	_" "3	ran	_	_	_	_	0	_	_	_" "" > "$T/batch.conllu"
gradcheck --task pair --parses "$T/batch.conllu"
# a model for pairs alone: a single-sentence task is refused; its own task is the pair task
expect 1 'model esim has no head for the classify task \(it does: pair\)' "$AG" --plugin "$P" gradcheck --model esim --task classify
gradcheck

# it learns the generated pair task (span vs reversed span: word order decides), judged on metrics.csv by column name
"$AG" --plugin "$P" train --model esim --task pair --dim 32 --hidden 32 --keep 1 --optim adam:lr=1e-2 --epochs 4 \
  --progress none --out "$T/run" >"$T/train.log" 2>&1 || bad "train: $(tail -n 3 "$T/train.log")"
col() { awk -F, -v name="$1" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next } c { print $c }' "$T/run/metrics.csv"; }
first=$(col train_loss | head -n 1) last=$(col train_loss | tail -n 1) best=$(col dev_acc | sort -g | tail -n 1)
if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN { exit !($last < 0.5 * $first) }"; then ok
else bad "the training loss did not halve: metrics.csv train_loss $first -> $last"; fi
if [ -n "$best" ] && awk "BEGIN { exit !($best >= 0.8) }"; then ok
else bad "best dev accuracy '$best' (an order-free model: at most 2/3)"; fi
expect 0 'test +accuracy' "$AG" --plugin "$P" eval --ckpt "$T/run/best.safetensors"
# its soft alignment: a row per word of sentence a (3), a column per word of sentence b (2)
expect 0 'align-ab\.svg' "$AG" --plugin "$P" heatmap --ckpt "$T/run/best.safetensors" --sentence "w1 w2 w3" \
  --sentence-b "w2 w3" --out "$T/maps/"
svg=$(cat "$T"/maps/*align*.svg 2>/dev/null)
[ "$(grep -o '<title>' <<<"$svg" | wc -l)" -eq 6 ] && grep -q 'sentence a to b' <<<"$svg" && ok ||
  bad "the align map: want 3 x 2 cells, a's words as rows, b's as columns"
summary
