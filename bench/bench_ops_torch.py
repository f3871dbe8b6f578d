#!/usr/bin/env python3
"""bench_ops_torch.py - attngrad's attention and sequence ops next to
PyTorch's equivalents, forward and forward+backward, median ms.

    python3 bench/bench_ops_torch.py [--build build] [--threads 1] [--reps 21]
        [--attn-exe PATH] [--seq-exe PATH] [--taskset 0] [--device cpu|cuda]

attngrad's figures come from its own benchmarks, run here and parsed:
build/bench/bench_ops_attn (masked softmax, fused attention, heads at
B=64 N=64 d=300 h=6) and build/bench/bench_ops_seq (LSTM and Gaussian
scoring at B=64 N=64 H=300, and every elementwise activation on a
[2048, 1024] tensor); a missing binary leaves its rows empty.  The
PyTorch side runs the same shapes and masks in float32:
  masked softmax     softmax(scale * S + M) with M the MS-SAN head masks
                     [h,N,N] (PAST_INCL / FUTURE_INCL, 1.5 x word distance)
  fused attention    F.scaled_dot_product_attention with that additive mask
  composed           matmul, softmax, matmul
  heads              view/transpose/contiguous and back
  LSTM               nn.LSTM(300, 300, batch_first=True), 1 layer
  Gaussian scoring   composed from tensor ops: window i <= t, exp, normalise, bmm
  activations        torch.exp, ..., F.gelu (approximate='none'), F.silu on
                     [2048, 1024] drawn as bench_ops_seq draws them
  MTSA attention     (--device cuda only) torch_models.MTSA.attention over
                     2 heads: sigmoid(R) masked, exp(S - colmax), two matmuls
Backward is seeded with a fixed d(out) (the same pattern as attngrad's
benches), each column the median of --reps runs after 3 warm-up runs.

--device cuda runs both sides on the GPU: the benches with --device cuda,
and PyTorch on "cuda" with torch.cuda.synchronize() where attngrad's benches
call ag_sync() (after the forward, and after the backward), inputs and
seeds made there beforehand, float32 without TF32 on either side (cuDNN's
LSTM would use it by default).  It adds attngrad's ag_mtsa_attention row.
"""
import argparse
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
B, N, D, H = 64, 64, 300, 6
DH = D // H

# (row label, attngrad binary, prefix of its row name)
ROWS = [
    ("masked softmax [B,h,N,N] + mask [h,N,N]", "attn", "masked_softmax [B,h,N,N] + mask"),
    ("masked softmax + padding mask built per step", "attn", "masked_softmax + ag_mask_batch"),
    ("attention fused, Q,K,V [B,h,N,50]", "attn", "attention fused"),
    ("attention composed: matmul, softmax, matmul", "attn", "attention composed"),
    ("split + merge heads [B,N,300]", "attn", "split_heads + merge_heads"),
    ("split + fused attention + merge", "attn", "split + fused attention"),
    ("softmax gate over 5 sources [B,N,5,300]", "attn", "softmax_mix 5 sources"),
    ("LSTM 1 layer, in 300, H 300", "seq", "lstm"),
    ("GRU 1 layer, in 300, H 300", "seq", "gru"),
    ("Gaussian scoring, H 300", "seq", "gaussian"),
]
# the elementwise activations: (name, PyTorch's function in F or torch,
# input range), as bench_ops_seq's unary_ctx table; its rows "<name> [2048,1024]"
UNARY_SHAPE = (2048, 1024)
UNARY = [("exp", "exp", -4, 4), ("log", "log", 0.1, 4), ("sqrt", "sqrt", 0.1, 4), ("square", "square", -4, 4),
         ("abs", "abs", -4, 4), ("tanh", "tanh", -4, 4), ("sigmoid", "sigmoid", -4, 4), ("relu", "relu", -4, 4),
         ("elu", "elu", -4, 4), ("softplus", "softplus", -4, 4), ("log_sigmoid", "logsigmoid", -4, 4),
         ("gelu", "gelu", -4, 4), ("silu", "silu", -4, 4)]
