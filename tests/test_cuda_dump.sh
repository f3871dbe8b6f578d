#!/usr/bin/env bash
# test_cuda_dump.sh - `attngrad dump-step --device cuda` of every model
# variant against the CPU's dump of the same tiny model and batch: the loss,
# every gradient and parameter, compared by st_compare (f64 1e-9 and f32
# 1e-4 relative to each tensor's scale; summation orders differ between
# cuBLAS and OpenBLAS, nothing else should).  Exit 77 where no GPU can run.
#
#   test_cuda_dump.sh ATTNGRAD ATTNGRAD_F64 ST_COMPARE
set -u
[ $# -eq 3 ] || { echo "usage: $0 attngrad attngrad-f64 st_compare" >&2; exit 2; }
AG=$1 AG64=$2 CMP=$3
. "$(dirname "$0")/cli_lib.sh" test_cuda_dump

out=$("$AG64" dump-step --model mpsan --device cuda --out "$T/probe.st" 2>&1) || {
  echo "SKIP: $out"
  exit 77
}
variants=("--model mpsan" "--model mpsan --task relatedness" "--model dual_axial" "--model ms_san"
  "--model ms_san --task pair" "--model mtsa" "--model poslm" "--model poslm --attention standard"
  "--model poslm --attention none")
for v in "${variants[@]}"; do
  for build in f64 f32; do
    exe=$AG64 tol=1e-9
    [ $build = f32 ] && exe=$AG tol=1e-4
    # shellcheck disable=SC2086 # the variant's words are options
    if "$exe" dump-step $v --out "$T/cpu.st" >/dev/null && "$exe" dump-step $v --device cuda --out "$T/gpu.st" >/dev/null; then
      res=$("$CMP" "$T/cpu.st" "$T/gpu.st" "$tol")
      if [ $? -eq 0 ]; then ok; echo "ok $build $v: $res"; else bad "$build $v: $res"; fi
    else
      bad "$build $v: dump-step failed"
    fi
  done
done
summary
