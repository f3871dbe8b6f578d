#!/usr/bin/env bash
# test_embeddings_cli.sh - attngrad train --embeddings as a user runs it, on
# the generated task (words A, B, w0..w19) with vectors files written here:
# the coverage line, the lowercase fallback and --embeddings-exact, the
# dimension taken from the file (a narrower --dim or a model that cannot
# take it stops with both numbers, a wider --dim pads), --freeze-embeddings (no optimizer state
# in the checkpoint, the vectors unchanged), eval, predict and --resume with
# the vectors file gone, and a bad file stopping before any run folder.
#
#   tests/test_embeddings_cli.sh build/tools/attngrad
set -u
AG=$1
[ -x "$AG" ] || { echo "usage: $0 attngrad"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_embeddings_cli

SMALL=(--synth-n 200 --batch 25 --progress none --threads 1)
V=$T/vectors.txt
{ echo "a 0.5 0.25 -0.125 1 -1 0.75 0.0625 2"
  for i in 0 1 2 3 4 5 6 7 8 9; do echo "w$i $i 0.1 0.2 0.3 0.4 0.5 0.6 -$i"; done; } > "$V"

# 22 words: A through "a", w0..w9 exactly; the 11 others (B, w10..w19) drawn
expect 0 "embeddings $V \(GloVe text, 8d\): 11 of 22 words found \(1 lower-cased\), [0-9.]+% of [0-9]+ training tokens; the other 11 words from U\(-0.05, 0.05\)" \
  "$AG" train "${SMALL[@]}" --embeddings "$V" --max-steps 2 --out "$T/fine"
expect 0 'parameters \(d=8\)' "$AG" train "${SMALL[@]}" --embeddings "$V" --max-steps 1 --out "$T/dim"
expect 0 ": 10 of 22 words found, " "$AG" train "${SMALL[@]}" --embeddings "$V" --embeddings-exact --max-steps 1 --out "$T/exact"
# the same file with a word2vec text header
{ echo "11 8"; cat "$V"; } > "$T/vectors.vec"
expect 0 "\(word2vec text, 8d\): 11 of 22 words found" "$AG" train "${SMALL[@]}" --embeddings "$T/vectors.vec" --max-steps 1 --out "$T/w2v"

# every model with a word embedding takes the file's dimension
for m in mtsa dual_axial poslm; do
  expect 0 "parameters \(d=8\)" "$AG" train --model "$m" "${SMALL[@]}" --embeddings "$V" --max-steps 1 --out "$T/m-$m"
done
expect 1 "model poslm cannot take the 8-dimensional vectors .*hidden \(64\) must equal dim \(8\)" \
  "$AG" train --model poslm --attention none "${SMALL[@]}" --embeddings "$V" --out "$T/lm-none"

# a word twice: the first vector is kept, with a note; a word with spaces is skipped
{ cat "$V"; echo "w0 9 9 9 9 9 9 9 9"; echo "at name@domain.com 1 2 3 4 5 6 7 8"; } > "$T/dup.txt"
expect 0 "note: $T/dup.txt repeats 1 word of the vocabulary, the first vector kept: 'w0' on line 12 again: line 2's vector is used" \
  "$AG" train "${SMALL[@]}" --embeddings "$T/dup.txt" --max-steps 1 --out "$T/dup"
expect 0 "note: 1 vector skipped: a word with spaces" "$AG" train "${SMALL[@]}" --embeddings "$T/dup.txt" --max-steps 1 --out "$T/dup2"

# the dimension: a --dim below the file's, a model whose width cannot be 8;
# a --dim above it keeps the vectors in the first 8 columns (MS-SAN: 12)
expect 1 "--dim 4, but $V holds 8-dimensional vectors .*leave --dim out to take 8, or give one above it" \
  "$AG" train "${SMALL[@]}" --embeddings "$V" --dim 4 --out "$T/dim4"
expect 1 "model ms_san cannot take the 8-dimensional vectors of $V \(its own dim is 300\): .*multiple of its 6 heads; a --dim above 8" \
  "$AG" train --model ms_san "${SMALL[@]}" --embeddings "$V" --out "$T/ms"
[ ! -e "$T/dim4" ] && [ ! -e "$T/ms" ] && ok || bad "a refused run left a folder"
expect 0 "parameters \(d=12\)" \
  "$AG" train --model ms_san "${SMALL[@]}" --embeddings "$V" --dim 12 --freeze-embeddings --max-steps 1 --out "$T/ms12"
expect 1 "--embeddings and --init $T/fine/best.safetensors both set the word embedding: give one" \
  "$AG" train "${SMALL[@]}" --embeddings "$V" --init "$T/fine/best.safetensors" --out "$T/both"
expect 1 "embeddings-exact: there is no --embeddings file" "$AG" train "${SMALL[@]}" --embeddings-exact --out "$T/noexact"

# a bad file: path:line, no run folder
{ head -n 3 "$V"; echo "w9 1 2 3"; } > "$T/bad.txt"
expect 1 "$T/bad.txt:4: 'w9' has 3 values, expected 8" "$AG" train "${SMALL[@]}" --embeddings "$T/bad.txt" --out "$T/bad"
[ ! -e "$T/bad" ] && ok || bad "a bad vectors file left a run folder"

# frozen: the checkpoint holds no optimizer state for the table (mpsan's Adadelta
# has slots v and u), the fine-tuned run does
expect 0 "\(GloVe text, 8d, frozen\)" "$AG" train "${SMALL[@]}" --embeddings "$V" --freeze-embeddings --max-steps 6 --out "$T/frozen"
grep -aq 'optim.adadelta.v.embed.weight' "$T/fine/last.safetensors" && ok || bad "the fine-tuned run has no state for its table"
grep -aq 'optim.adadelta.v.embed.weight' "$T/frozen/last.safetensors" && bad "the frozen table has optimizer state" || ok
grep -aq 'optim.adadelta.v.cls.out.weight' "$T/frozen/last.safetensors" && ok || bad "the frozen run lost its other state"

# after 6 steps the frozen table still holds the file's rows (A: the row of "a"), the fine-tuned one does not
rows_match() { # run folder, vectors file: exit 0 when every word's row is its vector
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
run, vec = sys.argv[1], sys.argv[2]
raw = open(run + "/last.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
t = json.loads(raw[8:8 + n])["embed.weight"]
V, d = t["shape"]
b, e = t["data_offsets"]
vals = struct.unpack("<%df" % (V * d), raw[8 + n + b:8 + n + e])
ids = {w: i for i, w in enumerate(open(run + "/vocab.txt").read().split("\n"))}
for line in open(vec):
    w, *v = line.split()
    i = ids["A" if w == "a" else w]
    if any(abs(vals[i * d + j] - float(x)) > 1e-6 for j, x in enumerate(v)):
        sys.exit(1)
PY
}
if command -v python3 >/dev/null; then
  rows_match "$T/frozen" "$V" && ok || bad "the frozen table moved"
  rows_match "$T/ms12" "$V" && ok || bad "the 12-wide table does not start with the 8d vectors"
  rows_match "$T/fine" "$V" && bad "the fine-tuned table did not move" || ok
fi

# eval, predict and resume need no vectors file: the checkpoint holds the table
mv "$V" "$V.gone"
expect 0 '^test +accuracy [0-9.]+%' "$AG" eval --ckpt "$T/frozen/best.safetensors"
expect 0 $'^[0-3]\t' sh -c "echo 'w1 A w2 B' | '$AG' predict --ckpt '$T/frozen/best.safetensors'"
expect 0 'embeddings: from the checkpoint \(frozen\)' "$AG" train --resume --out "$T/frozen" --max-steps 10 --progress none
grep -aq 'optim.adadelta.v.embed.weight' "$T/frozen/last.safetensors" && bad "resume gave the frozen table optimizer state" || ok
grep -aq 'freeze-embeddings=1' "$T/frozen/last.safetensors" && ok || bad "the run's config does not record --freeze-embeddings"
summary
