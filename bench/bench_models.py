#!/usr/bin/env python3
"""bench_models.py - a training step of each model, attngrad against PyTorch.

    python3 bench/bench_models.py [--exe build/bench/bench_models] [--threads 1]
        [--steps 20] [--warmup 3] [--models mpsan,ms_san] [--csv bench/models.csv]
        [--taskset 0] [--rounds 3] [--cycles] [--no-dropout]
    python3 bench/bench_models.py --device cuda [--modes eager,compile,cudagraphs] [--models ...]

For every model attngrad registers, run build/bench/bench_models on it (one
process per model), which writes its synthetic batch and config to a file;
then, in a fresh Python process, the same model (bench/torch_models.py) at
the same sizes in float32 from the same initial parameters on the same
batch, with the same optimizer, L2
term and (LM) gradient clipping, timed the same way: median of --steps
steps after --warmup, each step = zero_grad, forward, backward, clip, step.
Both sides get the same thread count: OMP/MKL/OPENBLAS_NUM_THREADS in the
environment, torch.set_num_threads and bench_models --threads; --taskset
pins both to the same CPUs.

Both sides run the model's own recipe, read from the batch file: the
optimizer spec, gradient clipping, L2, dropout keep (and the LM's keep
between LSTM layers).  Each side reports what it ran, and the driver says
so when the two differ.  Losses: first->last (median of the last five),
since one step's loss says little where the recipe is noisy (the LM's SGD
at lr 30 spikes on single steps, and the two sides draw different dropout
masks).  --no-dropout runs both sides with every keep at 1: then they
compute the same steps, and the largest gap between their per-step losses
is printed (float32 rounding grows it slowly over the steps).

Peak memory, both sides alike: growth of the process's peak RSS (getrusage
ru_maxrss) from just before the model is built to the end of its steps,
in a fresh process per model (PyTorch's is measured after `import torch`).

--rounds R repeats the whole comparison R times, attngrad then PyTorch for
each model in turn, and reports the medians over the rounds, the ratio as
the median of the rounds' ratios with its range: on a shared machine the
load drifts, and a ratio taken within one round sees the same load on both
sides.

--cycles (needs perf) also counts user-space CPU cycles and instructions
per step on both sides: each side runs twice, with --warmup + 2 and with
--warmup + 2 + --steps steps, and the difference over --steps is one
steady-state step (setup, imports and warm-up cancel).  Cycles are what
the process itself ran, so the ratio of cycles hardly moves with the load
of a shared machine, where wall times swing by 2x.

--device cuda runs both sides on the GPU: bench_models --device cuda, and
PyTorch on "cuda" in each of --modes: eager; compile (torch.compile of the
loss, default mode); cudagraphs (torch.compile mode="reduce-overhead",
which replays CUDA graphs).  Each step ends with a device synchronisation
on both sides.  Memory is device memory: attngrad's accounted bytes (the
device step arena's high-water mark + parameters, gradients, optimizer
state) against torch.cuda.max_memory_allocated over the run.  The ratios
are attngrad / eager and attngrad / the best mode.

Prints a table with the ratio attngrad / PyTorch (below 1: attngrad is
faster) and writes the CSV model,attngrad_ms,torch_ms,ratio,
attngrad_peak_mb,torch_peak_mb.  Without PyTorch it prints attngrad's
figures alone and says so.
"""
import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_result(text):
    """The `result: k=v ...` lines -> list of dicts (numbers as floats)."""
    out = []
    for line in text.splitlines():
        if line.startswith("result: "):
            d = {}
            for kv in line[len("result: "):].split():
                k, _, v = kv.partition("=")
                try:
                    d[k] = float(v)
                except ValueError:
                    d[k] = v
            out.append(d)
    return out


def read_batch(path):
    """bench_models' batch file: name -> numpy array (batch.* int64, the
    initial parameters float32), and the config lines as a dict."""
    import numpy as np
    dtypes = {"I64": np.int64, "F32": np.float32, "F64": np.float64}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    arrays = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        arrays[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=dtypes[info["dtype"]]).reshape(info["shape"]).copy()
    conf = dict(line.split("=", 1) for line in meta["config"].splitlines() if "=" in line)
    return arrays, conf


RECIPE = ("optim", "clip", "l2", "keep", "keep_layers")


def recipe_differences(a, t):
    """The recipe fields of two result lines that differ, as 'name attngrad vs PyTorch' strings."""
    out = []
    for k in RECIPE:
        x, y = a.get(k), t.get(k)
        if isinstance(x, float) and isinstance(y, float):
            same = abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))
        else:
            same = x == y
        if not same:
            out.append(f"{k} {x} vs {y}")
    return out


