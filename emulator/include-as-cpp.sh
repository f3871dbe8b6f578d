#!/bin/sh
# include-as-cpp.sh SRC.cu OUT.cpp: a C++ file that includes SRC by its
# absolute path, so that its own #includes resolve beside it (meson.build,
# -Dgpu_emulator=true).
printf '#include "%s"\n' "$(realpath "$1")" > "$2"
