#!/usr/bin/env bash
# test_param_groups.sh - attngrad train --param-group as a user runs it, on
# the generated task: the header's count of what each group matched; an
# embedding at lr_scale=0 bit-identical to its initial values (those of a
# run that freezes it: the same seed, and with no clipping the other
# parameters the same too), where a run without the group moves it; the
# groups in the run's config, rebuilt by --resume (the embedding still as
# it was) and by eval; a changed group on --resume said and applied; a
# parameter the run froze refused to --resume unfrozen; muon=0 routing the
# head to Muon's AdamW part, resumed to the bit and refused when a resume
# routes it otherwise; and the refusals of a pattern matching nothing, a bad
# key, value or set, muon=0 for another optimizer.
#
#   tests/test_param_groups.sh build/tools/attngrad
set -u
AG=$1
[ -x "$AG" ] || { echo "usage: $0 attngrad"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_param_groups

SMALL=(--synth-n 200 --dim 8 --batch 25 --progress none --threads 1 --clip 0)

# the bytes of tensor NAME of a safetensors FILE, as hex (python3: the header is JSON)
tensor_hex() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
b, e = json.loads(raw[8:8 + n])[sys.argv[2]]["data_offsets"]
print(raw[8 + n + b:8 + n + e].hex())
PY
}
# every parameter's bytes (not the optimizer's state), name by name
params_hex() {
  python3 - "$1" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
for k in sorted(h):
    if k != "__metadata__" and not k.startswith("optim.") and not k.startswith("sched."):
        b, e = h[k]["data_offsets"]
        print(k, raw[8 + n + b:8 + n + e].hex())
PY
}

expect 0 "param group 'embed\.\*:lr_scale=0': 1 parameter, 192 values \(embed\.weight\)" \
  "$AG" train "${SMALL[@]}" --max-steps 6 --param-group 'embed.*:lr_scale=0' --out "$T/scaled"
expect 0 "param group '@bias_norm:weight_decay=0': [0-9]+ parameters, [0-9]+ values \(unit0\.dense\.bias, .*, \.\.\.\)" \
  "$AG" train "${SMALL[@]}" --max-steps 6 --param-group '*:weight_decay=0.01' --param-group '@bias_norm:weight_decay=0' --out "$T/decay"
expect 0 "param group 'embed\.\*:freeze=1': 1 parameter" \
  "$AG" train "${SMALL[@]}" --max-steps 6 --param-group 'embed.*:freeze=1' --out "$T/frozen"
expect 0 "run folder" "$AG" train "${SMALL[@]}" --max-steps 6 --out "$T/plain"
grep -aq 'param-group=embed\.\*:lr_scale=0' "$T/scaled/last.safetensors" && ok || bad "the run's config lacks its group"
grep -aq 'param-group=\*:weight_decay=0\.01.u000aparam-group=@bias_norm:weight_decay=0' "$T/decay/last.safetensors" && ok ||
  bad "the run's config lacks its two groups, in order"
grep -aq 'optim.adadelta.v.embed.weight' "$T/frozen/last.safetensors" && bad "freeze=1 left optimizer state" || ok
grep -aq 'optim.adadelta.v.embed.weight' "$T/scaled/last.safetensors" && ok || bad "lr_scale=0 kept no state"

