"""Minimal safetensors reader/writer (torch + numpy), so the reference tools run
with or without the `safetensors` package and write byte-for-byte reproducible
files.

File layout (safetensors): u64 little-endian header length N, N bytes of JSON
header {name: {dtype, shape, data_offsets:[begin,end]}, "__metadata__": {...}}
padded with spaces to a multiple of 8, then the raw little-endian tensor data.
Tensors are laid out largest element size first (then by name), so every
tensor starts at an offset that is a multiple of its element size.

Tensors are torch tensors, except U32 ones (packed quantized weights), which are
numpy uint32 arrays (older torch has no uint32 dtype).
"""
import json
import os
import struct

import numpy as np
import torch

_TORCH2ST = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
    torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}
_ST2TORCH = {v: k for k, v in _TORCH2ST.items()}
_SIZE = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
         "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def _encode(t):
    """-> (dtype string, shape list, raw bytes)"""
    if isinstance(t, np.ndarray):
        if t.dtype != np.uint32:
            raise ValueError("numpy arrays are only used for U32, got %s" % t.dtype)
        return "U32", list(t.shape), np.ascontiguousarray(t).astype("<u4").tobytes()
    t = t.detach().cpu().contiguous()
    code = _TORCH2ST[t.dtype]
    if t.dtype == torch.bfloat16:
        raw = t.view(torch.int16).numpy().tobytes()
    else:
        raw = t.numpy().tobytes()
    return code, list(t.shape), raw


def save(path, tensors, metadata=None):
    enc = {name: _encode(t) for name, t in tensors.items()}
    order = sorted(enc, key=lambda n: (-_SIZE[enc[n][0]], n))
    header, blobs, off = {}, [], 0
    for name in order:
        code, shape, raw = enc[name]
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    meta = {"format": "pt"}
    meta.update(metadata or {})
    header = dict([("__metadata__", {k: str(v) for k, v in meta.items()})] + list(header.items()))
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def load(path):
    """-> (dict name -> tensor (numpy uint32 for U32), metadata dict)"""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        raw = data[base + b: base + e]
        code, shape = h["dtype"], h["shape"]
        if code == "U32":
            out[name] = np.frombuffer(raw, dtype="<u4").reshape(shape).copy()
        elif code == "BF16":
            a = np.frombuffer(raw, dtype="<i2").reshape(shape).copy()
            out[name] = torch.from_numpy(a).view(torch.bfloat16)
        else:
            dt = _ST2TORCH[code]
            a = np.frombuffer(raw, dtype=torch.empty(0, dtype=dt).numpy().dtype).reshape(shape).copy()
            out[name] = torch.from_numpy(a)
    return out, meta


def save_sharded(model_dir, tensors, n_shards, metadata=None):
    """HF sharded layout: model-0000k-of-0000N.safetensors + model.safetensors.index.json.
    Tensors are split in name order into n_shards chunks of roughly equal bytes."""
    names = sorted(tensors)
    sizes = {n: len(_encode(tensors[n])[2]) for n in names}
    total = sum(sizes.values())
    shards, cur, acc = [[] for _ in range(n_shards)], 0, 0
    for n in names:
        if cur < n_shards - 1 and acc >= total * (cur + 1) / n_shards:
            cur += 1
        shards[cur].append(n)
        acc += sizes[n]
    weight_map = {}
    for k, chunk in enumerate(shards):
        if not chunk:
            raise ValueError("empty shard %d" % k)
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, n_shards)
        save(os.path.join(model_dir, fname), {n: tensors[n] for n in chunk}, metadata)
        for n in chunk:
            weight_map[n] = fname
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


def load_dir(model_dir):
    """All tensors of a HF model directory (single file or sharded)."""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        t, _ = load(os.path.join(model_dir, fn))
        out.update(t)
    return out
