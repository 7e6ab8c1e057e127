"""Rewrites a deepseek2 GGUF file from llama.cpp's current MLA layout into the layout its converter
wrote before the MLA rework (the DeepSeek GGUF files of 2024 still in use): kv_b_proj whole as
attn_kv_b, the MHA head sizes in attention.key_length / value_length, head_count_kv = heads,
no *_mla keys. attn_kv_b keeps attn_v_b's type (so a Q8_0 file gets a quantized kv_b_proj, which
the loader must dequantize for its transpose of W_uk).

usage (as a module): write_legacy(src_path, dst_path)
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "loader"))
import gguf_reference as g  # noqa: E402

ALIGNMENT = 32


def put_string(out, s):
    raw = s.encode("utf-8")
    out += struct.pack("<Q", len(raw)) + raw


def put_value(out, vtype, value):
    if vtype in g.SCALARS:
        out += struct.pack(g.SCALARS[vtype], value)
    elif vtype == g.STRING:
        put_string(out, value)
    elif vtype == g.ARRAY:
        out += struct.pack("<IQ", value["array_type"], len(value["values"]))
        for v in value["values"]:
            put_value(out, value["array_type"], v)
    else:
        raise ValueError(vtype)


def write_gguf(path, kv, tensors):
    """kv: {key: {"type", "value"}}; tensors: [(name, ne, type_id, raw bytes)]."""
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, v in kv.items():
        put_string(out, key)
        out += struct.pack("<I", v["type"])
        put_value(out, v["type"], v["value"])
    offset = 0
    for name, ne, type_id, raw in tensors:
        put_string(out, name)
        out += struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", type_id, offset)
        offset = (offset + len(raw) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    out += bytes(-len(out) % ALIGNMENT)
    for _, _, _, raw in tensors:
        out += raw + bytes(-len(raw) % ALIGNMENT)
    with open(path, "wb") as f:
        f.write(out)


def write_legacy(src, dst):
    _, kv, infos, data_start, _, data = g.read_gguf(src)
    a = "deepseek2."
    heads = kv[a + "attention.head_count"]["value"]
    rope = kv[a + "rope.dimension_count"]["value"]
    qk_head = kv.pop(a + "attention.key_length_mla")["value"]
    v_head = kv.pop(a + "attention.value_length_mla")["value"]
    kv[a + "attention.head_count_kv"]["value"] = heads
    kv[a + "attention.key_length"]["value"] = qk_head
    kv[a + "attention.value_length"]["value"] = v_head
    nope = qk_head - rope

    by_name = {t["name"]: t for t in infos}
    tensors = []
    for t in infos:
        name = t["name"]
        if name.endswith(".attn_v_b.weight"):
            continue  # written with attn_k_b
        raw = g.tensor_bytes(data, data_start, t)
        if name.endswith(".attn_k_b.weight"):
            v_info = by_name[name.replace("attn_k_b", "attn_v_b")]
            k_b = g.decode(t["type"], raw).reshape(heads, -1, nope)  # [H, rank, nope]
            rank = k_b.shape[1]
            v_b = g.decode(v_info["type"], g.tensor_bytes(data, data_start, v_info))
            v_b = v_b.reshape(heads, v_head, rank)
            kv_b = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1).reshape(-1, rank)
            tensors.append((name.replace("attn_k_b", "attn_kv_b"), [rank, kv_b.shape[0]],
                            v_info["type"], g.encode(v_info["type"], kv_b.astype(np.float32))))
            continue
        tensors.append((name, t["ne"], t["type"], raw))
    write_gguf(dst, kv, tensors)