if command -v python3 >/dev/null; then
  init=$(tensor_hex "$T/frozen/last.safetensors" embed.weight)
  [ "$(tensor_hex "$T/scaled/last.safetensors" embed.weight)" = "$init" ] && ok || bad "lr_scale=0 moved the embedding"
  [ "$(tensor_hex "$T/plain/last.safetensors" embed.weight)" != "$init" ] && ok ||
    bad "the run without groups did not move the embedding: the test sees nothing"
  [ "$(params_hex "$T/scaled/last.safetensors")" = "$(params_hex "$T/frozen/last.safetensors")" ] && ok ||
    bad "lr_scale=0 and freeze=1 trained the other parameters differently"
  # --resume rebuilds the group from the config: the embedding stays, no note of a change
  out=$("$AG" train "${SMALL[@]}" --resume --max-steps 12 --out "$T/scaled" 2>&1) && ok || bad "resume: $out"
  grep -q "param group 'embed\.\*:lr_scale=0': 1 parameter" <<<"$out" && ok || bad "the resumed header lacks the group"
  grep -q "parameter groups are" <<<"$out" && bad "an unchanged resume said the groups changed" || ok
  [ "$(tensor_hex "$T/scaled/last.safetensors" embed.weight)" = "$init" ] && ok || bad "resume moved the embedding"
  # a group given on --resume goes after the run's and wins: said, and the embedding moves
  expect 0 "note: .*/last.safetensors: the parameter groups are this command's from here on: 'embed\.\*:lr_scale=0' 'embed\.\*:lr_scale=1' \(the run's: 'embed\.\*:lr_scale=0'\)" \
    "$AG" train "${SMALL[@]}" --resume --max-steps 18 --param-group 'embed.*:lr_scale=1' --out "$T/scaled"
  [ "$(tensor_hex "$T/scaled/last.safetensors" embed.weight)" != "$init" ] && ok || bad "lr_scale=1 on resume did not train"
  # the same command line again (a group the run has): the group moves to the end, not added twice
  out=$("$AG" train "${SMALL[@]}" --resume --max-steps 20 --param-group 'embed.*:lr_scale=1' --out "$T/scaled" 2>&1) && ok ||
    bad "resume with the run's own group: $out"
  grep -q "parameter groups are" <<<"$out" && bad "a group the run had, given again, changed the groups: $out" || ok
  [ "$(grep -ao 'embed\.\*:lr_scale=1' "$T/scaled/last.safetensors" | wc -l)" -eq 1 ] && ok || bad "the group given again was added twice"
fi
# '' clears the groups before it: the run's own
expect 0 "the parameter groups are this command's from here on: none \(the run's: '\*:weight_decay=0\.01' '@bias_norm:weight_decay=0'\)" \
  "$AG" train "${SMALL[@]}" --resume --max-steps 8 --param-group '' --out "$T/decay"
grep -aq 'param-group=' "$T/decay/last.safetensors" && bad "'' left groups in the config" || ok
# a parameter the run froze has no optimizer state: --resume cannot train it
expect 1 "parameter 'embed\.weight' was frozen in the run \(no 'v' state\): --resume cannot train it" \
  "$AG" train "${SMALL[@]}" --resume --max-steps 8 --param-group '' --out "$T/frozen"
expect 0 "param group 'embed\.\*:freeze=1'" "$AG" train "${SMALL[@]}" --resume --max-steps 8 --out "$T/frozen"
expect 0 '^test +accuracy [0-9.]+%' "$AG" eval --ckpt "$T/decay/best.safetensors"

# the header's size of the optimizer's state: Adafactor's factors, a
# fraction of Adadelta's two slots of every value (under a fifth at d 8)
factored=$("$AG" train "${SMALL[@]}" --optim adafactor --max-steps 2 --out "$T/adafactor" 2>&1 |
  sed -n 's/^  optimizer state: row_var, col_var, variance, \([0-9]*\) values ([0-9.]* KiB)$/\1/p')
full=$("$AG" train "${SMALL[@]}" --max-steps 2 --out "$T/adadelta_state" 2>&1 |
  sed -n 's/^  optimizer state: v, u, \([0-9]*\) values ([0-9.]* KiB)$/\1/p')
[ -n "$factored" ] && [ -n "$full" ] && [ $((factored * 5)) -lt "$full" ] && ok ||
  bad "optimizer state: adafactor '$factored' values, not under a fifth of adadelta's '$full'"

# muon=0: the classifier head on Muon's AdamW part (its v kept), the other
# matrices on Muon's step (none); the run's routing rebuilt by --resume, to
# the bit of a run straight through; a resume that routes it otherwise refused
MUON=(--optim muon:lr=0.01 --param-group 'cls.out.*:muon=0')
expect 0 "muon: [0-9]+ matrices, [0-9]+ values, take its step \(unit0\.dense\.weight, .*\); [0-9]+ parameters, [0-9]+ values, its AdamW part" \
  "$AG" train "${SMALL[@]}" "${MUON[@]}" --max-steps 5 --out "$T/muon"
grep -aq 'optim\.muon\.v\.cls\.out\.weight' "$T/muon/last.safetensors" && ok || bad "muon=0 kept no v for the head"
grep -aq 'optim\.muon\.v\.cls\.hidden\.weight' "$T/muon/last.safetensors" && bad "a Muon matrix kept a v" || ok
expect 0 "run folder" "$AG" train "${SMALL[@]}" --optim muon:lr=0.01 --max-steps 5 --out "$T/muon_plain"
expect 0 "run folder" "$AG" train "${SMALL[@]}" "${MUON[@]}" --max-steps 9 --out "$T/muon_straight"
expect 0 "run folder" "$AG" train "${SMALL[@]}" --optim muon:lr=0.01 --resume --max-steps 9 --out "$T/muon"
if command -v python3 >/dev/null; then
  [ "$(params_hex "$T/muon/last.safetensors")" = "$(params_hex "$T/muon_straight/last.safetensors")" ] && ok ||
    bad "a Muon run resumed with its routing differs from one straight through"
