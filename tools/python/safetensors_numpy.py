"""Reads a Hugging Face safetensors checkpoint into NumPy arrays (no torch, no safetensors
package: the format is an 8-byte header length, a JSON header, then raw little-endian data).
f16 and bf16 tensors are widened to float32 exactly. Shared by the engine's NumPy reference
(tests/engine/reference_forward.py) and the GGUF converter (bench/llama_cpp/convert_to_gguf.py).
"""
import json
import os
import struct

import numpy as np


def load_safetensors(path):
    """Tensor name -> float32 array of the tensor's shape."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        dtype = info["dtype"]
        if dtype == "F32":
            arr = np.frombuffer(raw, dtype="<f4")
        elif dtype == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dtype == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: unsupported dtype {dtype}")
        out[name] = arr.reshape(info["shape"])
    return out


def load_weights(model_dir):
    """Every tensor of a model directory (one file, or shards listed by the index)."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(load_safetensors(os.path.join(model_dir, name)))
    return weights