UNARY_LABEL = "{} [%d,%d]" % UNARY_SHAPE
ROWS += [(UNARY_LABEL.format(name), "seq", UNARY_LABEL.format(name)) for name, _, _, _ in UNARY]
# rows of the GPU table only (the CPU table was measured without them)
CUDA_ROWS = [
    ("MTSA attention, R [B,2,N,N], S,v [B,2,N,150]", "attn", "mtsa_attention"),
]
MTSA_H, MTSA_DH = 2, D // 2


def rows_for(device):
    return ROWS + CUDA_ROWS if device == "cuda" else ROWS


def parse_attn(text):
    """bench_ops_attn: 'name  fwd  fwd+bwd  cpu' lines."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(.*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", line)
        if m:
            out[m.group(1).strip()] = (float(m.group(2)), float(m.group(3)))
    return out


def parse_seq(text):
    """bench_ops_seq: '| name | fwd | fwd+bwd | ...' rows."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3:
            try:
                out[cells[0]] = (float(cells[1]), float(cells[2]))
            except ValueError:
                pass
    return out


def attngrad_numbers(exe, parse, reps, env, pin, device):
    if not exe or not os.path.exists(exe):
        return {}
    cmd = pin + [exe, str(reps)] + (["--device", device] if device != "cpu" else [])
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:  # its rows stay empty; say why (no GPU, a refused op)
        print(f"{os.path.basename(exe)} failed (exit {run.returncode}): {run.stderr.strip()[-600:]}\n")
        return {}
    return parse(run.stdout)


def lookup(table, prefix):
    for name, v in table.items():
        if name.startswith(prefix):
            return v
    return None


