#!/usr/bin/env bash
# The main job: build attngrad and train the default model on built-in data.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
exec build/examples/mlp "$@"
