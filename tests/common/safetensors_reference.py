"""safetensors files written and read by hand for the PyTorch references (tests/model/hf_reference.py,
tests/deepseek/deepseek_reference.py), so that no test shares code with the engine's loader:
an 8-byte header length, the JSON header padded with spaces to 8 bytes, then the tensors.
"""
import json
import struct

import numpy as np
import torch

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def save_safetensors(path, tensors, dtype, keep_f32=lambda name: False):
    """Writes `tensors` (name -> tensor) in `dtype` (F32, F16 or BF16), but F32 for the names
    `keep_f32` holds."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        dt = "F32" if keep_f32(name) else dtype
        t = t.to(_DTYPES[dt]).contiguous()
        raw = t.numpy().tobytes() if dt == "F32" else t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """name -> fp32 tensor, widened from whatever the file stores."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        if info["dtype"] == "F32":
            t = torch.from_numpy(np.frombuffer(data[a:b], dtype=np.float32).copy())
        else:
            raw = torch.from_numpy(np.frombuffer(data[a:b], dtype=np.int16).copy())
            t = raw.view(_DTYPES[info["dtype"]]).float()
        out[name] = t.reshape(info["shape"]).float()
    return out