def no_tf32(torch):
    """float32 arithmetic in every product, as attngrad's cuBLAS calls: cuDNN
    lets its RNNs use TF32 tensor cores by default."""
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if rnn is not None and hasattr(rnn, "fp32_precision"):  # PyTorch >= 2.9: the legacy flags must not be mixed in
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        rnn.fp32_precision = "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def torch_numbers(reps, threads, device="cpu"):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda:
        no_tf32(torch)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    g = torch.Generator().manual_seed(1)  # drawn on the host as attngrad's, then moved
    leaf = lambda *shape, scale=1.0: (scale * torch.randn(*shape, generator=g)).to(dev).requires_grad_()
    scores = leaf(B, H, N, N, scale=3.0)
    q, k, v = leaf(B, H, N, DH), leaf(B, H, N, DH), leaf(B, H, N, DH)
    x = leaf(B, N, D)
    scale = 1 / math.sqrt(DH)
    # MS-SAN head masks: PAST_INCL (0-2) / FUTURE_INCL (3-5), 1.5 x word distance except heads 2 and 5
    qi, ki = torch.arange(N)[:, None], torch.arange(N)[None, :]
    masks = []
    for h in range(H):
        allowed = ki <= qi if h < 3 else ki >= qi
        pen = -1.5 * (qi - ki).abs().float() if h % 3 != 2 else torch.zeros(N, N)
        masks.append(torch.where(allowed, pen, torch.tensor(float("-inf"))))
    mask = torch.stack(masks).to(dev)
    lengths = torch.tensor([N - (b * 7) % (N // 2) for b in range(B)], device=dev)

    def padded_softmax():
        valid = torch.arange(N, device=dev)[None, :] < lengths[:, None]
        pad = torch.zeros(B, 1, N, N, device=dev).masked_fill(~(valid[:, None, :, None] & valid[:, None, None, :]),
                                                              float("-inf"))
        p = torch.softmax(scores * scale + mask + pad, -1)
        return torch.nan_to_num(p)  # padded query rows: all -inf

    def split(t):
        return t.view(B, N, H, DH).transpose(1, 2).contiguous()

    def merge(t):
        return t.transpose(1, 2).contiguous().view(B, N, D)

    def self_attention(s):  # Q = K = V = s, as bench_ops_attn's MS-SAN inner block
        return F.scaled_dot_product_attention(s, s, s, attn_mask=mask, scale=scale)

    lstm = torch.nn.LSTM(D, D, batch_first=True)
    for p in lstm.parameters():
        torch.nn.init.uniform_(p, -0.06, 0.06)
    lstm.to(dev)  # training mode: cuDNN's LSTM backward needs it
    gru = torch.nn.GRU(D, D, batch_first=True)
    for p in gru.parameters():
        torch.nn.init.uniform_(p, -0.06, 0.06)
    gru.to(dev)
    hx = leaf(B, N, D)
    gh = leaf(B, N, D)
    mu = torch.rand(B, N, generator=g).to(dev).requires_grad_()
    sigma = (0.05 + 0.45 * torch.rand(B, N, generator=g)).to(dev).requires_grad_()
    window = (torch.arange(N)[None, :] <= torch.arange(N)[:, None]).float().to(dev)  # [t, i]

    mix_z = leaf(B, N, 5 * D)
    mix_s = [leaf(B, N, D) for _ in range(5)]

    def softmax_mix():  # MPSAN's position fusion
        gate = torch.softmax(mix_z.view(B, N, 5, D), dim=2)
        return (gate * torch.stack(mix_s, dim=2)).sum(2)

    def gaussian():
        pos = torch.arange(N, dtype=torch.float32, device=dev) / N
        gamma = torch.exp(-(pos[None, None, :] - mu[:, :, None]) ** 2 / (2 * sigma[:, :, None] ** 2 + 1e-3)) * window
        gamma = gamma / gamma.sum(-1, keepdim=True).clamp(min=1e-12)
        return gamma @ gh

    fns = {
        "masked softmax [B,h,N,N] + mask [h,N,N]": lambda: torch.softmax(scores * scale + mask, -1),
        "masked softmax + padding mask built per step": padded_softmax,
        "attention fused, Q,K,V [B,h,N,50]": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale),
        "attention composed: matmul, softmax, matmul": lambda: torch.softmax(q @ k.transpose(-1, -2) * scale + mask, -1) @ v,
        "split + merge heads [B,N,300]": lambda: merge(split(x)),
        "split + fused attention + merge": lambda: merge(self_attention(split(x))),
        "softmax gate over 5 sources [B,N,5,300]": softmax_mix,
        "LSTM 1 layer, in 300, H 300": lambda: lstm(hx)[0],
        "GRU 1 layer, in 300, H 300": lambda: gru(hx)[0],
        "Gaussian scoring, H 300": gaussian,
    }
    for name, torch_name, lo, hi in UNARY:
        fn = getattr(F, torch_name, None) or getattr(torch, torch_name)
        ux = (lo + (hi - lo) * torch.rand(*UNARY_SHAPE, generator=g)).to(dev).requires_grad_()
        fns[UNARY_LABEL.format(name)] = lambda fn=fn, ux=ux: fn(ux)
    if cuda:
        # MTSA (torch_models.MTSA.attention over the heads): head 0 PAST (k < q), head 1 FUTURE (k > q)
        mtsa_r, mtsa_s, mtsa_v = leaf(B, MTSA_H, N, N), leaf(B, MTSA_H, N, MTSA_DH), leaf(B, MTSA_H, N, MTSA_DH)
        allowed = torch.stack([ki < qi, ki > qi]).to(dev)  # [2,N,N]

        def mtsa():
            valid = torch.arange(N, device=dev)[None, :] < lengths[:, None]  # [B,N]
            M = allowed[None] & valid[:, None, :, None] & valid[:, None, None, :]  # [B,2,N,N]
            ER = torch.sigmoid(mtsa_r) * M
            kv = valid[:, None, :, None]
            top = mtsa_s.masked_fill(~kv, float("-inf")).amax(2, keepdim=True).detach()
            ES = torch.exp(mtsa_s - top) * kv
            Z = ER @ ES
            Z = torch.where(Z <= 0, torch.ones_like(Z), Z)
            return (ER @ (mtsa_v * ES)) / Z

        fns["MTSA attention, R [B,2,N,N], S,v [B,2,N,150]"] = mtsa
    # On the GPU each row is timed as the attngrad bench it faces times it:
    # bench_ops_attn's fwd+bwd includes the wait after the forward,
    # bench_ops_seq's is a run of its own with no wait inside.
    apart = {label for label, which, _ in ROWS if which == "seq"} if cuda else set()
    out = {}
    for label, fn in fns.items():
        seed = None
        fwd, both = [], []
        for i in range(-3, reps):
            t0 = time.perf_counter()
            y = fn()
            sync()
            t1 = time.perf_counter()
            if label in apart:
                del y  # its graph freed before the next run
                t0 = time.perf_counter()
                y = fn()
            if seed is None:
                n = y.numel()
                seed = ((torch.arange(n) % 13 - 6).float() / 6).view(y.shape).to(dev)
            y.backward(seed)
            sync()
            t2 = time.perf_counter()
            if i >= 0:
                fwd.append(1e3 * (t1 - t0))
                both.append(1e3 * (t2 - t0))
        fwd.sort()
        both.sort()
        out[label] = (fwd[len(fwd) // 2], both[len(both) // 2])
    return out


def have_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--attn-exe", default="")
    ap.add_argument("--seq-exe", default="")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--taskset", default="")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(args.threads)
    pin = ["taskset", "-c", args.taskset] if args.taskset else []
    if args.torch_only:  # the PyTorch half, in its own (pinned) process
        for label, (f, fb) in torch_numbers(args.reps, args.threads, args.device).items():
            print(f"torch: {f:.4f} {fb:.4f} {label}")
        return 0

    attn_exe = args.attn_exe or os.path.join(args.build, "bench", "bench_ops_attn")
    seq_exe = args.seq_exe or os.path.join(args.build, "bench", "bench_ops_seq")
    ag = {"attn": attngrad_numbers(attn_exe, parse_attn, args.reps, env, pin, args.device),
          "seq": attngrad_numbers(seq_exe, parse_seq, args.reps, env, pin, args.device)}
    if have_torch():
        run = subprocess.run(pin + [sys.executable, os.path.abspath(__file__), "--torch-only", "--threads",
                                    str(args.threads), "--reps", str(args.reps), "--device", args.device],
                             capture_output=True, text=True, env=env)
        tt = {}
        for line in run.stdout.splitlines():
            if line.startswith("torch: "):
                f, fb, label = line[len("torch: "):].split(" ", 2)
                tt[label] = (float(f), float(fb))
        if run.returncode != 0:
            print(f"PyTorch's run failed (exit {run.returncode}): {run.stderr.strip()[-600:]}\n")
    else:
        tt = None
        print("PyTorch is missing: attngrad's figures only.\n")
    where = "on cuda (both sides synchronised after forward and after backward), " if args.device == "cuda" else ""
    print(f"Ops at B={B} N={N} d={D} h={H}, float32, {where}threads={args.threads}"
          f"{' taskset ' + args.taskset if args.taskset else ''}, median of {args.reps} runs (ms)\n")
    print("| op | attngrad fwd | attngrad fwd+bwd | PyTorch fwd | PyTorch fwd+bwd | ratio fwd+bwd |")
    print("|---|---|---|---|---|---|")
    fmt = lambda v: f"{v:.2f}" if v is not None else "-"
    for label, which, prefix in rows_for(args.device):
        a = lookup(ag[which], prefix)
        t = tt.get(label) if tt else None
        ratio = a[1] / t[1] if a and t else None
        print(f"| {label} | {fmt(a[0] if a else None)} | {fmt(a[1] if a else None)} | {fmt(t[0] if t else None)} "
              f"| {fmt(t[1] if t else None)} | {fmt(ratio)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
