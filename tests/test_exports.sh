#!/usr/bin/env bash
# test_exports.sh LIB.so HEADER... - the installed shared library exports
# the public API and nothing else: every defined dynamic symbol is a name
# the public headers declare (or ag__item_at, which ag_item expands to, or
# the real-type link guard), no internal ag__ name leaks, and the core of
# the API is there.  Skips (77) without nm.
set -euo pipefail
lib=$1
shift
command -v nm >/dev/null || { echo "SKIP: no nm"; exit 77; }
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
declared=$(sed -e 's://.*$::' "$@" | grep -oE 'ag_[a-z][a-z0-9_]*' | sort -u)
fail=0
n=0
for s in $exported; do
  n=$((n + 1))
  case $s in
    ag__item_at | ag_link_with_attngrad_*) continue ;;
    ag__*) echo "FAIL: internal symbol exported: $s"; fail=1; continue ;;
  esac
  grep -qx "$s" <<<"$declared" || { echo "FAIL: exported but in no public header: $s"; fail=1; }
done
for s in ag_tensor_new ag_backward ag_step_end ag_masked_softmax ag_optim_step ag_model_loss ag_train; do
  grep -qx "$s" <<<"$exported" || { echo "FAIL: public function not exported: $s"; fail=1; }
done
[ "$n" -gt 100 ] || { echo "FAIL: only $n symbols exported"; fail=1; }
[ $fail -eq 0 ] && echo "ok: $n symbols exported, all declared in the public headers"
exit $fail
