#!/usr/bin/env bash
# Proves attngrad works as a library outside its tree, the ways a user takes
# it (README, "Use it from your own program"):
#   1. `meson install` into a scratch prefix, then programs built out of tree
#      with cc $(pkg-config --cflags --libs attngrad) - shared and --static -
#      and attngrad-f64.pc for a double-precision program, and a program on
#      the installed trainer (<attngrad/train.h>); the installed `attngrad`
#      program runs;
#   2. a small meson project that gets attngrad as a subproject through a
#      wrap file (dependency('attngrad')).
# Each check prints "ok NAME" or "FAILED NAME" with the log's tail; the last
# line is "install: N passed, M failed".  Needs meson, ninja, pkg-config, cc.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/attngrad-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { # name, command...
  local name=$1; shift
  if "$@" >"$tmp/log" 2>&1; then pass=$((pass + 1)); echo "ok $name"
  else fail=$((fail + 1)); echo "FAILED $name"; tail -20 "$tmp/log"; fi
}

# -- 1. install, pkg-config --
prefix=$tmp/prefix
# -O0 without debug info: what is checked here is the installed files and
# how a program finds them, not speed (the release and sanitizer builds
# test the code), and an unoptimised build is what a user's debug build
# compiles too; it takes a third of the release build's compile time
check "meson install into a scratch prefix" \
  bash -c "meson setup '$tmp/build' '$src' --prefix='$prefix' -Dtests=false -Doptimization=0 -Ddebug=false &&
    meson install -C '$tmp/build' --quiet"
pc=$(find "$prefix" -name attngrad.pc | head -1)
pcdir=$(dirname "${pc:-$prefix/lib/pkgconfig/x}")
libdir=$(dirname "$pcdir")
export PKG_CONFIG_PATH=$pcdir LD_LIBRARY_PATH=$libdir
cc_=${CC:-cc}
check "installed files (header, libraries with soname, .pc, programs)" bash -c "
  test -f '$prefix/include/attngrad.h' && test -f '$prefix/include/attngrad/train.h' && test -x '$prefix/bin/attngrad' && test -x '$prefix/bin/attngrad-f64' && test -x '$prefix/bin/optim_experiments' &&
  test -f '$libdir/libattngrad.a' && test -f '$libdir/libattngrad-f64.a' &&
  readelf -d '$libdir/libattngrad.so' | grep -q 'SONAME.*libattngrad.so.0' &&
  readelf -d '$libdir/libattngrad-f64.so' | grep -q 'SONAME.*libattngrad-f64.so.0' &&
  pkg-config --cflags attngrad-f64 | grep -q -- -DAG_REAL_DOUBLE"
check "examples/mlp.c with pkg-config attngrad (shared)" bash -c "
  $cc_ -std=c11 -O2 '$src/examples/mlp.c' \$(pkg-config --cflags --libs attngrad) -lm -o '$tmp/mlp' &&
  ldd '$tmp/mlp' | grep -q libattngrad.so.0 && '$tmp/mlp' 300"
if pkg-config --static --libs attngrad | grep -q cudart; then
  # a CUDA build: the CUDA runtime has no fully static form, so libattngrad.a
  # goes in whole and the system libraries stay shared
  check "examples/mlp.c with libattngrad.a and pkg-config --static (CUDA build)" bash -c "
    $cc_ -std=c11 -O2 '$src/examples/mlp.c' \$(pkg-config --cflags attngrad) -Wl,-Bstatic -lattngrad -Wl,-Bdynamic \
      \$(pkg-config --static --libs attngrad | sed 's/ -lattngrad / /') -o '$tmp/mlp-static' &&
    ! ldd '$tmp/mlp-static' | grep -q libattngrad && '$tmp/mlp-static' 300"
else
  check "examples/mlp.c linked -static with pkg-config --static attngrad" bash -c "
    $cc_ -static -std=c11 -O2 '$src/examples/mlp.c' \$(pkg-config --static --cflags --libs attngrad) -o '$tmp/mlp-static' &&
    ! ldd '$tmp/mlp-static' >/dev/null 2>&1 && '$tmp/mlp-static' 300"
fi
check "an f64 gradient check with pkg-config attngrad-f64" bash -c "
  $cc_ -std=c11 -O2 '$src/tests/install/gradcheck_f64.c' \$(pkg-config --cflags --libs attngrad-f64) -lm -o '$tmp/gc' &&
  '$tmp/gc'"
# the two real types never mix: compiled for one, linked with the other
# library, a program fails to link, naming the library it needs
check "a program compiled for doubles does not link with libattngrad" bash -c "
  ! $cc_ -std=c11 -O2 '$src/examples/mlp.c' \$(pkg-config --cflags attngrad-f64) \$(pkg-config --libs attngrad) -lm \
    -o '$tmp/mixed' 2>'$tmp/mixed.err' && grep -q ag_link_with_attngrad_f64__compiled_with_AG_REAL_DOUBLE '$tmp/mixed.err'"
check "a program compiled for floats does not link with libattngrad-f64" bash -c "
  ! $cc_ -std=c11 -O2 '$src/examples/mlp.c' \$(pkg-config --cflags attngrad) \$(pkg-config --libs attngrad-f64) -lm \
    -o '$tmp/mixed' 2>'$tmp/mixed.err' && grep -q ag_link_with_attngrad_f32__compiled_without_AG_REAL_DOUBLE '$tmp/mixed.err'"
check "the trainer from <attngrad/train.h> with pkg-config attngrad" bash -c "
  $cc_ -std=c11 -O2 '$src/tests/install/train_synth.c' \$(pkg-config --cflags --libs attngrad) -o '$tmp/ts' &&
  '$tmp/ts' '$tmp/run-installed'"
check "the installed attngrad program" bash -c "'$prefix/bin/attngrad' models | grep -q mpsan"
# the build tree without installing: meson-uninstalled/attngrad-uninstalled.pc
check "examples/mlp.c with pkg-config attngrad-uninstalled (the build tree)" bash -c "
  export PKG_CONFIG_PATH='$tmp/build/meson-uninstalled' LD_LIBRARY_PATH='$tmp/build' &&
  $cc_ -std=c11 -O2 '$src/examples/mlp.c' \$(pkg-config --cflags --libs attngrad-uninstalled) -lm -o '$tmp/mlp-un' &&
  '$tmp/mlp-un' 300"

# -- 2. a meson subproject through a wrap file (not the installed copy) --
unset PKG_CONFIG_PATH LD_LIBRARY_PATH
proj=$tmp/consumer
mkdir -p "$proj/subprojects/attngrad"
cp "$src/tests/install/consumer/meson.build" "$src/examples/mlp.c" "$src/tests/install/gradcheck_f64.c" \
  "$src/tests/install/train_synth.c" "$proj/"
# the checkout as it is (tracked and new files), vendored as the subproject
(cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 tar cf -) | tar xf - -C "$proj/subprojects/attngrad"
cat >"$proj/subprojects/attngrad.wrap" <<'WRAP'
[wrap-file]
directory = attngrad

[provide]
dependency_names = attngrad, attngrad-f64
WRAP
check "a meson project with attngrad as a subproject" bash -c "
  cd '$proj' && meson setup build -Doptimization=0 -Ddebug=false -Dattngrad:optimization=0 -Dattngrad:debug=false &&
  ninja -C build && build/mlp 300 && build/gradcheck_f64 &&
  build/train_synth '$tmp/run-subproject'"

echo "install: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
