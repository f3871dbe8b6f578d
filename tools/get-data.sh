#!/usr/bin/env bash
# get-data.sh - fetches the benchmark data sets into the layout attngrad's
# loader expects (docs/data.md), every file pinned by its sha256 in
# tools/data-manifest.tsv: a source URL at a fixed git commit, and the
# checksum of the final file.
#
#   tools/get-data.sh DATA                       download every data set
#   tools/get-data.sh --only trec,sst DATA       only these sets
#   tools/get-data.sh --from COPY DATA           copy from a folder of the same
#                                                layout instead (no network)
#   tools/get-data.sh --base-url file:///mirror DATA
#
# Each file is written to a temporary name (.NAME.get-data.PID) in its
# destination folder and renamed only once its sha256 matches the manifest;
# a file already there with the right sha256 is skipped, so running it again
# is cheap and safe.  One line per file: "ok", "skipped" or "FAILED" (the
# last on stderr, naming the file, both checksums and the source).  A
# failure does not stop the run: the rest are tried, nothing is left of the
# failed file, and the exit status is 1.  Exit status 2: a usage or
# manifest error, before anything is fetched.
#
# Needs bash, coreutils (sha256sum), curl (or wget, for http(s) only) and,
# for the PTB zip, unzip.
set -u

RAW=https://raw.githubusercontent.com
here=$(cd "$(dirname "$0")" && pwd)
manifest=$here/data-manifest.tsv
from='' only='' base='' data=''