def recipe_str(r):
    """A result line's recipe in one line."""
    return ", ".join(f"{k} {r[k]:g}" if isinstance(r.get(k), float) else f"{k} {r.get(k, '?')}" for k in RECIPE)


def losses_of(r):
    """A result line's per-step losses (one step parses as a number)."""
    v = r.get("losses", "")
    return [v] if isinstance(v, float) else [float(x) for x in v.split(",") if x]


def tail_median(losses, k=5):
    """The median of the last k losses: one spike does not move it."""
    v = sorted(losses[-k:])
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def loss_str(r):
    """first->last (median of the last five) of a result line."""
    return f"{r['loss_first']:.3f}->{r['loss_last']:.3f} ({r.get('loss_tail', float('nan')):.3f})"


def loss_gap(a, t):
    """(largest |attngrad - PyTorch| over the steps both ran, the step where it is largest)."""
    pairs = list(zip(losses_of(a), losses_of(t)))
    if not pairs:
        return None
    return max((abs(x - y), i) for i, (x, y) in enumerate(pairs))


def report_losses(name, a, t, no_dropout):
    """One model's recipe and losses, both sides; a recipe that differs is said loudly."""
    print(f"{name}: recipe {recipe_str(a)}")
    print(f"{name}: attngrad losses {' '.join(f'{v:.3f}' for v in losses_of(a))}")
    if not t:
        return
    print(f"{name}: PyTorch  losses {' '.join(f'{v:.3f}' for v in losses_of(t))}")
    diff = recipe_differences(a, t)
    if diff:
        print(f"{name}: THE TWO SIDES RAN DIFFERENT RECIPES (attngrad vs PyTorch): {'; '.join(diff)}")
    gap = loss_gap(a, t)
    if no_dropout and gap:
        print(f"{name}: dropout off: largest |attngrad - PyTorch| loss gap {gap[0]:.2e}, at step {gap[1]}")


def maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def torch_worker(args):
    """Runs in its own process: one model's steps in PyTorch; prints result:."""
    import torch
    sys.path.insert(0, HERE)
    import torch_models as tm

    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    arrays, conf = read_batch(args.batch_file)
    name = conf["model"]
    batch = {k[len("batch."):]: torch.from_numpy(v) for k, v in arrays.items() if k.startswith("batch.")}
    if name == "ms_san":  # parse distances come precomputed from the data pipeline, as in a real loader
        batch["tree_dist"] = tm.batch_tree_distances(batch["heads"], batch["lengths"], batch["tokens"].shape[1])
    cfg = tm.Config(vocab=int(conf["vocab"]), classes=int(conf["classes"]), dim=int(conf["dim"]),
                    hidden=int(conf["hidden"]), heads=int(conf["heads"]), layers=int(conf["layers"]),
                    fixed_len=int(conf["fixed_len"]), n_bigram=int(conf["n_bigram"]), keep=float(conf["keep"]),
                    keep_layers=float(conf.get("keep_layers", "-1")), pos_hidden=int(conf.get("pos_hidden", "0")),
                    l2=float(conf["l2"]), optim=conf["optim"], task=conf["task"], attention=conf["attention"],
                    batch=int(conf["batch"]))
    if cfg.task == "lm":
        cfg.layers = 0  # poslm: 0 means the paper's count
    clip = float(conf.get("clip", "0"))
    rss0 = maxrss_mb()
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        batch = {k: v.to(dev) for k, v in batch.items()}
        torch.cuda.reset_peak_memory_stats()
    model = tm.build(name, cfg, dtype=torch.float32)
    model.load_named({k: torch.from_numpy(v) for k, v in arrays.items() if not k.startswith("batch.")})
    model.to(dev)
    model.train()
    opt = tm.make_optimizer(model.cfg.optim, model.parameters())
    loss_fn = model.loss
    if args.mode == "compile":
        loss_fn = torch.compile(model.loss)
    elif args.mode == "cudagraphs":
        loss_fn = torch.compile(model.loss, mode="reduce-overhead")
    times, losses = [], []
    for s in range(-args.warmup, args.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        if args.mode == "cudagraphs":  # a new step: the graph may reuse its outputs' memory
            torch.compiler.cudagraph_mark_step_begin()
        loss = loss_fn(batch)
        total = loss
        l2 = model.l2_term()
        if l2 is not None:
            total = loss + l2
        total.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sync()
        dt = time.perf_counter() - t0
        losses.append(float(loss.detach()))
        if s >= 0:
            times.append(1e3 * dt)
    print(worker_result(name, args.mode, times, losses, maxrss_mb() - rss0,
                        sum(p.numel() for p in model.parameters()),
                        torch.cuda.max_memory_allocated() / 2**20 if cuda else 0, model.cfg, clip))


def worker_result(name, mode, times, losses, rss_mb, params, device_mb, cfg, clip):
    """The PyTorch worker's `result:` line: times and losses of its steps,
    and the recipe its model ran (cfg after the model's own defaults)."""
    times = sorted(times)
    q = lambda f: times[min(len(times) - 1, int(round(f * (len(times) - 1))))]
    return (f"result: model={name} ms_med={q(0.5):.4f} ms_q1={q(0.25):.4f} ms_q3={q(0.75):.4f} "
            f"ms_min={times[0]:.4f} ms_max={times[-1]:.4f} rss_mb={rss_mb:.2f} "
            f"loss_first={losses[0]:.6f} loss_last={losses[-1]:.6f} loss_tail={tail_median(losses):.6f} "
            f"params={params} mode={mode} device_mb={device_mb:.2f} "
            f"optim={cfg.optim} clip={clip:g} l2={cfg.l2:g} keep={cfg.keep:g} "
            f"keep_layers={cfg.keep_layers if cfg.task == 'lm' else 1.0:g} "
            f"losses={','.join(f'{v:.6f}' for v in losses)}")


def have_torch():
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def torch_version():
    """PyTorch's version and the BLAS it was built with, as it says."""
    try:
        import torch
    except ImportError:
        return "missing"
    blas = next((w.split("=", 1)[1] for w in torch.__config__.show().replace(",", " ").split()
                 if w.startswith("BLAS_INFO=")), "?")
    return f"{torch.__version__} (BLAS {blas})"


# A fixed-shape step replays whole as CUDA graphs from its eighth step
# (docs/design.md, "CUDA graphs"): attngrad's graph run warms up this long.
GRAPH_WARMUP = 7


def graphs_against_eager(name, a, g):
    """Whether attngrad's CUDA-graph run gave its eager run's losses, step for step."""
    pairs = list(zip(losses_of(a), losses_of(g)))
    differ = [i for i, (x, y) in enumerate(pairs) if x != y]
    if differ:
        print(f"{name}: CUDA GRAPHS CHANGED THE LOSSES: {len(differ)} of {len(pairs)} steps differ from eager's, "
              f"the first at step {differ[0]}", flush=True)
    else:
        print(f"{name}: with CUDA graphs the same losses as eager over {len(pairs)} steps", flush=True)
    return not differ


def main_cuda(args):
    """Both sides on the GPU: attngrad (eager, then with its CUDA graphs), then
    PyTorch in each mode, per model."""
    modes = [m for m in args.modes.split(",") if m]
    no_dropout = ["--no-dropout"] if args.no_dropout else []
    torch_ok = have_torch()
    if not torch_ok:
        print("PyTorch (or numpy) is missing: attngrad's figures only.\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            run = subprocess.run([args.exe, "--model", name, "--device", "cuda", "--steps", str(args.steps),
                                  "--warmup", str(args.warmup), "--batch-dir", tmp, "--no-peak"] + no_dropout,
                                 capture_output=True, text=True)
            res = parse_result(run.stdout)
            if run.returncode != 0 or not res:
                print(f"{name}: bench_models --device cuda failed: {run.stderr.strip()[-600:]}", flush=True)
                continue
            a, t = res[0], {}
            run = subprocess.run([args.exe, "--model", name, "--device", "cuda", "--cuda-graphs", "--steps",
                                  str(args.steps), "--warmup", str(max(args.warmup, GRAPH_WARMUP)), "--no-peak"]
                                 + no_dropout, capture_output=True, text=True)
            res = parse_result(run.stdout)
            g = res[0] if run.returncode == 0 and res else None
            if not g:
                print(f"{name}: bench_models --cuda-graphs failed: {run.stderr.strip()[-600:]}", flush=True)
            elif not graphs_against_eager(name, a, g):
                g = None  # a graph run that is not the eager step is no time to report
            for mode in modes if torch_ok else []:
                cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", os.path.join(tmp, name + ".safetensors"),
                       "--device", "cuda", "--mode", mode, "--steps", str(args.steps), "--warmup", str(args.warmup)]
                try:
                    tw = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                    tres = parse_result(tw.stdout)
                    if tw.returncode != 0 or not tres:
                        print(f"{name}: PyTorch {mode} failed: {tw.stderr.strip()[-400:]}", flush=True)
                    else:
                        t[mode] = tres[0]
                except subprocess.TimeoutExpired:
                    print(f"{name}: PyTorch {mode} took over {args.timeout:.0f} s, skipped", flush=True)
            acct = a["arena_mb"] + a["param_mb"] + a["optim_mb"]
            graphs = f", with CUDA graphs {g['ms_med']:.2f} ms" if g else ""
            print(f"{name}: attngrad {a['ms_med']:.2f} ms{graphs}, {acct:.0f} MB, {a.get('launches', 0):.0f} launches and "
                  f"{a.get('waits', 0):.0f} host waits a step; " +
                  ", ".join(f"{m} {r['ms_med']:.2f} ms {r['device_mb']:.0f} MB" for m, r in t.items()), flush=True)
            report_losses(name, a, t.get("eager"), args.no_dropout)
            rows.append((name, a, g, t))
    print(f"\nTraining step on the GPU, float32, median of {args.steps} steps after {args.warmup} warm-up "
          f"({max(args.warmup, GRAPH_WARMUP)} with attngrad's CUDA graphs) (q1-q3); ratios: attngrad eager to each "
          f"mode, and attngrad's best to PyTorch's best; memory: attngrad's accounted device bytes, PyTorch's "
          f"max_memory_allocated\n")
    head = "".join(f" PyTorch {m} ms | ratio |" for m in modes)
    print(f"| model | BxN | attngrad ms | attngrad graphs ms |{head} best to best | attngrad MB | PyTorch MB (eager) "
          f"| loss first->last (median of the last 5), ag / eager |")
    print("|---|---|---|---|" + "---|---|" * len(modes) + "---|---|---|---|")
    csv = ["model,attngrad_ms,attngrad_graphs_ms," + ",".join(f"torch_{m}_ms" for m in modes) +
           ",ratio_eager,ratio_best,attngrad_mb,torch_mb"]
    for name, a, g, t in rows:
        cols, best = "", None
        for m in modes:
            r = t.get(m)
            cols += f" {r['ms_med']:.2f} [{r['ms_q1']:.2f}-{r['ms_q3']:.2f}] | {a['ms_med'] / r['ms_med']:.2f} |" if r else " - | - |"
            if r and (best is None or r["ms_med"] < best):
                best = r["ms_med"]
        e = t.get("eager")
        acct = a["arena_mb"] + a["param_mb"] + a["optim_mb"]
        ours = min(a["ms_med"], g["ms_med"]) if g else a["ms_med"]
        gcol = f"{g['ms_med']:.2f} [{g['ms_q1']:.2f}-{g['ms_q3']:.2f}]" if g else "-"
        print(f"| {name} | {int(a['B'])}x{int(a['N'])} | {a['ms_med']:.2f} [{a['ms_q1']:.2f}-{a['ms_q3']:.2f}] | {gcol} |"
              f"{cols} {'%.2f' % (ours / best) if best else '-'} | {acct:.0f} | {'%.0f' % e['device_mb'] if e else '-'} "
              f"| {loss_str(a)} / {loss_str(e) if e else '-'} |")
        csv.append(f"{name},{a['ms_med']:.3f},{g['ms_med'] if g else float('nan'):.3f}," +
                   ",".join(f"{t[m]['ms_med']:.3f}" if m in t else "" for m in modes) +
                   f",{a['ms_med'] / e['ms_med'] if e else float('nan'):.3f},{ours / best if best else float('nan'):.3f}"
                   f",{acct:.1f},{e['device_mb'] if e else float('nan'):.1f}")
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("\n".join(csv) + "\n")
        print(f"\nwrote {args.csv}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(HERE, "..", "build", "bench", "bench_models"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--models", default="mpsan,dual_axial,poslm,ms_san,mtsa",
                    help="comma-separated; those attngrad has not registered are reported and skipped")
    ap.add_argument("--csv", default="")
    ap.add_argument("--taskset", default="", help="CPU list for taskset -c (both sides)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the comparison; medians over the rounds")
    ap.add_argument("--cycles", action="store_true", help="also user cycles per step on both sides (perf stat)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--modes", default="eager,compile,cudagraphs", help="PyTorch's modes on --device cuda")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for one PyTorch run (compiling included)")
    ap.add_argument("--no-dropout", action="store_true",
                    help="every keep 1 on both sides: the same steps, whose losses are compared step by step")
    ap.add_argument("--mode", default="eager", help=argparse.SUPPRESS)
    ap.add_argument("--torch-worker", dest="batch_file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.batch_file:
        torch_worker(args)
        return 0
    if args.device == "cuda":
        return main_cuda(args)

    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(args.threads)
    pin = ["taskset", "-c", args.taskset] if args.taskset else []
    no_dropout = ["--no-dropout"] if args.no_dropout else []
    torch_ok = have_torch()
    if not torch_ok:
        print("PyTorch (or numpy) is missing: attngrad's figures only.\n")

    peak_out = subprocess.run(pin + [args.exe, "--peak-only", "--threads", str(args.threads)], env=env,
                              capture_output=True, text=True).stdout
    peak = parse_result(peak_out)
    blas = next((l[len("blas: "):] for l in peak_out.splitlines() if l.startswith("blas: ")), "OpenBLAS")
    def run_pair(name, tmp):
        """One round of one model: attngrad's result and PyTorch's (or None)."""
        run = subprocess.run(pin + [args.exe, "--model", name, "--threads", str(args.threads), "--steps",
                                    str(args.steps), "--warmup", str(args.warmup), "--batch-dir", tmp,
                                    "--no-peak"] + no_dropout, env=env, capture_output=True, text=True)
        if run.returncode != 0 and "unknown model" in run.stderr:
            print(f"{name}: not registered in attngrad yet, skipped")
            return None
        res = parse_result(run.stdout)
        if run.returncode != 0 or not res:
            print(f"{name}: bench_models failed: {run.stderr.strip()[:400]}")
            return None
        a, t = res[0], None
        if torch_ok:
            tw = subprocess.run(pin + [sys.executable, os.path.abspath(__file__), "--torch-worker",
                                       os.path.join(tmp, name + ".safetensors"), "--threads", str(args.threads),
                                       "--steps", str(args.steps), "--warmup", str(args.warmup)],
                                env=env, capture_output=True, text=True)
            tres = parse_result(tw.stdout)
            if tw.returncode != 0 or not tres:
                print(f"{name}: PyTorch run failed: {tw.stderr.strip()[-600:]}")
            else:
                t = tres[0]
        report_losses(name, a, t, args.no_dropout)
        return a, t

    def perf_counts(cmd):
        """CPU ms (user + kernel: page faults count), cycles and user instructions of a command, or None."""
        run = subprocess.run(pin + ["perf", "stat", "-x", ",", "-e", "task-clock,cycles,instructions:u"] + cmd,
                             env=env, capture_output=True, text=True)
        got = {}
        for line in run.stderr.splitlines():
            f = line.split(",")
            if len(f) > 2:
                try:
                    got[f[2].split(":")[0]] = float(f[0])
                except ValueError:
                    pass
        keys = ("task-clock", "cycles", "instructions")
        return tuple(got[k] for k in keys) if run.returncode == 0 and all(k in got for k in keys) else None

    def cycles_per_step(name, tmp):
        """(attngrad, torch) steady-state (CPU ms, cycles, instructions) per step; None when not measured."""
        def side(cmd_of):
            lo, hi = perf_counts(cmd_of(2)), perf_counts(cmd_of(2 + args.steps))
            return tuple((h - l) / args.steps for h, l in zip(hi, lo)) if lo and hi else None
        ag = side(lambda k: [args.exe, "--model", name, "--threads", str(args.threads), "--steps", str(k),
                             "--warmup", str(args.warmup), "--no-peak"] + no_dropout)
        tc = side(lambda k: [sys.executable, os.path.abspath(__file__), "--torch-worker",
                             os.path.join(tmp, name + ".safetensors"), "--threads", str(args.threads), "--steps",
                             str(k), "--warmup", str(args.warmup)]) if torch_ok else None
        return ag, tc

    def median(v):
        v = sorted(v)
        n = len(v)
        return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])

    names = args.models.split(",")
    rounds = {name: [] for name in names}
    cycles = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(max(1, args.rounds)):
            for name in names:
                pair = run_pair(name, tmp)
                if pair:
                    rounds[name].append(pair)
        if args.cycles:
            if subprocess.run(["perf", "--version"], capture_output=True).returncode != 0:
                print("--cycles: perf is not available, skipped")
            else:
                for name in names:
                    if rounds[name]:
                        cycles[name] = cycles_per_step(name, tmp)
    rows = []
    for name in names:
        got = rounds[name]
        if not got:
            continue
        # the round with attngrad's median step carries the other columns
        got.sort(key=lambda p: p[0]["ms_med"])
        a, t = got[len(got) // 2]
        if len(got) > 1:  # the brackets become the range of the rounds' medians
            am = [p[0]["ms_med"] for p in got]
            a = dict(a, ms_med=median(am), ms_q1=min(am), ms_q3=max(am))
            tm = [p[1]["ms_med"] for p in got if p[1]]
            if t and tm:
                t = dict(t, ms_med=median(tm), ms_q1=min(tm), ms_q3=max(tm))
        ratios = [p[0]["ms_med"] / p[1]["ms_med"] for p in got if p[1]]
        rows.append((name, a, t, ratios))

    pk = peak[0]["peak_gflops"] if peak else 0
    print(f"Training step, float32, threads={args.threads}{' taskset ' + args.taskset if args.taskset else ''}, "
          f"median of {args.steps} steps after {args.warmup} warm-up (q1-q3 in brackets)"
          f"{f', then the median [range] over {args.rounds} rounds' if args.rounds > 1 else ''}; "
          f"{blas}, sgemm peak {pk:.1f} GFLOP/s; PyTorch {torch_version()}"
          f"{'; dropout off' if args.no_dropout else ''}\n")
    print("| model | BxN | attngrad ms | PyTorch ms | ratio | attngrad MB (rss) | PyTorch MB (rss) "
          "| attngrad MB (accounted) | GEMM share | GEMM GFLOP/s (% peak) "
          "| loss first->last (median of the last 5), ag / torch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    csv = ["model,attngrad_ms,torch_ms,ratio,attngrad_peak_mb,torch_peak_mb"]
    for name, a, t, ratios in rows:
        acct = a["arena_mb"] + a["param_mb"] + a["optim_mb"]
        rate = a["gemm_gflop"] / (a["gemm_ms"] / 1e3) if a["gemm_ms"] > 0 else 0
        share = 100 * a["gemm_ms"] / a["ms_med"]
        ag = f"{a['ms_med']:.1f} [{a['ms_q1']:.1f}-{a['ms_q3']:.1f}]"
        if t:
            ratio = median(ratios)
            tt = f"{t['ms_med']:.1f} [{t['ms_q1']:.1f}-{t['ms_q3']:.1f}]"
            tloss = loss_str(t)
            csv.append(f"{name},{a['ms_med']:.3f},{t['ms_med']:.3f},{ratio:.3f},{a['rss_mb']:.1f},{t['rss_mb']:.1f}")
        else:
            ratio, tt, tloss = None, "-", "-"
            csv.append(f"{name},{a['ms_med']:.3f},,,{a['rss_mb']:.1f},")
        spread = f" [{min(ratios):.2f}-{max(ratios):.2f}]" if len(ratios) > 1 else ""
        print(f"| {name} | {int(a['B'])}x{int(a['N'])} | {ag} | {tt} | {'%.2f' % ratio if ratio else '-'}{spread} "
              f"| {a['rss_mb']:.0f} | {'%.0f' % t['rss_mb'] if t else '-'} | {acct:.0f} | {share:.0f}% "
              f"| {rate:.1f} ({100 * rate / pk if pk else 0:.0f}%) "
              f"| {loss_str(a)} / {tloss} |")
    if cycles:
        print(f"\nCPU per steady-state step (perf stat: a {2 + args.steps}-step run minus a 2-step run, / "
              f"{args.steps}; both after {args.warmup} warm-up; CPU ms and cycles count user and kernel time):\n")
        print("| model | attngrad CPU ms | PyTorch CPU ms | ratio | attngrad Mcycles | PyTorch Mcycles | ratio "
              "| attngrad Minstr (user) | PyTorch Minstr (user) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, (ag, tc) in cycles.items():
            if not ag:
                print(f"| {name} |" + " - |" * 8)
                continue
            t = tc or (0, 0, 0)
            r = lambda i: f"{ag[i] / t[i]:.2f}" if tc else "-"
            print(f"| {name} | {ag[0]:.1f} | {t[0]:.1f} | {r(0)} | {ag[1] / 1e6:.0f} | {t[1] / 1e6:.0f} | {r(1)} "
                  f"| {ag[2] / 1e6:.0f} | {t[2] / 1e6:.0f} |")
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("\n".join(csv) + "\n")
        print(f"\nwrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
