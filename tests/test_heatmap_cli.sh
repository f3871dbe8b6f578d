#!/usr/bin/env bash
# test_heatmap_cli.sh - `attngrad heatmap` as a user runs it: every registered
# model trains a few steps on its generated task, then draws its attention on
# a sentence.  Each SVG written must be complete (<svg ... </svg>), hold one
# cell per (row, column) of the sentence (features for dual-axial's feature
# axis), and label its axes with the words (unknown ones as <unk>(word); LM
# rows are the next words, <eos> last).  Bad input ends with a clear message
# and a non-zero exit.
#
#   tests/test_heatmap_cli.sh build/tools/attngrad
set -u
AG=$1
[ -x "$AG" ] || { echo "usage: $0 attngrad"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_heatmap_cli

# check_svg FILE CELLS PATTERN: a complete SVG with CELLS cells (one <title>
# each) whose text matches PATTERN
check_svg() {
  local f=$1 cells=$2 pattern=$3
  if [ ! -s "$f" ]; then bad "$f was not written"; return; fi
  local first last n
  first=$(head -c 4 "$f") last=$(tail -n 1 "$f") n=$(grep -o '<title>' "$f" | wc -l)
  [ "$first" = "<svg" ] && [ "$last" = "</svg>" ] && ok || bad "$f: not a complete SVG (starts '$first', ends '$last')"
  [ "$n" -eq "$cells" ] && ok || bad "$f: $n cells, want $cells"
  grep -Eq -- "$pattern" "$f" && ok || bad "$f: no /$pattern/"
}

DIM=12
TINY=(--synth-n 64 --dim $DIM --hidden $DIM --fixed-len 24 --batch 16 --epochs 1 --max-steps 3 --progress none)
models=$("$AG" models | awk '$2 ~ /^(classify|pair|lm|relatedness)$/ && !seen[$1]++ { print $1 }')
SENT="w1 A w2 zebra B w3"   # 6 words, "zebra" unknown to every generated task
LM_SENT="010 t1 t5 : 100"   # 5 words of the lookup task: 5 inputs, 5 targets (<eos> last)

for m in $models; do
  "$AG" train --model "$m" "${TINY[@]}" --out "$T/run-$m" >/dev/null 2>&1 || { bad "train $m"; continue; }
  lm=0; [ "$("$AG" models | awk -v m="$m" '$1 == m { print $2 }')" = lm ] && lm=1
  sent=$SENT; n=6; [ $lm = 1 ] && sent=$LM_SENT && n=5
  out=$("$AG" heatmap --ckpt "$T/run-$m/best.safetensors" --sentence "$sent" --out "$T/maps/" 2>&1)
  rc=$?
  [ $rc -eq 0 ] && ok || { bad "heatmap $m -> exit $rc: $out"; continue; }
  files=$(grep '\.svg$' <<<"$out")
  [ -n "$files" ] && ok || bad "heatmap $m printed no paths: $out"
  for f in $files; do
    case "$f" in "$T/maps/$m-"*) ok ;; *) bad "$f: want $T/maps/$m-*.svg" ;; esac
    if [[ "$f" == *feature* ]]; then
      check_svg "$f" $((DIM * DIM)) '>11</text>'
    elif [ $lm = 1 ]; then   # rows: t1 t5 : 100 <eos>; columns: 010 t1 t5 : 100
      check_svg "$f" $((n * n)) '>010</text>'
      grep -q '>&lt;eos&gt;</text>' "$f" && ok || bad "$f: the LM's last target, <eos>, is not a row label"
      grep -q 'rows: target' "$f" && ok || bad "$f: the title does not say the rows are the targets"
    else
      check_svg "$f" $((n * n)) '>&lt;unk&gt;\(zebra\)</text>'
      grep -q '&lt;eos&gt;' "$f" && bad "$f: a classifier's map has an <eos> label" || ok
    fi
    grep -q "<text[^>]*>$m" "$f" && ok || bad "$f: the title does not name the model $m"
  done
done

# a [B,h,N,N] map gives a file per head, and a prefix instead of a folder
if grep -qx ms_san <<<"$models"; then
  expect 0 'ms_san-heads-h2\.svg' "$AG" heatmap --ckpt "$T/run-ms_san/best.safetensors" --sentence "w1 A" --out "$T/maps/"
  check_svg "$T/maps/ms_san-heads-h2.svg" 4 'head 2 of [0-9]+'
  expect 0 "^$T/pre-heads-h1\.svg" "$AG" heatmap --ckpt "$T/run-ms_san/best.safetensors" --sentence "w1 A B" --out "$T/pre"
  check_svg "$T/pre-heads-h1.svg" 9 '>B</text>'
  # a pair model: the second sentence's maps have its words and length
  "$AG" train --model ms_san --task pair "${TINY[@]}" --out "$T/pair" >/dev/null 2>&1 || bad "train ms_san --task pair"
  expect 0 'hm-pair-heads-b-h1\.svg' "$AG" heatmap --ckpt "$T/pair/best.safetensors" --sentence "w1 w2 w3" \
    --sentence-b "w2 w3" --out "$T/hm-pair"
  check_svg "$T/hm-pair-heads-a-h1.svg" 9 'sentence a'
  check_svg "$T/hm-pair-heads-b-h1.svg" 4 '>w2</text>'
  expect 1 'give the second with --sentence-b' "$AG" heatmap --ckpt "$T/pair/best.safetensors" --sentence "w1" --out "$T/x"
fi

# MPSAN's relatedness head reads a pair: both sentences' maps, tagged a and b
"$AG" train --model mpsan --task relatedness "${TINY[@]}" --out "$T/rel" >/dev/null 2>&1 || bad "train mpsan --task relatedness"
expect 0 'hm-rel-fa2-b\.svg' "$AG" heatmap --ckpt "$T/rel/best.safetensors" --sentence "w1 w2 w3" \
  --sentence-b "w2 w3" --out "$T/hm-rel"