usage() {
  cat <<EOF
usage: $0 [options] DATA

Downloads the benchmark data sets into DATA/<set>/..., the layout attngrad
reads (docs/data.md), checking every file against the sha256 in
tools/data-manifest.tsv.

options:
  --from DIR        copy the files from DIR, a folder of the same layout,
                    instead of downloading them (still checks every sha256);
                    also copies what has no public source, when DIR has it:
                    DIR/<set>/conllu/*.conllu and DIR/glove/*
  --only SET,...    only these sets ($(sets_list))
  --base-url URL    fetch from URL instead of $RAW
                    (a mirror with the same OWNER/REPO/COMMIT/PATH layout,
                    e.g. file:///srv/mirror)
  --manifest FILE   read FILE instead of tools/data-manifest.tsv
  -h, --help        this text

A file already in DATA with the right sha256 is skipped.  A file whose
sha256 does not match is reported and not kept; the others are still
fetched, and the exit status is 1.  Each data set has its own terms of use:
see docs/data.md.
EOF
}

die() { echo "get-data: $*" >&2; exit 2; }

# the sets the manifest names, comma-separated (for --help and --only)
sets_list() {
  [ -r "$manifest" ] || { echo "see the manifest"; return; }
  awk -F'\t' '!/^#/ && NF { if (!seen[$1]++) printf "%s%s", (n++ ? "," : ""), $1 }' "$manifest"
}

need_arg() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value (--help for usage)"; }

while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --from) need_arg "$@"; from=$2; shift 2 ;;
    --from=*) from=${1#*=}; shift ;;
    --only) need_arg "$@"; only=$2; shift 2 ;;
    --only=*) only=${1#*=}; shift ;;
    --base-url) need_arg "$@"; base=$2; shift 2 ;;
    --base-url=*) base=${1#*=}; shift ;;
    --manifest) need_arg "$@"; manifest=$2; shift 2 ;;
    --manifest=*) manifest=${1#*=}; shift ;;
    --) shift; [ $# -gt 0 ] && { data=$1; shift; }; [ $# -eq 0 ] || die "one DATA folder, not '$*'" ;;
    -?*) die "unknown option '$1' (--help for usage)" ;;
    *) [ -z "$data" ] || die "one DATA folder, not '$data' and '$1'"; data=$1; shift ;;
  esac
done
[ -n "$data" ] || die "name the DATA folder to fill (--help for usage)"
[ -r "$manifest" ] && [ -f "$manifest" ] || die "no manifest '$manifest'"
[ -z "$from" ] || [ -d "$from" ] || die "--from $from: no such folder"
base=${base%/}
command -v sha256sum >/dev/null 2>&1 || die "needs sha256sum (coreutils)"

# ---- the manifest ----
M_SET=() M_DEST=() M_SHA=() M_BYTES=() M_URL=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  line=${line%$'\r'}
  case $line in ''|'#'*) continue ;; esac
  IFS=$'\t' read -r -a f <<<"$line"
  # an empty URL (local copy only) leaves 4 fields
  { [ ${#f[@]} -eq 4 ] || [ ${#f[@]} -eq 5 ]; } &&
    [[ ${f[0]} =~ ^[A-Za-z0-9_.-]+$ ]] && [[ ${f[2]} =~ ^[0-9a-f]{64}$ ]] && [[ ${f[3]} =~ ^[0-9]+$ ]] ||
    die "$manifest:$lineno: want set, path, sha256 (64 hex digits), bytes and URL, tab-separated"
  case /${f[1]}/ in
    *//*|*/../*|*/./*) die "$manifest:$lineno: '${f[1]}' is not a relative path inside DATA" ;;
  esac
  case ${f[1]} in "${f[0]}"/*) ;; *) die "$manifest:$lineno: '${f[1]}' is not under the set's folder '${f[0]}/'" ;; esac
  M_SET+=("${f[0]}") M_DEST+=("${f[1]}") M_SHA+=("${f[2]}") M_BYTES+=("${f[3]}") M_URL+=("${f[4]:-}")
done <"$manifest"
[ ${#M_DEST[@]} -gt 0 ] || die "$manifest: no files listed"

declare -A want=()
if [ -n "$only" ]; then
  known=",$(sets_list),"
  IFS=, read -r -a picked <<<"$only"
  for s in "${picked[@]}"; do
    [ -n "$s" ] || continue
    case $known in *",$s,"*) want[$s]=1 ;; *) die "--only: unknown set '$s' (sets: $(sets_list))" ;; esac
  done
  [ ${#want[@]} -gt 0 ] || die "--only: no set named"
fi

# ---- helpers ----
sha_of() { local h; h=$(sha256sum <"$1") && echo "${h%% *}"; }
size_of() { wc -c <"$1" | tr -d ' '; }

downloader=''
if command -v curl >/dev/null 2>&1; then downloader=curl
elif command -v wget >/dev/null 2>&1; then downloader=wget; fi

# fetch URL OUT: a download, or a message on stderr and non-zero
fetch() {
  case $downloader:$1 in
    curl:*) curl -fsSL --retry 2 --connect-timeout 30 -o "$2" "$1" ;;
    wget:file://*) echo "file:// URLs need curl" >&2; return 1 ;;
    wget:*) wget -q --tries=3 --timeout=30 -O "$2" "$1" ;;
    *) echo "neither curl nor wget is installed" >&2; return 1 ;;
  esac
}

mkdir -p "$data" || die "cannot make $data"
cache='' tmp=''
cleanup() { [ -z "$tmp" ] || rm -f "$tmp"; [ -z "$cache" ] || rm -rf "$cache"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
declare -A got=()   # URL without fragment -> its download in $cache

# download URL (no fragment), once per run: sets DL to the local copy, or
# WHY to the reason and returns non-zero
DL='' WHY=''
download() {
  local url=$1 out
  DL='' WHY=''
  if [ -n "${got[$url]:-}" ]; then DL=${got[$url]}; return 0; fi
  if [ -z "$cache" ]; then
    cache=$(mktemp -d "$data/.get-data.XXXXXX") || { WHY="cannot make a folder in $data"; return 1; }
  fi
  out=$cache/$(( ${#got[@]} + 1 ))
  if ! WHY=$(fetch "$url" "$out" 2>&1); then
    rm -f "$out"; WHY=$(printf '%s\n' "${WHY:-download failed}" | tail -n 1); return 1
  fi
  WHY='' got[$url]=$out DL=$out
}

n_ok=0 n_skip=0 n_fail=0 local_missing=0 glove_missing=0 conllu_missing=0
failed() { n_fail=$((n_fail + 1)); echo "FAILED   $*" >&2; }

for i in "${!M_DEST[@]}"; do
  set_=${M_SET[$i]} dest=${M_DEST[$i]} sha=${M_SHA[$i]} bytes=${M_BYTES[$i]} url=${M_URL[$i]}
  [ -z "$only" ] || [ -n "${want[$set_]:-}" ] || continue
  target=$data/$dest dir=$data/$dest name=${dest##*/}
  dir=${dir%/*}

  if [ -f "$target" ] && [ "$(sha256sum <"$target")" = "$sha  -" ]; then
    n_skip=$((n_skip + 1)); echo "skipped  $dest (present, sha256 matches)"; continue
  fi
  src=''
  if [ -n "$from" ]; then
    src=$from/$dest
  elif [ -z "$url" ]; then
    src=none  # local copy only, nowhere to fetch it from
  fi
  if [ -z "$url" ] && { [ "$src" = none ] || [ ! -f "$src" ]; }; then
    local_missing=$((local_missing + 1))
    case $dest in glove/*|*/glove/*) glove_missing=1 ;; */conllu/*) conllu_missing=1 ;; esac
    continue
  fi
  [ -e "$target" ] && echo "note: $dest is there with another sha256; replacing it" >&2

  mkdir -p "$dir" || { failed "$dest: cannot make $dir"; continue; }
  tmp=$dir/.$name.get-data.$$
  rm -f "$tmp"
  if [ -n "$from" ]; then
    where=$src
    [ -f "$src" ] || { failed "$dest: not in $from (no $src)"; tmp=''; continue; }
    cp -- "$src" "$tmp" || { rm -f "$tmp"; failed "$dest: cannot copy $src"; tmp=''; continue; }
  else
    plain=${url%%#*}
    how=${url:${#plain}}; how=${how#\#}
    [ -z "$base" ] || case $plain in "$RAW"/*) plain=$base${plain#"$RAW"} ;; esac
    where=$plain${how:+ (#$how)}
    if ! download "$plain"; then
      failed "$dest: cannot download $plain: $WHY"; tmp=''; continue
    fi
    dl=$DL
    why=''
    case $how in
      '') cp -- "$dl" "$tmp" ;;
      head=*)
        n=${how#head=}
        if [[ $n =~ ^[0-9]+$ ]]; then head -n "$n" -- "$dl" >"$tmp"
        else why="bad '#$how' in the manifest"; false; fi ;;
      unzip=*)
        member=${how#unzip=}
        if ! command -v unzip >/dev/null 2>&1; then
          why="unzip is not installed"; false
        else
          m=$(unzip -Z1 "$dl" 2>/dev/null | awk -v m="$member" \
                '!/^__MACOSX\// && ($0 == m || substr($0, length($0) - length(m)) == "/" m)')
          if [ "$(printf '%s\n' "$m" | grep -c .)" -ne 1 ]; then
            why="no single member '$member' in the zip"; false
          else
            unzip -p "$dl" "$m" >"$tmp"
          fi
        fi ;;
      *) why="unknown transformation '#$how' in the manifest"; false ;;
    esac
    if [ $? -ne 0 ]; then
      rm -f "$tmp"; tmp=''
      failed "$dest: cannot make it from $where${why:+: $why}"; continue
    fi
  fi

  actual=$(sha_of "$tmp")
  if [ "$actual" != "$sha" ]; then
    got_bytes=$(size_of "$tmp"); rm -f "$tmp"; tmp=''
    failed "$dest: sha256 $actual ($got_bytes bytes), expected $sha ($bytes bytes), from $where"
    continue
  fi
  mv -f -- "$tmp" "$target" || { rm -f "$tmp"; tmp=''; failed "$dest: cannot rename into place"; continue; }
  tmp=''
  n_ok=$((n_ok + 1)); echo "ok       $dest"
done

if [ $glove_missing -eq 1 ]; then
  echo "GloVe: no pinned public copy of ours (glove/, GloVe 6B 50d cut to these data sets' words;" \
    "--from DIR copies it when DIR has it). Get https://nlp.stanford.edu/data/glove.6B.zip, unzip it," \
    "and train with --embeddings glove.6B.50d.txt"
fi
if [ $conllu_missing -eq 1 ]; then
  echo "conllu/: the dependency parses are not downloadable: they were made with spaCy" \
    "en_core_web_sm 3.8.0 on the data sets' own tokens (docs/data.md); --from DIR copies" \
    "DIR/<set>/conllu/*.conllu when DIR has them, and without them MS-SAN reads a chain"
fi
echo "Each data set has its own terms (several are research-only; SICK is CC BY-NC-SA 3.0, WikiText-2 CC BY-SA 3.0, PTB's text LDC's): see docs/data.md"
[ $local_missing -eq 0 ] || local_note=", $local_missing local-only not copied"
echo "get-data: $n_ok ok, $n_skip skipped, $n_fail FAILED${local_note:-}"
[ $n_fail -eq 0 ]
