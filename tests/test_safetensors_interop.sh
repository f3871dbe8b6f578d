#!/usr/bin/env bash
# test_safetensors_interop.sh - our checkpoints against the reference
# safetensors implementation, both ways (tests/read_safetensors.py with the
# attngrad program), in a virtual environment cached in the build folder
# that holds the `safetensors` and `numpy` packages (small wheels, installed
# with pip on first use).  Without the registry it says so and skips (77).
#
#   tests/test_safetensors_interop.sh build/tests/test_safetensors_f32 build/tools/attngrad VENV_DIR
set -u
WRITER=$1 AG=$2 VENV=$3
[ -x "$WRITER" ] && [ -x "$AG" ] || { echo "usage: $0 test_safetensors attngrad venv-dir"; exit 2; }
PY=$VENV/bin/python
if ! "$PY" -c 'import safetensors.numpy, numpy' 2>/dev/null; then
  rm -rf "$VENV"
  if ! python3 -m venv "$VENV" >"$VENV.log" 2>&1; then
    echo "python3 -m venv failed (is python3-venv installed?): skipping"; tail -n 3 "$VENV.log"; exit 77
  fi
  if ! timeout 300 "$VENV/bin/pip" install --disable-pip-version-check -q safetensors numpy >>"$VENV.log" 2>&1; then
    echo "pip could not install safetensors and numpy (is the package registry reachable?): skipping"
    tail -n 3 "$VENV.log"; rm -rf "$VENV"; exit 77
  fi
fi
"$PY" -c 'import safetensors, numpy; print("safetensors", safetensors.__version__, "numpy", numpy.__version__)'
exec "$PY" "$(dirname "$0")/read_safetensors.py" "$WRITER" "$AG"
