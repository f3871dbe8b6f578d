#!/usr/bin/env bash
# Builds attngrad release and with address+undefined sanitizers and runs
# every test in both; runs the README's subset under valgrind, the threaded
# tests under ThreadSanitizer, and the GPU tests on the CUDA emulator
# (emulator/); cross-builds for 64-bit Arm and runs the gradient checks
# there under qemu where the cross tools are installed; fuzzes each input
# parser briefly (tools/fuzz.sh);
# checks the installed library from outside the tree (tools/check-install.sh).  Ends with the line
#   tests: N passed, M failed, K skipped
# where a skipped test (exit 77: no GPU, no numpy, ...) is never a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh || exit 1

run_suite() { # build-dir, extra meson options...  (SUITE_ARGS: meson test's, for this build)
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >/dev/null || return 1
  fi
  ninja -C "$dir" >/dev/null || { ninja -C "$dir"; return 1; }
  meson test -C "$dir" --print-errorlogs --num-processes 2 "${MESON_TEST_ARGS[@]}" "${SUITE_ARGS[@]}"
}
SUITE_ARGS=()

# counts of a meson testlog: "passed failed skipped" (a build that made no log: one failure)
count() { python3 tools/testlog-counts.py "$1" 2>/dev/null || echo "0 1 0"; }

total_p=0 total_f=0 total_s=0
step_start=$SECONDS
add() { # passed failed skipped rc label  (also says how long the step took, build included)
  local p=$1 f=$2 s=$3 rc=$4 label=$5
  # a step that failed without a failed test (a build error) counts once
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
  echo "$label: $p passed, $f failed, $s skipped  ($((SECONDS - step_start)) s)"
  step_start=$SECONDS
  total_p=$((total_p + p)) total_f=$((total_f + f)) total_s=$((total_s + s))
}

