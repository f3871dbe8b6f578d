#!/usr/bin/env bash
# test_get_data.sh - tools/get-data.sh, offline and in seconds: a fake mirror
# with raw.githubusercontent's layout (OWNER/REPO/COMMIT/PATH) made here
# from the real manifest's URLs, holding small fake files (a long file for
# the #head= cut, a zip with __MACOSX junk for the #unzip= members), and a
# fake manifest with their sha256s.  Checks: a full fetch with --base-url
# file://MIRROR puts every file where the loader expects it and nothing of
# the local-only ones (conllu/, glove/), with notes saying where those come
# from; a second run skips every file; a damaged file already in DATA is
# replaced; a wrong checksum (a tampered mirror file, a tampered line inside
# the cut part of the trees) and a missing download fail naming the file,
# both sha256s and the URL, leave neither the file nor a temporary, and the
# other files still arrive; --from DIR copies everything, local-only files
# included, with the mirror gone, and fails on a tampered copy; --only
# fetches only the sets named; an unknown option, an unknown set, a missing
# DATA and a bad manifest line exit 2 naming what is wrong.
#
#   tests/test_get_data.sh [tools/get-data.sh]
set -u
GD=${1:-$(dirname "$0")/../tools/get-data.sh}
[ -f "$GD" ] && [ -f "$(dirname "$GD")/data-manifest.tsv" ] ||
  { echo "usage: $0 [tools/get-data.sh] (with data-manifest.tsv beside it)"; exit 2; }
command -v curl >/dev/null 2>&1 || { echo "SKIP: no curl (get-data.sh reads file:// URLs with it)"; exit 77; }
command -v unzip >/dev/null 2>&1 || { echo "SKIP: no unzip (get-data.sh unzips PTB with it)"; exit 77; }
command -v zip >/dev/null 2>&1 || command -v python3 >/dev/null 2>&1 ||
  { echo "SKIP: neither zip nor python3 to make the fake PTB zip"; exit 77; }
GD=$(cd "$(dirname "$GD")" && pwd)/$(basename "$GD")
REAL=$(dirname "$GD")/data-manifest.tsv
. "$(dirname "$0")/cli_lib.sh" test_get_data

RAW=https://raw.githubusercontent.com
M=$T/mirror        # the fake raw.githubusercontent.com
W=$T/want          # every file as it must end up in DATA (also a --from DIR)
FM=$T/manifest.tsv
sha() { sha256sum <"$1" | cut -c1-64; }
run() { bash "$GD" --manifest "$FM" "$@"; }
# no file or folder whose name starts with a dot under $1 (temporaries, the download cache)
no_temps() {
  local left; left=$(find "$1" -name '.*' 2>/dev/null)
  [ -z "$left" ] && ok || bad "$2: temporaries left behind: $left"
}

