#!/usr/bin/env python3
"""torch_tlm_reference.py - the Transformer LM example (examples/transformer_lm.c)
against an independent PyTorch implementation, gradient by gradient, on both
of its blocks: the 2017 one (learned positions, LayerNorm, GELU) and the
later one (--hparams rope=BASE,rms=1,glu=1: rotary positions, RMS norm,
SwiGLU), and grouped-query attention (kv_heads=K, each key-value head
repeated for the query heads of its group).

    torch_tlm_reference.py ATTNGRAD-F64 transformer_lm-f64.so [ATTNGRAD transformer_lm.so]

For each block, `dump-step` writes one forward/backward (dropout off:
every parameter, grad.<name>, loss and batch.*; docs/models.md, "The
reference dump"); this script rebuilds the model in float64 from the
dumped parameters with torch's own layer_norm, rms_norm, gelu and silu,
and the rotation written out from the RoFormer paper (eq. 34: adjacent
pairs), runs the same batch and compares the loss and every gradient:
|attngrad - torch| <= rtol * scale per tensor, as tests/torch_reference.py
does (rtol 1e-8 for F64 dumps, 1e-4 for F32 ones).

Exit 0 all match, 1 a mismatch or a failed dump, 77 (meson: SKIP) when
torch or numpy is missing.
"""
import os
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # never in CI's fresh machine: the check needs PyTorch
    print(f"torch_tlm_reference: SKIP ({e.name} is not installed)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import read_safetensors, parse_config  # noqa: E402

PAD = 0  # AG_PAD_ID: padded targets count for nothing


def rope(x, base):
    """x [B, h, N, dh]: pair (2i, 2i+1) at position m turned by m base^(-2i/dh)."""
    N, dh = x.shape[-2], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angle = torch.arange(N, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [N, dh/2]
    c, s = torch.cos(angle), torch.sin(angle)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)


def tlm_loss(P, conf, hp, batch):
    d, heads, layers, hidden = (int(conf[k]) for k in ("dim", "heads", "layers", "hidden"))
    base, rms, glu = float(hp.get("rope", 0)), hp.get("rms", "0") != "0", hp.get("glu", "0") != "0"
    kv = int(hp.get("kv_heads", 0)) or heads
    tokens, targets, lengths = batch["tokens"], batch["targets"], batch["lengths"]
    B, N = tokens.shape
    dh, eps = d // heads, 1e-5

    def norm(x, prefix):
        if rms:
            return F.rms_norm(x, (d,), P[prefix + ".gain"], eps)
        return F.layer_norm(x, (d,), P[prefix + ".gain"], P[prefix + ".bias"], eps)

    E = P["embed.weight"]
    h = E[tokens]
    if not base:
        h = h + P["pos.weight"][:N]
    q_pos, k_pos = torch.arange(N)[:, None], torch.arange(N)[None, :]
    allowed = (k_pos <= q_pos)[None, None] & (k_pos[None, None] < lengths[:, None, None, None])  # [B,1,N,N]
    for l in range(layers):
        p = lambda name: P[f"layer{l}.{name}"]  # noqa: E731
        qkv = norm(h, f"layer{l}.ln1") @ p("attn.qkv.weight") + p("attn.qkv.bias")
        q, k, v = qkv.split([d, kv * dh, kv * dh], dim=-1)
        q = q.reshape(B, N, heads, dh).transpose(1, 2)
        k, v = (t.reshape(B, N, kv, dh).transpose(1, 2) for t in (k, v))
        if base:
            q, k = rope(q, base), rope(k, base)
        k, v = k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1)  # each group's
        scores = (q @ k.transpose(-1, -2)) / dh ** 0.5
        probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        o = (probs @ v).transpose(1, 2).reshape(B, N, d)
        h = h + o @ p("attn.out.weight") + p("attn.out.bias")
        f_in = norm(h, f"layer{l}.ln2")
        if glu:
            gate, value = (f_in @ p("ffn.w1") + p("ffn.b1")).split(hidden, dim=-1)
            f = (F.silu(gate) * value) @ p("ffn.w2") + p("ffn.b2")
        else:
            f = F.gelu(f_in @ p("ffn.w1") + p("ffn.b1")) @ p("ffn.w2") + p("ffn.b2")
        h = h + f
    logits = norm(h, "ln_f") @ E.T
    return F.cross_entropy(logits.reshape(B * N, -1), targets.reshape(-1), ignore_index=PAD)


def check(path, label):
    tensors, meta, dtypes = read_safetensors(path)
    conf = parse_config(meta)
    hp = dict(kv.split("=", 1) for kv in conf.get("hparams", "").split(",") if "=" in kv)
    P = {k: torch.from_numpy(v.astype(np.float64)).requires_grad_() for k, v in tensors.items()
         if not k.startswith(("grad.", "batch.")) and k != "loss"}
    batch = {k[len("batch."):]: torch.from_numpy(v.astype(np.int64)) for k, v in tensors.items()
             if k.startswith("batch.")}
    loss = tlm_loss(P, conf, hp, batch)
    loss.backward()
    rtol = 1e-4 if dtypes.get("loss") == "F32" else 1e-8
    grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)).numpy() for n, t in P.items()}
    top = max(float(np.abs(g).max()) for g in grads.values())
    ref, got = float(loss.detach()), float(tensors["loss"].reshape(()))
    rows = [("loss", abs(got - ref) / max(abs(ref), 1e-30))]
    for n in sorted(grads):
        if "grad." + n not in tensors:
            print(f"{label}: FAIL (no grad.{n} in the dump)")
            return False
        scale = max(float(np.abs(grads[n]).max()), 1e-3 * top, 1e-300)
        rows.append((n, float(np.abs(tensors["grad." + n].astype(np.float64) - grads[n]).max()) / scale))
    bad = [r for r in rows if r[1] > rtol]
    worst = max(rows, key=lambda r: r[1])
    print(f"{label}: {'FAIL' if bad else 'ok'}  loss {got:.10g} (torch {ref:.10g}), {len(rows) - 1} gradients, "
          f"worst {worst[0]} rel {worst[1]:.2e} (rtol {rtol:g})")
    for n, rel in bad:
        print(f"    {n:28s} rel {rel:.3e}  MISMATCH")
    return not bad


BLOCKS = [("2017 block", []), ("later block", ["--hparams", "rope=10000,rms=1,glu=1"]),
          ("rotary positions alone, base 500", ["--hparams", "rope=500"]),
          ("later block, multi-query (one key-value head)", ["--hparams", "rope=10000,rms=1,glu=1,kv_heads=1"]),
          ("grouped-query, 4 heads in 2 groups", ["--heads", "4", "--dim", "16", "--hparams", "kv_heads=2"])]


def main(argv):
    if len(argv) not in (3, 5):
        print(__doc__)
        return 2
    pairs = [(argv[1], argv[2])] + ([(argv[3], argv[4])] if len(argv) == 5 else [])
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for exe, plugin in pairs:
            for label, extra in BLOCKS:
                out = os.path.join(tmp, "step.safetensors")
                cmd = [exe, "--plugin", plugin, "dump-step", "--model", "tlm", "--batch", "3", "--len", "7",
                       "--out", out] + extra
                run = subprocess.run(cmd, capture_output=True, text=True)
                if run.returncode != 0:
                    print(f"{label}: FAIL (dump-step exited {run.returncode}: {run.stderr.strip()[-300:]})")
                    ok = False
                    continue
                ok &= check(out, f"{os.path.basename(plugin)}, {label}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
