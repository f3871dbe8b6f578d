#!/usr/bin/env python3
"""Small edits of safetensors files for the CLI tests, with the standard
library only (no numpy):

    st_edit.py config IN OUT key=value...   set entries of the 'config' metadata
    st_edit.py flip IN OUT TENSOR BYTE BIT  flip one bit of a tensor's data
    st_edit.py strip-crc IN OUT             drop the crc32c.* metadata
    st_edit.py rename IN OUT OLD NEW        rename a tensor (its checksum too)
    st_edit.py same-tensors A B [PREFIX]    exit 1 unless the tensors (whose
                                            names start with PREFIX) hold the same bytes
"""
import json
import struct
import sys


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), bytearray(raw[8 + n :])


def save(path, header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + bytes(data))


def tensor_bytes(header, data, name):
    begin, end = header[name]["data_offsets"]
    return bytes(data[begin:end])


def main(cmd, *args):
    if cmd == "same-tensors":
        (ha, da), (hb, db) = load(args[0]), load(args[1])
        prefix = args[2] if len(args) > 2 else ""
        names = sorted(k for k in ha if k != "__metadata__" and k.startswith(prefix))
        for k in names:
            if k not in hb or tensor_bytes(ha, da, k) != tensor_bytes(hb, db, k) or ha[k]["dtype"] != hb[k]["dtype"]:
                print("tensor %s differs" % k)
                return 1
        return 0 if names else 1
    header, data = load(args[0])
    meta = header.setdefault("__metadata__", {})
    if cmd == "config":
        lines = meta["config"].split("\n")
        for kv in args[2:]:
            key = kv.split("=")[0]
            lines = [kv if l.split("=")[0] == key else l for l in lines]
        meta["config"] = "\n".join(lines)
    elif cmd == "flip":
        begin = header[args[2]]["data_offsets"][0]
        data[begin + int(args[3])] ^= 1 << int(args[4])
    elif cmd == "strip-crc":
        for k in [k for k in meta if k.startswith("crc32c.")]:
            del meta[k]
    elif cmd == "rename":
        header[args[3]] = header.pop(args[2])
        if "crc32c." + args[2] in meta:
            meta["crc32c." + args[3]] = meta.pop("crc32c." + args[2])
    else:
        raise SystemExit("unknown command " + cmd)
    save(args[1], header, data)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
