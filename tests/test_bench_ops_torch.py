#!/usr/bin/env python3
"""The driver bench/bench_ops_torch.py end to end, without PyTorch or a GPU.

Its subprocesses are replaced by canned outputs in the formats that
bench_ops_attn / bench_ops_seq print (on the CPU and with --device cuda)
and that its own --torch-only child prints, so this checks what the GPU
machine runs for the first time there: the commands (--device passed to
both benches and to the PyTorch child, none on the CPU as before), the
parsing of every row, the GPU-only MTSA row, the ratios, and the messages
when PyTorch is missing or a bench fails.  The PyTorch code itself
(torch_numbers) needs torch and runs in tools/gpu-check.sh.
"""
import contextlib
import importlib.util
import io
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_ops_torch",
                                              os.path.join(HERE, "..", "bench", "bench_ops_torch.py"))
bot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bot)

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}")


# bench_ops_attn's lines: "%-52s %8.3f %11.3f %15.3f" (fwd, fwd+bwd, cpu)
ATTN_NAMES = ["masked_softmax [B,h,N,N] + mask [h,N,N]", "masked_softmax + ag_mask_batch [B,h,N,N] (padded)",
              "attention fused  Q,K,V [B,h,N,dh], mask [h,N,N]", "attention composed: matmul, masked_softmax, matmul",
              "split_heads + merge_heads [B,N,d]", "split + fused attention + merge",
              "softmax_mix 5 sources [B,N,5d] -> [B,N,d]", "softmax mixture composed: concat, softmax, mul, sum"]
MTSA_NAME = "mtsa_attention R [B,2,N,N], S,v [B,2,N,150], lengths"


def attn_output(cuda):
    names = ATTN_NAMES + ([MTSA_NAME] if cuda else [])
    lines = [f"attention ops, f32{' on cuda' if cuda else ''}: B=64 N=64 d=300 h=6 (d_head 50), median of 5 runs, "
             "1 threads", f"{'op':<52} {'fwd ms':>8} {'fwd+bwd ms':>11} {'fwd+bwd cpu ms':>15}"]
    lines += [f"{n:<52} {0.01 * (i + 1):8.3f} {0.04 * (i + 1):11.3f} {0.05:15.3f}" for i, n in enumerate(names)]
    return "\n".join(lines) + "\n"


def seq_output(cuda):
    head = f"attngrad f32{' on cuda' if cuda else ''}, median of 5 runs, 1 threads\n\n"
    head += "| op (median ms; min ms)             |     fwd | fwd+bwd |     bwd | min fwd | min f+b | GFLOP/s |\n"
    head += "|------------------------------------|---------|---------|---------|---------|---------|---------|\n"
    rows = [("lstm B64 N64 in300 H300 (1 layer)", 1.5, 4.5), ("gru B64 N64 in300 H300 (1 layer)", 1.2, 3.6),
            ("gaussian B64 N64 H300", 0.02, 0.06)]
    rows += [(bot.UNARY_LABEL.format(name), 0.5 + i, 1.5 + i) for i, (name, _, _, _) in enumerate(bot.UNARY)]
    return head + "".join(f"| {n:<34} | {f:7.2f} | {fb:7.2f} | {fb - f:7.2f} | {f:7.2f} | {fb:7.2f} | {100.0:7.1f} |\n"
                          for n, f, fb in rows)


def torch_output(device):
    # PyTorch at twice attngrad's fwd+bwd on every row: each ratio 0.50
    ag = {**bot.parse_attn(attn_output(device == "cuda")), **bot.parse_seq(seq_output(device == "cuda"))}
    out = []
    for label, _, prefix in bot.rows_for(device):
        f, fb = bot.lookup(ag, prefix)
        out.append(f"torch: {2 * f:.4f} {2 * fb:.4f} {label}")
    return "\n".join(out) + "\n"