fi
expect 1 "parameter 'cls\.out\.weight' took Muon's AdamW part in the run that saved it \(its 'optim\.muon\.v\.cls\.out\.weight' is there\), but Muon's step here: route it as the run did \(ag_optim_set_muon; attngrad train --param-group 'cls\.out\.weight:muon=0'\)" \
  "$AG" train "${SMALL[@]}" --optim muon:lr=0.01 --resume --max-steps 12 --param-group '' --out "$T/muon"
expect 1 "parameter 'cls\.out\.weight' took Muon's step in the run that saved it \(its 'optim\.muon\.v\.cls\.out\.weight' is not there\), but the AdamW part here" \
  "$AG" train "${SMALL[@]}" --optim muon:lr=0.01 --resume --max-steps 8 --param-group 'cls.out.*:muon=0' --out "$T/muon_plain"

# refusals, before any run folder
expect 1 "option --param-group 'nope\.\*:lr_scale=0': pattern 'nope\.\*' matches no parameter of model mpsan \(its [0-9]+: embed\.weight, unit0\.dense\.weight, .*\.\.\.\)" \
  "$AG" train "${SMALL[@]}" --param-group 'nope.*:lr_scale=0' --out "$T/none"
expect 2 "param group 'embed\.\*': unknown key 'lr' \(it takes: lr_scale, weight_decay, freeze, muon\)" \
  "$AG" train "${SMALL[@]}" --param-group 'embed.*:lr=0.1' --out "$T/none"
expect 2 "param group 'embed\.\*': lr_scale -1 must be >= 0" "$AG" train "${SMALL[@]}" --param-group 'embed.*:lr_scale=-1' --out "$T/none"
expect 2 "key 'lr_scale': 'nan' is not a finite number" "$AG" train "${SMALL[@]}" --param-group 'embed.*:lr_scale=nan' --out "$T/none"
expect 2 "key 'weight_decay': 'x' is not a finite number" "$AG" train "${SMALL[@]}" --param-group '*.bias:weight_decay=x' --out "$T/none"
expect 2 "unknown set '@biases' \(the sets: @bias_norm .*@matrices" "$AG" train "${SMALL[@]}" --param-group '@biases:freeze=1' --out "$T/none"
expect 2 "param group 'embed\.\*' sets nothing" "$AG" train "${SMALL[@]}" --param-group 'embed.*' --out "$T/none"
expect 2 "freeze 2 must be 0 or 1" "$AG" train "${SMALL[@]}" --param-group 'embed.*:freeze=2' --out "$T/none"
expect 2 "freeze=1 keeps its parameters as they are" "$AG" train "${SMALL[@]}" --param-group 'embed.*:freeze=1,lr_scale=0' --out "$T/none"
expect 1 "option --param-group 'cls\.out\.\*:muon=0': muon=0 routes matrices between Muon's step and its AdamW part, a setting of --optim muon, but the optimizer is adadelta" \
  "$AG" train "${SMALL[@]}" --param-group 'cls.out.*:muon=0' --out "$T/none"
expect 1 "option --param-group '\*\.bias:muon=1': muon=1, but pattern '\*\.bias' matches no 2-D parameter" \
  "$AG" train "${SMALL[@]}" --optim muon --param-group '*.bias:muon=1' --out "$T/none"
expect 2 "param group 'cls\.out\.\*': muon 2 must be 0 \(Muon's AdamW part\) or 1 \(Muon's step\)" \
  "$AG" train "${SMALL[@]}" --optim muon --param-group 'cls.out.*:muon=2' --out "$T/none"
expect 2 "freeze=1 keeps its parameters as they are: lr_scale, weight_decay and muon would do nothing" \
  "$AG" train "${SMALL[@]}" --optim muon --param-group 'cls.out.*:freeze=1,muon=0' --out "$T/none"
[ ! -e "$T/none" ] && ok || bad "a refused group left a run folder"
expect 0 "--param-group GROUP +per-parameter settings, PATTERN:SET" "$AG" train --help
summary
