"""Tokens on the wire: dtypes, bf16 rounding, and row chunks of at most 4 MiB.

Wire values are little-endian: f32 as float32, f16 as IEEE half (numpy's
float16, round to nearest even), bf16 as the upper 16 bits of float32 rounded
to nearest even, bit for bit as common/token_codec.cc encodes them.
numpy arrays and torch tensors are both accepted; torch is only touched if the
caller already imported it.
"""

import sys

import numpy as np

from .errors import invalid
from .v1 import common_pb2

DTYPES = {"f32": common_pb2.F32, "bf16": common_pb2.BF16, "f16": common_pb2.F16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
_WIRE_NUMPY = {"f32": np.dtype("<f4"), "bf16": np.dtype("<u2"), "f16": np.dtype("<f2")}

# Payload bytes per chunk a client sends: 4 MiB (common/wire_limits.h,
# kMaxChunkBytes) less room for the message's framing, as the C++ client does.
MAX_CHUNK_BYTES = (4 << 20) - (16 << 10)


_BF16_BLOCK = 1 << 20  # elements rounded at once: their temporaries stay in cache


def bf16_bits(values) -> np.ndarray:
    """float32 values -> bf16 bit patterns (uint16), round to nearest even.
    Rounded a block at a time into the result, so that a context of a
    gigabyte makes no temporaries of its size."""
    f32 = np.ascontiguousarray(values, dtype="<f4")
    bits = f32.reshape(-1).view("<u4")
    out = np.empty(bits.shape, "<u2")
    scratch = np.empty(min(_BF16_BLOCK, bits.size), "<u4")
    for first in range(0, bits.size, _BF16_BLOCK):
        block = bits[first:first + _BF16_BLOCK]
        t = scratch[:block.size]
        np.right_shift(block, 16, out=t)
        np.bitwise_and(t, 1, out=t)
        t += np.uint32(0x7FFF)
        t += block
        np.right_shift(t, 16, out=t)
        out[first:first + block.size] = t
    return out.reshape(f32.shape)


def bf16_to_float32(bits) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32, exactly."""
    return (np.asarray(bits, dtype="<u2").astype("<u4") << 16).view("<f4")


def round_bf16(values) -> np.ndarray:
    """float32 values as the server sees them after a bf16 trip: float32."""
    return bf16_to_float32(bf16_bits(values))


def _torch_tensor(x):
    """x if it is a torch.Tensor (without importing torch), else None."""
    torch = sys.modules.get("torch")
    return x if torch is not None and isinstance(x, torch.Tensor) else None


def is_torch(x) -> bool:
    return _torch_tensor(x) is not None


class Tokens:
    """A [tokens, width] block of tokens held in a wire dtype.

    ``wire``: a C-contiguous 2-D numpy array of the dtype's wire elements
    (<f4, <f2, or <u2 bit patterns for bf16); ``dtype``: "f32"|"bf16"|"f16".
    """

    def __init__(self, wire: np.ndarray, dtype: str):
        self.wire, self.dtype = wire, dtype

    @property
    def tokens(self) -> int:
        return self.wire.shape[0]

    @property
    def width(self) -> int:
        return self.wire.shape[1]

    def to_float32(self) -> np.ndarray:
        if self.dtype == "bf16":
            return bf16_to_float32(self.wire)
        return self.wire.astype("<f4", copy=False)

    def as_dtype(self, dtype: str) -> "Tokens":
        """The same tokens in ``dtype`` (re-encoded through float32 if it differs)."""
        return self if dtype == self.dtype else Tokens(encode(self.to_float32(), dtype), dtype)

    def chunks(self, begin: int = 0, count: int = None):
        """Yields (offset, rows, data) of rows [begin, begin + count), whole
        rows of at most MAX_CHUNK_BYTES each (one row if a row is larger);
        offsets count from ``begin``; ``data`` is a view of the rows, not a
        copy (bytes(data) makes one)."""
        count = self.tokens - begin if count is None else count
        per_chunk = max(1, MAX_CHUNK_BYTES // (self.width * self.wire.itemsize))
        for first in range(0, count, per_chunk):
            rows = min(per_chunk, count - first)
            yield first, rows, self.wire[begin + first:begin + first + rows]


def encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """Real values -> wire elements of ``dtype`` (see Tokens.wire)."""
    if dtype == "bf16":
        return bf16_bits(values)
    return np.ascontiguousarray(values, dtype=_WIRE_NUMPY[dtype])


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise invalid(f"dtype '{dtype}' (allowed: f32, bf16, f16)")
    return dtype


def _natural_dtype_and_values(x):
    """(dtype the tokens already have, values as numpy) for a numpy array or
    torch tensor; bf16 values come back as their uint16 bit patterns."""
    t = _torch_tensor(x)
    if t is not None:
        torch = sys.modules["torch"]
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return "bf16", t.view(torch.int16).numpy().view("<u2")
        if t.dtype == torch.float16:
            return "f16", t.numpy()
        return "f32", t.to(torch.float32).numpy()
    a = np.asarray(x)
    if a.dtype.name == "bfloat16":  # ml_dtypes / jax bfloat16
        return "bf16", a.view("<u2")
    if a.dtype.kind not in "fiu":
        raise invalid(f"tokens must be real numbers, not {a.dtype}")
    return ("f16" if a.dtype == np.float16 else "f32"), a


def as_tokens(x, dtype: str = None, what: str = "context") -> Tokens:
    """Tokens [L >= 1, width >= 1] from a numpy array or torch tensor.

    ``dtype`` None keeps the input's own (float16 -> f16, torch bfloat16 ->
    bf16, anything else -> f32); otherwise the values are converted to it.
    Raises LactError INVALID_ARGUMENT for a bad shape or dtype.
    """
    natural, values = _natural_dtype_and_values(x)
    if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] < 1:
        raise invalid(f"{what} must be [L >= 1, width >= 1], not {list(values.shape)}")
    tokens = Tokens(np.ascontiguousarray(values, dtype=_WIRE_NUMPY[natural]), natural)
    return tokens if dtype is None else tokens.as_dtype(check_dtype(dtype))


def to_user(array: np.ndarray, torch_out: bool):
    """A float32 result as numpy, or as a torch tensor sharing its memory."""
    return sys.modules["torch"].from_numpy(array) if torch_out else array
