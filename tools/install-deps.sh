#!/usr/bin/env bash
# Installs what attngrad needs to build and test (Debian/Ubuntu), only if missing.
set -euo pipefail
need=()
command -v meson >/dev/null || need+=(meson)
command -v ninja >/dev/null || need+=(ninja-build)
command -v cc >/dev/null || need+=(gcc)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -f /usr/include/x86_64-linux-gnu/cblas.h ] || [ -f /usr/include/cblas.h ] ||
  [ -f /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || need+=(libopenblas-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  sudo_=""
  [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${need[@]}" >/dev/null
fi
