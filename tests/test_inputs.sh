#!/usr/bin/env bash
# test_inputs.sh - what a user hands attngrad, checked as issue 37 asked.
# No input line takes memory in proportion to it: predict refuses (or, with --long-lines cut, cuts) a line past
# --max-line-bytes or --max-line-words before anything is built from it,
# naming stdin:N, and goes on with the next line.  Memory is checked without
# a clock and without depending on the machine: each case runs under a
# fixed address-space limit (ulimit -v) far below what the line would take
# (20,000 words of attention: gigabytes), and where python3 is there the
# child's peak RSS (getrusage) must stay under a fixed bound as well.  And
# one policy for text that is not UTF-8, whatever the input form: read as
# bytes, said once.
#
# A checkpoint saved before checkpoints were sealed whole loads with a note
# that its header is unverified.
#
#   tests/test_inputs.sh build/tools/attngrad
set -u
AG=$1
[ -x "$AG" ] || { echo "usage: $0 attngrad"; exit 2; }
# sanitizer builds reserve terabytes of address space, which no ulimit -v allows
if nm -u "$AG" 2>/dev/null | grep -q __asan_init; then echo "test_inputs: sanitizer build: skipped"; exit 77; fi
. "$(dirname "$0")/cli_lib.sh" test_inputs

