"""lact.checksum against the crc32c package, an implementation of its own:
the same CRC-32C for every length, alignment and starting value, and ISA-L
in use where it is installed (scripts/install-deps installs it).

Run from tests/python: /usr/bin/python3 -m unittest test_checksum -v
"""

import ctypes.util
import importlib.util
import os
import unittest

import crc32c
import numpy as np

import lact_package

# The module alone, from the source tree: it needs no generated stubs.
_SPEC = importlib.util.spec_from_file_location(
    "lact_checksum_under_test", lact_package.ROOT / "client" / "python" / "lact" / "checksum.py")
checksum = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(checksum)


class ChecksumTest(unittest.TestCase):
    def test_isal_is_used_where_installed(self):
        self.assertEqual(checksum.HARDWARE, ctypes.util.find_library("isal") is not None)

    def test_every_length_offset_and_start(self):
        raw = os.urandom(70_000)
        for length in (0, 1, 2, 3, 7, 8, 15, 16, 63, 64, 255, 4096, 65_537):
            for offset in (0, 1, 5):
                data = memoryview(raw)[offset:offset + length]
                for start in (0, 1, 0xFFFFFFFF, 0x1234ABCD):
                    self.assertEqual(checksum.crc32c(data, start), crc32c.crc32c(data, start),
                                     f"{length} bytes at offset {offset}, from {start:08x}")

    def test_pieces_continue_the_whole(self):
        rows = np.random.default_rng(3).standard_normal((1000, 48), dtype=np.float32)
        whole = checksum.crc32c(rows, 0)
        crc = 0
        for first in range(0, 1000, 37):
            crc = checksum.crc32c(rows[first:first + 37], crc)
        self.assertEqual(crc, whole)
        self.assertEqual(whole, crc32c.crc32c(rows.tobytes(), 0))

    def test_a_known_value(self):
        # RFC 3720, B.4: 32 bytes of zeros.
        self.assertEqual(checksum.crc32c(bytes(32), 0), 0x8A9136AA)


if __name__ == "__main__":
    unittest.main()
