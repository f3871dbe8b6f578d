#!/usr/bin/env python3
"""Small edits of safetensors files for the CLI tests, with the standard
library only (no numpy):

    st_edit.py config IN OUT key=value...   set entries of the 'config' metadata
    st_edit.py stale-config IN OUT k=v...   the same without sealing the file again:
                                            an edit by hand, which readers refuse
    st_edit.py flip IN OUT TENSOR BYTE BIT  flip one bit of a tensor's data
    st_edit.py flip-header IN OUT TEXT K BIT  flip one bit of byte K of TEXT's first place in the header
    st_edit.py strip-crc IN OUT             drop every checksum: a file of another writer
    st_edit.py unseal IN OUT                drop the whole-file seal only: a checkpoint of
                                            attngrad before the seal (tensor checksums kept)
    st_edit.py rename IN OUT OLD NEW        rename a tensor (its checksum too)
    st_edit.py reseal IN OUT                seal a file edited by other means again

Edits other than stale-config and flip-header seal the file again (the
whole-file CRC-32C of attngrad.file_crc32c), as attngrad would write it:
what they test is the reader's check of what the edit changed.
    st_edit.py same-tensors A B [PREFIX]    exit 1 unless the tensors (whose
                                            names start with PREFIX) hold the same bytes
"""
import json
import struct
import sys


FILE_CRC = "attngrad.file_crc32c"


def crc32c(data, crc=0):
    table = crc32c.table
    if not table:
        for b in range(256):
            c = b
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ table[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


crc32c.table = []


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), bytearray(raw[8 + n :])


def save(path, header, data, seal=True):
    meta = header.get("__metadata__", {})
    if seal and FILE_CRC in meta:
        meta[FILE_CRC] = "00000000"
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    raw = bytearray(struct.pack("<Q", len(text)) + text + bytes(data))
    if seal and FILE_CRC in meta:
        at = raw.index(b'"%s":"' % FILE_CRC.encode()) + len(FILE_CRC) + 4
        raw[at : at + 8] = b"%08x" % crc32c(raw)
    open(path, "wb").write(bytes(raw))


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
    if cmd in ("config", "stale-config"):
        lines = meta["config"].split("\n")
        for kv in args[2:]:
            key = kv.split("=")[0]
            lines = [kv if l.split("=")[0] == key else l for l in lines]
        meta["config"] = "\n".join(lines)
    elif cmd == "flip":
        begin = header[args[2]]["data_offsets"][0]
        data[begin + int(args[3])] ^= 1 << int(args[4])
    elif cmd == "strip-crc":
        for k in [k for k in meta if k.startswith("crc32c.") or k in (FILE_CRC, "attngrad.sealed")]:
            del meta[k]
    elif cmd == "unseal":
        for k in (FILE_CRC, "attngrad.sealed"):
            meta.pop(k, None)
    elif cmd == "reseal":
        pass
    elif cmd == "flip-header":
        raw = bytearray(open(args[0], "rb").read())
        raw[raw.index(args[2].encode(), 8) + int(args[3])] ^= 1 << int(args[4])
        open(args[1], "wb").write(bytes(raw))
        return 0
    elif cmd == "rename":
        header[args[3]] = header.pop(args[2])
        if "crc32c." + args[2] in meta:
            meta["crc32c." + args[3]] = meta.pop("crc32c." + args[2])
    else:
        raise SystemExit("unknown command " + cmd)
    save(args[1], header, data, seal=cmd != "stale-config")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
