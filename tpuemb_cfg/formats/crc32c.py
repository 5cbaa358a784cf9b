"""CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TensorFlow's masking of it: the one
home of the checksum that TFRecord frames (``planner.tfrecord``) and checkpoints
(``formats.bundle``, ``formats.sstable``) carry.

- :func:`crc32c` ``(data, crc=0)`` extends a running CRC by ``data`` (``crc32c::Extend``), so a
  tensor of gigabytes is checked in chunks: ``crc32c(b, crc32c(a)) == crc32c(a + b)``. Inputs of
  more than :data:`COMPILED_FROM` bytes run in a compiled slicing-by-8 kernel
  (:mod:`formats.crc32c_kernels`, about 1 GB/s, imported lazily: nothing else pays for numba),
  shorter ones (and every input where numba cannot compile) a byte at a time in Python.
- :func:`mask` / :func:`unmask`: ``rotate_right(crc, 15) + 0xa282ead8`` modulo 2^32 and its
  inverse (``crc32c::Mask``: a CRC stored inside data that is itself checksummed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["COMPILED_FROM", "CRC_TABLE", "MASK_DELTA", "crc32c", "mask", "mask_many",
           "masked_crc32c", "unmask"]

MASK_DELTA = 0xA282EAD8
#: Inputs longer than this many bytes go to the compiled kernel when numba is available.
COMPILED_FROM = 4096


def _crc_table() -> np.ndarray:
    """CRC-32C of every byte value, uint32 (256,)."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1)
    return table.astype(np.uint32)


CRC_TABLE = _crc_table()
_CRC_LIST = [int(v) for v in CRC_TABLE]
_kernel: Any = None  # the compiled kernel module, False when numba is unavailable


def _compiled() -> Any:
    global _kernel
    if _kernel is None:
        try:
            from . import crc32c_kernels
        except ImportError:  # numba missing or disabled (NumbaUnavailable is an ImportError)
            _kernel = False
        else:
            _kernel = crc32c_kernels
    return _kernel


def crc32c(data: bytes | bytearray | memoryview | np.ndarray, crc: int = 0) -> int:
    """CRC-32C of ``data``, continuing the CRC ``crc`` of what came before (0: nothing)."""
    view = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else None
    size = data.nbytes if view is None else len(view)  # type: ignore[union-attr]
    if size > COMPILED_FROM:
        kernel = _compiled()
        if kernel:
            buffer = (np.frombuffer(view, dtype=np.uint8) if view is not None
                      else np.ascontiguousarray(data).reshape(-1).view(np.uint8))
            return int(kernel.extend(crc, buffer, 0, size, kernel.TABLES))
    table = _CRC_LIST
    state = crc ^ 0xFFFFFFFF
    for byte in (view if view is not None else np.ascontiguousarray(data).tobytes()):
        state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
    return state ^ 0xFFFFFFFF


def mask(crc: int) -> int:
    """``crc32c::Mask``: rotate right by 15 bits and add 0xa282ead8, modulo 2^32."""
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    """``crc32c::Unmask``: the inverse of :func:`mask`."""
    rot = (masked - MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def mask_many(crc: np.ndarray) -> np.ndarray:
    """:func:`mask` of every element of a uint32 array."""
    crc = crc.astype(np.uint32)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(MASK_DELTA)


def masked_crc32c(data: bytes) -> int:
    """``mask(crc32c(data))``: the CRC TFRecord frames and table blocks store."""
    return mask(crc32c(data))
