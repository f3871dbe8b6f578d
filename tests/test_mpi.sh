#!/usr/bin/env bash
# Data-parallel training on MPI (distributed/dist.h), end to end through
# `mpirun ... attngrad train`.  Usage:
#
#   test_mpi.sh MODE ATTNGRAD_F64 ATTNGRAD_F32 ST_COMPARE MPI_FOUND [GPU_BUILD]
#
#   equal  2 ranks on this machine against 1 process, every model (and the
#          relatedness and pair heads), 30 steps on generated data with
#          dropout on: the same checkpoints (parameters, optimizer state,
#          dropout generator) and metrics, to 1e-6 relative in f64;
#          and f32 to F32_TOL (see below).
#   hosts  the same check with the two ranks in two network namespaces
#          joined by a veth pair, Open MPI over TCP between them.
#   fault  a rank killed mid-run: the job ends on every rank within a
#          timeout with a message, and the last checkpoint still loads;
#          rank 0's view of the run folder decides for every rank; ranks
#          that differ (options, data, a resumed optimizer state) are
#          refused; a signal to one rank stops and saves every rank after
#          the same step, and resumes bit for bit.
#   cuda   `--device cuda`: 2 ranks sharing this machine's first GPU, the
#          gradients through host memory (AG_DIST_REDUCE=host), against one
#          process on that GPU, as equal does.
#   nccl   the same with NCCL on device buffers (AG_DIST_REDUCE=nccl), a
#          GPU per rank, and against the host path on the same GPUs.
#   nccl_emulator  the emulated NCCL's own checks on 2 ranks: the program
#          tests/test_nccl_emulator.cpp, given as a 7th argument.
#
# GPU_BUILD: nccl, cuda (CUDA without NCCL), emulated or emulated-nccl
# (emulator/: its GPUs are AG_CUDA_EMULATOR_DEVICES, 2 for the
# nccl mode unless set; its NCCL runs over MPI) or none.  Skips (exit 77) with
# the reason when the build has no MPI, when mpirun is not Open MPI's
# (hosts), when the machine refuses namespaces, when there is no GPU (cuda,
# nccl) or fewer than 2 (nccl: NCCL refuses two ranks on one GPU).
set -uo pipefail
mode=$1 found=$5 gpu_build=${6:-none}
f64=$(realpath "$2") f32=$(realpath "$3") compare=$(realpath "$4") # meson passes them relative to the build dir
program=${7:+$(realpath "$7")}
here=$(dirname "$(realpath "$0")")
edit=$here/st_edit.py # small edits of checkpoints
skip() { echo "SKIP: $*"; exit 77; }
[ "$found" = true ] || skip "this build has no MPI (meson -Dmpi=enabled needs libopenmpi-dev openmpi-bin)"
command -v mpirun >/dev/null || skip "mpirun is not on PATH"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/attngrad-mpi.XXXXXX")
cleanup() { [ -n "${netns_up:-}" ] && netns_down; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 143' TERM INT # a timeout's kill still removes the namespaces
cd "$tmp" || exit 1

# Open MPI runs as root only when told (CI is root); the shared-memory
# transport between ranks on this machine, TCP between hosts.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# In a sanitizer build the ranks run without leak detection: at exit Open
# MPI leaves allocations in components it has unloaded, which LeakSanitizer
# cannot name, let alone suppress.  Address and UB checks stay on, and the
# single-process runs of the same cases keep leak detection.
RANK_ENV=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
# Open MPI's mpirun, or MPICH's mpiexec (Hydra), and how each names a rank
if mpirun --version 2>&1 | grep -q "Open MPI"; then LAUNCH2=(mpirun -np 2 --oversubscribe) RANK_VAR=OMPI_COMM_WORLD_RANK
else LAUNCH2=(mpiexec -n 2) RANK_VAR=PMI_RANK; fi
export AG_TEST_JOB=$$ # marks this test's ranks among the machine's processes
# Every launch has a bound, so that a hang ends the test instead of CI: a
# generous one (300 s against the few seconds a case takes on an idle
# machine), which no slow, loaded machine reaches and a hang always does.
HANG=300
MPIRUN=(timeout -k 5 $HANG "${RANK_ENV[@]}" "${LAUNCH2[@]}")

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# 57 training examples in batches of 8: 7 full batches and one of a single
# row, so rank 1 also takes steps with no rows; 30 steps cross 3 epochs.
# steps.csv (--log-steps 1), rank 0's alone, holds the global batch's loss,
# gradient norm, examples and tokens: the single process's, row for row.
COMMON=(--max-steps 30 --keep 0.8 --batch 8 --synth-n 57 --seed 5 --progress none --quiet --log-steps 1)
CASES=("mpsan --dim 12" "mpsan --task relatedness --dim 12" "dual_axial --dim 12" "ms_san --dim 12 --hidden 12"
       "ms_san --task pair --dim 12 --hidden 12" "mtsa --dim 12 --hidden 12" "poslm --dim 12 --hidden 12")

# metrics, same_metrics, same_steps: two runs' files compared
. "$here/same_run.sh"

# check_case EXE TOL LAUNCH... : the case "$case" on one process, then
# under LAUNCH (an mpirun command) with the options ranks_only adds, compared.
ranks_only=()
check_case() {
  local exe=$1 tol=$2; shift 2
  local name=${case// /_}
  rm -rf "one-$name" "two-$name"
  # shellcheck disable=SC2086
  if ! "$exe" train --model $case "${COMMON[@]}" --out "one-$name" >"one-$name.log" 2>&1; then
    fail "$case: the single process failed"; tail -5 "one-$name.log"; return
  fi
  # shellcheck disable=SC2086
  if ! "$@" "$exe" train --model $case "${COMMON[@]}" "${ranks_only[@]}" --out "$PWD/two-$name" >"two-$name.log" 2>&1; then
    fail "$case: 2 ranks failed"; tail -20 "two-$name.log"; return
  fi
  local res
  res=$("$compare" "one-$name/last.safetensors" "two-$name/last.safetensors" "$tol") || { fail "$case: $res"; return; }
  same_metrics "one-$name/metrics.csv" "two-$name/metrics.csv" "$tol" || { fail "$case: metrics.csv"; return; }
  same_steps "one-$name" "two-$name" "$tol" || { fail "$case: steps.csv"; return; }
  echo "ok $(basename "$exe") $case${ranks_only[*]:+ (ranks: ${ranks_only[*]})}: $res"
}

# f32: both sides round every sum to float, the ranks in another order (a
# half batch each, then the allreduce; BLAS picks kernels by the rows it
# gets), so they differ by float ulps (~6e-8) per step, which 30 optimizer
# steps carry on without blowing up: 5e-7 is the worst seen.  1e-5 leaves
# a 20x margin and is far below a real error (a mask keyed wrong moves
# tensors by 1e-1).
F32_TOL=1e-5

case $mode in
equal)
  for case in "${CASES[@]}"; do check_case "$f64" 1e-6 "${MPIRUN[@]}"; done
  # --resume: 2 ranks stopped at step 13 (mid-epoch) and resumed on 2, and
  # on 1 (the state is the same whatever the rank count), end where one
  # process running 30 steps does
  case="mtsa --dim 12 --hidden 12"; first=(${case} --max-steps 13 "${COMMON[@]:2}") # COMMON without its --max-steps 30
  for n in 2 1; do
    rm -rf "resumed$n"
    # shellcheck disable=SC2068
    "${MPIRUN[@]}" "$f64" train --model ${first[@]} --out "$PWD/resumed$n" >"resumed$n.log" 2>&1 || fail "2 ranks, 13 steps"
    launch=("${MPIRUN[@]}"); [ $n -eq 1 ] && launch=()
    "${launch[@]}" "$f64" train --resume --out "$PWD/resumed$n" --max-steps 30 >>"resumed$n.log" 2>&1 || fail "resume on $n"
    res=$("$compare" "one-${case// /_}/last.safetensors" "resumed$n/last.safetensors" 1e-6) &&
      echo "ok 13 steps on 2 ranks, resumed on $n to 30: $res" || fail "resumed on $n: $res"
    same_steps "one-${case// /_}" "resumed$n" 1e-6 && echo "ok steps.csv of 13 steps on 2 ranks, resumed on $n" ||
      fail "resumed on $n: steps.csv"
  done
  for case in "mtsa --dim 12 --hidden 12" "poslm --dim 12 --hidden 12"; do check_case "$f32" $F32_TOL "${MPIRUN[@]}"; done
  # what runs after the reduction, once on the summed gradient: clipping
  # (tight enough to clip every step) and L2; every optimizer (Muon: its products on the summed gradient; Adafactor: its factors, with
  # eps=1e-3: head0.bs2's gradient is 0 in exact arithmetic (a shift before a softmax), rounding noise of
  # ~1e-17 here, another noise on 2 ranks, and at the default eps1, 2.2e-16, Adafactor divides it by
  # about eps1: a step of noise, 1e-3 apart), lazy rows
  # (a word on one rank's share only); the plateau schedule and early
  # stopping on the shared dev metric (the rate halves after epoch 3,
  # which stops the run: 24 of the 30 steps); and
  # 3 ranks, two of them without rows in the one-row last batch
  for case in "mtsa --dim 12 --hidden 12 --clip 0.01 --l2 1e-3" "mtsa --dim 12 --hidden 12 --optim sgd:lr=0.1,momentum=0.9" \
              "mtsa --dim 12 --hidden 12 --optim adam:lr=0.01,lazy=1" "mtsa --dim 12 --hidden 12 --optim adadelta:lr=0.5,lazy=1" \
              "mtsa --dim 12 --hidden 12 --optim muon:lr=0.01" "mtsa --dim 12 --hidden 12 --optim adafactor:lr=0.05,eps=1e-3" \
              "mpsan --dim 12 --sched plateau:factor=0.5,patience=0 --patience 2"; do
    check_case "$f64" 1e-6 "${MPIRUN[@]}"
  done
  case="mtsa --dim 12 --hidden 12 --clip 0.5"; check_case "$f64" 1e-6 "${MPIRUN[@]/-np 2/-np 3}"
  # each rank's share (4 rows) in parts of 3 (3 and 1; the last batch's
  # row whole), against whole batches in one process: the parts' losses
  # summed on each rank, then over the ranks
  ranks_only=(--micro-batch 3)
  for case in "mpsan --dim 12" "poslm --dim 12 --hidden 12"; do check_case "$f64" 1e-6 "${MPIRUN[@]}"; done
  ranks_only=()
  ;;
hosts)
  # Two "hosts": network namespaces A and B joined by a veth pair.  mpirun
  # runs in A; it reaches B through a plm_rsh_agent that runs the command
  # there (ip netns exec) under its own host name, and the ranks talk TCP
  # over the veth pair only (no shared memory between them).
  [ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
  mpirun --version 2>&1 | grep -q "Open MPI" || skip "the launcher agent is Open MPI's (plm_rsh_agent); this mpirun is not"
  nsa=agmpi$$a nsb=agmpi$$b net=10.231.7
  netns_down() { ip netns del "$nsa" 2>/dev/null; ip netns del "$nsb" 2>/dev/null; }
  ip netns add "$nsa" 2>netns.err || skip "this machine refuses network namespaces: $(head -1 netns.err)"
  netns_up=1
  { ip netns add "$nsb" && ip link add "agv$$a" netns "$nsa" type veth peer name "agv$$b" netns "$nsb" &&
    ip -n "$nsa" addr add $net.1/24 dev "agv$$a" && ip -n "$nsb" addr add $net.2/24 dev "agv$$b" &&
    ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
    ip -n "$nsa" link set "agv$$a" up && ip -n "$nsb" link set "agv$$b" up; } 2>netns.err ||
    skip "this machine refuses the veth pair between namespaces: $(head -1 netns.err)"
  uts=""; unshare --uts true 2>/dev/null && uts="unshare --uts"
  cat >agent.sh <<EOS
#!/bin/sh
# plm_rsh_agent: "agent.sh HOST COMMAND..." runs COMMAND on HOST, a namespace
host=\$1; shift
case \$host in $net.1) ns=$nsa ;; $net.2) ns=$nsb ;; *) echo "agent.sh: unknown host \$host" >&2; exit 1 ;; esac
if [ -n "$uts" ]; then exec ip netns exec \$ns $uts sh -c "hostname host-\$host; \$*"; fi
exec ip netns exec \$ns sh -c "\$*"
EOS
  chmod +x agent.sh
  printf '%s slots=1\n' $net.1 $net.2 >hostfile
  HOSTS=(timeout -k 5 $HANG ip netns exec "$nsa" "${RANK_ENV[@]}" mpirun -np 2 --hostfile hostfile --mca plm_rsh_agent "$PWD/agent.sh"
         --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24)
  # one rank on each host, or this proves nothing.  Each rank writes where
  # it runs into a file of its own: mpirun's output is no place to read it
  # from, since the launcher adds warnings of its own there (Open MPI's rsh
  # launcher prints "setpgid ... Permission denied" into it under load).
  rm -f where.0 where.1
  "${HOSTS[@]}" sh -c "ip netns identify > $PWD/where.\$OMPI_COMM_WORLD_RANK" >where.log 2>&1
  where="0 $(cat where.0 2>/dev/null) 1 $(cat where.1 2>/dev/null)"
  [ "$where" = "0 $nsa 1 $nsb" ] || { fail "ranks not one per namespace: $where (mpirun said: $(head -c 400 where.log))"; exit 1; }
  echo "ok rank 0 in $nsa, rank 1 in $nsb, TCP over $net.0/24"
  for case in "${CASES[@]}"; do check_case "$f64" 1e-6 "${HOSTS[@]}"; done
  ;;