LIMIT_KB=400000   # the address space each predict below may take
PEAK_KB=200000    # and the resident memory it may reach
export AG_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# A CUDA build maps cuBLAS and the CUDA runtime before main (840 MB of
# address space and 220 MB resident here, without a GPU), so no fixed cap
# fits it.  There the bound is the resident memory above the program's own
# at start-up (`attngrad models`), which python3 measures, and the
# address-space cap is the mapped libraries' size plus 1 GB as a backstop
# (none where a GPU is present: its driver reserves far more at its first
# call).
CUDA_BUILD=0
ldd "$AG" 2>/dev/null | grep -q 'libcudart\|libcublas' && CUDA_BUILD=1
if [ $CUDA_BUILD = 1 ]; then
  command -v python3 >/dev/null || { echo "test_inputs: a CUDA build needs python3 to measure memory: skipped"; exit 77; }
  base=$(python3 -c '
import resource, subprocess, sys
subprocess.run([sys.argv[1], "models"], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$AG")
  libs_kb=$(ldd "$AG" | awk '/=> \//{print $3}' | xargs -r readlink -f | sort -u | xargs -r stat -Lc %s |
    awk '{s += $1} END {print int(s / 1024)}')
  PEAK_KB=$((base + PEAK_KB)) LIMIT_KB=$((libs_kb + 1000000))
  [ -e /dev/nvidia0 ] && LIMIT_KB=0
fi

# bounded CMD... < input: runs CMD under the limits; stdout to $T/out, stderr
# to $T/err, the exit status to $T/rc, the peak RSS in kB to $T/peak (0 when
# python3 is not there to read it)
MEASURE='
import resource, subprocess, sys
t, limit, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def cap():
    if limit > 0:  # 0: not capped (a CUDA build)
        resource.setrlimit(resource.RLIMIT_AS, (limit * 1024, limit * 1024))
with open(t + "/out", "wb") as out, open(t + "/err", "wb") as err:
    rc = subprocess.run(cmd, stdout=out, stderr=err, preexec_fn=cap).returncode
open(t + "/rc", "w").write("%d\n" % rc)
open(t + "/peak", "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
'
bounded() {
  if command -v python3 >/dev/null; then
    python3 -c "$MEASURE" "$T" "$LIMIT_KB" "$@"
  else
    (ulimit -v "$LIMIT_KB"; "$@" >"$T/out" 2>"$T/err"; echo $? >"$T/rc")
    echo 0 >"$T/peak"
  fi
}

# check NAME RC ERR_REGEX OUT_LINES: the exit status, stderr ('': empty), how many output lines, and the peak
check() {
  local name=$1 want=$2 pattern=$3 lines=$4 rc peak
  rc=$(cat "$T/rc") peak=$(cat "$T/peak")
  [ "$rc" -eq "$want" ] && ok || bad "$name: exit $rc, want $want: $(head -c 600 "$T/err")"
  { if [ -z "$pattern" ]; then [ ! -s "$T/err" ]; else grep -Eq -- "$pattern" "$T/err"; fi; } && ok || bad "$name: stderr does not match /$pattern/: $(head -c 600 "$T/err")"
  [ "$(wc -l < "$T/out")" -eq "$lines" ] && ok || bad "$name: want $lines output lines, got $(wc -l < "$T/out")"
  [ "$peak" -lt "$PEAK_KB" ] && ok || bad "$name: peak RSS $peak kB, want under $PEAK_KB kB"
}

"$AG" train --synth-n 200 --dim 8 --batch 25 --progress none --epochs 1 --out "$T/run" >"$T/train.log" 2>&1 ||
  { bad "train: $(tail -5 "$T/train.log")"; summary; exit 1; }
CK=$T/run/best.safetensors

# 20,000 words in a 40 KB line: far below --max-line-bytes, but attention over
# it takes gigabytes; refused by its words, the lines around it predicted
{ echo 'w1 A w2 B'; yes w1 | head -n 20000 | tr '\n' ' '; echo; echo 'B w3 w4 w5 A w6'; } > "$T/words.txt"
bounded "$AG" predict --ckpt "$CK" < "$T/words.txt"
check "20,000 words" 1 '^attngrad predict: stdin:2: 20000 words, more than --max-line-words 1000: refused' 3
sed -n 2p "$T/out" | grep -q '^$' && sed -n 3p "$T/out" | grep -Eq '^[0-3]'$'\t' && ok ||
  bad "20,000 words: want a blank line for it and a label after it: $(cat "$T/out")"

# --long-lines cut predicts its first --max-line-words words, with a note
bounded "$AG" predict --ckpt "$CK" --long-lines cut < "$T/words.txt"
check "20,000 words, cut" 0 '^attngrad predict: stdin:2: note: a line of 20000 words, cut to its first 1000 \(--long-lines cut\)' 3
[ "$(grep -c -E '^[0-3]'$'\t' "$T/out")" -eq 3 ] && ok || bad "20,000 words, cut: want 3 labels: $(cut -c1-80 "$T/out")"

# a lower limit of the user's, and 0 for none (a short line either way)
printf 'w1 A w2 B w3\n' > "$T/five.txt"
bounded "$AG" predict --ckpt "$CK" --max-line-words 4 < "$T/five.txt"
check "--max-line-words 4" 1 '^attngrad predict: stdin:1: 5 words, more than --max-line-words 4' 1
bounded "$AG" predict --ckpt "$CK" --max-line-words 0 < "$T/five.txt"
check "--max-line-words 0" 0 '' 1
expect 2 "option --max-line-words: -1 is out of range" "$AG" predict --ckpt "$CK" --max-line-words -1

# the issue's case: one 64 MB line of words (it took 8.9 GB and 16 s), refused by its bytes
python3 -c 'import sys; sys.stdout.write("a " * (32 << 20) + "\nw1 w2\n")' > "$T/64mb.txt" 2>/dev/null ||
  { yes a | head -n $((32 << 20)) | tr '\n' ' '; echo; echo 'w1 w2'; } > "$T/64mb.txt"
bounded "$AG" predict --ckpt "$CK" < "$T/64mb.txt"
check "a 64 MB line" 1 '^attngrad predict: stdin:1: line longer than 1048576 bytes \([0-9]+ more\): refused before reading it' 2
rm -f "$T/64mb.txt"

# a CoNLL-U sentence of 1,500 words: refused, naming its first line (no cut: its parse would lose heads)
{ printf '# sent_id = a\n'; for i in $(seq 1500); do printf '%d\tw1\t_\t_\t_\t_\t0\t_\t_\t_\n' "$i"; done; echo;
  printf '1\tw1\t_\t_\t_\t_\t0\t_\t_\t_\n2\tA\t_\t_\t_\t_\t1\t_\t_\t_\n\n'; } > "$T/long.conllu"
bounded "$AG" predict --ckpt "$CK" --input conllu < "$T/long.conllu"
check "a CoNLL-U sentence of 1,500 words" 1 '^attngrad predict: stdin:1: a CoNLL-U sentence of more than 1000 words: refused' 2

# data files: a sentence of more than --max-line-words is refused by its file and line at load, in train and
# eval alike (it made a batch of gigabytes before), unless --max-len cuts it
{ for i in $(seq 60); do echo "$((i % 2)) w$((i % 5)) A w$((i % 3)) B"; done; echo "1 $(yes w1 | head -n 1500 | tr '\n' ' ')"; } > "$T/long.txt"
bounded "$AG" train --data "$T/long.txt" --dim 8 --progress none --epochs 1 --out "$T/long-run"
check "train, 1,500 words" 1 "long.txt:61: a sentence of 1500 words, more than the limit of 1000: refused before its words are kept \(--max-line-words N takes longer ones, --max-len N cuts them\)" 0
bounded "$AG" eval --ckpt "$CK" --data "$T/long.txt"
check "eval, 1,500 words" 1 "long.txt:61: a sentence of 1500 words, more than the limit of 1000" 0
expect 0 'done in' "$AG" train --data "$T/long.txt" --dim 8 --progress none --epochs 1 --max-len 50 --out "$T/long-cut"

# heatmap: the same bound on its sentence
expect 2 '^attngrad heatmap: --sentence: 5 words, more than --max-line-words 4' \
  "$AG" heatmap --ckpt "$CK" --sentence 'w1 A w2 B w3' --max-line-words 4 --out "$T/maps/"

# text is bytes (docs/data.md, "Text is bytes"): a line that is not UTF-8 (Latin-1, \xff\xfe, the overlong
# \xc0\xaf) is predicted as the data was read, with one note naming the first, in either input form
printf 'w1 caf\xe9 A\n\xff\xfe B\n\xc0\xaf w2\n' > "$T/latin1.txt"
bounded "$AG" predict --ckpt "$CK" < "$T/latin1.txt"
check "not UTF-8" 0 '^attngrad predict: stdin:1: note: not UTF-8 \(byte 0xe9 at column 7\), read as bytes' 3
[ "$(grep -c note "$T/err")" -eq 1 ] && ok || bad "not UTF-8: want one note: $(cat "$T/err")"
printf '1\tw1\t_\t_\t_\t_\t0\t_\t_\t_\n2\tcaf\xe9\t_\t_\t_\t_\t1\t_\t_\t_\n\n1\t\xc0\xaf\t_\t_\t_\t_\t0\t_\t_\t_\n\n' > "$T/latin1.conllu"
bounded "$AG" predict --ckpt "$CK" --input conllu < "$T/latin1.conllu"
check "not UTF-8, CoNLL-U" 0 '^attngrad predict: stdin:2: note: not UTF-8 \(byte 0xe9 at column 6\), read as bytes' 2
[ "$(grep -c note "$T/err")" -eq 1 ] && ok || bad "not UTF-8, CoNLL-U: want one note: $(cat "$T/err")"

# a checkpoint of attngrad before the seal (tensor checksums, no attngrad.file_crc32c) loads, saying its header
# is unverified; a sealed one says nothing
if command -v python3 >/dev/null; then
  python3 "$(dirname "$0")/st_edit.py" unseal "$CK" "$T/unsealed.safetensors"
  cp "$T/run/vocab.txt" "$T/" 2>/dev/null
  expect 0 "note: $T/unsealed.safetensors: not sealed whole \(saved before attngrad.file_crc32c\): its tensors are verified, its header \(the config, the metrics history\) loads unverified" \
    "$AG" eval --ckpt "$T/unsealed.safetensors"
  expect 0 'note: .*unsealed.safetensors: not sealed whole' sh -c "echo 'w1 A w2 B' | '$AG' predict --ckpt '$T/unsealed.safetensors'"
  out=$("$AG" eval --ckpt "$CK" 2>&1)
  grep -q 'not sealed\|unverified' <<<"$out" && bad "a sealed checkpoint noted as unverified: $out" || ok
fi

summary
