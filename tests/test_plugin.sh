#!/usr/bin/env bash
# test_plugin.sh - a model the library has never seen, loaded into the
# programs as a plugin (tests/test_custom_model.c built with
# -DAG_TEST_PLUGIN): `attngrad --plugin custom_model.so` trains it (also by
# cross-validation, and up to a limit), resumes, evaluates, predicts, draws
# its attention, dumps a step and gradchecks it
# (attngrad-f64 loading custom_model-f64.so); optim_experiments --plugin
# compares optimizers on it with --threads and a time budget.  Plugins that
# cannot be used are refused with the reason.
#
#   tests/test_plugin.sh attngrad optim_experiments custom_model.so bad_plugin.so no_init_plugin.so
set -u
AG=$1 OX=$2 P=$3 BAD=$4 NOINIT=$5
[ -x "$AG" ] && [ -x "$OX" ] && [ -f "$P" ] || { echo "usage: $0 attngrad optim_experiments custom_model.so bad.so no_init.so"; exit 2; }
. "$(dirname "$0")/cli_lib.sh" test_plugin

TINY=(--model tiny_attn --synth-n 120 --dim 8 --batch 16 --progress none)
expect 0 '^tiny_attn +classify' "$AG" --plugin "$P" models
expect 0 'done in .* 2 epochs' "$AG" --plugin "$P" train "${TINY[@]}" --epochs 2 --out "$T/run"
for f in best.safetensors last.safetensors vocab.txt; do [ -s "$T/run/$f" ] && ok || bad "train wrote no $f"; done
expect 0 'done in .* 3 epochs' "$AG" --plugin="$P" train --resume --out "$T/run" --epochs 3
expect 0 'dev +accuracy' "$AG" --plugin "$P" eval --ckpt "$T/run/best.safetensors"
out=$(echo "w1 A w2 B" | "$AG" --plugin "$P" predict --ckpt "$T/run/best.safetensors" 2>&1)
[[ $out == *$'\t'* ]] && ok || bad "predict printed '$out'"
expect 0 'maps-self\.svg' "$AG" --plugin "$P" heatmap --ckpt "$T/run/best.safetensors" --sentence "w1 A w2" --out "$T/maps"
[ "$(tail -n 1 "$T/maps-self.svg" 2>/dev/null)" = "</svg>" ] && ok || bad "no complete $T/maps-self.svg"
expect 0 'wrote' "$AG" --plugin "$P" dump-step --model tiny_attn --out "$T/step.safetensors"
# a cross-validation benchmark (MR's file in a folder of another name) and a time budget
mkdir -p "$T/cv"
for i in $(seq 1 120); do
  if [ $((i % 2)) = 0 ]; then echo "1 a good film number $i"; else echo "0 a bad film number $i"; fi
done > "$T/cv/rt-polarity.all"
expect 0 'test accuracy .*\(\+- .* over 3 folds\) +\(mean over folds' "$AG" --plugin "$P" train --model tiny_attn --data "$T/cv" \
  --dataset mr --folds 3 --dim 8 --epochs 1 --progress none --out "$T/cv-run"
[ -s "$T/cv-run/fold2/metrics.csv" ] && ok || bad "no metrics.csv of fold 2"
expect 0 'limit reached .*--resume --out' "$AG" --plugin "$P" train "${TINY[@]}" --max-steps 3 --out "$T/short"
# gradcheck runs in attngrad-f64, which loads the plugin's double build, custom_model-f64.so
expect 0 'gradient check of 8 parameters .*true = ' "$AG" --plugin "$P" gradcheck --model tiny_attn
expect 0 'attn\.wq .*rel [0-9.e+-]+  true [0-9.e+-]+  abs .* ok' "$AG" --plugin "$P" gradcheck --model tiny_attn
expect 0 'worst relative error .* \(true .*\): PASS' "$AG" --plugin "$P" gradcheck --model tiny_attn
expect 0 '^tiny_attn/no_pos: f64 gradient check of 8' "$AG" --plugin "$P" gradcheck --model tiny_attn --flags no_pos
expect 1 'model mtsa does not read flag no_pos \(its flags: exp_score\)' "$AG" --plugin "$P" train --model mtsa --flags no_pos

# optim_experiments: progress per epoch, both optimizers, its files; then a budget that stops each run early
expect 0 'adam:lr=3e-3 epoch 2/2: .*val accuracy' "$OX" --plugin "$P" --model tiny_attn --synth-n 120 --dim 8 \
  --batch 16 --epochs 2 --threads 1 --optim sgd:lr=0.1 --optim adam:lr=3e-3 --out "$T/o"
for f in o_steps.csv o_epochs.csv o_loss.svg o_accuracy.svg; do [ -s "$T/$f" ] && ok || bad "no $T/$f"; done
expect 0 'its share of --max-minutes \(0\.0 s\) ran out after 1 steps' "$OX" --plugin "$P" --model tiny_attn \
  --synth-n 120 --dim 8 --batch 16 --epochs 50 --max-minutes 1e-6 --optim adam:lr=3e-3 --out "$T/budget"

# refusals: without the plugin, a missing file, no ag_plugin_init, a kind without .abi, twice the same,
# and a float plugin in the double program (no -f64 build next to it)
expect 2 "unknown model .*needs --plugin FILE" "$AG" train --model tiny_attn
expect 1 "tiny_attn" "$AG" eval --ckpt "$T/run/best.safetensors"
expect 1 "plugin $T/none\.so: .*No such file" "$AG" --plugin "$T/none.so" models
expect 1 "no ag_plugin_init \(it must export" "$AG" --plugin "$NOINIT" models
expect 1 "ag_plugin_init failed: ag_model_register: kind 'no_abi' has no \.abi: set \.abi = AG_MODEL_ABI" "$AG" --plugin "$BAD" models
expect 1 "'tiny_attn' is already registered" "$AG" --plugin "$P" --plugin "$P" models
expect 2 "--plugin needs a file" "$AG" --plugin
expect 2 "attngrad eval: --plugin comes before the command: attngrad --plugin FILE eval" "$AG" eval --plugin "$P"
expect 1 "No such file" "$OX" --plugin "$T/none.so" --model tiny_attn
expect 2 "--plugin comes before every other option" "$OX" --model mpsan --plugin "$P"
cp "$P" "$T/solo.so"
expect 1 "4-byte ag_real .* rebuild it against this attngrad with -DAG_REAL_DOUBLE" \
  "$AG" --plugin "$T/solo.so" gradcheck --model tiny_attn

summary