fault)
  # (a) rank 1 killed after the first checkpoint
  "${RANK_ENV[@]}" "${LAUNCH2[@]}" "$f64" train --model mtsa --dim 12 --hidden 12 --synth-n 1500 --batch 8 --epochs 50 \
    --keep 0.8 --progress none --out "$PWD/killed" >killed.log 2>&1 &
  launcher=$!
  for _ in $(seq $((HANG * 10))); do [ -f killed/last.safetensors ] && break; sleep 0.1; done
  [ -f killed/last.safetensors ] || fail "no checkpoint after $HANG s"
  victim=""
  for d in /proc/[0-9]*; do # this test's rank 1
    [ "$(cat "$d/comm" 2>/dev/null)" = attngrad-f64 ] || continue
    env_=$(tr '\0' '\n' <"$d/environ" 2>/dev/null)
    grep -qx "AG_TEST_JOB=$$" <<<"$env_" && grep -qx "$RANK_VAR=1" <<<"$env_" && victim=${d#/proc/}
  done
  [ -n "$victim" ] || fail "rank 1's process not found"
  t0=$(date +%s%N)
  [ -n "$victim" ] && kill -9 "$victim"
  # the job ends within seconds (the time is printed); only a hang fails
  for _ in $(seq $((HANG * 10))); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
  if kill -0 $launcher 2>/dev/null; then
    fail "the job still runs $HANG s after rank 1 died"; kill -9 $launcher
  fi
  wait $launcher; rc=$?
  took=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc -ne 0 ] || fail "mpirun exited 0 after a rank died"
  grep -q "rank 1" killed.log || { fail "no message naming rank 1"; tail -5 killed.log; }
  echo "ok killed rank 1: the job ended in ${took} ms (exit $rc): $(grep -m1 "rank 1" killed.log)"
  # the checkpoint from before is whole and resumes, here in one process
  out=$("$compare" killed/last.safetensors killed/last.safetensors 0) || fail "last checkpoint: $out"
  step=$(grep -a -o 'state\.step=[0-9]*' killed/last.safetensors | head -1 | cut -d= -f2)
  if "$f64" train --resume --out "$PWD/killed" --max-steps $((step + 3)) --progress none --quiet >resume.log 2>&1; then
    echo "ok the checkpoint of step $step resumes in one process"
  else
    fail "resuming the last checkpoint failed"; tail -5 resume.log
  fi

  # (b) rank 1 cannot read its data: it says so, and the job ends
  cat >rank1-bad-data.sh <<EOS
