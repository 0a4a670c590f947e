"""Minimal safetensors reader/writer (numpy only; no `safetensors` package).

File format:
  u64 little-endian N, then N bytes of JSON header
    {name: {"dtype": "BF16"|"F16"|"F32"|"F8_E4M3", "shape": [...], "data_offsets": [begin, end]},
     "__metadata__": {...}}
  (offsets relative to the first byte after the header), then raw little-endian data.

Reading returns float32 numpy arrays (BF16 is widened by putting the uint16 in the upper
half of a uint32; F16 is converted via numpy float16; F8_E4M3 (float8_e4m3fn: 1 sign,
4 exponent bits with bias 7, 3 mantissa bits, subnormals, no infinities, 0x7f/0xff NaN,
max 448) is decoded exactly through a 256-entry table: the raw fp8 values, NOT multiplied
by any `_scale_inv`).  Writing supports BF16 (round-to-nearest-even from f32), F16, F32
and F8_E4M3 (round-to-nearest-even, saturating to +-448, NaN -> 0x7f; a uint8 array is
taken as ready-made fp8 bytes); tensors are sorted by name and stored contiguously; the
header is padded with spaces to a multiple of 8 bytes.
Sharded checkpoints are read via `model.safetensors.index.json`.
"""
import json
import os
import struct

import numpy as np

_DTYPE_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1}


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


def _e4m3_table():
    """float64 value of each of the 256 float8_e4m3fn bit patterns (NaN for 0x7f, 0xff)."""
    out = np.empty(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        exp = (b >> 3) & 0xF
        man = b & 0x7
        if exp == 0xF and man == 0x7:
            out[b] = np.nan
        elif exp == 0:
            out[b] = sign * (man / 8.0) * 2.0 ** -6  # subnormal
        else:
            out[b] = sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)
    return out


E4M3_VALUES = _e4m3_table()
E4M3_MAX = 448.0
_E4M3_POS = E4M3_VALUES[:127]  # codes 0x00..0x7e: 0 .. 448, strictly increasing


def e4m3_bits_to_f32(u8):
    """uint8 array of float8_e4m3fn bit patterns -> float32 array (exact)."""
    return E4M3_VALUES.astype(np.float32)[np.asarray(u8, dtype=np.uint8)]


def f32_to_e4m3_bits(x):
    """float array -> uint8 float8_e4m3fn bit patterns: round to nearest, ties to the even
    code (= even mantissa), |x| > 448 saturates to +-448, NaN -> 0x7f (sign kept)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    nan = np.isnan(x)
    a = np.where(nan, 0.0, a)
    hi = np.searchsorted(_E4M3_POS, a, side="left")  # _E4M3_POS[hi-1] < a <= _E4M3_POS[hi]
    hi = np.minimum(hi, 126)
    lo = np.maximum(hi - 1, 0)
    d_lo = a - _E4M3_POS[lo]
    d_hi = _E4M3_POS[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code = np.where(a == 0.0, np.uint8(0), code).astype(np.uint8)
    code = np.where(nan, np.uint8(0x7F), code).astype(np.uint8)
    neg = np.signbit(x)
    return np.where(neg, code | np.uint8(0x80), code).astype(np.uint8)


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
    elif dtype == "F8_E4M3":
        arr = e4m3_bits_to_f32(np.frombuffer(raw, dtype=np.uint8))
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
    if dtype == "F8_E4M3":
        if arr.dtype == np.uint8:  # already fp8 bits
            return np.ascontiguousarray(arr).tobytes()
        return f32_to_e4m3_bits(arr).tobytes()
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