def run_driver(argv, torch=True, failing=()):
    """main() with argv, the subprocesses faked; returns (stdout, the commands run)."""
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        device = cmd[cmd.index("--device") + 1] if "--device" in cmd else "cpu"
        exe = os.path.basename(cmd[0])
        if "--torch-only" in cmd:
            return types.SimpleNamespace(returncode=0, stdout=torch_output(device), stderr="")
        if exe in failing:
            return types.SimpleNamespace(returncode=1, stdout="", stderr=f"{exe}: --device cuda: no CUDA device found")
        text = attn_output(device == "cuda") if exe == "bench_ops_attn" else seq_output(device == "cuda")
        return types.SimpleNamespace(returncode=0, stdout=text, stderr="")

    exes = [os.path.join(HERE, "bench_ops_attn"), os.path.join(HERE, "bench_ops_seq")]
    saved = bot.subprocess.run, bot.have_torch, bot.os.path.exists, sys.argv
    bot.subprocess.run, bot.have_torch = fake_run, (lambda: torch)
    bot.os.path.exists = lambda p: p in exes or saved[2](p)
    sys.argv = ["bench_ops_torch.py", "--attn-exe", exes[0], "--seq-exe", exes[1], "--reps", "5"] + argv
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            rc = bot.main()
    finally:
        bot.subprocess.run, bot.have_torch, bot.os.path.exists, sys.argv = saved
    check(rc == 0, f"{argv}: main returns 0 (got {rc})")
    return out.getvalue(), calls


def table(text):
    """{row label: [cells]} of the printed markdown table."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| op "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_cuda():
    text, calls = run_driver(["--device", "cuda"])
    benches = [c for c in calls if "--torch-only" not in c]
    child = [c for c in calls if "--torch-only" in c]
    check(len(benches) == 2 and all(c[-2:] == ["--device", "cuda"] for c in benches),
          f"both benches run with --device cuda: {benches}")
    check(len(child) == 1 and child[0][child[0].index("--device") + 1] == "cuda", f"the PyTorch child on cuda: {child}")
    check("on cuda" in text, "the heading says cuda")
    rows = table(text)
    labels = [label for label, _, _ in bot.rows_for("cuda")]
    check(list(rows) == labels, f"every row, in order: {list(rows)}")
    check(any(label.startswith("MTSA") for label in rows), "the MTSA row is in the GPU table")
    for label, cells in rows.items():
        check(len(cells) == 5 and "-" not in cells, f"{label}: all five figures ({cells})")
        check(cells[-1] == "0.50", f"{label}: ratio fwd+bwd 0.50 (got {cells[-1]})")
    mtsa = rows.get("MTSA attention, R [B,2,N,N], S,v [B,2,N,150]", [])
    check(mtsa[:2] == ["0.09", "0.36"], f"the MTSA row's attngrad figures parsed: {mtsa}")
    gelu = rows.get("gelu [2048,1024]", [])
    check(gelu[:2] == ["11.50", "12.50"], f"the activation rows' attngrad figures parsed: {gelu}")


def test_cpu_unchanged():
    text, calls = run_driver([])
    benches = [c for c in calls if "--torch-only" not in c]
    check(all("--device" not in c for c in benches), f"the benches run as before on the CPU: {benches}")
    check("cuda" not in text, "no cuda in the CPU table")
    rows = table(text)
    check(list(rows) == [label for label, _, _ in bot.ROWS], f"the CPU table's rows as before: {list(rows)}")
    check(all(cells[-1] == "0.50" for cells in rows.values()), "CPU ratios")


def test_no_torch_and_a_failing_bench():
    text, _ = run_driver(["--device", "cuda"], torch=False, failing=("bench_ops_seq",))
    check("PyTorch is missing" in text, "says PyTorch is missing")
    check("bench_ops_seq failed (exit 1): bench_ops_seq: --device cuda: no CUDA device found" in text,
          "says why the seq bench gave no rows")
    rows = table(text)
    lstm = rows.get("LSTM 1 layer, in 300, H 300", [])
    check(lstm == ["-"] * 5, f"the failed bench's rows are empty: {lstm}")
    gelu = rows.get("gelu [2048,1024]", [])
    check(gelu == ["-"] * 5, f"the failed bench's activation rows are empty too: {gelu}")
    fused = rows.get("attention fused, Q,K,V [B,h,N,50]", [])
    check(fused[:2] == ["0.03", "0.12"] and fused[2:] == ["-"] * 3, f"attngrad's figures only: {fused}")


test_cuda()
test_cpu_unchanged()
test_no_torch_and_a_failing_bench()
print(f"test_bench_ops_torch: {'FAILED, ' + str(failures) + ' checks' if failures else 'all checks passed'}")
sys.exit(1 if failures else 0)
