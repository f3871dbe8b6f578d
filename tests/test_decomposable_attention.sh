#!/usr/bin/env bash
# test_decomposable_attention.sh - the plugin model of examples/decomposable_attention.c (Parikh et al. 2016) on
# the sentence-pair task: attngrad gradcheck (f64, in attngrad-f64 with decomposable_attention-f64.so) on the tiny
# pair batch and on a random padded batch (two sentences of their own lengths and widths); a few training steps on
# the generated pair task whose loss falls, and the heatmap of its attention between the two sentences.
#
#   tests/test_decomposable_attention.sh attngrad decomposable_attention.so
set -u
AG=$1 P=$2
[ -x "$AG" ] && [ -f "$P" ] || { echo "usage: $0 attngrad decomposable_attention.so"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_decomposable_attention

expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model dam --task pair
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model dam --task pair --batch 4 --len 6
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model dam --task pair --batch 3 --len 7 \
  --dim 5 --hidden 4 --seed 7
# a model for pairs alone: a single-sentence task is refused
expect 1 'model dam has no head for the classify task \(it does: pair\)' "$AG" --plugin "$P" gradcheck --model dam --task classify
# the loss falls by a fifth on the generated pair task (from ln 3 to 0.6 in 300 steps; the model sees no word order,
# so it cannot tell a span from the reversed span: 2/3 accuracy is its ceiling there)
out=$("$AG" --plugin "$P" train --model dam --task pair --dim 32 --hidden 32 --keep 1 --batch 32 \
      --optim adam:lr=3e-3 --max-steps 300 --progress none --out "$T/run" 2>&1)
if [[ $out =~ training\ loss\ ([0-9.]+)\ -\>\ ([0-9.]+) ]] && awk "BEGIN{exit !(${BASH_REMATCH[2]} < 0.8 * ${BASH_REMATCH[1]})}"; then ok
else bad "training loss did not fall: $(tail -n 3 <<<"$out")"; fi
# its cross attention: a row per word of sentence a (3), a column per word of sentence b (2), both labelled
expect 0 'attend-ab\.svg' "$AG" --plugin "$P" heatmap --ckpt "$T/run/best.safetensors" --sentence "w1 w2 w3" \
  --sentence-b "w2 zebra" --out "$T/maps/"
svg=$(cat "$T"/maps/*attend*.svg 2>/dev/null)
[ "$(grep -o '<title>' <<<"$svg" | wc -l)" -eq 6 ] && grep -q '>w1</text>' <<<"$svg" && grep -q '>&lt;unk&gt;(zebra)</text>' <<<"$svg" &&
  grep -q 'sentence a to b' <<<"$svg" && ok || bad "the attend map: want 3 x 2 cells, a's words as rows, b's as columns"
# the model's own task is its first (pair): no --task needed
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model dam
summary
