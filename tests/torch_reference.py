#!/usr/bin/env python3
"""torch_reference.py - attngrad's models against an independent PyTorch
implementation (bench/torch_models.py), gradient by gradient.

    torch_reference.py STEP.safetensors...      check dump files
    torch_reference.py EXE [EXE...]             for every model EXE registers
                                                (`EXE models`) and each of its
                                                variants, run `EXE dump-step
                                                --model X --out F [...]`, check F

A dump (docs/models.md, "The reference dump") holds one forward/backward with dropout
off: every parameter, grad.<name>, loss and batch.*.  We rebuild the model in
PyTorch float64 from the dumped parameters, run the same batch, and compare
the loss and every gradient: |attngrad - torch| <= rtol * scale per tensor,
scale = max(max|torch grad of that tensor|, 1e-3 * the largest gradient of
the model) (the floor keeps gradients that are zero by symmetry, like every
pool.b2, from being judged on rounding noise).  rtol is 1e-4 for F32 dumps
and 1e-8 for F64 ones.

Exit 0 all match, 1 a mismatch or a failed dump, 77 (meson: SKIP) when
torch or numpy is missing or the executable has no dump-step.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

SKIP = 77

try:
    import numpy as np
    import torch
except ImportError as e:  # never in CI: the check needs PyTorch
    print(f"torch_reference: SKIP ({e.name} is not installed)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import torch_models as tm  # noqa: E402

# The FLAG variants of docs/models.md, as dump-step options, per model.
VARIANTS = {
    "mpsan": [[], ["--flags", "elu_score"], ["--flags", "linear_dist"]],
    "dual_axial": [[], ["--flags", "no_bigram"], ["--flags", "softmax"], ["--flags", "no_zeta"],
                   ["--flags", "text_only"]],
    "ms_san": [[], ["--flags", "no_dist"], ["--task", "pair"]],
    "mtsa": [[], ["--flags", "exp_score"]],
    "poslm": [[], ["--flags", "strict"], ["--attention", "standard"], ["--attention", "none"]],
}

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    """name -> numpy array, and the metadata dict."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out, dtypes = {}, {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        arr = np.frombuffer(raw[base + b:base + e], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = arr.copy()
        dtypes[name] = info["dtype"]
    return out, meta, dtypes


def parse_config(meta):
    """The "key=value" lines of the dump's config metadata."""
    conf = {}
    for line in meta.get("config", "").splitlines():
        k, _, v = line.partition("=")
        conf[k.strip()] = v.strip()
    return conf


def check_file(path, label=None):
    """Replays one dump in float64; prints a line per tensor; returns ok."""
    tensors, meta, dtypes = read_safetensors(path)
    conf = parse_config(meta)
    name = meta.get("model") or conf.get("model")
    label = label or name
    if name not in tm.MODELS:
        print(f"{label}: FAIL (no PyTorch implementation of '{name}' in bench/torch_models.py)")
        return False
    shapes = {k: tuple(v.shape) for k, v in tensors.items() if not k.startswith(("grad.", "batch.")) and k != "loss"}
    flags = frozenset(f for f in conf.get("flags", "").split(",") if f)
    base = tm.Config(flags=flags, task=conf.get("task") or ("lm" if name == "poslm" else "classify"),
                     attention=conf.get("attention") or "positional", keep=1.0, keep_layers=1.0)
    cfg = tm.config_from_params(name, shapes, base)
    model = tm.build(name, cfg, dtype=torch.float64)
    missing = sorted(set(model.p) ^ set(shapes))
    if missing:
        print(f"{label}: FAIL (parameters differ between dump and PyTorch model: {missing})")
        return False
    model.load_named({k: torch.from_numpy(tensors[k]) for k in shapes})
    model.eval()
    batch = {k[len("batch."):]: torch.from_numpy(v.astype(np.int64)) for k, v in tensors.items()
             if k.startswith("batch.")}
    loss = model.loss(batch)
    loss.backward()

    f32 = dtypes.get("loss") == "F32"
    rtol = 1e-4 if f32 else 1e-8
    grads = {n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in model.p.items()}
    top = max(float(g.abs().max()) for g in grads.values())
    ok = True
    rows = []
    ref_loss, got_loss = float(loss.detach()), float(tensors["loss"].reshape(()))
    loss_err = abs(got_loss - ref_loss) / max(abs(ref_loss), 1e-30)
    ok &= loss_err <= rtol
    rows.append(("loss", loss_err, abs(got_loss - ref_loss), loss_err <= rtol))
    for n in sorted(grads):
        want = grads[n].numpy()
        got = tensors["grad." + n].astype(np.float64)
        scale = max(float(np.abs(want).max()), 1e-3 * top, 1e-300)
        err = float(np.abs(got - want).max())
        good = err <= rtol * scale
        ok &= good
        rows.append((n, err / scale, err, good))
    worst = max(rows, key=lambda r: r[1])
    print(f"{label}: {'ok' if ok else 'FAIL'}  loss {got_loss:.10g} (torch {ref_loss:.10g}), "
          f"{len(rows) - 1} gradients, worst {worst[0]} rel {worst[1]:.2e} (rtol {rtol:g}, {'F32' if f32 else 'F64'})")
    for n, rel, err, good in rows:
        if not good:
            print(f"    {n:28s} rel {rel:.3e}  abs {err:.3e}  MISMATCH")
    return ok


def registered_models(exe):
    """Model names from `EXE models`: the first word of each line after the header."""
    out = subprocess.run([exe, "models"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    names = []
    for line in out.stdout.splitlines()[1:]:
        if line.strip() and not line.startswith(("(", " ")):
            names.append(line.split()[0])
    return names


def has_dump_step(exe):
    out = subprocess.run([exe, "dump-step", "--help"], capture_output=True, text=True)
    text = out.stdout + out.stderr
    return "unknown command" not in text and ("dump-step" in text or out.returncode == 0)


def check_exe(exe):
    if not has_dump_step(exe):
        print(f"torch_reference: SKIP ({exe} has no dump-step command)")
        return None
    names = registered_models(exe)
    if names is None:
        print(f"torch_reference: FAIL ({exe} models failed)")
        return False
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if name not in tm.MODELS:
                print(f"{name}: FAIL (registered in attngrad, no PyTorch implementation)")
                ok = False
                continue
            for i, extra in enumerate(VARIANTS.get(name, [[]])):
                label = f"{os.path.basename(exe)} {name}" + (" " + " ".join(extra) if extra else "")
                path = os.path.join(tmp, f"{name}-{i}.safetensors")
                run = subprocess.run([exe, "dump-step", "--model", name, "--out", path] + extra,
                                     capture_output=True, text=True)
                if run.returncode != 0:
                    print(f"{label}: FAIL (dump-step exited {run.returncode}: {run.stderr.strip()[:300]})")
                    ok = False
                    continue
                ok &= check_file(path, label)
    return ok


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    torch.set_num_threads(1)
    results = []
    for arg in argv[1:]:
        if arg.endswith(".safetensors"):
            results.append(check_file(arg))
        else:
            results.append(check_exe(arg))
    ran = [r for r in results if r is not None]
    if not ran:
        return SKIP
    return 0 if all(ran) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
