#!/usr/bin/env python3
"""Reads a safetensors file written by attngrad with a few lines of numpy.

    read_safetensors.py WRITER

runs `WRITER --write-example FILE` (tests/test_safetensors.c), then checks
every tensor and metadata value, and that the header is exactly the compact,
key-sorted JSON a Python user would write.  The other way round, it writes
files the way Python code does (json.dumps with its spaces, insertion order,
no padding; and with the `safetensors` package when installed) and checks
what `WRITER --dump FILE` reads from them.  Exits 77 (a skip for meson) when
numpy is not installed.
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

DTYPES = {"F32": "<f4", "F64": "<f8", "I32": "<i4", "I64": "<i8"}


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
            assert metadata[parts[1]] == " ".join(parts[2:]), line
            continue
        name, dt, shape, values = parts[0], parts[1], parts[2], parts[3:]
        a = tensors[name]
        assert dt == {"float32": "F32", "float64": "F64", "int32": "I32", "int64": "I64"}[str(a.dtype)], line
        assert shape == ",".join(str(d) for d in a.shape), line
        got = np.array([float(v) if dt[0] == "F" else int(v) for v in values], dtype=a.dtype)
        assert np.array_equal(got, a.reshape(-1)), line
        seen[name] = True
    assert set(seen) == set(tensors), (set(seen), set(tensors))


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
    print("read_safetensors: all checks passed")


if __name__ == "__main__":
    main()