#!/bin/sh
data=; [ "\$$RANK_VAR" = 1 ] && data="--data $PWD/no-such-data.txt"
exec "$f64" train --model mtsa --dim 12 --hidden 12 --synth-n 57 --batch 8 --max-steps 5 --progress none \$data --out "$PWD/bad"
EOS
  chmod +x rank1-bad-data.sh
  t0=$(date +%s%N)
  timeout -k 5 $HANG "${RANK_ENV[@]}" "${LAUNCH2[@]}" ./rank1-bad-data.sh >bad.log 2>&1; rc=$?
  took=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "mpirun exited $rc when rank 1 could not read its data"
  msg=$(grep -m1 "rank 1 of 2:.*no-such-data" bad.log) || { fail "no message naming rank 1 and its data"; tail -5 bad.log; }
  echo "ok rank 1 without data: the job ended in ${took} ms (exit $rc): $msg"

  # (c) --device cuda:N names one GPU for every rank: refused by each before
  # it trains, GPU or none (--device cuda gives each rank its own)
  out=$("${MPIRUN[@]}" "$f64" train --model mpsan --dim 12 "${COMMON[@]}" --device cuda:0 --out "$PWD/cuda0" 2>&1); rc=$?
  [ $rc -ne 0 ] && grep -q "cuda:0 names one GPU for all 2 ranks" <<<"$out" && echo "ok --device cuda:0 on 2 ranks refused" ||
    fail "--device cuda:0 on 2 ranks: exit $rc: $(tail -3 <<<"$out")"

  # (c) the run folder is rank 0's to judge: rank 1 runs where the same
  # relative --out holds an old run (as a rank looking after rank 0 made
  # the folder, or at another disk, would see it); without --force rank 0's
  # verdict, a fresh folder, holds for both, and the run goes ahead
  mkdir -p r0 r1/run && echo "an old run" >r1/run/last.safetensors
  cat >rank-folders.sh <<EOS
