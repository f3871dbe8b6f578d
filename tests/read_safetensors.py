#!/usr/bin/env python3
"""Reads a safetensors file written by attngrad with a few lines of numpy.

    read_safetensors.py WRITER [ATTNGRAD]

runs `WRITER --write-example FILE` (tests/test_safetensors.c), then checks
every tensor and metadata value, and that the header is exactly the compact,
key-sorted JSON a Python user would write.  The other way round, it writes
files the way Python code does (json.dumps with its spaces, insertion order,
no padding; and with the `safetensors` package when installed) and checks
what `WRITER --dump FILE` reads from them.  Exits 77 (a skip for meson) when
numpy is not installed.

With ATTNGRAD (the program; tests/test_safetensors_interop.sh runs this in a
virtual environment holding the `safetensors` package) it also checks both
directions against the reference implementation: a checkpoint `attngrad
train` wrote loads with safetensors.numpy.load_file, every name, shape,
dtype, value and metadata entry as our reader gives them; and files
safetensors.numpy.save_file writes (F32, F64, F16, metadata, empty tensors),
with BF16, odd alignments and header padding written by hand, either start
a model (`train --init`, converted to f32 with one note) or are refused
naming the tensor and the reason.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("numpy is not installed: skipping")
    sys.exit(77)

DTYPES = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8", "F16": "<f2"}


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    tensors = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        begin, end = h["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=DTYPES[h["dtype"]]).reshape(h["shape"])
    return raw[8 : 8 + n], header, tensors


def write_plain(path, tensors, metadata):
    """A safetensors file the way a short Python script writes one."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        dt = {np.float32: "F32", np.float64: "F64", np.int32: "I32", np.int64: "I64"}[a.dtype.type]
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def check_dump(writer, path, tensors, metadata):
    out = subprocess.run([writer, "--dump", path], check=True, capture_output=True, text=True).stdout
    seen = {}
    for line in out.splitlines():
        parts = line.split(" ")
        if parts[0] == "meta":
            assert metadata[parts[1]].replace("\n", "\\n") == " ".join(parts[2:]), line
            continue
        name, dt, shape, values = parts[0], parts[1], parts[2], parts[3:]
        a = tensors[name]
        assert dt == {"float32": "F32", "float64": "F64", "int32": "I32", "int64": "I64", "float16": "F16"}[str(a.dtype)], line
        assert shape == ",".join(str(d) for d in a.shape), line
        got = np.array([float(v) if dt[0] == "F" else int(v) for v in values], dtype=a.dtype)
        assert np.array_equal(got, a.reshape(-1)), line
        seen[name] = True
    assert set(seen) == set(tensors), (set(seen), set(tensors))


