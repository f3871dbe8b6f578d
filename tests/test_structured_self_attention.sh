#!/usr/bin/env bash
# test_structured_self_attention.sh - the plugin model of examples/structured_self_attention.c (Lin et al. 2017):
# attngrad gradcheck (f64, in attngrad-f64 with structured_self_attention-f64.so) on the tiny batch (lengths 5
# and 3), on a batch of lengths 5, 1 and 3 from a CoNLL-U file (padding and a length-1 sentence), without the
# penalization term; a few training steps whose loss falls, and the heatmap of its hops.
#
#   tests/test_structured_self_attention.sh attngrad structured_self_attention.so
set -u
AG=$1 P=$2
[ -x "$AG" ] && [ -f "$P" ] || { echo "usage: $0 attngrad structured_self_attention.so"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_structured_self_attention

# its own switch is listed where the built-in ones are, and `models` names its switches and settings
expect 0 'flags LIST .*; ssa: no_penalty' "$AG" --plugin "$P" train --help
expect 0 '^\(ssa: --flags no_penalty; --hparams penalty\)$' "$AG" --plugin "$P" models
# its setting: checked with another coefficient, refused by name when it is not its own or no number
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model ssa --hparams penalty=0.3
expect 1 "model ssa has no setting 'coef' \(its --hparams: penalty\)" "$AG" --plugin "$P" gradcheck --model ssa --hparams coef=1
expect 1 "model ssa: --hparams penalty: 'x' is not a finite number" "$AG" --plugin "$P" gradcheck --model ssa --hparams penalty=x
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model ssa
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model ssa --flags no_penalty
printf '%s\n' "1	the	_	_	_	_	2	_	_	_" "2	cat	_	_	_	_	3	_	_	_" "3	sat	_	_	_	_	0	_	_	_" \
  "4	on	_	_	_	_	5	_	_	_" "5	mats	_	_	_	_	3	_	_	_" "" "1	hi	_	_	_	_	0	_	_	_" "" \
  "1	a	_	_	_	_	2	_	_	_" "2	dog	_	_	_	_	3	_	_	_" "3	ran	_	_	_	_	0	_	_	_" "" > "$T/batch.conllu"
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model ssa --heads 3 --parses "$T/batch.conllu"
# the loss (penalization included) falls by a fifth on the generated task, and the hops are drawn
out=$("$AG" --plugin "$P" train --model ssa --heads 4 --dim 16 --hidden 16 --keep 1 --optim adam:lr=3e-3 \
      --synth-n 800 --max-steps 150 --progress none --out "$T/run" 2>&1)
if [[ $out =~ training\ loss\ ([0-9.]+)\ -\>\ ([0-9.]+) ]] && awk "BEGIN{exit !(${BASH_REMATCH[2]} < 0.8 * ${BASH_REMATCH[1]})}"; then ok
else bad "training loss did not fall: $(tail -n 3 <<<"$out")"; fi
# a run's setting goes with its checkpoint: eval builds the same model
"$AG" --plugin "$P" train --model ssa --heads 2 --dim 8 --hidden 8 --hparams penalty=0.5 --max-steps 3 --progress none \
  --out "$T/hp" >/dev/null 2>&1 || bad "train with --hparams penalty=0.5"
expect 0 'test +accuracy' "$AG" --plugin "$P" eval --ckpt "$T/hp/best.safetensors"
expect 0 'hops\.svg' "$AG" --plugin "$P" heatmap --ckpt "$T/run/best.safetensors" --sentence "w1 A w2 B" --out "$T/maps/"
# the hops are rows (4 of them), the sentence's words the columns: 4 x 4 cells, labelled by the words
svg=$(cat "$T"/maps/*hops.svg 2>/dev/null)
[ "$(grep -o '<title>' <<<"$svg" | wc -l)" -eq 16 ] && grep -q '>w2</text>' <<<"$svg" && grep -q 'rows: slot' <<<"$svg" && ok ||
  bad "the hops map: want 16 cells, the words as column labels, rows named as slots"
summary