#!/bin/sh
cd "$PWD/r\$$RANK_VAR" && exec "$f64" train --model mtsa --dim 12 --hidden 12 --synth-n 57 --batch 8 --max-steps 3 --progress none --quiet --out run
EOS
  chmod +x rank-folders.sh
  if timeout -k 5 $HANG "${RANK_ENV[@]}" "${LAUNCH2[@]}" ./rank-folders.sh >folders.log 2>&1 && [ -f r0/run/last.safetensors ]; then
    echo "ok rank 0's fresh folder decides, though rank 1 sees an old run there"
  else
    fail "rank 1's view of the run folder overruled rank 0's"; tail -5 folders.log
  fi

  # (d) --resume: rank 0 alone writes, the metrics files it rewrites from
  # the checkpoint included.  Rank 1 resumes from a copy of the run whose
  # metrics.csv is a marker: a rank that wrote there would replace it.
  rm -rf r0/run r1/run
  "$f64" train --model mtsa --dim 12 --hidden 12 --synth-n 57 --batch 8 --max-steps 3 --progress none --quiet \
    --out "$PWD/r0/run" >resume-folders.log 2>&1 || fail "the run to resume failed"
  cp -r r0/run r1/run && echo "rank 1 must not write here" >r1/run/metrics.csv
  cat >rank-resume.sh <<EOS
