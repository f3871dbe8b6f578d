#!/usr/bin/env bash
# test_parses_cli.sh - SST's phrases and dependency parses as a user meets
# them in the attngrad program, on a small SST-like folder made here:
# --phrases trains on every labelled node of trees/train.txt, a conllu/
# folder beside the data is picked up (the run says so and records it),
# --parses none and a folder without parses fall back to the chain with a
# note, bad trees and parses that do not fit their data are refused naming
# file and line, predict reads CoNLL-U and uses its parse, and gradcheck
# and dump-step run on a parse read from a file.
#
#   tests/test_parses_cli.sh build/tools/attngrad build/tools/attngrad-f64
set -u
AG=$1 AG64=$2
[ -x "$AG" ] && [ -x "$AG64" ] || { echo "usage: $0 attngrad attngrad-f64"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_parses_cli

S=$T/sst
mkdir -p "$S/trees" "$S/conllu"
# five training trees (4, 4, 3, 3, 3 words: 7 + 7 + 5 + 5 + 5 = 29 phrases)
cat > "$S/trees/train.txt" <<'EOF'
(3 (2 (2 The) (2 movie)) (3 (2 is) (3 good)))
(1 (2 (2 A) (2 film)) (1 (2 is) (0 awful)))
(4 (2 It) (4 (2 is) (4 great)))
(0 (2 It) (0 (2 is) (0 terrible)))
(2 (2 It) (2 (2 is) (2 fine)))
EOF
printf '3 the movie is good\n1 a film is awful\n4 it is great\n0 it is terrible\n2 it is fine\n' > "$S/stsa.fine.train"
printf '3 the film is good\n0 a movie is terrible\n' > "$S/stsa.fine.dev"
printf '4 the film is great\n1 it is awful\n' > "$S/stsa.fine.test"

# conllu FILE SENTENCE...: a parse of each sentence (the subject's
# determiner -> the subject -> the adjective, the root; "is" -> the adjective)
conllu() {
  local file=$1 line=0; shift
  for s in "$@"; do
    line=$((line + 1)); set -- $s
    echo "# sent_id = $file:$line"
    if [ $# -eq 4 ]; then
      printf '1\t%s\t_\t_\t_\t_\t2\tdet\t_\t_\n2\t%s\t_\t_\t_\t_\t4\tnsubj\t_\t_\n3\t%s\t_\t_\t_\t_\t4\tcop\t_\t_\n4\t%s\t_\t_\t_\t_\t0\troot\t_\t_\n\n' "$@"
    else
      printf '1\t%s\t_\t_\t_\t_\t3\tnsubj\t_\t_\n2\t%s\t_\t_\t_\t_\t3\tcop\t_\t_\n3\t%s\t_\t_\t_\t_\t0\troot\t_\t_\n\n' "$@"
    fi
  done
}
conllu stsa.fine.train "the movie is good" "a film is awful" "it is great" "it is terrible" "it is fine" > "$S/conllu/stsa.fine.train.conllu"
conllu stsa.fine.dev "the film is good" "a movie is terrible" > "$S/conllu/stsa.fine.dev.conllu"
conllu stsa.fine.test "the film is great" "it is awful" > "$S/conllu/stsa.fine.test.conllu"

# SST-2: the neutral sentence ("it is fine") is in no stsa.binary file, nor in its parses
printf '1 the movie is good\n0 a film is awful\n1 it is great\n0 it is terrible\n' > "$S/stsa.binary.train"
printf '1 the film is good\n0 a movie is terrible\n' > "$S/stsa.binary.dev"
printf '1 the film is great\n0 it is awful\n' > "$S/stsa.binary.test"
conllu stsa.binary.train "the movie is good" "a film is awful" "it is great" "it is terrible" > "$S/conllu/stsa.binary.train.conllu"
conllu stsa.binary.dev "the film is good" "a movie is terrible" > "$S/conllu/stsa.binary.dev.conllu"
conllu stsa.binary.test "the film is great" "it is awful" > "$S/conllu/stsa.binary.test.conllu"

TINY=(--model ms_san --dim 12 --hidden 12 --batch 4 --epochs 2 --progress none --threads 1)

# ---- phrases, with the parses beside the data ----
expect 0 'ms_san on sst5-phrases: 29 train / 2 dev / 2 test examples' "$AG" train "${TINY[@]}" --data "$S" --dataset sst5 --phrases --out "$T/phr"
expect 0 "parses: $S/conllu" "$AG" train "${TINY[@]}" --data "$S" --dataset sst5 --phrases --out "$T/phr" --force
grep -aq "parse-source=$S/conllu" "$T/phr/last.safetensors" && ok || bad "the run's config does not record the parses it used"
expect 0 '^test +accuracy [0-9.]+%' "$AG" eval --ckpt "$T/phr/best.safetensors" --data "$S" --dataset sst5
expect 0 'ms_san on sst5: 5 train / 2 dev / 2 test examples' "$AG" train "${TINY[@]}" --data "$S" --dataset sst5 --out "$T/sent"

# SST-2's phrases come from every tree, the neutral sentences' too: their parses are stsa.fine.train's
# (5 trees, 29 nodes, of which not neutral: 3 in each of the first four, none in the fifth = 12 phrases)
expect 0 'ms_san on sst2-phrases: 12 train / 2 dev / 2 test examples' "$AG" train "${TINY[@]}" --data "$S" --dataset sst2 --phrases --out "$T/phr2"

# ---- no parse: the chain, said once, and recorded ----
out=$("$AG" train "${TINY[@]}" --data "$S" --dataset sst5 --parses none --out "$T/chain" 2>&1)
[ "$(grep -c 'note: ms_san reads a dependency parse, but the data has none' <<<"$out")" -eq 1 ] && ok ||
  bad "--parses none: want one note of the chain, got: $(head -c 600 <<<"$out")"
grep -aq 'parse-source=chain' "$T/chain/last.safetensors" && ok || bad "--parses none: the config does not say chain"
expect 0 'train / 2 dev' "$AG" train --model mpsan --dim 8 --epochs 1 --progress none --data "$S" --dataset sst5 --out "$T/mpsan"
grep -q 'dependency parse' <<<"$("$AG" train --model mpsan --dim 8 --epochs 1 --progress none --data "$S" --dataset sst5 --parses none --out "$T/mpsan" --force 2>&1)" &&
  bad "mpsan reads no parse: no note about one" || ok

# a model that reads no parse never loads one: parses that do not fit its data cannot stop it
mkdir -p "$T/mpsan-parse" && cp -r "$S"/* "$T/mpsan-parse/"
sed -i 's/\tawful\t/\tbad\t/' "$T/mpsan-parse/conllu/stsa.fine.train.conllu"
expect 0 'mpsan on sst5: 5 train / 2 dev' "$AG" train --model mpsan --dim 8 --epochs 1 --progress none --data "$T/mpsan-parse" --dataset sst5 --out "$T/mpsan2"
expect 0 'note: model mpsan reads no parse: --parses .* ignored' "$AG" train --model mpsan --dim 8 --epochs 1 --progress none \
  --data "$T/mpsan-parse" --dataset sst5 --parses "$T/mpsan-parse/conllu" --out "$T/mpsan3"

# ---- what is refused, by file and line ----
expect 1 '--phrases: trec has no phrase labels' "$AG" train "${TINY[@]}" --data "$S" --dataset trec --phrases --out "$T/x"
mkdir -p "$T/notrees"; cp "$S"/stsa.* "$T/notrees/"
expect 1 "--phrases: no $T/notrees/trees/train.txt" "$AG" train "${TINY[@]}" --data "$T/notrees" --dataset sst5 --phrases --out "$T/x"
expect 1 '--parses /nonexistent: no such folder' "$AG" train "${TINY[@]}" --data "$S" --dataset sst5 --parses /nonexistent --out "$T/x"
cp -r "$S" "$T/badtree"
printf '(3 (2 The) (2 movie)\n' >> "$T/badtree/trees/train.txt"
expect 1 "$T/badtree/trees/train.txt:6: column 21: the line ends inside the tree" "$AG" train "${TINY[@]}" --data "$T/badtree" --dataset sst5 --phrases --out "$T/x"
cp -r "$S" "$T/badparse"
sed -i 's/\tawful\t/\tbad\t/' "$T/badparse/conllu/stsa.fine.train.conllu"
expect 1 "$T/badparse/stsa.fine.train:2: word 4 is 'awful', but its parse at $T/badparse/conllu/stsa.fine.train.conllu:7 has 'bad'" \
  "$AG" train "${TINY[@]}" --data "$T/badparse" --dataset sst5 --out "$T/x"
expect 1 "$T/badparse/trees/train.txt:2: no parse of this sentence in $T/badparse/conllu/stsa.fine.train.conllu" \
  "$AG" train "${TINY[@]}" --data "$T/badparse" --dataset sst5 --phrases --out "$T/x"
cp -r "$S" "$T/shortparse"
head -n 6 "$S/conllu/stsa.fine.test.conllu" > "$T/shortparse/conllu/stsa.fine.test.conllu"
expect 1 "$T/shortparse/stsa.fine.test:2: no parse of this sentence in" "$AG" train "${TINY[@]}" --data "$T/shortparse" --dataset sst5 --out "$T/x"

# ---- predict reads CoNLL-U, and the parse matters to MS-SAN ----
two='# sent_id = in:1
1	the	_	_	_	_	2	_	_	_
2	movie	_	_	_	_	4	_	_	_
3	is	_	_	_	_	4	_	_	_
4	good	_	_	_	_	0	_	_	_

'
out=$(printf '%s%s' "$two" "$two" | "$AG" predict --ckpt "$T/phr/best.safetensors" --input conllu); rc=$?
# the run knows SST-5's class names (its config's labels=), and predict prints them
[ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -cE '^(very_negative|negative|neutral|positive|very_positive)'$'\t''[0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+$')" -eq 2 ] && ok ||
  bad "predict --input conllu: want 2 lines of a class name and 5 probabilities, got rc $rc: $out"
grep -aq 'labels=very_negative,negative,neutral,positive,very_positive' "$T/phr/last.safetensors" && ok ||
  bad "the run's config does not record SST-5's class names"
chain=$(printf '1\tthe\t_\t_\t_\t_\t2\t_\t_\t_\n2\tmovie\t_\t_\t_\t_\t3\t_\t_\t_\n3\tis\t_\t_\t_\t_\t4\t_\t_\t_\n4\tgood\t_\t_\t_\t_\t0\t_\t_\t_\n' |
  "$AG" predict --ckpt "$T/phr/best.safetensors" --input conllu)
[ -n "$chain" ] && [ "$chain" != "$(printf '%s\n' "$out" | sed -n 1p)" ] && ok ||
  bad "predict --input conllu: another parse of the same words gave the same output ($chain)"
out=$(printf '1\tthe\t_\t_\t_\t_\t9\t_\t_\t_\n\n1\tgood\t_\t_\t_\t_\t0\t_\t_\t_\n' |
  "$AG" predict --ckpt "$T/phr/best.safetensors" --input conllu 2>"$T/pred.err"); rc=$?
[ "$rc" -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ] && [ -z "$(printf '%s\n' "$out" | sed -n 1p)" ] && ok ||
  bad "predict --input conllu of a bad sentence: want exit 1, a blank line then a label; got $rc '$out'"
grep -q '^attngrad predict: stdin:1: sentence 1: token 1: head 9 out of range' "$T/pred.err" && ok ||
  bad "predict --input conllu: the error does not name stdin's line: $(cat "$T/pred.err")"
# a sentence longer than 16 x --max-line-bytes is refused before it is held; the next one is predicted
out=$({ printf '1\tthe\t_\t_\t_\t_\t0\t_\t_\t_\n'; for i in $(seq 2 40); do printf "$i\tthe\t_\t_\t_\t_\t1\t_\t_\t_\n"; done
        printf '\n1\tgood\t_\t_\t_\t_\t0\t_\t_\t_\n'; } |
      "$AG" predict --ckpt "$T/phr/best.safetensors" --input conllu --max-line-bytes 30 2>"$T/pred-long.err"); rc=$?
[ "$rc" -eq 1 ] && [ -z "$(printf '%s\n' "$out" | sed -n 1p)" ] && [ -n "$(printf '%s\n' "$out" | sed -n 2p)" ] &&
  grep -q 'stdin:1: a CoNLL-U sentence of more than 480 bytes: refused' "$T/pred-long.err" && ok ||
  bad "predict --input conllu of a sentence too long: rc $rc, '$out', $(cat "$T/pred-long.err")"
expect 2 "option --input: 'xml': expected lines or conllu" "$AG" predict --ckpt "$T/phr/best.safetensors" --input xml

# eval reads a CoNLL-U file too, its parses given to the model
cat "$S/conllu/stsa.fine.train.conllu" "$S/conllu/stsa.fine.train.conllu" > "$T/eval.conllu"
sed -i 's/^# sent_id = .*/# label = 3/' "$T/eval.conllu"
# (a file of the user's: every sentence of it scored, as one 'file' row)
n=$(grep -c '^# label = 3' "$T/eval.conllu")
expect 0 "^file +accuracy [0-9.]+%  loss [0-9.]+  \\($n examples\\)" "$AG" eval --ckpt "$T/phr/best.safetensors" --data "$T/eval.conllu" --format conllu

# ---- gradcheck and dump-step with a parse from a file ----
P=$T/parse.conllu
printf '# label = 1\n1\tthe\t_\t_\t_\t_\t2\t_\t_\t_\n2\tmovie\t_\t_\t_\t_\t5\t_\t_\t_\n3\tis\t_\t_\t_\t_\t5\t_\t_\t_\n4\tnot\t_\t_\t_\t_\t5\t_\t_\t_\n5\tgood\t_\t_\t_\t_\t0\t_\t_\t_\n6\tat\t_\t_\t_\t_\t7\t_\t_\t_\n7\tall\t_\t_\t_\t_\t5\t_\t_\t_\n8\t.\t_\t_\t_\t_\t5\t_\t_\t_\n\n1\ta\t_\t_\t_\t_\t3\t_\t_\t_\n2\tfine\t_\t_\t_\t_\t3\t_\t_\t_\n3\tfilm\t_\t_\t_\t_\t0\t_\t_\t_\n' > "$P"
expect 0 'worst relative error .*: PASS' "$AG64" gradcheck --model ms_san --parses "$P"
expect 0 'worst relative error .*: PASS' "$AG64" gradcheck --model ms_san --parses "$P" --task pair
expect 0 "wrote $T/dump.st" "$AG" dump-step --model ms_san --parses "$P" --out "$T/dump.st"
grep -aq '"batch.heads":{[^}]*"shape":\[2,8\]' "$T/dump.st" && ok || bad "dump-step --parses: no [2,8] batch.heads in the dump"
expect 1 "$T/none.conllu: cannot open" "$AG64" gradcheck --model ms_san --parses "$T/none.conllu"

summary