# Each test's meson timeout is a bound for a hang, set for an idle machine;
# the test command must pass on a loaded 2-core machine too (another build
# beside it), so CI gives every test three times its bound (the valgrind
# setup has its own, 20 times).
MESON_TEST_ARGS=(--timeout-multiplier "${AG_TEST_TIMEOUT_MULTIPLIER:-3}")
# the release build is the CUDA variant where nvcc is found, GPU or not:
# every kernel compiled by nvcc (the default, -Dcuda=auto, builds CUDA only
# where a GPU can run it), for one architecture: nvcc compiles the same
# code once per architecture, and one proves it compiles (a user's build
# gets the default, 80;90)
release_cuda=(); command -v nvcc >/dev/null && release_cuda=(-Dcuda=enabled -Dgpu_arch=90)
# (the arena's valgrind marks, suite memcheck: in the emulator build below,
# whose programs valgrind starts without reading cuBLAS's symbols first)
[ ${#release_cuda[@]} -gt 0 ] && SUITE_ARGS=(--no-suite memcheck)
# MPI: the ranks' numbers against one process (mpi-ranks) here, optimised;
# the faults that end or refuse a job (mpi-faults) under the sanitizers
# below, where a bad free on an error path shows.  Each runs alone.
SUITE_ARGS+=(--no-suite mpi-faults)
run_suite build "${release_cuda[@]}"; rc=$?
SUITE_ARGS=()
read -r p f s < <(count build/meson-logs/testlog.json); add "$p" "$f" "$s" $rc "release build"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# nvcc takes no sanitizer flags: the sanitizer build is the CPU-only variant,
# the release build the CUDA one (where nvcc is found), so CI builds both.
# gcc's "undefined" leaves out float-cast-overflow (a double too large for
# the int it is cast to, undefined behaviour in C): added here.
# -O1 and line tables only (-g1), as ASan's documentation advises: the
# reports keep their file:line, and the build takes 40% less time than -O2 -g.
SUITE_ARGS=(--no-suite mpi-ranks)
run_suite build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized -Doptimization=1 \
  -Dcuda=disabled -Dc_args="-g1 -fsanitize=float-cast-overflow" -Dc_link_args=-fsanitize=float-cast-overflow; rc=$?
read -r p f s < <(count build-asan/meson-logs/testlog.json); add "$p" "$f" "$s" $rc "sanitizer build"
SUITE_ARGS=()
unset ASAN_OPTIONS UBSAN_OPTIONS

# ThreadSanitizer over the thread pool (graph/parallel.c: lock-free claims)
# and the tests that run every parallel op and a training step on 2 and 3
# threads.  A subset: TSan cannot run the tests that replace malloc
# (engine) or cap the address space (cli), and the rest adds nothing here;
# threads_f64 neither: the same parallel code as threads_f32, in doubles;
# nor the f64 sequence-op and layer tests, whose tiny shapes run every loop
# inline on one thread (0.2 and 0.6 s under TSan), and without which the
# f64 library is not compiled here at all.
export TSAN_OPTIONS=halt_on_error=1:allocator_may_return_null=1
tsan_tests=(threads_f32 attention_f32 train)
rc=0
if [ ! -f build-tsan/build.ninja ]; then
  meson setup build-tsan -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debugoptimized -Dcuda=disabled >/dev/null || rc=1
fi
[ $rc -eq 0 ] && { ninja -C build-tsan tests/test_threads_f32 tests/test_attention_f32 tests/test_train >/dev/null || rc=1; }
# train: the parts that train on the pool (a run, resume, lazy updates, a
# relatedness run, an LM, the gate of a diverging run), not the option
# checks, schedules and anomaly mode, single-threaded logic the other
# builds run
[ $rc -eq 0 ] && { AG_TEST_ONLY=resume,lazy_run,learns,relatedness_run,lm_predict_by_sentence,diverged_runs \
  meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes 2 "${MESON_TEST_ARGS[@]}" "${tsan_tests[@]}"; rc=$?; }
read -r p f s < <(count build-tsan/meson-logs/testlog.json); add "$p" "$f" "$s" $rc "thread sanitizer"
unset TSAN_OPTIONS

# The CUDA backend on emulator/ (docs/design.md, "Testing the CUDA
# backend without a GPU"): the GPU tests - every op's kernels, the five
# models' steps, optimizers, CUDA graphs, dump-step, 2 ranks on one GPU and
# 2 on NCCL (emulated over MPI),
# each against the CPU - run the backend's own code with its kernels on one
# CPU core, device memory closed to the host and guarded at its ends (the
# bounds_ tests: every tensor its own allocation, so guarded one by one).  On a
# GPU, tools/gpu-check.sh runs the same tests there.  Also here:
# arena_checks, the step arena's marks under valgrind, which in the CUDA
# release build would read cuBLAS's symbols for half a minute first.
# (in the order they start, named tests keeping the order given: the MPI
# ones first, each alone, then the longest)
emu_tests=(mpi_cuda mpi_nccl nccl_emulator cuda_ops_f64 cuda_resume cuda_train_f64 cuda_train_f32 cuda_train_bounds_f32
  cuda_train_bounds_f64 train_device cli cuda_ops_f32 cuda_ops_bounds_f32 cuda_ops_bounds_f64 cuda_dump cuda_emulator
  device param_stack graph_records arena_checks buffer layers recompute)
rc=0
if [ ! -f build-emu/build.ninja ]; then
  # line tables only (-g1): backtraces keep file:line, and the compiler
  # writes less; the C at -O1 (its -O2 is the release build's business):
  # the tests' time here is the emulated kernels', C++ at -O2, while gcc
  # takes a third less time over the C library at -O1
  meson setup build-emu -Dgpu_emulator=true -Dbuildtype=debugoptimized -Dc_args="-g1 -O1" -Dcpp_args=-g1 >/dev/null || rc=1
else # a tree set up before the emulated NCCL had it disabled; meson test skips unknown names silently
  meson configure build-emu -Dnccl=auto >/dev/null || rc=1
fi
# only what these tests and valgrind's below run is built (meson test builds
# a test's own targets: 273 of the build's 444 steps); the benchmarks and
# the other tests' programs are the release and sanitizer builds' business
# (cli: its --device part only, AG_CLI_DEVICE_ONLY; the rest ran in the builds above)
[ $rc -eq 0 ] && { AG_CLI_DEVICE_ONLY=1 meson test -C build-emu --print-errorlogs --num-processes 2 "${MESON_TEST_ARGS[@]}" \
  "${emu_tests[@]}" | grep -v '^\[[0-9]*/[0-9]*\] '; rc=${PIPESTATUS[0]}; }
read -r p f s < <(count build-emu/meson-logs/testlog.json); add "$p" "$f" "$s" $rc "CUDA emulator"

# valgrind's memcheck over the README's subset, which the step arena marks
# tensor by tensor (docs/design.md "Memory"): leaks, invalid accesses, reads
# of what a kernel never wrote.  In the emulator build: the same C as the
# release build's, without cuBLAS, whose 500 MB of symbols valgrind reads
# for half a minute before every program of a CUDA build (a minute and a
# half in all).  Skipped where valgrind is not installed (the build needs none).
vg_tests=(engine_f32 optim_f32 checkpoint_f32 safetensors_f32 schedule data masks layers recompute)
if command -v valgrind >/dev/null && [ -f build-emu/build.ninja ]; then
  meson test -C build-emu --setup valgrind --print-errorlogs --num-processes 2 "${vg_tests[@]}" >build-emu/valgrind.log 2>&1
  rc=$?
  grep -E "^ *[0-9]+/[0-9]+ " build-emu/valgrind.log | grep -v " OK " | head -20
  read -r p f s < <(count build-emu/meson-logs/testlog-valgrind.json); add "$p" "$f" "$s" $rc "valgrind"
else
  add 0 0 1 0 "valgrind (not installed: skipped)"
fi

# 64-bit Arm (tools/cross/aarch64-linux-gnu.ini): the whole tree cross-built,
# so that a compiler's failure on Arm shows here (GCC 12's aarch64
# vectoriser once died on the library's fmax reductions, and two tests
# called x86-only builtins), then the finite-difference checks of every op
# and model and a few fast tests under qemu-user (the whole suite there
# takes an hour: docs/design.md, "Other CPUs").  Skipped where the cross
# compiler, qemu or arm64's OpenBLAS is missing, as on a fresh machine.
arm_tests=(gradcheck_ops models_gradcheck f32_vs_f64 engine_f32 optim_f32 attention_f32 layers masks dropout_mask)
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null &&
   [ -e /usr/lib/aarch64-linux-gnu/libopenblas.so ]; then
  rc=0
  [ -f build-arm/build.ninja ] || meson setup build-arm --cross-file tools/cross/aarch64-linux-gnu.ini \
    -Dcuda=disabled -Dmpi=disabled -Dbuildtype=release >/dev/null || rc=1
  # only what the tests above run: the cross build of every tool, example and benchmark took a minute
  arm_targets=()
  [ $rc -eq 0 ] && mapfile -t arm_targets < <(meson introspect build-arm --tests | python3 -c '
import json, sys
want = set(sys.argv[1:])
for t in json.load(sys.stdin):
    if t["name"] in want:
        for d in t["depends"]: print(d.split("@@")[1].rsplit("@", 1)[0])' "${arm_tests[@]}" | sort -u)
  [ $rc -eq 0 ] && [ ${#arm_targets[@]} -gt 0 ] || rc=1
  [ $rc -eq 0 ] && { meson compile -C build-arm "${arm_targets[@]}" >/dev/null ||
    { meson compile -C build-arm "${arm_targets[@]}" | tail -30; rc=1; }; }
  [ $rc -eq 0 ] && { meson test -C build-arm --no-rebuild --print-errorlogs --num-processes 2 "${MESON_TEST_ARGS[@]}" \
    "${arm_tests[@]}" | grep -v '^\[[0-9]*/[0-9]*\] '; rc=${PIPESTATUS[0]}; }
  read -r p f s < <(count build-arm/meson-logs/testlog.json); add "$p" "$f" "$s" $rc "64-bit Arm (cross build, qemu)"
else
  add 0 0 1 0 "64-bit Arm (no aarch64-linux-gnu-gcc, qemu-aarch64 or arm64 OpenBLAS: skipped)"
fi

# fuzzing: the seed corpora replayed, then each libFuzzer harness for
# FUZZ_SECONDS (8; a smoke run: tools/fuzz.sh 600 is the long one) under
# ASan+UBSan, in a clang build dir (build-fuzz); skipped where clang with
# libFuzzer is missing (tools/fuzz.sh exits 77)
bash tools/fuzz.sh "${FUZZ_SECONDS:-8}" >build/fuzz.log 2>&1; rc=$?
tail -15 build/fuzz.log
if [ $rc -eq 77 ]; then
  add 0 0 1 0 "fuzz"
else
  read -r p f < <(sed -n 's/^fuzz: \([0-9]*\) passed, \([0-9]*\) failed.*$/\1 \2/p' build/fuzz.log | tail -1)
  add "${p:-0}" "${f:-0}" 0 $rc "fuzz"
fi

# the library as a user outside the tree takes it: install + pkg-config, subproject
bash tools/check-install.sh >build/check-install.log 2>&1; rc=$?
cat build/check-install.log
read -r p f < <(sed -n 's/^install: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' build/check-install.log)
add "${p:-0}" "${f:-0}" 0 $rc "install"

echo "tests: $total_p passed, $total_f failed, $total_s skipped  ($SECONDS s in all)"
[ "$total_f" -eq 0 ]