#!/bin/sh
cd "$PWD/r\$$RANK_VAR" && exec "$f64" train --resume --out run --max-steps 5 --progress none --quiet
EOS
  chmod +x rank-resume.sh
  timeout -k 5 $HANG "${RANK_ENV[@]}" "${LAUNCH2[@]}" ./rank-resume.sh >>resume-folders.log 2>&1 || fail "resuming on 2 ranks failed"
  if [ "$(cat r1/run/metrics.csv)" = "rank 1 must not write here" ] && grep -q "^epoch," r0/run/metrics.csv; then
    echo "ok --resume on 2 ranks: rank 0 alone rewrote the metrics files"
  else
    fail "--resume: rank 1 wrote the run folder's metrics.csv"; tail -5 resume-folders.log
  fi

  # (e) ranks that would not train the same run: rank 1 started with other
  # options (a launcher's per-rank line, as mpirun's "A : B" gives), or
  # reading other data at the same path (a copy on its own disk).  Their
  # collectives would not match (a crash, MPI_ERR_TRUNCATE, a hang, or a
  # run silently wrong); each job must end instead, rank 1 saying what
  # differs from rank 0.
  printf '%s\n' "0 a b c" "1 d e f" "0 a c b" "1 f e d" "0 b a c" "1 e d f" "0 c a b" "1 d f e" "0 b c a" "1 e f d" \
    "0 a a b" "1 d d e" >r0/data.txt
  sed 's/^0 b a c$/1 b a c/' r0/data.txt >r1/data.txt # one label differs
  cat >rank-differs.sh <<EOS
#!/bin/sh
# rank-differs.sh WHAT: rank 1 takes another WHAT
what=\$1 extra=
if [ "\$$RANK_VAR" = 1 ]; then case \$what in dim) extra="--dim 16" ;; seed) extra="--seed 6" ;; esac; fi
case \$what in data) cd "$PWD/r\$$RANK_VAR" && set -- --data data.txt --format labeled --dev-frac 0.25 ;; *) set -- ;; esac
exec "$f64" train --model mtsa --dim 12 --hidden 12 --synth-n 57 --batch 8 --max-steps 5 --progress none --quiet \
  --out "$PWD/differs-\$what" --force "\$@" \$extra
EOS
  chmod +x rank-differs.sh
  for what in dim seed data; do
    timeout -k 5 $HANG "${RANK_ENV[@]}" "${LAUNCH2[@]}" ./rank-differs.sh $what >differs-$what.log 2>&1; rc=$?
    msg=$(grep -m1 "rank 1 of 2:.*differ.*rank 0" differs-$what.log)
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ -n "$msg" ]; then
      echo "ok rank 1 with another $what: the job ended (exit $rc): $msg"
    else
      fail "rank 1 with another $what: exit $rc, no message naming rank 1 and what differs"; tail -3 differs-$what.log
    fi
  done

  # (f) the final metrics of a resumed run that took no step come from
  # best.safetensors, which rank 0 judges for all, as the run folder: here
  # rank 1's copy of the run (at step 5, as (d) left it) lacks it.  Rank 0
  # evaluates it, so rank 1 must too (and say it cannot) rather than leave
  # rank 0 waiting in the evaluation.
  rm -rf r1/run && cp -r r0/run r1/run && rm r1/run/best.safetensors
  cat >rank-no-best.sh <<EOS
#!/bin/sh
cd "$PWD/r\$$RANK_VAR" && exec "$f64" train --resume --out run --max-steps 5 --progress none --quiet
EOS
  chmod +x rank-no-best.sh
  timeout -k 5 $HANG "${RANK_ENV[@]}" "${LAUNCH2[@]}" ./rank-no-best.sh >no-best.log 2>&1; rc=$?
  msg=$(grep -m1 "rank 1 of 2:.*best.safetensors" no-best.log)
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ -n "$msg" ]; then
    echo "ok rank 1 without best.safetensors: the job ended (exit $rc): $msg"
  else
    fail "rank 1 without best.safetensors: exit $rc, no message naming rank 1 and the file"; tail -3 no-best.log
  fi

  # (g) a signal stops every rank after the same step, and saves it, as
  # one process stops.  The signals are raised by the ranks themselves, at
  # a step the test chooses (AG_SIGNAL_AT, test-only: the handler's whole
  # path without a race against a kill from outside).  Each rank writes
  # its exit status to a file and the wrapper exits 0: a rank's non-zero
  # exit makes mpirun end the others, maybe before they wrote theirs.
  cat >rank-signal.sh <<EOS
