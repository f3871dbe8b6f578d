#!/usr/bin/env bash
# test_optim_rule.sh - an optimizer rule from a plugin (examples/lion.c) in
# the programs: `attngrad --plugin lion.so train --optim lion:...` trains,
# resumes to the bits of an uninterrupted run, gives the same bits at 1 and
# 2 threads, takes a new rate on --resume; optim_experiments compares it
# with a built-in optimizer; and what cannot work is refused by name (the
# rule without its plugin, on a fresh run and on --resume, an unknown key,
# a bad value, the plugin loaded twice, and on a GPU where there is one).
# A rule with sums over the whole parameter (examples/lamb.c) resumes and
# runs at 2 threads to the same bits too, and refuses lazy=1 by name.
#
#   tests/test_optim_rule.sh attngrad optim_experiments lion.so test_train lamb.so
set -u
AG=$1 OX=$2 P=$3 TT=$4 LAMB=$5
[ -x "$AG" ] && [ -x "$OX" ] && [ -f "$P" ] && [ -x "$TT" ] && [ -f "$LAMB" ] ||
  { echo "usage: $0 attngrad optim_experiments lion.so test_train lamb.so"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_optim_rule

SMALL=(--synth-n 200 --dim 8 --batch 25 --progress none --optim lion:lr=3e-3,beta2=0.98,weight_decay=0.1)

expect 0 '^\(optimizer rule lion: --optim lion:lr=0\.0001,beta1=0\.9,beta2=0\.99,weight_decay=0\)$' "$AG" --plugin "$P" models

# resume == uninterrupted, bit for bit (parameters, the rule's state, the step), and the same bits at 2 threads:
#   same_bits NAME PLUGIN CUT-AT TRAIN-FLAGS... (3 epochs of 8 steps, into $T/NAME, $T/NAME-cut, $T/NAME-two)
same_bits() {
  local name=$1 plugin=$2 cut=$3; shift 3
  expect 0 'done in .* 3 epochs, 24 steps' "$AG" --plugin "$plugin" train "$@" --threads 1 --epochs 3 --out "$T/$name"
  expect 0 'limit reached' "$AG" --plugin "$plugin" train "$@" --threads 1 --epochs 3 --max-steps "$cut" --out "$T/$name-cut"
  expect 0 'done in .* 3 epochs, 24 steps' "$AG" --plugin "$plugin" train --resume --out "$T/$name-cut" --progress none
  "$TT" compare "$T/$name/last.safetensors" "$T/$name-cut/last.safetensors" && ok ||
    bad "the resumed $name run differs from the uninterrupted one"
  expect 0 'done in .* 3 epochs, 24 steps' "$AG" --plugin "$plugin" train "$@" --threads 2 --epochs 3 --out "$T/$name-two"
  "$TT" compare "$T/$name/last.safetensors" "$T/$name-two/last.safetensors" && ok || bad "$name at 2 threads differs from 1 thread"
}
same_bits lion "$P" 11 "${SMALL[@]}"
# a new rate on --resume: the keys given change the run's own rule settings, the others stay
expect 0 'lr 0\.0005, this command.s, is the rate from here on' "$AG" --plugin "$P" train --resume --out "$T/lion-cut" \
  --epochs 4 --optim lion:lr=5e-4 --progress none
# lazy rows and a schedule run through the CLI too
expect 0 'done in .* 2 epochs' "$AG" --plugin "$P" train "${SMALL[@]}" --optim lion:lr=1e-3,lazy=1 \
  --lr-steps cosine:warmup=4,total=16 --clip 0.5 --epochs 2 --out "$T/lazy"

# a rule with sums (LAMB's trust ratio): resume == uninterrupted, and 2 threads, to the bit
same_bits lamb "$LAMB" 13 --synth-n 200 --dim 8 --batch 25 --progress none --optim lamb:lr=1e-2,weight_decay=0.05
expect 2 "optimizer 'lamb': lazy=1 is not for a rule with sums over the whole parameter" \
  "$AG" --plugin "$LAMB" train --optim lamb:lazy=1 --out "$T/none"

# optim_experiments: the rule beside a built-in optimizer
expect 0 'lion:lr=3e-3 epoch 2/2: .*val accuracy' "$OX" --plugin "$P" --optim lion:lr=3e-3 --optim adam:lr=1e-3 \
  --epochs 2 --train 256 --val 128 --threads 1 --out "$T/ox"
[ -s "$T/ox_epochs.csv" ] && grep -q '^"lion:lr=3e-3",2,16,' "$T/ox_epochs.csv" && ok || bad "no lion rows in $T/ox_epochs.csv"

# refusals
expect 2 "unknown optimizer 'lion' \(known: .*muon, adafactor\); a plugin's rule needs --plugin FILE" \
  "$AG" train "${SMALL[@]}" --out "$T/none"
expect 1 "bad config entry 'optim'.*unknown optimizer 'lion'.*needs --plugin FILE" "$AG" train --resume --out "$T/lion"
expect 2 "optimizer 'lion': unknown key 'eps' \(it takes: lr, beta1, beta2, weight_decay, lazy, ema, swa, lookahead, lookahead_alpha\)" \
  "$AG" --plugin "$P" train --optim lion:eps=1e-8 --out "$T/none"
expect 2 "optimizer 'lion': beta1 1 must be in \[0, 1\)" "$AG" --plugin "$P" train --optim lion:beta1=1 --out "$T/none"
expect 1 "ag_plugin_init failed: ag_optim_register: 'lion' is already registered" "$AG" --plugin "$P" --plugin "$P" models
expect 2 "unknown optimizer 'lion'" "$OX" --optim lion --epochs 1 --out "$T/oy"

# on a GPU (or the CUDA emulator) the rule is refused at the optimizer's init, naming it and the device
if "$AG" train --synth-n 50 --dim 8 --epochs 1 --device cuda --progress none --out "$T/gpu" >/dev/null 2>&1; then
  expect 1 "optimizer 'lion' is a registered rule, whose update runs on the CPU only, but the parameters are on the cuda" \
    "$AG" --plugin "$P" train "${SMALL[@]}" --device cuda --epochs 1 --out "$T/gpu-lion"
else
  echo "(no usable GPU: the refusal on one is not tested here)"
fi

summary
