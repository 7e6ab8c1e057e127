#!/usr/bin/python3
"""An independent GGUF v3 reader for gguf_writer_test (Debian's /usr/bin/python3 + numpy).

usage: gguf_reference.py FILE.gguf SOURCES_DIR OUT.json

Parses FILE.gguf from scratch (struct + numpy, nothing shared with the C++ writer), checks the
layout rules of the format (magic, version, aligned offsets inside the file, no overlaps, data
section at the aligned end of the header), and for every tensor NAME with a SOURCES_DIR/NAME.f32
file (raw little-endian float32) re-encodes those values with numpy versions of ggml's
reference quantizers (quantize_row_q8_0_ref / quantize_row_q4_0_ref in ggml-quants.c) and
conversions, and compares bytes. Writes what it found as JSON for the C++ test to assert on.
Exits 1 with a message on a malformed file.
"""
import json
import os
import struct
import sys

import numpy as np

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
# ggml type id: (name, values per block, bytes per block)
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 8: ("Q8_0", 32, 34),
         30: ("BF16", 1, 2)}


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, fmt):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            sys.exit(f"truncated at byte {self.pos}")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self):
        n = self.take("<Q")
        if self.pos + n > len(self.data):
            sys.exit(f"string of {n} bytes runs past the end at {self.pos}")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8")

    def value(self, vtype):
        if vtype in SCALARS:
            return self.take(SCALARS[vtype])
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            etype = self.take("<I")
            n = self.take("<Q")
            return {"array_type": etype, "values": [self.value(etype) for _ in range(n)]}
        sys.exit(f"unknown value type {vtype} at byte {self.pos}")


def round_half_away(v):
    # C's roundf: half away from zero (numpy's round is half to even). float64 holds every
    # float32 exactly, so |v| + 0.5 is exact there.
    v64 = v.astype(np.float64)
    return np.sign(v64) * np.floor(np.abs(v64) + 0.5)


def quantize_q8_0(x):
    x = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(x).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.zeros_like(d)
    np.divide(np.float32(1), d, out=inv, where=d != 0)
    q = round_half_away(x * inv[:, None]).astype(np.int8)
    return np.concatenate([d.astype(np.float16).view(np.uint8).reshape(-1, 2),
                           q.view(np.uint8)], axis=1).tobytes()


def quantize_q4_0(x):
    x = x.reshape(-1, 32).astype(np.float32)
    # the signed value of largest magnitude, the first one on ties (ggml keeps it with `<`)
    m = x[np.arange(len(x)), np.argmax(np.abs(x), axis=1)]
    d = (m / np.float32(-8)).astype(np.float32)
    inv = np.zeros_like(d)
    np.divide(np.float32(1), d, out=inv, where=d != 0)
    shifted = (x * inv[:, None]).astype(np.float32) + np.float32(8.5)
    q = np.minimum(15, np.trunc(shifted)).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([d.astype(np.float16).view(np.uint8).reshape(-1, 2),
                           packed], axis=1).tobytes()


def to_bf16(x):
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded.tobytes()


def encode(type_id, x):
    if type_id == 0:
        return x.astype("<f4").tobytes()
    if type_id == 1:
        return x.astype("<f2").tobytes()
    if type_id == 30:
        return to_bf16(x)
    if type_id == 8:
        return quantize_q8_0(x)
    if type_id == 2:
        return quantize_q4_0(x)
    raise ValueError(type_id)


def decode(type_id, raw):
    if type_id == 0:
        return np.frombuffer(raw, "<f4").astype(np.float64)
    if type_id == 1:
        return np.frombuffer(raw, "<f2").astype(np.float64)
    if type_id == 30:
        bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    block = 34 if type_id == 8 else 18
    b = np.frombuffer(raw, np.uint8).reshape(-1, block)
    d = b[:, :2].copy().view("<f2").astype(np.float64)
    if type_id == 8:
        q = b[:, 2:].view(np.int8).astype(np.float64)
    else:
        lo, hi = (b[:, 2:] & 0x0F).astype(np.float64), (b[:, 2:] >> 4).astype(np.float64)
        q = np.concatenate([lo, hi], axis=1) - 8
    return (d * q).reshape(-1)


def read_gguf(path):
    """(version, kv, tensor infos with nbytes, data_start, end of the last tensor, bytes)."""
    data = open(path, "rb").read()
    r = Reader(data)
    if data[:4] != b"GGUF":
        sys.exit(f"{path}: bad magic {data[:4]!r}")
    r.pos = 4
    version = r.take("<I")
    n_tensors = r.take("<Q")
    n_kv = r.take("<Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        if key in kv:
            sys.exit(f"{path}: key {key} repeated")
        vtype = r.take("<I")
        kv[key] = {"type": vtype, "value": r.value(vtype)}
    alignment = kv.get("general.alignment", {"value": 32})["value"]
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("<I")
        ne = [r.take("<Q") for _ in range(n_dims)]
        type_id = r.take("<I")
        offset = r.take("<Q")
        infos.append({"name": name, "ne": ne, "type": type_id, "offset": offset})
    data_start = (r.pos + alignment - 1) // alignment * alignment
    if any(b != 0 for b in data[r.pos:data_start]):
        sys.exit(f"{path}: header padding is not zero")
    end = data_start
    for t in sorted(infos, key=lambda t: t["offset"]):
        if t["type"] not in TYPES:
            sys.exit(f"{path}: tensor {t['name']} has unknown type {t['type']}")
        _, block, block_bytes = TYPES[t["type"]]
        n = int(np.prod(t["ne"]))
        if t["ne"][0] % block:
            sys.exit(f"{path}: tensor {t['name']} rows are not whole blocks")
        t["nbytes"] = n // block * block_bytes
        if t["offset"] % alignment:
            sys.exit(f"{path}: tensor {t['name']} offset {t['offset']} is not aligned")
        if data_start + t["offset"] < end:
            sys.exit(f"{path}: tensor {t['name']} overlaps the one before it")
        end = data_start + t["offset"] + t["nbytes"]
        if end > len(data):
            sys.exit(f"{path}: tensor {t['name']} runs past the end of the file")
    return version, kv, infos, data_start, end, data


def tensor_bytes(data, data_start, t):
    return data[data_start + t["offset"]:data_start + t["offset"] + t["nbytes"]]


def main():
    path, sources, out_path = sys.argv[1:4]
    version, kv, infos, data_start, end, data = read_gguf(path)
    alignment = kv.get("general.alignment", {"value": 32})["value"]
    for t in infos:
        n = int(np.prod(t["ne"]))
        raw = tensor_bytes(data, data_start, t)
        source = os.path.join(sources, t["name"] + ".f32")
        if os.path.exists(source):
            x = np.fromfile(source, "<f4")
            if x.size != n:
                sys.exit(f"{source}: {x.size} values, tensor has {n}")
            expected = encode(t["type"], x)
            t["matches_source"] = expected == raw
            if not t["matches_source"]:
                diff = [i for i in range(len(raw)) if raw[i] != expected[i]]
                t["first_mismatch_byte"] = diff[0]
                t["num_mismatched_bytes"] = len(diff)
            t["max_abs_error"] = float(np.nanmax(np.abs(decode(t["type"], raw) - x)))
            t["max_abs_source"] = float(np.nanmax(np.abs(x)))
    json.dump({"version": version, "alignment": alignment, "data_start": data_start,
               "file_size": len(data), "data_end": end, "kv": kv, "tensors": infos},
              open(out_path, "w"), ensure_ascii=False)


if __name__ == "__main__":
    main()
