#!/bin/sh
# cuda-headers.sh SRCROOT NVCC_ARGS... -- FILE.cu...
# The project's own headers that the .cu files include, directly or not, one
# per line, relative to SRCROOT.  meson.build reads them when meson is too old
# to have nvcc write dependency files (before 1.4), so that an edited header
# still rebuilds the .cu objects.
set -eu
root=$1; shift
nvcc=""
while [ "$1" != "--" ]; do nvcc="$nvcc $1"; shift; done
shift
cd "$root"
for cu in "$@"; do
  # nvcc -M prints "obj: dep dep \" lines; keep the dependencies inside SRCROOT
  $nvcc -M -I. -Iinclude "$cu" | tr ' \\' '\n\n' | grep -E '\.(h|cuh|hpp)$' || true
done | while read -r dep; do
  path=$(realpath -m "$dep")
  case "$path" in "$(pwd)"/*) echo "${path#"$(pwd)"/}" ;; esac
done | sort -u
