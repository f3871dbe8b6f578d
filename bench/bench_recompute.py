#!/usr/bin/env python3
"""bench_recompute.py - the Transformer LM example's training step, plain and
with each layer recomputed in backward, attngrad against PyTorch.

    python3 bench/bench_recompute.py [--exe build/bench/bench_recompute] [--threads 1] [--rounds 3]
        [--taskset 1] [--later] [--batch 16] [--len 128] [--dim 256] [--heads 4] [--layers 6]
        [--hidden 1024] [--vocab 10001] [--reps 3]

build/bench/bench_recompute times the step (loss, backward, zeroing the
gradients; dropout 0.1 on the embedding and on each sublayer's output)
plainly, with every layer an ag_recompute region, with the attention
keeping no probabilities (ag_attention_recompute), and with both, and
reports its step memory.  Then, in this process, PyTorch's same model in
float32 does the step two ways: plainly, and with each layer under
torch.utils.checkpoint.checkpoint (use_reentrant=False).  Its attention
is F.scaled_dot_product_attention, whose CPU kernel (flash attention)
keeps no probabilities either, so attngrad's attention row is set against
PyTorch's plain step and its both row against the checkpointed one.  --later runs the
later block on both sides (rotary positions, RMS norm, SwiGLU).  Both get
the same thread count and --taskset CPUs.  Prints ms a step (the median of
--reps steps after a warm one) and the ratios attngrad / PyTorch (below 1:
attngrad is faster), the median over --rounds and its range.  The weights
differ (each side draws its own); the work does not.  Without PyTorch it
prints attngrad's figures alone.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import same_threads  # noqa: E402


def run_attngrad(a):
    cmd = ([] if a.taskset is None else ["taskset", "-c", a.taskset]) + [
        a.exe, "--threads", str(a.threads), "--reps", str(a.reps), "--batch", str(a.batch), "--len", str(a.len),
        "--dim", str(a.dim), "--heads", str(a.heads), "--layers", str(a.layers), "--hidden", str(a.hidden),
        "--vocab", str(a.vocab), "--window", str(a.window)] + (["--later"] if a.later else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_recompute failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    ways = {}
    for line in out.stdout.splitlines():  # our own program's lines, not a launcher's
        if line.startswith("result: "):
            kv = dict(item.split("=", 1) for item in line[len("result: "):].split())
            ways[kv["way"]] = (float(kv["ms_per_step"]), float(kv["step_mb"]))
    return ways


def torch_ms_per_step(a, torch, checkpointed):
    """The example's model in PyTorch float32: ms a training step, median of a.reps after a warm one."""
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    d, h, L, Fw, V, N, B = a.dim, a.heads, a.layers, a.hidden, a.vocab, a.len, a.batch
    dh, keep = d // h, 0.9
    g = torch.Generator().manual_seed(1)

    def param(*shape, scale=0.05):
        return (torch.randn(*shape, generator=g) * scale).requires_grad_()

    P = {"embed": param(V, d), "pos": param(N, d), "lnf_g": torch.ones(d, requires_grad=True),
         "lnf_b": torch.zeros(d, requires_grad=True)}
    for l in range(L):
        P.update({f"{l}.qkv": param(d, 3 * d), f"{l}.bqkv": param(3 * d), f"{l}.out": param(d, d),
                  f"{l}.bout": param(d), f"{l}.w1": param(d, (2 if a.later else 1) * Fw),
                  f"{l}.b1": param((2 if a.later else 1) * Fw), f"{l}.w2": param(Fw, d), f"{l}.b2": param(d),
                  f"{l}.g1": torch.ones(d, requires_grad=True), f"{l}.g2": torch.ones(d, requires_grad=True),
                  f"{l}.n1": torch.zeros(d, requires_grad=True), f"{l}.n2": torch.zeros(d, requires_grad=True)})
    inv_freq = 10000.0 ** (-torch.arange(0, dh, 2, dtype=torch.float32) / dh)
    angle = torch.arange(N, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = torch.cos(angle), torch.sin(angle)

    def rope(x):  # adjacent pairs, as ag_rope
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    def norm(x, gain, bias):
        return F.rms_norm(x, (d,), gain, 1e-5) if a.later else F.layer_norm(x, (d,), gain, bias, 1e-5)

    lengths = torch.tensor([N - r % 4 for r in range(B)])
    qpos, kpos = torch.arange(N)[:, None], torch.arange(N)[None, :]
    allowed = (kpos <= qpos)[None, None] & (kpos[None, None] < lengths[:, None, None, None])
    if a.window > 0:  # a sliding window: itself and the window - 1 before it
        allowed = allowed & (qpos - kpos < a.window)[None, None]

    def layer(x, l):
        qkv = norm(x, P[f"{l}.g1"], P[f"{l}.n1"]) @ P[f"{l}.qkv"] + P[f"{l}.bqkv"]
        q, k, v = (t.reshape(B, N, h, dh).transpose(1, 2) for t in qkv.split(d, dim=-1))
        if a.later:
            q, k = rope(q), rope(k)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + F.dropout(o.transpose(1, 2).reshape(B, N, d) @ P[f"{l}.out"] + P[f"{l}.bout"], 1 - keep)
        f_in = norm(x, P[f"{l}.g2"], P[f"{l}.n2"])
        if a.later:
            gate, value = (f_in @ P[f"{l}.w1"] + P[f"{l}.b1"]).split(Fw, dim=-1)
            f = (F.silu(gate) * value) @ P[f"{l}.w2"] + P[f"{l}.b2"]
        else:
            f = F.gelu(f_in @ P[f"{l}.w1"] + P[f"{l}.b1"]) @ P[f"{l}.w2"] + P[f"{l}.b2"]
        return x + F.dropout(f, 1 - keep)

    tokens = torch.tensor([[2 + (r * 7919 + t * 104729) % (V - 2) for t in range(N)] for r in range(B)])
    targets = torch.tensor([[2 + (r * 31 + t * 17 + 1) % (V - 2) if t < lengths[r] else 0 for t in range(N)]
                            for r in range(B)])

    def step():
        x = P["embed"][tokens] + (0 if a.later else P["pos"])
        x = F.dropout(x, 1 - keep)
        for l in range(L):
            x = checkpoint(layer, x, l, use_reentrant=False) if checkpointed else layer(x, l)
        logits = norm(x, P["lnf_g"], P["lnf_b"]) @ P["embed"].T
        loss = F.cross_entropy(logits.reshape(B * N, V), targets.reshape(-1), ignore_index=0)
        loss.backward()
        for p in P.values():
            p.grad = None

    step()  # warm
    times = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        step()
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exe", default="build/bench/bench_recompute")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--taskset", default=None, help="CPU list for both sides (taskset -c)")
    p.add_argument("--later", action="store_true")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--len", type=int, default=128)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=10001)
    p.add_argument("--window", type=int, default=0, help="sliding-window attention (0: none)")
    a = p.parse_args()
    torch = same_threads(a.threads, a.taskset)
    rows = []
    for r in range(a.rounds):
        ours = run_attngrad(a)
        theirs = {w: torch_ms_per_step(a, torch, w == "recompute") for w in ("plain", "recompute")} if torch else None
        rows.append((ours, theirs))
        print(f"round {r + 1}: attngrad plain {ours['plain'][0]:.1f} ms, recomputed {ours['recompute'][0]:.1f} ms, "
              f"attention recomputed {ours['attention'][0]:.1f} ms, both {ours['both'][0]:.1f} ms"
              + (f"; PyTorch plain {theirs['plain']:.1f} ms, checkpointed {theirs['recompute']:.1f} ms" if theirs
                 else "; no PyTorch"), flush=True)
    print(f"\ntraining step, {'later' if a.later else '2017'} block, batch {a.batch} x {a.len}, d {a.dim}, "
          + (f"window {a.window}, " if a.window else "")
          + f"{a.heads} heads, {a.layers} layers, FFN {a.hidden}, vocab {a.vocab}, {a.threads} thread(s)")
    print("| way | attngrad (ms) | step memory (MB) | PyTorch (ms) | ratio attngrad / PyTorch |")
    print("|---|---|---|---|---|")
    ways = (("plain", "plain", "plain"), ("recompute", "each layer recomputed", "recompute"),
            ("attention", "attention probabilities recomputed (PyTorch: plain)", "plain"),
            ("both", "both (PyTorch: each layer recomputed)", "recompute"))
    for w, label, tw in ways:
        ms = statistics.median(x[0][w][0] for x in rows)
        mb = statistics.median(x[0][w][1] for x in rows)
        if torch:
            ratios = [x[0][w][0] / x[1][tw] for x in rows]
            print(f"| {label} | {ms:.1f} | {mb:.0f} | {statistics.median(x[1][tw] for x in rows):.1f} | "
                  f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}] |")
        else:
            print(f"| {label} | {ms:.1f} | {mb:.0f} | (no PyTorch) | - |")


if __name__ == "__main__":
    main()
