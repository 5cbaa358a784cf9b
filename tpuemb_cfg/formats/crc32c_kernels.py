"""The compiled CRC-32C of :mod:`formats.crc32c` (imported lazily there; numba is imported
here only, through ``base.jit``), also called from the TFRecord kernels of ``tpuemb plan``.

Slicing-by-8: eight tables of 256 entries, table ``k`` the CRC of a byte followed by ``k`` zero
bytes, so eight bytes advance the CRC with eight lookups (about 1 GB/s where a byte at a time runs
at a few hundred MB/s).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.jit import njit

__all__ = ["TABLES", "crc_tables", "extend", "span"]


def crc_tables() -> np.ndarray:
    """The slicing-by-8 tables of CRC-32C (reflected polynomial 0x82F63B78), int64 (8, 256)."""
    tables = np.zeros((8, 256), dtype=np.int64)
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        tables[0, byte] = crc
    for k in range(1, 8):
        for byte in range(256):
            prev = int(tables[k - 1, byte])
            tables[k, byte] = (prev >> 8) ^ int(tables[0, prev & 0xFF])
    return tables


TABLES = crc_tables()


@njit(cache=True, nogil=True)
def extend(crc: int, buf: np.ndarray, start: int, length: int, t: np.ndarray) -> Any:
    """CRC-32C of ``buf[start:start + length]`` (uint8) continuing the CRC ``crc``."""
    state = np.int64(crc) ^ 0xFFFFFFFF
    p = start
    end = start + length
    while p + 8 <= end:
        low = state ^ (np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8)
                       | (np.int64(buf[p + 2]) << 16) | (np.int64(buf[p + 3]) << 24))
        state = (t[7, low & 0xFF] ^ t[6, (low >> 8) & 0xFF] ^ t[5, (low >> 16) & 0xFF]
                 ^ t[4, (low >> 24) & 0xFF] ^ t[3, buf[p + 4]] ^ t[2, buf[p + 5]]
                 ^ t[1, buf[p + 6]] ^ t[0, buf[p + 7]])
        p += 8
    while p < end:
        state = t[0, (state ^ buf[p]) & 0xFF] ^ (state >> 8)
        p += 1
    return state ^ 0xFFFFFFFF


@njit(cache=True, nogil=True)
def span(buf: np.ndarray, start: int, length: int, t: np.ndarray) -> Any:
    """CRC-32C of ``buf[start:start + length]`` alone."""
    return extend(0, buf, start, length, t)
