"""A small pure-Python (numpy) reader and writer of .safetensors files.

The format: an 8-byte little-endian header length, a JSON header mapping each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into
the data that follows the header) plus an optional "__metadata__" map of
strings, then the raw little-endian data. lact keeps its model config under
``__metadata__["lact.config"]`` (docs/model.md, Configuration).

    tensors, metadata = read(path)        # name -> numpy array, {str: str}
    write(path, tensors, metadata)        # numpy arrays or torch tensors

BF16 is read as float32 (exactly: bf16 is the top half of a float32).
"""

import json
import struct
from pathlib import Path

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_NAMES = {np.dtype(v).newbyteorder("<").str: k for k, v in _DTYPES.items()}
_NAMES[np.dtype("?").str] = "BOOL"
_NAMES[np.dtype("i1").str] = "I8"
_NAMES[np.dtype("u1").str] = "U8"

# A header larger than this is not a safetensors file we can hold.
_MAX_HEADER = 100 << 20


class SafetensorsError(ValueError):
    """A malformed file or an unsupported tensor."""


def read(path):
    """(name -> numpy array, __metadata__ dict) of the file at `path`.

    Arrays are writable copies in native byte order; BF16 becomes float32.
    """
    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise SafetensorsError(f"{path}: too short for a safetensors file")
    (length,) = struct.unpack("<Q", raw[:8])
    if length > min(_MAX_HEADER, len(raw) - 8):
        raise SafetensorsError(f"{path}: header length {length} exceeds the file")
    try:
        header = json.loads(raw[8:8 + length])
    except ValueError as e:
        raise SafetensorsError(f"{path}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data = memoryview(raw)[8 + length:]
    tensors = {}
    for name, entry in header.items():
        try:
            dtype, shape = entry["dtype"], [int(s) for s in entry["shape"]]
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: bad header entry for '{name}'") from None
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data):
            raise SafetensorsError(f"{path}: tensor '{name}' lies outside the file")
        chunk = data[begin:end]
        if dtype == "BF16":
            if end - begin != 2 * count:
                raise SafetensorsError(f"{path}: tensor '{name}' has {end - begin} bytes, "
                                       f"expected {2 * count}")
            bits = np.frombuffer(chunk, "<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        elif dtype in _DTYPES:
            np_dtype = _DTYPES[dtype]
            if end - begin != np_dtype.itemsize * count:
                raise SafetensorsError(f"{path}: tensor '{name}' has {end - begin} bytes, "
                                       f"expected {np_dtype.itemsize * count}")
            values = np.frombuffer(chunk, np_dtype).astype(np_dtype.newbyteorder("="))
        else:
            raise SafetensorsError(f"{path}: tensor '{name}' has unsupported dtype {dtype}")
        tensors[name] = values.reshape(shape)
    return tensors, dict(metadata)


def _as_numpy(value):
    """A numpy array of a numpy array, torch tensor (bf16 -> float32) or sequence."""
    if hasattr(value, "detach"):  # torch.Tensor, without importing torch here
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def write(path, tensors, metadata=None, dtype=None):
    """Writes `tensors` (name -> array-like) and `metadata` ({str: str}) to `path`.

    `dtype` (e.g. np.float32) converts every tensor first; otherwise each keeps
    its own (float64, float32, float16, integer and bool arrays are supported).
    """
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        if not isinstance(name, str) or name == "__metadata__":
            raise SafetensorsError(f"bad tensor name {name!r}")
        array = _as_numpy(tensors[name])
        if dtype is not None:
            array = array.astype(dtype)
        little = array.dtype.newbyteorder("<") if array.dtype.byteorder != "|" else array.dtype
        key = little.str if little.str in _NAMES else None
        if key is None:
            raise SafetensorsError(f"tensor '{name}': unsupported dtype {array.dtype}")
        blob = np.ascontiguousarray(array, dtype=little).tobytes()
        header[name] = {"dtype": _NAMES[key], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise SafetensorsError(f"metadata must map strings to strings: {k!r}: {v!r}")
        header = {"__metadata__": dict(metadata), **header}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