#!/bin/sh
# rank-signal.sh OUT SIGNAL0 SIGNAL1 ARGS...: rank R raises at AG_SIGNAL_AT=SIGNALR ("-": none)
out=\$1 s0=\$2 s1=\$3; shift 3
at=\$s0; [ "\$$RANK_VAR" = 1 ] && at=\$s1
[ "\$at" = - ] || export AG_SIGNAL_AT=\$at
"$f64" train --model mtsa --dim 12 --hidden 12 "\$@" --out "$PWD/\$out"
echo \$? >"$PWD/\$out.status\$$RANK_VAR"
EOS
  chmod +x rank-signal.sh
  # signal_case OUT SIGNAL0 SIGNAL1 STATUS STEP WHAT ARGS...: every rank exits
  # STATUS, and last.safetensors and rank 0's message name STEP
  signal_case() {
    local out=$1 s0=$2 s1=$3 want=$4 step=$5 what=$6; shift 6
    rm -rf "$out" "$out".status*
    timeout -k 5 $HANG "${RANK_ENV[@]}" "${LAUNCH2[@]}" ./rank-signal.sh "$out" "$s0" "$s1" "$@" >"$out.log" 2>&1
    local got saved
    got="$(cat "$out.status0" 2>/dev/null) $(cat "$out.status1" 2>/dev/null)"
    saved=$(grep -a -o 'state\.step=[0-9]*' "$out/last.safetensors" 2>/dev/null | head -1 | cut -d= -f2)
    if [ "$got" = "$want $want" ] && [ "$saved" = "$step" ] && grep -q "after step $step on all 2 ranks" "$out.log"; then
      echo "ok $what: both ranks exit $want, last.safetensors at step $step"
    else
      fail "$what: exit statuses '$got' (want $want on both), checkpoint at step '$saved' (want $step)"; tail -5 "$out.log"
    fi
  }
  STOP=(--synth-n 57 --batch 8 --keep 0.8 --seed 5 --progress none --quiet) # 8 steps an epoch
  # rank 1's SIGTERM as step 11 begins rides in that step's gradient
  # allreduce: rank 0 stops after step 11 too, and saves it; resumed to 30
  # on 2 ranks it ends bit for bit where 2 ranks running 30 steps end
  signal_case sigterm - step:11 143 11 "SIGTERM to rank 1 at step 11" --max-steps 30 "${STOP[@]}"
  "${MPIRUN[@]}" "$f64" train --model mtsa --dim 12 --hidden 12 --max-steps 30 "${STOP[@]}" --out "$PWD/nonstop" \
    >nonstop.log 2>&1 || fail "2 ranks, 30 steps without a stop"
  "${MPIRUN[@]}" "$f64" train --resume --out "$PWD/sigterm" --max-steps 30 --progress none --quiet >>sigterm.log 2>&1 ||
    fail "resuming the stopped run on 2 ranks"
  res=$("$compare" nonstop/last.safetensors sigterm/last.safetensors 0) &&
    echo "ok stopped at step 11 and resumed to 30: $res" || fail "stopped at 11, resumed to 30: $res"
  # rank 0's SIGINT after epoch 1's checkpoint, between two steps: the
  # ranks agree before epoch 2's first step and take none
  signal_case sigint jsonl:1:2 - 130 8 "SIGINT to rank 0 between epochs" --max-steps 30 "${STOP[@]}"
  # ... and after the last epoch's: the run is done, but every rank's
  # command says it was stopped, as one process's does
  signal_case sigint-end jsonl:2:2 - 130 16 "SIGINT to rank 0 after the last epoch" --epochs 2 "${STOP[@]}"
  # a signal to every rank at once, as a launcher forwards one: SIGINT and
  # SIGUSR1 at the same step give every rank the larger, SIGUSR1
  signal_case both step:5:2 step:5:10 138 5 "SIGINT and SIGUSR1 at step 5" --max-steps 30 "${STOP[@]}"
  # (h) SIGUSR1 to Open MPI's mpirun, which forwards it to every rank (its
  # SIGTERM ends the job at once): stopped and saved after one step for all
  if mpirun --version 2>&1 | grep -q "Open MPI"; then
    rm -rf usr1
    "${RANK_ENV[@]}" "${LAUNCH2[@]}" "$f64" train --model mtsa --dim 12 --hidden 12 --synth-n 1500 --batch 8 --epochs 50 \
      --keep 0.8 --progress none --quiet --out "$PWD/usr1" >usr1.log 2>&1 &
    launcher=$!
    for _ in $(seq $((HANG * 10))); do [ -f usr1/last.safetensors ] && break; sleep 0.1; done # a bound, not a speed
    kill -USR1 $launcher
    for _ in $(seq $((HANG * 10))); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
    kill -0 $launcher 2>/dev/null && { fail "the job still runs $HANG s after SIGUSR1"; kill -9 $launcher; }
    wait $launcher; rc=$?
    step=$(grep -o 'stopped by SIGUSR1 after step [0-9]* on all 2 ranks' usr1.log | grep -o 'step [0-9]*' | cut -d' ' -f2)
    saved=$(grep -a -o 'state\.step=[0-9]*' usr1/last.safetensors | head -1 | cut -d= -f2)
    if [ $rc -eq 138 ] && [ -n "$step" ] && [ "$saved" = "$step" ]; then
      echo "ok SIGUSR1 to mpirun: exit 138, both ranks stopped after step $step, which last.safetensors holds"
    else
      fail "SIGUSR1 to mpirun: exit $rc (want 138), message's step '$step', checkpoint's '$saved'"; tail -5 usr1.log
    fi
  fi

  # (i) --resume from a copy of the run folder whose optimizer state, or
  # parameters, differ from rank 0's while every counter agrees: rank 1
  # would take other steps from the same gradients.  Its copy is rank 0's
  # last.safetensors without checksums (another writer's file, which loads)
  # and one bit of one tensor flipped; the copy unflipped goes ahead.
  if command -v python3 >/dev/null; then
    rm -rf s0 s1 && mkdir -p s0 s1
    "$f64" train --model mtsa --dim 12 --hidden 12 --optim adam --synth-n 57 --batch 8 --max-steps 3 --progress none \
      --quiet --out "$PWD/s0/run" >values.log 2>&1 || fail "the run to resume failed"
    cat >rank-values.sh <<EOS
