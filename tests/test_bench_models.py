#!/usr/bin/env python3
"""The driver bench/bench_models.py without PyTorch: its subprocesses are
replaced by canned `result:` lines, attngrad's in bench_models' format and
PyTorch's made by the worker's own worker_result, so this checks what a
machine with PyTorch runs: --no-dropout reaching bench_models, the recipe
of both sides compared (a difference said by name), every step's loss and
the median of the last five in the table, the per-step gap with dropout
off, and the messages without PyTorch.  The PyTorch steps themselves need
torch (bench_models.py on a machine that has it).
"""
import contextlib
import importlib.util
import io
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_models", os.path.join(HERE, "..", "bench", "bench_models.py"))
bm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bm)

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}")


# the LM's 23 losses of the bench (CPU, float32, its own dropout masks): one spike on the last step
AG_LOSSES = [9.230870, 9.232653, 8.699286, 8.102815, 8.327488, 7.756963, 9.610867, 7.843179, 8.518711, 7.634994,
             8.117472, 7.595236, 7.559491, 7.503885, 7.563941, 7.753782, 7.700517, 7.363793, 7.524766, 7.390341,
             7.197231, 7.150734, 16.473482]
RECIPE = dict(optim="sgd:lr=30,weight_decay=1.2e-6", clip=0.25, l2=0.0, keep=0.5, keep_layers=0.8)


def ag_output(losses, recipe):
    """bench_models' summary and result line for the LM, as its printf writes them."""
    tail = bm.tail_median(losses)
    r = recipe
    return (f"  poslm      loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps\n"
            f"result: model=poslm B=32 N=35 params=6931045 ms_med=390.7318 ms_q1=366.2210 ms_q3=518.6172 "
            f"ms_min=362.1682 ms_max=630.3986 gemm_gflop=33.324528 gemm_ms=351.8631 gemm_calls=358 arena_mb=131.451 "
            f"param_mb=52.880 optim_mb=0.000 rss_mb=187.88 loss_first={losses[0]:.6f} loss_last={losses[-1]:.6f} "
            f"loss_tail={tail:.6f} peak_gflops=0.00 waits=0.0 optim={r['optim']} clip={r['clip']:g} l2={r['l2']:g} "
            f"keep={r['keep']:g} keep_layers={r['keep_layers']:g} losses={','.join(f'{v:.6f}' for v in losses)}\n")


def torch_output(losses, recipe):
    r = recipe
    cfg = types.SimpleNamespace(optim=r["optim"], l2=r["l2"], keep=r["keep"], keep_layers=r["keep_layers"], task="lm")
    return bm.worker_result("poslm", "eager", [700.0 + i for i in range(20)], losses, 467.0, 6931045, 0.0, cfg,
                            r["clip"]) + "\n"


def run_driver(argv, ag, torch_out=None, ag_graphs=None):
    """main() with argv, the subprocesses faked (attngrad's CUDA-graph run
    answers ag_graphs when given, else ag); returns (stdout, the commands run)."""
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        if "--cuda-graphs" in cmd and ag_graphs is not None:
            return types.SimpleNamespace(returncode=0, stdout=ag_graphs, stderr="")
        if "--peak-only" in cmd:
            return types.SimpleNamespace(returncode=0, stdout="result: peak_gflops=100.00\n", stderr="")
        if "--torch-worker" in cmd:
            return types.SimpleNamespace(returncode=0, stdout=torch_out, stderr="")
        return types.SimpleNamespace(returncode=0, stdout=ag, stderr="")

    saved = bm.subprocess.run, bm.have_torch, sys.argv
    bm.subprocess.run, bm.have_torch = fake_run, (lambda: torch_out is not None)
    sys.argv = ["bench_models.py", "--exe", "bench_models", "--models", "poslm"] + argv
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            rc = bm.main()
    finally:
        bm.subprocess.run, bm.have_torch, sys.argv = saved
    check(rc == 0, f"{argv}: main returns 0 (got {rc})")
    return out.getvalue(), calls


def table_row(text, model):
    for line in text.splitlines():
        if line.startswith(f"| {model} |"):
            return [c.strip() for c in line.strip().strip("|").split("|")]
    return []


def bench_calls(calls):
    return [c for c in calls if "--torch-worker" not in c and "--peak-only" not in c]


