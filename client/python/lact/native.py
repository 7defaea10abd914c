"""NativeTransfers: a job's bytes moved by the C++ client's transfers.

``liblact_transfer.so`` (client/c/lact_transfer.h, built beside the lact
command) runs one JobAccepted's streams on threads of its own: each
shard's context rows go from the caller's array to the socket with no copy
of their own (gRPC's Python library copies every message twice: into its
bytes, and into its own buffer), and the context's outputs come back
straight into the result array. Its threads never call into Python; the
count of context tokens sent wakes a thread of this module's that tells
the job (its UPLOAD progress).

The library is found beside this module (the build's build/python/lact),
then as $LACT_TRANSFER_LIBRARY, then on the system's library path (where
``cmake --install`` puts it). Without it, or with LACT_NATIVE_TRANSFERS=0,
``available()`` is False and jobs move their bytes through gRPC's Python
library (lact.transfers.JobTransfers), with the same results.

Not thread-safe itself: one owner starts, cancels and joins it (cancel may
come from any thread). Results are complete only after join() returned
without raising.
"""

import ctypes
import ctypes.util
import importlib
import os
import threading
import time

import grpc
import numpy as np

from . import codec
from .errors import LactError

_ABI_VERSION = 1
_LIBRARY_NAME = "liblact_transfer.so"
_PROGRESS_SECONDS = 0.1
_MESSAGE_BYTES = 4096
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class _Input(ctypes.Structure):
    _fields_ = [
        ("accepted", ctypes.c_void_p), ("accepted_size", ctypes.c_size_t),
        ("tls_roots", ctypes.c_char_p),
        ("context", ctypes.c_void_p), ("context_tokens", ctypes.c_int64),
        ("width", ctypes.c_int64), ("dtype", ctypes.c_int),
        ("query_sets", ctypes.c_int), ("queries", ctypes.POINTER(ctypes.c_void_p)),
        ("query_tokens", ctypes.POINTER(ctypes.c_int64)),
        ("output", ctypes.c_void_p), ("timeout_seconds", ctypes.c_double),
    ]


def _candidates():
    yield os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME)
    if os.environ.get("LACT_TRANSFER_LIBRARY"):
        yield os.environ["LACT_TRANSFER_LIBRARY"]
    found = ctypes.util.find_library("lact_transfer")
    if found:
        yield found


def _declare(lib):
    handle, f32p, i64p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int64)
    lib.lact_transfer_start.restype = handle
    lib.lact_transfer_start.argtypes = (ctypes.POINTER(_Input),)
    lib.lact_transfer_wait_sent.restype = ctypes.c_int64
    lib.lact_transfer_wait_sent.argtypes = (handle, ctypes.c_int64, ctypes.c_double)
    lib.lact_transfer_cancel.argtypes = (handle,)
    lib.lact_transfer_join.restype = ctypes.c_int
    lib.lact_transfer_join.argtypes = (handle, ctypes.c_char_p, ctypes.c_size_t)
    lib.lact_transfer_query_output.restype = f32p
    lib.lact_transfer_query_output.argtypes = (handle, ctypes.c_int, i64p)
    lib.lact_transfer_state_count.restype = ctypes.c_int
    lib.lact_transfer_state_count.argtypes = (handle,)
    lib.lact_transfer_state.restype = f32p
    lib.lact_transfer_state.argtypes = (handle, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                        ctypes.POINTER(i64p), ctypes.POINTER(ctypes.c_int), i64p)
    lib.lact_transfer_free.argtypes = (handle,)
    return lib


def _load():
    """The library, or None (not found, switched off, or of another ABI).

    The library's C++ code registers lact/v1's descriptors in the C++
    protobuf pool, which the Python protobuf (its C++ implementation) looks
    in before its own for a file it has not seen: every lact.v1 module is
    imported first, so that all of them keep the Python pool's descriptors."""
    if os.environ.get("LACT_NATIVE_TRANSFERS", "1") == "0":
        return None
    for name in ("common", "coordinator", "worker", "control", "data"):
        importlib.import_module(f"{__package__}.v1.{name}_pb2")
        importlib.import_module(f"{__package__}.v1.{name}_pb2_grpc")
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        lib.lact_transfer_abi_version.restype = ctypes.c_int
        if lib.lact_transfer_abi_version() == _ABI_VERSION:
            return _declare(lib)
    return None


_LIB = _load()


def available() -> bool:
    """Whether jobs' bytes go through liblact_transfer.so."""
    return _LIB is not None


def _as_array(pointer, elements: int, shape) -> np.ndarray:
    """A copy of float32 values the library holds, as an array of ``shape``."""
    values = np.ctypeslib.as_array(pointer, shape=(elements,)) if elements else np.empty(0)
    return np.array(values, dtype=np.float32).reshape(shape)