#!/bin/sh
cd "$PWD/s\$$RANK_VAR" && exec "$f64" train --resume --out run --max-steps 5 --progress none --quiet
EOS
    chmod +x rank-values.sh
    for tensor in optim.adam.v.cls.out.weight cls.out.weight none; do
      case $tensor in none) what= ;; optim.*) what="optimizer state differs" ;; *) what="parameters differ" ;; esac
      rm -rf s1/run && cp -r s0/run s1/run && python3 "$edit" strip-crc s0/run/last.safetensors s1/run/plain.st &&
        { [ $tensor = none ] || python3 "$edit" flip s1/run/plain.st s1/run/plain.st $tensor 3 0; } &&
        mv s1/run/plain.st s1/run/last.safetensors || fail "editing rank 1's copy of the run"
      timeout -k 5 $HANG "${RANK_ENV[@]}" "${LAUNCH2[@]}" ./rank-values.sh >values-$tensor.log 2>&1; rc=$?
      if [ $tensor = none ]; then
        [ $rc -eq 0 ] && echo "ok rank 1's copy without checksums, values the same: resumed" ||
          { fail "rank 1's copy without checksums: exit $rc"; tail -3 values-$tensor.log; }
        continue
      fi
      msg=$(grep -m1 "rank 1 of 2: its $what from rank 0's ('$tensor'" values-$tensor.log)
      if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ -n "$msg" ]; then
        echo "ok rank 1 resuming another $tensor: the job ended (exit $rc): $msg"
      else
        fail "rank 1 resuming another $tensor: exit $rc, no message naming rank 1 and the tensor"; tail -3 values-$tensor.log
      fi
    done
  else
    echo "skipped (i): no python3 to edit a checkpoint"
  fi
  ;;
