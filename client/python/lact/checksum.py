"""CRC-32C of the results' streams, as the workers compute it.

``crc32c(data, crc)`` continues ``crc`` (0 to start) over ``data``, any
buffer, like the crc32c package's function of the same name. It runs on the
CPU's CRC instructions through ISA-L (``libisal.so.2``, the library the
workers use; Debian's libisal2), outside the GIL, where that library is
installed, and on the crc32c package otherwise (Debian's build of it is a
table walk: about 2 GB/s, a second of one core for every 2 GB of results).
"""

import ctypes
import ctypes.util

import crc32c as _crc32c_package
import numpy as np


def _isal_crc32_iscsi():
    """ISA-L's crc32_iscsi(buffer, len, register), or None without ISA-L."""
    try:
        library = ctypes.CDLL(ctypes.util.find_library("isal") or "libisal.so.2")
    except OSError:
        return None
    function = library.crc32_iscsi
    function.restype = ctypes.c_uint32
    function.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32)
    return function


_CRC32_ISCSI = _isal_crc32_iscsi()
_MAX_CALL_BYTES = 1 << 30  # crc32_iscsi takes an int length


def _isal_crc32c(data, crc: int) -> int:
    view = np.frombuffer(data, dtype=np.uint8)
    register = ~crc & 0xFFFFFFFF  # crc32_iscsi works before the final inversion
    for first in range(0, view.size, _MAX_CALL_BYTES):
        piece = view[first:first + _MAX_CALL_BYTES]
        register = _CRC32_ISCSI(piece.ctypes.data, piece.size, register)
    return ~register & 0xFFFFFFFF


HARDWARE = _CRC32_ISCSI is not None
crc32c = _isal_crc32c if HARDWARE else _crc32c_package.crc32c