check_svg "$T/hm-rel-fa2-a.svg" 9 'sentence a'
check_svg "$T/hm-rel-fa2-b.svg" 4 '>w2</text>'

# the LM with standard attention, and without attention (nothing to draw)
if grep -qx poslm <<<"$models"; then
  "$AG" train --model poslm --attention standard "${TINY[@]}" --out "$T/std" >/dev/null 2>&1 || bad "train poslm standard"
  expect 0 'hm-std-standard\.svg' "$AG" heatmap --ckpt "$T/std/best.safetensors" --sentence "$LM_SENT" --out "$T/hm-std"
  check_svg "$T/hm-std-standard.svg" 25 'rows: target'
  "$AG" train --model poslm --attention none "${TINY[@]}" --out "$T/none" >/dev/null 2>&1 || bad "train poslm none"
  expect 1 'records no attention maps' "$AG" heatmap --ckpt "$T/none/best.safetensors" --sentence "$LM_SENT" --out "$T/n"
fi

# words are read as in training: a run on lower-cased data lower-cases the sentence
for i in $(seq 1 20); do printf '0 The Cat sat\n1 A Dog ran\n'; done > "$T/cased.txt"
"$AG" train --data "$T/cased.txt" --lowercase "${TINY[@]}" --out "$T/lower" >/dev/null 2>&1 || bad "train --lowercase"
expect 0 'hm-lower-fa2\.svg' "$AG" heatmap --ckpt "$T/lower/best.safetensors" --sentence "THE Dog Zebra" --out "$T/hm-lower"
check_svg "$T/hm-lower-fa2.svg" 9 '>the</text>'
grep -q '>dog</text>' "$T/hm-lower-fa2.svg" && grep -q '>&lt;unk&gt;(zebra)</text>' "$T/hm-lower-fa2.svg" && ok ||
  bad "lower-cased run: want the labels the, dog, <unk>(zebra)"

# dual-axial with --bigrams 0: no bigram embedding, as --flags no_bigram (the batch then has no bigram ids)
if grep -qx dual_axial <<<"$models"; then
  "$AG" train --model dual_axial --bigrams 0 "${TINY[@]}" --out "$T/nobi" >/dev/null 2>&1 || bad "train dual_axial --bigrams 0"
  expect 0 'hm-nobi-text\.svg' "$AG" heatmap --ckpt "$T/nobi/best.safetensors" --sentence "w1 A w2" --out "$T/hm-nobi"
  expect 1 'dual_axial: --bigrams 1: want 0 \(no bigram embedding\) or at least 2' \
    "$AG" train --model dual_axial --bigrams 1 "${TINY[@]}" --out "$T/e"
fi

# ---- errors ----
CK="$T/run-mpsan/best.safetensors"
expect 1 'nothing.safetensors: cannot open' "$AG" heatmap --ckpt "$T/nothing.safetensors" --sentence "w1" --out "$T/e"
expect 1 'empty sentence' "$AG" heatmap --ckpt "$CK" --sentence "   " --out "$T/e"
expect 1 'reads one sentence' "$AG" heatmap --ckpt "$CK" --sentence "w1" --sentence-b "w2" --out "$T/e"
expect 1 'cannot write the heatmap' "$AG" heatmap --ckpt "$CK" --sentence "w1" --out "$T/no/such/folder/x"
expect 2 '--sentence TEXT is required' "$AG" heatmap --ckpt "$CK" --out "$T/e"
expect 2 '--out DIR_OR_PREFIX is required' "$AG" heatmap --ckpt "$CK" --sentence "w1"
expect 2 '--ckpt FILE is required' "$AG" heatmap --sentence "w1" --out "$T/e"
expect 2 'takes no option --epochs' "$AG" heatmap --ckpt "$CK" --sentence "w1" --out "$T/e" --epochs 2
if grep -qx dual_axial <<<"$models"; then
  expect 1 'the sentence has 30 words, but model dual_axial reads at most 24' \
    "$AG" heatmap --ckpt "$T/run-dual_axial/best.safetensors" --sentence "$(seq -s ' ' 1 30)" --out "$T/e"
fi
# control bytes cannot be in an SVG (not even as &#x1;): refused, as predict and the loaders refuse them
expect 2 '^attngrad heatmap: --sentence: binary data \(byte 0x01 at column 4\)' "$AG" heatmap --ckpt "$CK" --sentence $'w1 \x01 w2' --out "$T/e"
ls "$T"/e* >/dev/null 2>&1 && bad "a failed heatmap command left files: $(ls -d "$T"/e*)" || ok
# a disk that fills up while a map is written (ulimit -f, SIGXFSZ ignored:
# writes fail with EFBIG): the map drawn before stays byte for byte, and no
# temporary file is left beside it
old_map="$T/maps/mpsan-fa2.svg"
cp "$old_map" "$T/fa2-before.svg"
out=$( (trap '' XFSZ; ulimit -f 1; "$AG" heatmap --ckpt "$CK" --sentence "w3 w2 w1 A" --out "$T/maps/") 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q "mpsan-fa2.svg: write failed: File too large" <<<"$out" && ok ||
  bad "a full disk under heatmap: exit $rc, want 1 naming the map and why: $out"
cmp -s "$old_map" "$T/fa2-before.svg" && ok || bad "a full disk under heatmap changed the map already there"
[ "$(ls "$T/maps" | grep -c '\.tmp\.')" -eq 0 ] && ok || bad "a full disk under heatmap left temporary files: $(ls "$T/maps")"

summary
