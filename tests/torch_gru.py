#!/usr/bin/env python3
"""torch_gru.py - ag_gru and ag_bigru against PyTorch's nn.GRU, in float64.

    torch_gru.py GRU_DUMP

runs `GRU_DUMP CASE FILE` (tests/gru_dump.c) for each case, rebuilds the
same network as nn.GRU from the dumped weights (ours are [in, 3H] with
columns r, z, n; torch's weight_ih_l0 is their transpose), runs the dumped
batch through pack_padded_sequence (the lengths), and compares the outputs,
the final states and the gradient of every input of the loss
sum(y dy) + sum(h_n dh_n):  |ours - torch| <= 1e-10 * max(1, max|torch|).

Exit 0 all match, 1 a mismatch or a failed dump, 77 (meson: SKIP) when torch
or numpy is missing.
"""
import os
import subprocess
import sys
import tempfile

SKIP = 77
try:
    import numpy as np
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
except ImportError as e:  # never in CI: the check needs PyTorch
    print(f"torch_gru: SKIP ({e.name} is not installed)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import read_safetensors  # noqa: E402

RTOL = 1e-10
failures = 0


def check(what, ours, theirs):
    global failures
    theirs = theirs.detach().numpy()
    if ours.shape != theirs.shape:
        print(f"  FAIL {what}: shape {ours.shape} vs torch {theirs.shape}")
        failures += 1
        return
    scale = max(1.0, float(np.abs(theirs).max(initial=0)))
    err = float(np.abs(ours - theirs).max(initial=0))
    ok = err <= RTOL * scale
    failures += not ok
    print(f"  {'ok  ' if ok else 'FAIL'} {what:24s} max |diff| {err:.2e} (scale {scale:.3g})")


def run_case(exe, case, tmp):
    path = os.path.join(tmp, case + ".safetensors")
    subprocess.run([exe, case, path], check=True)
    d, _, _ = read_safetensors(path)
    t = {k: torch.tensor(v) for k, v in d.items()}
    bidir = case == "bidir"
    prefixes = ["fw", "bw"] if bidir else sorted({k.split(".")[0] for k in d if k.startswith("l") and "." in k})
    layers = 1 if bidir else len(prefixes)
    x = t["x"].clone().requires_grad_(True)
    B, N, I = x.shape
    H = t[prefixes[0] + ".w_hh"].shape[0]
    gru = torch.nn.GRU(I, H, num_layers=layers, batch_first=True, bidirectional=bidir, dtype=torch.float64)
    names = {}  # ours -> torch's parameter
    for i, p in enumerate(prefixes):
        suffix = f"l{0 if bidir else i}" + ("_reverse" if bidir and p == "bw" else "")
        for ours, theirs, transpose in (("w_ih", "weight_ih_", True), ("w_hh", "weight_hh_", True),
                                        ("b_ih", "bias_ih_", False), ("b_hh", "bias_hh_", False)):
            param = getattr(gru, theirs + suffix)
            with torch.no_grad():
                param.copy_(t[f"{p}.{ours}"].T if transpose else t[f"{p}.{ours}"])
            names[f"{p}.{ours}"] = param
    h0 = t["h0"].clone().requires_grad_(True) if "h0" in t else None
    packed = pack_padded_sequence(x, t["len"], batch_first=True, enforce_sorted=False)
    out, hn = gru(packed, h0)
    y, _ = pad_packed_sequence(out, batch_first=True, total_length=N)
    loss = (y * t["dy"]).sum()
    if "h_n" in t:
        loss = loss + (hn * t["dh_n"]).sum()
    loss.backward()
    print(f"{case}: {layers} layer(s){', bidirectional' if bidir else ''}, B {B}, N {N}, in {I}, H {H}, "
          f"lengths {d['len'].tolist()}")
    check("y", d["y"], y)
    if "h_n" in t:
        check("h_n", d["h_n"], hn)
    check("grad.x", d["grad.x"], x.grad)
    if h0 is not None:
        check("grad.h0", d["grad.h0"], h0.grad)
    for ours, param in names.items():
        grad = param.grad.T if ours.endswith("w_ih") or ours.endswith("w_hh") else param.grad
        check("grad." + ours, d["grad." + ours], grad)


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        for case in ("one", "layers2", "bidir"):
            try:
                run_case(argv[1], case, tmp)
            except subprocess.CalledProcessError as e:
                print(f"  FAIL {case}: the dump exited {e.returncode}")
                global failures
                failures += 1
    print("torch_gru: " + ("all match" if failures == 0 else f"{failures} mismatch(es)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