class NativeTransfers:
    """Moves the bytes of one JobAccepted, as lact.transfers.JobTransfers does
    for a Submit (same arguments and results; no fetch): ``context`` a
    codec.Tokens in the job's dtype or None, ``queries`` Tokens,
    ``tls_roots`` the PEM bytes of the cluster's CA or None, ``on_sent(rows)``
    told of context rows handed to gRPC. After join(): ``output``,
    ``queries`` and ``state`` as JobTransfers has them."""

    def __init__(self, accepted, context=None, queries=(), tls_roots=None, on_sent=None):
        self._accepted, self._context, self._on_sent = accepted, context, on_sent
        self._query_rows = [np.ascontiguousarray(q.to_float32(), np.float32) for q in queries]
        width = accepted.output_width
        self.output = (np.empty((accepted.context_tokens, width), np.float32)
                       if accepted.output_in_band else None)
        self.queries, self.state = [], {}
        self._keep = [accepted.SerializeToString(), tls_roots]  # alive while the library reads
        self._handle = None
        self._sent = 0
        self._ended = threading.Event()
        self._reporter = None

    def _input(self, timeout: float) -> _Input:
        a, context, serialized = self._accepted, self._context, self._keep[0]
        pointers = (ctypes.c_void_p * max(1, len(self._query_rows)))(
            *[q.ctypes.data for q in self._query_rows])
        tokens = (ctypes.c_int64 * max(1, len(self._query_rows)))(
            *[q.shape[0] for q in self._query_rows])
        self._keep += [pointers, tokens]
        width = context.width if context is not None else (
            self._query_rows[0].shape[1] if self._query_rows else a.token_width)
        return _Input(
            accepted=ctypes.cast(ctypes.c_char_p(serialized), ctypes.c_void_p),
            accepted_size=len(serialized), tls_roots=self._keep[1],
            context=None if context is None else context.wire.ctypes.data,
            context_tokens=0 if context is None else context.tokens, width=width,
            dtype=codec.DTYPES[context.dtype] if context is not None else a.dtype,
            query_sets=len(self._query_rows), queries=pointers, query_tokens=tokens,
            output=None if self.output is None else self.output.ctypes.data,
            timeout_seconds=timeout)

    def start(self, deadline: float):
        """Starts the streams; ``deadline`` is a time.monotonic() value."""
        self._handle = _LIB.lact_transfer_start(
            ctypes.byref(self._input(max(0.0, deadline - time.monotonic()))))
        if self._handle is None:
            raise LactError(grpc.StatusCode.RESOURCE_EXHAUSTED, "no memory for the transfers")
        if self._on_sent is not None and self._context is not None:
            self._reporter = threading.Thread(target=self._report, daemon=True,
                                              name="lact-upload-progress")
            self._reporter.start()

    def _report(self):
        while not self._ended.is_set():
            self._tell_sent(_PROGRESS_SECONDS)

    def _tell_sent(self, wait: float = 0.0):
        sent = _LIB.lact_transfer_wait_sent(self._handle, self._sent, wait)
        if sent > self._sent:
            self._on_sent(sent - self._sent)
            self._sent = sent

    def cancel(self):
        if self._handle is not None and not self._ended.is_set():
            _LIB.lact_transfer_cancel(self._handle)

    def join(self):
        """Waits for every stream; raises the first failed shard's LactError."""
        if self._handle is None:
            return
        message = ctypes.create_string_buffer(_MESSAGE_BYTES)
        code = _LIB.lact_transfer_join(self._handle, message, _MESSAGE_BYTES)
        self._ended.set()
        if self._reporter is not None:
            self._reporter.join()
            self._tell_sent()
        try:
            if code != 0:
                raise LactError(_CODES.get(code, grpc.StatusCode.UNKNOWN),
                                message.value.decode(errors="replace"))
            self._take_results()
        finally:
            _LIB.lact_transfer_free(self._handle)
            self._handle = None

    def _take_results(self):
        elements = ctypes.c_int64()
        for k, rows in enumerate(self._accepted.query_tokens):
            pointer = _LIB.lact_transfer_query_output(self._handle, k, ctypes.byref(elements))
            self.queries.append(_as_array(pointer, elements.value,
                                          (rows, self._accepted.output_width)))
        name, shape, rank = ctypes.c_char_p(), ctypes.POINTER(ctypes.c_int64)(), ctypes.c_int()
        for i in range(_LIB.lact_transfer_state_count(self._handle)):
            pointer = _LIB.lact_transfer_state(self._handle, i, ctypes.byref(name),
                                               ctypes.byref(shape), ctypes.byref(rank),
                                               ctypes.byref(elements))
            dims = tuple(shape[d] for d in range(rank.value))
            self.state[name.value.decode()] = _as_array(pointer, elements.value, dims)

    def __del__(self):
        if getattr(self, "_handle", None) is not None and _LIB is not None:
            _LIB.lact_transfer_free(self._handle)
