"""Minimal safetensors reader/writer (numpy only; no `safetensors` package).

File format:
  u64 little-endian N, then N bytes of JSON header
    {name: {"dtype": "BF16"|"F16"|"F32", "shape": [...], "data_offsets": [begin, end]},
     "__metadata__": {...}}
  (offsets relative to the first byte after the header), then raw little-endian data.

Reading returns float32 numpy arrays (BF16 is widened by putting the uint16 in the upper
half of a uint32; F16 is converted via numpy float16).  Writing supports BF16
(round-to-nearest-even from f32), F16 and F32; tensors are sorted by name and stored
contiguously; the header is padded with spaces to a multiple of 8 bytes.
Sharded checkpoints are read via `model.safetensors.index.json`.
"""
import json
import os
import struct

import numpy as np

_DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4}


# ---------------------------------------------------------------- conversions
def bf16_bits_to_f32(u16):
    """uint16 array of bf16 bit patterns -> float32 array."""
    u16 = np.asarray(u16, dtype="<u2")
    return (u16.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bf16 bit patterns, round-to-nearest-even (NaN kept NaN)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    rounding_bias = ((u >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    out = ((u + rounding_bias) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def round_to_bf16(x):
    """float32 array -> float32 array holding the bf16-rounded values."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


# ---------------------------------------------------------------- reading
def read_header(path):
    """Return (header_dict, data_start_offset) of one safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    return header, 8 + n


def _decode(raw, dtype, shape):
    if dtype == "BF16":
        arr = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
    elif dtype == "F16":
        arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "F32":
        arr = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    else:
        raise ValueError("unsupported safetensors dtype %r" % dtype)
    return arr.reshape(shape)


def load_file(path, names=None):
    """Read a single safetensors file -> (dict name -> float32 ndarray, metadata dict)."""
    header, start = read_header(path)
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            b, e = info["data_offsets"]
            dtype = info["dtype"]
            shape = list(info["shape"])
            expect = _DTYPE_SIZE[dtype] * int(np.prod(shape, dtype=np.int64))
            if e - b != expect:
                raise ValueError("%s: %s has %d bytes, expected %d" % (path, name, e - b, expect))
            f.seek(start + b)
            raw = f.read(e - b)
            if len(raw) != e - b:
                raise ValueError("%s: truncated data for %s" % (path, name))
            out[name] = _decode(raw, dtype, shape)
    return out, meta


def load_checkpoint(model_dir):
    """Read all tensors of a HF model directory (sharded via index json, or model.safetensors).

    Returns dict name -> float32 ndarray."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        weight_map = index["weight_map"]
        shards = {}
        for name, shard in weight_map.items():
            shards.setdefault(shard, set()).add(name)
        tensors = {}
        for shard, names in sorted(shards.items()):
            got, _ = load_file(os.path.join(model_dir, shard), names=names)
            missing = names - set(got)
            if missing:
                raise ValueError("shard %s lacks tensors %s" % (shard, sorted(missing)[:5]))
            tensors.update(got)
        return tensors
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return load_file(single)[0]
    raise FileNotFoundError("no model.safetensors(.index.json) in %s" % model_dir)


# ---------------------------------------------------------------- writing
def _encode(arr, dtype):
    arr = np.asarray(arr)
    if dtype == "BF16":
        if arr.dtype == np.uint16:  # already bf16 bits
            return np.ascontiguousarray(arr, dtype="<u2").tobytes()
        return f32_to_bf16_bits(arr.astype(np.float32)).astype("<u2").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(arr, dtype="<f2").tobytes()
    if dtype == "F32":
        return np.ascontiguousarray(arr, dtype="<f4").tobytes()
    raise ValueError("unsupported dtype %r" % dtype)


def build_header(specs, metadata=None):
    """specs: list of (name, dtype, shape) in any order -> (header_bytes padded, ordered specs).

    Tensors are sorted by name and laid out contiguously."""
    specs = sorted(specs, key=lambda s: s[0])
    header = {}
    off = 0
    for name, dtype, shape in specs:
        nbytes = _DTYPE_SIZE[dtype] * int(np.prod(shape, dtype=np.int64))
        header[name] = {"dtype": dtype, "shape": [int(s) for s in shape],
                        "data_offsets": [off, off + nbytes]}
        off += nbytes
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    return hb, specs


def save_file(tensors, path, dtype="BF16", metadata=None):
    """Write dict name -> array. `dtype` is one string or a dict name -> dtype string."""
    dtypes = {n: (dtype[n] if isinstance(dtype, dict) else dtype) for n in tensors}
    specs = [(n, dtypes[n], list(np.shape(tensors[n]))) for n in tensors]
    hb, specs = build_header(specs, metadata)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, dt, _ in specs:
            f.write(_encode(tensors[name], dt))


class StreamingWriter:
    """Write a safetensors file tensor by tensor (constant memory).

    specs: list of (name, dtype, shape). Call write(name, array) for every tensor, in any
    order (each is seeked to its offset); close() checks all were written."""

    def __init__(self, path, specs, metadata=None):
        hb, specs = build_header(specs, metadata)
        self._f = open(path, "wb")
        self._f.write(struct.pack("<Q", len(hb)))
        self._f.write(hb)
        self._start = 8 + len(hb)
        hdr = json.loads(hb.decode("utf-8"))
        self._info = {n: hdr[n] for n, _, _ in specs}
        self._pending = set(self._info)
        total = max([v["data_offsets"][1] for v in self._info.values()] or [0])
        self._f.truncate(self._start + total)

    def write(self, name, arr, row_offset=0):
        """Write `arr` (whole tensor, or rows starting at row_offset of the first dim)."""
        info = self._info[name]
        shape = info["shape"]
        row_elems = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
        b = info["data_offsets"][0] + row_offset * row_elems * _DTYPE_SIZE[info["dtype"]]
        data = _encode(arr, info["dtype"])
        if b + len(data) > info["data_offsets"][1]:
            raise ValueError("write past end of %s" % name)
        self._f.seek(self._start + b)
        self._f.write(data)
        if b + len(data) == info["data_offsets"][1]:
            self._pending.discard(name)

    def close(self):
        self._f.close()
        if self._pending:
            raise ValueError("tensors not fully written: %s" % sorted(self._pending)[:5])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        else:
            self._f.close()


def write_index(model_dir, weight_map, total_size, metadata=None):
    md = {"total_size": int(total_size)}
    md.update(metadata or {})
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": md, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")