def write_by_hand(path, items, metadata, pad):
    """A file as a careless writer makes one: tensors in the order given
    (whatever their alignment), `pad` spaces after the JSON."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, (dtype, shape, raw) in items:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode() + b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def run(cmd, want_rc, *patterns):
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout + p.stderr
    assert p.returncode == want_rc, "%s: exit %d, want %d:\n%s" % (" ".join(cmd), p.returncode, want_rc, out[-2000:])
    for pat in patterns:
        assert pat in out, "%s: output lacks %r:\n%s" % (" ".join(cmd), pat, out[-2000:])
    return out


def interop(writer, attngrad, d):
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    # attngrad -> safetensors: a checkpoint of `attngrad train`
    model = ["--model", "mpsan", "--synth-n", "64", "--dim", "8", "--batch", "16", "--progress", "none"]
    run([attngrad, "train", *model, "--epochs", "1", "--out", os.path.join(d, "run")], 0)
    ckpt = os.path.join(d, "run", "last.safetensors")
    ref = load_file(ckpt)
    _, header, ours = read(ckpt)
    with safe_open(ckpt, "numpy") as f:
        meta = f.metadata()
    assert meta == header["__metadata__"] and "config" in meta and "crc32c.embed.weight" in meta
    assert set(ref) == set(ours) and len(ref) > 60, (len(ref), len(ours))
    for name, value in ref.items():
        assert value.dtype == ours[name].dtype and value.shape == ours[name].shape, name
        assert np.array_equal(value, ours[name]), name
    check_dump(writer, ckpt, ref, meta)  # and attngrad's own reader gives the same
    print("a checkpoint of attngrad train: %d tensors load with safetensors.numpy, as attngrad reads them" % len(ref))

    # safetensors -> attngrad: files that start a model, or are refused
    params = {k: v for k, v in ref.items() if not k.startswith(("optim.", "sched."))}
    init = ["train", *model, "--epochs", "1", "--optim", "sgd:lr=0", "--l2", "0"]  # lr 0: the parameters stay the file's

    def started_from(path, want, note):
        out_dir = os.path.join(d, "init-" + os.path.basename(path))
        out = run([attngrad, *init, "--init", path, "--out", out_dir], 0)
        notes = [l for l in out.splitlines() if "converted to F32" in l]
        assert len(notes) == (1 if note else 0), out  # said once, not per tensor
        if note:
            assert note in notes[0], notes
        got = load_file(os.path.join(out_dir, "last.safetensors"))
        for name, value in want.items():
            assert got[name].dtype == np.float32 and np.array_equal(got[name], value.astype(np.float32)), name

    for dtype, tag, note in ((np.float32, "F32", None), (np.float64, "F64", "are F64"), (np.float16, "F16", "are F16")):
        path = os.path.join(d, "export-%s.safetensors" % tag)
        cast = {k: v.astype(dtype) for k, v in params.items()}
        save_file(cast, path, metadata={"format": "pt"})  # as a PyTorch export carries
        started_from(path, cast, note)
        check_dump(writer, path, cast, {"format": "pt"})
    print("save_file's F32, F64 and F16 exports start a model (F64/F16 converted, one note)")

    # BF16 (numpy has no such type: written by hand, the upper half of each
    # float32) mixed with F16 and F32, at odd offsets after an odd padding;
    # safetensors reads that header and the non-BF16 tensors as we do
    names = sorted(params)
    items, want = [], {}
    for i, name in enumerate(names):
        v = params[name]
        if name == "unit0.b":  # 1 element: F16 and first, so the tensors after it sit at 2 mod 4
            items.insert(0, (name, ("F16", list(v.shape), v.astype("<f2").tobytes())))
            want[name] = v.astype("<f2")
        elif i % 3 == 0:
            bits = (v.astype("<f4").view("<u4") >> 16).astype("<u2")
            items.append((name, ("BF16", list(v.shape), bits.tobytes())))
            want[name] = (bits.astype("<u4") << 16).view("<f4")
        elif i % 3 == 1:
            items.append((name, ("F16", list(v.shape), v.astype("<f2").tobytes())))
            want[name] = v.astype("<f2")
        else:
            items.append((name, ("F32", list(v.shape), v.astype("<f4").tobytes())))
            want[name] = v
    assert params["unit0.b"].size == 1
    mixed = os.path.join(d, "mixed.safetensors")
    write_by_hand(mixed, items, {"source": "by hand"}, pad=5)
    with safe_open(mixed, "numpy") as f:
        assert sorted(f.keys()) == names and f.metadata() == {"source": "by hand"}
        for name in names:
            if dict(items)[name][0] != "BF16":
                assert np.array_equal(f.get_tensor(name), want[name]), name
    started_from(mixed, want, "are F16 or BF16, converted to F32")
    print("BF16, F16 and F32 mixed at odd offsets, padded header: starts a model")

    # refusals, each naming the tensor and the reason, every one listed
    bad = dict(params)
    first, second = names[0], names[1]
    bad[first] = params[first].astype(np.int32)
    bad[second] = params[second].astype(np.int64)
    bad["empty"] = np.zeros((0, 3), dtype=np.float32)
    bad["pool.w1"] = np.zeros((3, 8), dtype=np.float32)
    del bad["unit0.u"]
    path = os.path.join(d, "bad.safetensors")
    save_file(bad, path, metadata={"format": "pt"})
    run([attngrad, *init, "--init", path, "--out", os.path.join(d, "refused")], 1,
        "'%s' is I32 in the file, not a float type" % first, "'%s' is I64 in the file" % second,
        "extra:    'empty' F32 [0,3] is no parameter of the model", "'pool.w1' is [3,8] in the file, [8,8] in the model",
        "missing:  'unit0.u' [8] is not in the file",
        "does not fit the model's 31 parameters: 1 missing, 1 of another shape, 2 not float, 1 extra")
    assert not os.path.exists(os.path.join(d, "refused")), "a refused --init left a run folder"
    print("I32, I64, empty, mis-shaped and missing tensors: refused, each named")


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "example.safetensors")
        subprocess.run([sys.argv[1], "--write-example", path], check=True)
        text, header, t = read(path)

        assert t["weight"].dtype == np.float32 and t["weight"].shape == (2, 2)
        assert np.array_equal(t["weight"], np.array([[1.0, -2.0], [0.5, 0.0]], dtype=np.float32))
        assert t["ids"].dtype == np.int64 and t["ids"].tolist() == [1, -1, 300]
        assert t["scalar"].dtype == np.float64 and t["scalar"].shape == () and float(t["scalar"]) == 0.25
        assert header["__metadata__"] == {"name": 'x"y', "step": "7"}
        assert len(text) % 8 == 0, "data starts 8-byte aligned"
        compact = json.dumps(header, sort_keys=True, separators=(",", ":"))
        assert text.decode("utf-8").rstrip(" ") == compact, "header is sorted compact JSON"

        try:
            from safetensors.numpy import load_file
        except ImportError:
            print("safetensors package not installed: numpy check only")
        else:
            loaded = load_file(path)
            for name, value in t.items():
                assert np.array_equal(loaded[name], value), name
            print("safetensors.numpy.load_file agrees")
        # the other way: files written by Python, read by attngrad
        rng = np.random.default_rng(0)
        tensors = {
            "encoder.w": rng.standard_normal((3, 4)).astype(np.float32),
            "b": rng.standard_normal(5),
            "batch.tokens": np.array([[5, 6, 7], [8, 0, 0]], dtype=np.int64),
            "batch.lengths": np.array([3, 1], dtype=np.int32),
            "empty": np.zeros((0, 2), dtype=np.float32),
            "loss": np.array(0.693, dtype=np.float64),
        }
        metadata = {"step": "3", "note": "written by python"}
        plain = os.path.join(d, "plain.safetensors")
        write_plain(plain, tensors, metadata)
        check_dump(sys.argv[1], plain, tensors, metadata)
        try:
            from safetensors.numpy import save_file
        except ImportError:
            pass
        else:
            official = os.path.join(d, "official.safetensors")
            save_file(tensors, official, metadata=metadata)
            check_dump(sys.argv[1], official, tensors, metadata)
            print("a file written by safetensors.numpy.save_file reads back")
        if len(sys.argv) > 2:
            interop(sys.argv[1], sys.argv[2], d)
    print("read_safetensors: all checks passed")


if __name__ == "__main__":
    main()