cuda | nccl)
  [ "$gpu_build" != none ] || skip "this build has no CUDA (meson -Dcuda=enabled needs nvcc and cuBLAS)"
  [ "$mode" = cuda ] || [ "$gpu_build" = nccl ] || [ "$gpu_build" = emulated-nccl ] ||
    skip "this build has no NCCL (-Dnccl=auto builds it in beside MPI and CUDA where nccl.h is found)"
  gpus=0
  if [ "${gpu_build%-nccl}" = emulated ]; then # emulator/'s GPUs: as many as asked for
    [ "$mode" = nccl ] && export AG_CUDA_EMULATOR_DEVICES=${AG_CUDA_EMULATOR_DEVICES:-2}
    gpus=${AG_CUDA_EMULATOR_DEVICES:-1}
  elif command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L | grep -c '^GPU'); fi
  if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then # nvidia-smi does not read it; the ranks do
    visible=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
    [ "$visible" -lt "$gpus" ] && gpus=$visible
  fi
  [ "$gpus" -ge 1 ] || skip "no GPU here (nvidia-smi finds none)"
  if [ "$mode" = nccl ]; then
    [ "$gpus" -ge 2 ] || skip "NCCL needs a GPU per rank (it refuses two ranks on one: 'Duplicate GPU detected'), and this machine has $gpus; the cuda mode checks 2 ranks on one GPU"
    export AG_DIST_REDUCE=nccl CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0,1} # each rank takes its local rank's GPU
  else
    export AG_DIST_REDUCE=host CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} # both ranks on one GPU
  fi
  COMMON+=(--device cuda)
  # AG_DIST_REDUCE insists: the job fails rather than take the other path
  for case in "${CASES[@]}"; do check_case "$f64" 1e-6 "${MPIRUN[@]}"; done
  for case in "mtsa --dim 12 --hidden 12" "poslm --dim 12 --hidden 12"; do check_case "$f32" $F32_TOL "${MPIRUN[@]}"; done
  # each rank's share in parts of 3 on the GPU: the parts' losses summed
  # there and read once a step, against whole batches in one process
  ranks_only=(--micro-batch 3)
  for case in "mpsan --dim 12" "poslm --dim 12 --hidden 12"; do check_case "$f64" 1e-6 "${MPIRUN[@]}"; done
  ranks_only=()
  if [ "$mode" = nccl ]; then
    # the same sums through host memory: for 2 ranks both add the same two
    # numbers, so they should agree to the last bit (printed); 1e-12 passes.
    # Both runs f64 and their own (the f32 cases above reuse two-'s folders).
    case="mtsa --dim 12 --hidden 12" name=mtsa_--dim_12_--hidden_12
    for path in nccl host; do
      # shellcheck disable=SC2086
      AG_DIST_REDUCE=$path "${MPIRUN[@]}" "$f64" train --model $case "${COMMON[@]}" --out "$PWD/$path-$name" \
        >"$path-$name.log" 2>&1 || { fail "$case: 2 ranks, the gradients through $path, failed"; tail -5 "$path-$name.log"; }
    done
    res=$("$compare" "nccl-$name/last.safetensors" "host-$name/last.safetensors" 1e-12) &&
      echo "ok $case: NCCL against host memory: $res" || fail "$case: NCCL against host memory: $res"
    # A rank that cannot open libnccl (the programs open it, not link it;
    # on the emulator, AG_CUDA_EMULATOR_NCCL_MISSING=1 takes rank 1's):
    # unasked, every rank goes through host memory, to host's very bits,
    # and that rank says why; with AG_DIST_REDUCE=nccl the job stops and
    # rank 0 names it.
    if [ "${gpu_build%-nccl}" = emulated ]; then
      # shellcheck disable=SC2086
      AG_DIST_REDUCE=auto AG_CUDA_EMULATOR_NCCL_MISSING=1 "${MPIRUN[@]}" "$f64" train --model $case "${COMMON[@]}" \
        --out "$PWD/missing-$name" >"missing-$name.log" 2>&1 || { fail "$case: rank 1 without NCCL, failed"; tail -5 "missing-$name.log"; }
      grep -q "rank 1 of 2: NCCL could not be loaded: .*; every rank's gradients go through host memory instead" \
        "missing-$name.log" || fail "$case: rank 1 without NCCL did not say so: $(grep attngrad: "missing-$name.log" | head -3)"
      res=$("$compare" "host-$name/last.safetensors" "missing-$name/last.safetensors" 0) &&
        echo "ok $case: rank 1 without NCCL: every rank through host memory, host's bits: $res" ||
        fail "$case: rank 1 without NCCL against host memory: $res"
      # shellcheck disable=SC2086
      if AG_CUDA_EMULATOR_NCCL_MISSING=1 "${MPIRUN[@]}" "$f64" train --model $case "${COMMON[@]}" \
        --out "$PWD/insist-$name" >"insist-$name.log" 2>&1; then fail "$case: AG_DIST_REDUCE=nccl ran without rank 1's NCCL"
      elif grep -q "AG_DIST_REDUCE=nccl, but rank 1 cannot open NCCL" "insist-$name.log"; then
        echo "ok $case: AG_DIST_REDUCE=nccl without rank 1's NCCL stops the job, naming the rank"
      else fail "$case: AG_DIST_REDUCE=nccl without rank 1's NCCL: $(grep attngrad: "insist-$name.log" | head -3)"; fi
    fi
  fi
  ;;
nccl_emulator)
  # tests/test_nccl_emulator.cpp (7th argument) on 2 ranks, a GPU each
  AG_CUDA_EMULATOR_DEVICES=2 "${MPIRUN[@]}" "$program" >emulator.log 2>&1; rc=$?
  cat emulator.log
  [ $rc -eq 77 ] && skip "$(grep SKIP emulator.log)"
  [ $rc -eq 0 ] || fail "the emulated NCCL's own checks (exit $rc)"
  ;;
*) echo "test_mpi.sh: unknown mode $mode"; exit 2 ;;
esac
[ $failures -eq 0 ] && echo "all agree" || echo "$failures failed"
[ $failures -eq 0 ]