def test_dropout_on():
    torch_losses = [9.2301 - 0.07 * i for i in range(23)]
    text, calls = run_driver([], ag_output(AG_LOSSES, RECIPE), torch_output(torch_losses, RECIPE))
    check(all("--no-dropout" not in c for c in calls), f"dropout on: no --no-dropout anywhere: {calls}")
    check("DIFFERENT RECIPES" not in text, "the same recipe on both sides is not flagged")
    check("poslm: recipe optim sgd:lr=30,weight_decay=1.2e-6, clip 0.25, l2 0, keep 0.5, keep_layers 0.8" in text,
          "the recipe is printed")
    check("poslm: attngrad losses 9.231 9.233 8.699" in text and " 7.151 16.473" in text,
          "attngrad's every loss is printed")
    check("poslm: PyTorch  losses 9.230 9.160" in text, "PyTorch's every loss is printed")
    check("loss gap" not in text, "no per-step gap with dropout on (different masks)")
    row = table_row(text, "poslm")
    check(row[-1:] == ["9.231->16.473 (7.390) / 9.230->7.690 (7.830)"],
          f"first->last (median of the last five) on both sides: {row[-1:]}")


def test_no_dropout():
    ag_losses = [9.220, 9.055, 7.990, 7.505, 7.886]
    torch_losses = [9.220, 9.055, 7.991, 7.503, 7.886]
    recipe = dict(RECIPE, keep=1.0, keep_layers=1.0)
    text, calls = run_driver(["--no-dropout"], ag_output(ag_losses, recipe), torch_output(torch_losses, recipe))
    runs = bench_calls(calls)
    check(len(runs) == 1 and "--no-dropout" in runs[0], f"--no-dropout reaches bench_models: {runs}")
    check("dropout off" in text, "the heading says dropout off")
    check("DIFFERENT RECIPES" not in text, "keep 1 on both sides")
    check("largest |attngrad - PyTorch| loss gap 2.00e-03, at step 3" in text, "the per-step gap and where")


def test_recipes_differ():
    torch_recipe = dict(RECIPE, keep_layers=1.0, clip=0.0)
    text, _ = run_driver([], ag_output(AG_LOSSES, RECIPE), torch_output(AG_LOSSES, torch_recipe))
    check("THE TWO SIDES RAN DIFFERENT RECIPES (attngrad vs PyTorch): clip 0.25 vs 0.0; keep_layers 0.8 vs 1.0"
          in text, "a recipe difference is named field by field")


def test_no_torch():
    text, calls = run_driver(["--no-dropout"], ag_output(AG_LOSSES, RECIPE))
    check("PyTorch (or numpy) is missing" in text, "says PyTorch is missing")
    check(all("--torch-worker" not in c for c in calls), "no PyTorch worker started")
    check("poslm: attngrad losses 9.231" in text, "attngrad's losses still printed")
    row = table_row(text, "poslm")
    check(row[-1:] == ["9.231->16.473 (7.390) / -"], f"attngrad's loss column alone: {row[-1:]}")


def test_cuda_passes_no_dropout():
    recipe = dict(RECIPE, keep=1.0, keep_layers=1.0)
    text, calls = run_driver(["--device", "cuda", "--modes", "eager", "--no-dropout"], ag_output(AG_LOSSES, recipe),
                             torch_output(AG_LOSSES, recipe))
    runs = bench_calls(calls)
    check(len(runs) == 2 and all("--no-dropout" in r and "cuda" in r for r in runs),
          f"cuda: --no-dropout passed to both attngrad runs: {runs}")
    check("--cuda-graphs" in runs[1] and runs[1][runs[1].index("--warmup") + 1] == str(bm.GRAPH_WARMUP),
          f"cuda: the second run is attngrad's CUDA graphs, warmed up {bm.GRAPH_WARMUP} steps: {runs[1]}")
    check("with CUDA graphs the same losses as eager over 23 steps" in text, "cuda: graphs against eager, step by step")
    check("loss gap 0.00e+00" in text, f"cuda: the gap of equal losses is 0")
    row = table_row(text, "poslm")
    check(len(row) > 6 and row[3].startswith("390.73") and row[6] == "0.55", f"cuda: the graphs column and ratio: {row}")


def test_cuda_graphs_differ():
    recipe = dict(RECIPE, keep=1.0, keep_layers=1.0)
    other = list(AG_LOSSES)
    other[4] += 1e-6
    text, _ = run_driver(["--device", "cuda", "--modes", "eager", "--no-dropout"], ag_output(AG_LOSSES, recipe),
                         torch_output(AG_LOSSES, recipe), ag_graphs=ag_output(other, recipe))
    check("CUDA GRAPHS CHANGED THE LOSSES: 1 of 23 steps differ from eager's, the first at step 4" in text,
          "cuda: a graph run off the eager losses is named")
    row = table_row(text, "poslm")
    check(len(row) > 3 and row[3] == "-", f"cuda: and its time is not reported: {row}")


test_dropout_on()
test_no_dropout()
test_recipes_differ()
test_no_torch()
test_cuda_passes_no_dropout()
test_cuda_graphs_differ()
print(f"test_bench_models: {'FAILED, ' + str(failures) + ' checks' if failures else 'all checks passed'}")
sys.exit(1 if failures else 0)
