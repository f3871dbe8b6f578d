#!/usr/bin/env bash
# Installs what attngrad needs to build and test (Debian/Ubuntu), only what is
# missing.  Each check asks for what the build really uses - a program on
# PATH, a library that pkg-config or the linker finds - never for a header
# another package also ships (Debian's reference BLAS puts a cblas.h where
# OpenBLAS's would be, and linking against it is ten times slower).
#
#   tools/install-deps.sh            build + test dependencies (tools/test-all.sh)
#   tools/install-deps.sh --build    what the build needs alone (tools/train-default.sh)
#   tools/install-deps.sh --check    only say what is missing (exit 1 if any)
set -euo pipefail
check_only=0 tests=1
case "${1:-}" in
  --check) check_only=1 ;;
  --build) tests=0 ;;
  '') ;;
  *) echo "usage: $0 [--build | --check]" >&2; exit 2 ;;
esac

need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pc() { have_cmd pkg-config && pkg-config --exists "$1" 2>/dev/null; }
# a shared library the linker would find (ldconfig's cache, or this
# machine's own multiarch dir: not another architecture's, such as the
# arm64 OpenBLAS a cross build installs, tools/cross/aarch64-linux-gnu.ini)
multiarch=$(cc -dumpmachine 2>/dev/null || echo "$(uname -m)-linux-gnu")
libcache=$(ldconfig -p 2>/dev/null || true) # read whole: a reader that stops early would SIGPIPE under pipefail
native_tag=$(awk '$1 == "libc.so.6" { tag = $2 } END { print tag }' <<<"$libcache") # "(libc6,x86-64)"
have_lib() {
  [ -n "$native_tag" ] && grep "/$1\.so\b" <<<"$libcache" | grep -F "$native_tag" >/dev/null && return 0
  [ -e "/usr/lib/$multiarch/$1.so" ] || [ -e "/usr/lib/$1.so" ]
}

have_cmd meson || need+=(meson)
have_cmd ninja || need+=(ninja-build)
have_cmd cc || need+=(gcc)
# C++: the CUDA emulator build of the tests (-Dgpu_emulator=true,
# tools/test-all.sh) compiles the .cu files with it; nvcc needs it too
have_cmd c++ || need+=(g++)
have_cmd pkg-config || need+=(pkg-config)
# OpenBLAS: meson.build asks pkg-config for 'openblas', then for libopenblas.
{ have_pc openblas || have_lib libopenblas; } || need+=(libopenblas-dev)
# MPI for data-parallel training and its tests (meson -Dmpi=auto finds it
# through pkg-config's ompi-c or the mpicc wrapper; mpirun runs the tests).
{ have_pc ompi-c || have_pc mpich || have_cmd mpicc; } || need+=(libopenmpi-dev)
have_cmd mpirun || need+=(openmpi-bin)
# NCCL (--device cuda under mpirun) comes with the CUDA Toolkit, not from
# Debian: nothing to install here; without it the ranks' gradients go
# through host memory (docs/distributed.md, "On GPUs").

# The tests' own (tools/test-all.sh), beyond the build's.
if [ $tests -eq 1 ]; then
  have_cmd python3 || need+=(python3)
  have_cmd valgrind || need+=(valgrind)
  # tools/get-data.sh fetches the real data sets with curl (file:// URLs in
  # its test too) and unzips PTB; test_mpi's two-host run puts each rank in
  # a network namespace of its own (iproute2's ip).  Without them those tests
  # skip, so a fresh machine would never run them.
  have_cmd curl || need+=(curl)
  have_cmd unzip || need+=(unzip)
  have_cmd ip || need+=(iproute2)
  # clang that links a libFuzzer target (tools/fuzz.sh's probe), for the
  # tests' fuzz step; the runtime is a package of its own.  The build stays gcc.
  fuzz_probe=$(mktemp -d)
  trap 'rm -rf "$fuzz_probe"' EXIT
  { have_cmd clang &&
    printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
      clang -fsanitize=fuzzer,address -x c - -o "$fuzz_probe/t" 2>/dev/null; } || need+=(clang libclang-rt-dev)
fi

if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ $check_only -eq 1 ]; then echo "missing: ${need[*]}"; exit 1; fi
echo "installing: ${need[*]}"
sudo_=""
[ "$(id -u)" -eq 0 ] || sudo_="sudo"
$sudo_ apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