# ---- the fake mirror and manifest, from the real manifest's rows ----
ROWS=() URLROWS=() LOCALROWS=()
declare -A zips=()
while IFS=$'\t' read -r set dest _ _ url; do
  case $set in ''|'#'*) continue ;; esac
  ROWS+=("$set"$'\t'"$dest"$'\t'"$url")
  mkdir -p "$(dirname "$W/$dest")"
  printf 'fake %s\nsecond line of %s\n' "$dest" "$dest" >"$W/$dest"
  if [ -z "$url" ]; then LOCALROWS+=("$dest"); continue; fi
  URLROWS+=("$dest")
  plain=${url%%#*} how=${url#*#}; [ "$how" = "$url" ] && how=''
  case $plain in "$RAW"/*) ;; *) bad "manifest row $dest: URL $url is not under $RAW"; continue ;; esac
  src=$M/${plain#"$RAW"/}
  mkdir -p "$(dirname "$src")"
  case $how in
    '') cp "$W/$dest" "$src" ;;
    head=*)  # the source has N lines and then more (RNTN's train + dev)
      seq 1 "${how#head=}" | sed "s|^|($dest) |" >"$W/$dest"
      { cat "$W/$dest"; printf 'dev tree 1\ndev tree 2\n'; } >"$src" ;;
    unzip=*)  # the member under a folder, beside macOS resource-fork junk
      stage=$T/zipsrc/${plain#"$RAW"/}
      mkdir -p "$stage/ptb" "$stage/__MACOSX/ptb"
      cp "$W/$dest" "$stage/ptb/${how#unzip=}"
      printf 'junk\n' >"$stage/__MACOSX/ptb/._${how#unzip=}"
      zips[$src]=$stage ;;
    *) bad "manifest row $dest: unknown fragment #$how" ;;
  esac
done <"$REAL"
for z in "${!zips[@]}"; do
  if command -v zip >/dev/null 2>&1; then (cd "${zips[$z]}" && zip -qr "$z" ptb __MACOSX)
  else (cd "${zips[$z]}" && python3 -c 'import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for d, _, fs in os.walk("."):
        for f in fs: z.write(os.path.join(d, f), os.path.join(d, f)[2:])' "$z"); fi # as zip does, from the stage
done
{ echo "# a fake manifest: set, destination, sha256, bytes, url"
  for r in "${ROWS[@]}"; do
    IFS=$'\t' read -r set dest url <<<"$r"
    printf '%s\t%s\t%s\t%s\t%s\n' "$set" "$dest" "$(sha "$W/$dest")" "$(wc -c <"$W/$dest" | tr -d ' ')" "$url"
  done; } >"$FM"
NU=${#URLROWS[@]} NL=${#LOCALROWS[@]} NA=${#ROWS[@]}
[ "$NU" -ge 25 ] && [ "$NL" -ge 1 ] && ok || bad "the real manifest has $NU downloadable and $NL local-only rows"

# every file the loader reads (docs/data.md), downloadable from the manifest
LOADER=(trec/TREC.train.all trec/TREC.test.all
  sst/stsa.fine.{train,dev,test} sst/stsa.binary.{train,dev,test} sst/trees/{train,dev,test}.txt
  mr/rt-polarity.all subj/subj.all cr/custrev.all mpqa/mpqa.all
  sick/SICK_train.txt sick/SICK_trial.txt sick/SICK_test_annotated.txt
  ptb/ptb.{train,valid,test}.txt wikitext2/{train,valid,test}.txt)
for f in "${LOADER[@]}"; do
  printf '%s\n' "${URLROWS[@]}" | grep -qFx "$f" && ok || bad "the manifest has no URL for $f"
done

# ---- a full fetch from the mirror ----
D=$T/data
expect 0 "get-data: $NU ok, 0 skipped, 0 FAILED, $NL local-only not copied" run --base-url "file://$M" "$D"
out=$(run --base-url "file://$M/" "$T/data-slash" 2>&1)
grep -q 'glove.6B.zip' <<<"$out" && grep -q -- '--embeddings glove.6B.50d.txt' <<<"$out" && ok ||
  bad "no word of where GloVe comes from: $out"
grep -q 'en_core_web_sm 3.8.0' <<<"$out" && grep -q -- '--from DIR' <<<"$out" && ok ||
  bad "no word of where conllu/ comes from: $out"
grep -q 'own terms.*docs/data.md' <<<"$out" && ok || bad "no reminder of the data sets' terms: $out"
[ "$(grep -c '^ok ' <<<"$out")" -eq "$NU" ] && ok || bad "want one 'ok' line per file ($NU): $out"
for f in "${LOADER[@]}"; do cmp -s "$W/$f" "$D/$f" && ok || bad "full fetch: $D/$f is not the mirror's file"; done
for f in "${URLROWS[@]}"; do cmp -s "$W/$f" "$D/$f" || bad "full fetch: $D/$f differs"; done
[ "$(wc -l <"$D/sst/trees/train.txt")" -eq 8544 ] && ok || bad "trees/train.txt is not cut at 8544 lines"
for f in "${LOCALROWS[@]}"; do [ -e "$D/$f" ] && bad "a local-only file was made without --from: $f"; done; ok
no_temps "$D" "full fetch"

# ---- again: all skipped ----
expect 0 "get-data: 0 ok, $NU skipped, 0 FAILED" run --base-url "file://$M" "$D"
out=$(run --base-url "file://$M" "$D" 2>&1)
grep -q '^ok ' <<<"$out" && bad "second run fetched again: $out" || ok
[ "$(grep -c '^skipped ' <<<"$out")" -eq "$NU" ] && ok || bad "want one 'skipped' line per file: $out"

# ---- a damaged file already in DATA is replaced ----
echo damaged >>"$D/sst/stsa.fine.dev"
expect 0 'note: sst/stsa.fine.dev is there with another sha256; replacing it' run --base-url "file://$M" "$D"
cmp -s "$W/sst/stsa.fine.dev" "$D/sst/stsa.fine.dev" && ok || bad "the damaged file was not replaced"

# ---- a wrong checksum: named, nothing left, the rest fetched ----
url_of() { awk -F'\t' -v d="$1" '$2 == d { print $5 }' "$FM"; }
SRC=$M/$(url_of sst/stsa.fine.dev); SRC=${SRC/"$RAW"\//}
[ -f "$SRC" ] || bad "no $SRC in the mirror (has the manifest's URL changed?)"
cp "$SRC" "$T/good"; echo tampered >>"$SRC"
want_sha=$(sha "$W/sst/stsa.fine.dev") got_sha=$(sha "$SRC")
D2=$T/data2
expect 1 "FAILED +sst/stsa.fine.dev: sha256 $got_sha .*expected $want_sha .*from file://$SRC" run --base-url "file://$M" "$D2"
[ ! -e "$D2/sst/stsa.fine.dev" ] && ok || bad "a file with the wrong sha256 was kept"
no_temps "$D2" "wrong checksum"
cmp -s "$W/sst/stsa.fine.test" "$D2/sst/stsa.fine.test" && cmp -s "$W/wikitext2/test.txt" "$D2/wikitext2/test.txt" && ok ||
  bad "after a failure the other files were not fetched"
expect 1 "get-data: 0 ok, $((NU - 1)) skipped, 1 FAILED" run --base-url "file://$M" "$D2"
cp "$T/good" "$SRC"
# inside the part of the trees that is kept: the cut file's sha256 no longer matches
TREES=$M/$(url_of sst/trees/train.txt); TREES=${TREES/"$RAW"\//}; TREES=${TREES%%#*}
cp "$TREES" "$T/good"; sed -i '5s/^/X/' "$TREES"
expect 1 'FAILED +sst/trees/train.txt: sha256 .*from file://.*/trees/train.txt \(#head=8544\)' run --only sst --base-url "file://$M" "$T/data3"
[ ! -e "$T/data3/sst/trees/train.txt" ] && ok || bad "a cut file with the wrong sha256 was kept"
cp "$T/good" "$TREES"
# a download that fails
mv "$SRC" "$T/good"
expect 1 'FAILED +sst/stsa.fine.dev: cannot download file://.*/stsa.fine.dev' run --only sst --base-url "file://$M" "$T/data4"
[ ! -e "$T/data4/sst/stsa.fine.dev" ] && ok || bad "a failed download left a file"
no_temps "$T/data4" "failed download"
mv "$T/good" "$SRC"

# ---- --from: no network, local-only files too ----
mv "$M" "$M.off"
expect 0 "get-data: $NA ok, 0 skipped, 0 FAILED$" run --from "$W" "$T/from"
for r in "${ROWS[@]}"; do
  IFS=$'\t' read -r _ f _ <<<"$r"
  cmp -s "$W/$f" "$T/from/$f" || bad "--from: $f was not copied"
done; ok
# a copy with only the downloadable files: the others are said to be missing, not an error
expect 0 "get-data: $NU ok, 0 skipped, 0 FAILED, $NL local-only not copied" run --from "$D" "$T/from2"
cp -r "$W" "$T/bad-copy"; echo tampered >>"$T/bad-copy/mr/rt-polarity.all"
expect 1 "FAILED +mr/rt-polarity.all: sha256 .*expected $(sha "$W/mr/rt-polarity.all") .*from $T/bad-copy/mr/rt-polarity.all" run --from "$T/bad-copy" "$T/from3"
[ ! -e "$T/from3/mr/rt-polarity.all" ] && ok || bad "--from kept a file with the wrong sha256"
no_temps "$T/from3" "--from, wrong checksum"
rm "$T/bad-copy/cr/custrev.all"
expect 1 "FAILED +cr/custrev.all: not in $T/bad-copy" run --from "$T/bad-copy" --only cr "$T/from4"
mv "$M.off" "$M"

# ---- --only ----
expect 0 'get-data: 5 ok, 0 skipped, 0 FAILED' run --only trec,ptb --base-url "file://$M" "$T/only"
[ "$(cd "$T/only" && echo *)" = "ptb trec" ] && ok || bad "--only trec,ptb made: $(cd "$T/only" && echo *)"
for f in trec/TREC.train.all trec/TREC.test.all ptb/ptb.{train,valid,test}.txt; do
  cmp -s "$W/$f" "$T/only/$f" && ok || bad "--only: $f"
done
expect 2 "--only: unknown set 'bogus'" run --only trec,bogus --base-url "file://$M" "$T/x"

# ---- usage errors ----
expect 2 "unknown option '--frobnicate'" bash "$GD" --frobnicate "$T/x"
expect 0 'usage: .*DATA' bash "$GD" --help
expect 2 'name the DATA folder' bash "$GD" --base-url "file://$M"
expect 2 '--from /nonexistent: no such folder' bash "$GD" --from /nonexistent "$T/x"
expect 2 '--only needs a value' bash "$GD" "$T/x" --only
{ head -n 3 "$FM"; printf 'trec\ttrec/x\tnot-a-sha\t1\tfile:///x\n'; } >"$T/bad.tsv"
expect 2 "$T/bad.tsv:4: want set, path, sha256" bash "$GD" --manifest "$T/bad.tsv" "$T/x"
printf 'trec\t../x\t%064d\t1\t\n' 0 >"$T/bad2.tsv"
expect 2 "'../x' is not a relative path inside DATA" bash "$GD" --manifest "$T/bad2.tsv" "$T/x"
[ ! -e "$T/x" ] && ok || bad "a usage error made files"

summary
