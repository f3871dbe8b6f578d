#!/usr/bin/env bash
# The main job: build attngrad and train the default model (MPSAN, d=64) on
# the built-in generated task - no download needed.  Extra arguments go to
# `attngrad train` (see build/tools/attngrad train --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh --build
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
exec build/tools/attngrad train "$@"
