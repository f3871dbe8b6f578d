#!/usr/bin/env python3
"""torch_decoder.py - ag_decoder_layer (so ag_mha_cross_forward) against
PyTorch's nn.TransformerDecoderLayer, in float64.

    torch_decoder.py DECODER_DUMP

runs `DECODER_DUMP CASE FILE` (tests/decoder_dump.c) for the post-LN (ReLU)
and pre-LN (GELU) layers, builds nn.TransformerDecoderLayer (batch_first,
dropout 0) from the dumped weights (ours are [in, out], torch's their
transpose; torch's cross-attention in_proj_weight is our q.weight and
kv.weight stacked; norm1, norm2, norm3 are our self.ln1, ln_cross,
self.ln2), runs the dumped batch under the causal mask and the memory's
padding, and compares the output and the gradient of x, the memory and
every parameter of sum(y dy): |ours - torch| <= 1e-10 * max(1, max|torch|).
The target has lengths too: ours skips its padding and gives 0 there, so y
is compared on the valid rows, and dy is 0 at the padding.

Exit 0 all match, 1 a mismatch or a failed dump, 77 (meson: SKIP) when torch
or numpy is missing.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gru  # noqa: E402  (exits 77 without torch or numpy; its check() counts failures)
from torch_reference import read_safetensors  # noqa: E402

torch = torch_gru.torch


def run_case(exe, case, tmp):
    path = os.path.join(tmp, case + ".safetensors")
    subprocess.run([exe, case, path], check=True)
    d, _, _ = read_safetensors(path)
    t = {k: torch.tensor(v) for k, v in d.items()}
    x = t["x"].clone().requires_grad_(True)
    memory = t["memory"].clone().requires_grad_(True)
    B, Nt, D = x.shape
    Ns = memory.shape[1]
    heads = 2  # decoder_dump's
    layer = torch.nn.TransformerDecoderLayer(D, heads, dim_feedforward=t["self.ffn.w1"].shape[1], dropout=0.0,
                                             activation="gelu" if case == "pre" else "relu", batch_first=True,
                                             norm_first=case == "pre", dtype=torch.float64)
    # ours -> (torch's parameter, how ours is read from it)
    pairs = {
        "self.attn.qkv.weight": (layer.self_attn.in_proj_weight, lambda p: p.T),
        "self.attn.qkv.bias": (layer.self_attn.in_proj_bias, None),
        "self.attn.out.weight": (layer.self_attn.out_proj.weight, lambda p: p.T),
        "self.attn.out.bias": (layer.self_attn.out_proj.bias, None),
        "cross.q.weight": (layer.multihead_attn.in_proj_weight, lambda p: p[:D].T),
        "cross.kv.weight": (layer.multihead_attn.in_proj_weight, lambda p: p[D:].T),
        "cross.q.bias": (layer.multihead_attn.in_proj_bias, lambda p: p[:D]),
        "cross.kv.bias": (layer.multihead_attn.in_proj_bias, lambda p: p[D:]),
        "cross.out.weight": (layer.multihead_attn.out_proj.weight, lambda p: p.T),
        "cross.out.bias": (layer.multihead_attn.out_proj.bias, None),
        "self.ffn.w1": (layer.linear1.weight, lambda p: p.T),
        "self.ffn.b1": (layer.linear1.bias, None),
        "self.ffn.w2": (layer.linear2.weight, lambda p: p.T),
        "self.ffn.b2": (layer.linear2.bias, None),
        "self.ln1.gain": (layer.norm1.weight, None),
        "self.ln1.bias": (layer.norm1.bias, None),
        "ln_cross.gain": (layer.norm2.weight, None),
        "ln_cross.bias": (layer.norm2.bias, None),
        "self.ln2.gain": (layer.norm3.weight, None),
        "self.ln2.bias": (layer.norm3.bias, None),
    }
    missing = sorted(k for k in d if not k.startswith("grad.") and k not in pairs
                     and k not in ("x", "memory", "len", "tlen", "y", "dy"))
    if missing:
        print(f"  FAIL {case}: parameters with no torch counterpart: {missing}")
        torch_gru.failures += 1
    with torch.no_grad():
        for ours, (param, view) in pairs.items():
            (view(param) if view else param).copy_(t[ours])
    causal = torch.nn.Transformer.generate_square_subsequent_mask(Nt, dtype=torch.float64)
    padding = torch.arange(Ns)[None, :] >= t["len"][:, None]
    y = layer(x, memory, tgt_mask=causal, memory_key_padding_mask=padding, tgt_is_causal=True)
    (y * t["dy"]).sum().backward()
    print(f"{case}: B {B}, Nt {Nt}, Ns {Ns}, d {D}, {heads} heads, target lengths {d['tlen'].tolist()}, "
          f"memory lengths {d['len'].tolist()}")
    valid = (torch.arange(Nt)[None, :] < t["tlen"][:, None])[:, :, None]  # ours is 0 at the target's padding
    torch_gru.check("y (valid rows)", d["y"], torch.where(valid, y, torch.zeros(())))
    torch_gru.check("grad.x", d["grad.x"], x.grad)
    torch_gru.check("grad.memory", d["grad.memory"], memory.grad)
    for ours, (param, view) in pairs.items():
        torch_gru.check("grad." + ours, d["grad." + ours], view(param.grad) if view else param.grad)


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        for case in ("post", "pre"):
            try:
                run_case(argv[1], case, tmp)
            except subprocess.CalledProcessError as e:
                print(f"  FAIL {case}: the dump exited {e.returncode}")
                torch_gru.failures += 1
    print("torch_decoder: " + ("all match" if torch_gru.failures == 0 else f"{torch_gru.failures} mismatch(es)"))
    return 1 if torch_gru.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
