#!/usr/bin/env python3
"""bench_optim_torch.py - attngrad's optimizer step next to torch.optim's,
on one weight matrix, median ms of --reps steps after 2 warm-up steps.

    python3 bench/bench_optim_torch.py [--exe build/bench/bench_optim] [--threads 1]
        [--reps 11] [--device cpu|cuda] [--spec SPEC]... [--shape RxC]...

attngrad's figures come from bench/bench_optim (its "step ..." rows); the
same specs run as torch.optim's optimizers on a float32 parameter of the
same shape and values' scale: adam, adamw, sgd, adafactor (their keys map
one to one; adafactor's eps 0 is torch's None) and muon as torch.optim.Muon (adjust_lr_fn "match_rms_adamw" where the spec
has match_rms_adamw=1, attngrad's default).  torch's Muon runs Newton-Schulz
in bfloat16; its row "muon, f32 products" runs the same code with the
products in float32 (torch's function patched), attngrad's arithmetic.
Defaults: muon, muon:ns_steps=3, adafactor and adamw on 300x300, 300x1200,
1200x300.
--device cuda runs both sides on the GPU, each step timed to
torch.cuda.synchronize() (attngrad's: ag_sync()), float32 without TF32.
"""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_spec(spec):
    name, _, rest = spec.partition(":")
    keys = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        keys[k] = float(v)
    return name, keys


def torch_optimizer(torch, spec, param):
    name, k = parse_spec(spec)
    lr = k.get("lr", 1e-3)
    if name in ("adam", "adamw"):
        cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        wd = k.get("weight_decay", 0.0 if name == "adam" else 1e-2)
        return cls([param], lr=lr, betas=(k.get("beta1", 0.9), k.get("beta2", 0.999)), eps=k.get("eps", 1e-8),
                   weight_decay=wd, foreach=False)
    if name == "sgd":
        return torch.optim.SGD([param], lr=lr, momentum=k.get("momentum", 0), weight_decay=k.get("weight_decay", 0),
                               nesterov=bool(k.get("nesterov", 0)))
    if name == "muon":
        return torch.optim.Muon([param], lr=lr, weight_decay=k.get("weight_decay", 0.1), momentum=k.get("momentum", 0.95),
                                nesterov=bool(k.get("nesterov", 1)), ns_steps=int(k.get("ns_steps", 5)),
                                eps=k.get("eps", 1e-7),
                                adjust_lr_fn="match_rms_adamw" if k.get("match_rms_adamw", 1) else None)
    if name == "adafactor":  # eps 0: torch's None, the dtype's epsilon
        eps1 = k.get("eps", 0) or None
        return torch.optim.Adafactor([param], lr=k.get("lr", 1e-2), beta2_decay=k.get("beta2_decay", -0.8),
                                     eps=(eps1, k.get("eps2", 1e-3)), d=k.get("d", 1.0),
                                     weight_decay=k.get("weight_decay", 0.0), foreach=False)
    return None


def f32_newton_schulz(torch, original):
    """torch's _zeropower_via_newtonschulz with the products in float32."""
    def run(grad, ns_coefficients, ns_steps, eps):
        a, b, c = ns_coefficients
        x = grad.to(dtype=torch.float32, copy=True)
        if grad.size(0) > grad.size(1):
            x = x.T
        x.div_(x.norm().clamp(min=eps))
        for _ in range(ns_steps):
            gram = x @ x.T
            x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
        return x.T if grad.size(0) > grad.size(1) else x
    return run


def time_torch(torch, spec, rows, cols, reps, device):
    g = torch.Generator().manual_seed(7)
    param = torch.nn.Parameter((0.1 * (torch.rand(rows, cols, generator=g) - 0.5)).to(device))
    param.grad = (1e-3 * (torch.rand(rows, cols, generator=g) - 0.5)).to(device)
    opt = torch_optimizer(torch, spec, param)
    if opt is None:
        return None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ms = []
    for r in range(reps + 2):
        sync()
        t0 = time.perf_counter()
        opt.step()
        sync()
        if r >= 2:
            ms.append(1e3 * (time.perf_counter() - t0))
    ms.sort()
    return ms[len(ms) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(HERE, "..", "build", "bench", "bench_optim"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--spec", action="append")
    ap.add_argument("--shape", action="append")
    args = ap.parse_args()
    specs = args.spec or ["muon", "muon:ns_steps=3", "adafactor", "adamw"]
    shapes = args.shape or ["300x300", "300x1200", "1200x300"]
    try:
        import torch
        import torch.optim._muon as muon_module
    except ImportError as e:
        print(f"bench_optim_torch: PyTorch with torch.optim.Muon is needed ({e})")
        return 77
    torch.set_num_threads(args.threads)
    torch_runs = args.device == "cpu" or torch.cuda.is_available()
    if not torch_runs:  # the emulator's dry run (tools/gpu-check.sh --emulator): attngrad's column alone
        print("bench_optim_torch: --device cuda, but PyTorch sees no GPU: its columns stay empty")
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    cmd = [args.exe, "--threads", str(args.threads), "--reps", str(args.reps), "--device", args.device]
    for s in specs:
        cmd += ["--spec", s]
    for s in shapes:
        cmd += ["--shape", s]
    if os.path.exists(args.exe):
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    else:  # a build without it: PyTorch's columns alone
        print(f"bench_optim_torch: no {args.exe} (ninja -C BUILD bench/bench_optim): attngrad's column stays empty")
        out = ""
    ours = {}
    for line in out.splitlines():
        m = re.match(r"step (\S+) (\d+)x(\d+) median_ms (\S+) min_ms (\S+)$", line)
        if m:
            ours[(m.group(1), int(m.group(2)), int(m.group(3)))] = float(m.group(4))
    bf16_ns = muon_module._zeropower_via_newtonschulz
    where = f"{args.threads} CPU thread(s)" if args.device == "cpu" else torch.cuda.get_device_name() if torch_runs else "cuda"
    print(f"torch {torch.__version__}, {where}, median ms of {args.reps} steps\n")
    print("| spec | shape | attngrad ms | torch.optim ms | ratio | torch, f32 products ms | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for shape in shapes:
        rows, cols = (int(x) for x in shape.split("x"))
        for spec in specs:
            mine = ours.get((spec, rows, cols))
            theirs = time_torch(torch, spec, rows, cols, args.reps, args.device) if torch_runs else None
            f32 = None
            if spec.startswith("muon") and torch_runs:
                muon_module._zeropower_via_newtonschulz = f32_newton_schulz(torch, bf16_ns)
                try:
                    f32 = time_torch(torch, spec, rows, cols, args.reps, args.device)
                finally:
                    muon_module._zeropower_via_newtonschulz = bf16_ns

            def cell(x):
                return "—" if x is None else f"{x:.2f}"

            def ratio(x):
                return "—" if x is None or mine is None else f"{mine / x:.2f}"
            print(f"| {spec} | {shape} | {cell(mine)} | {cell(theirs)} | {ratio(theirs)} | {cell(f32)} | {ratio(f32)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
