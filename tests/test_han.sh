#!/usr/bin/env bash
# test_han.sh - the plugin model of examples/han.c (Yang et al. 2016's word level on ag_bigru): attngrad gradcheck
# (f64, in attngrad-f64 with han-f64.so) on the tiny batch, on a batch of lengths 5, 1 and 3 from a CoNLL-U file
# (padding and a length-1 sentence), with either encoder; a short training run whose loss falls, and the heatmap
# of its word attention.
#
#   tests/test_han.sh attngrad han.so
set -u
AG=$1 P=$2
[ -x "$AG" ] && [ -f "$P" ] || { echo "usage: $0 attngrad han.so"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_han

expect 0 '^\(han: --flags lstm\)$' "$AG" --plugin "$P" models
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model han
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model han --flags lstm
printf '%s\n' "1	the	_	_	_	_	2	_	_	_" "2	cat	_	_	_	_	3	_	_	_" "3	sat	_	_	_	_	0	_	_	_" \
  "4	on	_	_	_	_	5	_	_	_" "5	mats	_	_	_	_	3	_	_	_" "" "1	hi	_	_	_	_	0	_	_	_" "" \
  "1	a	_	_	_	_	2	_	_	_" "2	dog	_	_	_	_	3	_	_	_" "3	ran	_	_	_	_	0	_	_	_" "" > "$T/batch.conllu"
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model han --parses "$T/batch.conllu"
expect 0 'worst relative error .*: PASS' "$AG" --plugin "$P" gradcheck --model han --flags lstm --parses "$T/batch.conllu"
# the encoder's parameters are the GRU's (3H columns), or the LSTM's with --flags lstm
expect 0 'encoder\.fw\.w_hh +\[3,9\]' "$AG" --plugin "$P" gradcheck --model han
expect 0 'encoder\.bw\.w_hh +\[3,12\]' "$AG" --plugin "$P" gradcheck --model han --flags lstm
# the loss falls by half on the generated task, and the word attention is drawn
out=$("$AG" --plugin "$P" train --model han --dim 16 --hidden 16 --optim adam:lr=3e-3 --synth-n 800 --max-steps 150 \
      --progress none --out "$T/run" 2>&1)
if [[ $out =~ training\ loss\ ([0-9.]+)\ -\>\ ([0-9.]+) ]] && awk "BEGIN{exit !(${BASH_REMATCH[2]} < 0.5 * ${BASH_REMATCH[1]})}"; then ok
else bad "training loss did not fall: $(tail -n 3 <<<"$out")"; fi
expect 0 'test +accuracy' "$AG" --plugin "$P" eval --ckpt "$T/run/best.safetensors"
expect 0 'words\.svg' "$AG" --plugin "$P" heatmap --ckpt "$T/run/best.safetensors" --sentence "w1 A w2 B" --out "$T/maps/"
summary
