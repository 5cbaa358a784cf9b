"""Arrays that start on a cache-line boundary.

NumPy's allocator aligns a large array to 16 bytes only (the allocation's header precedes it), so
a 256-byte table row (dimension 64, float32) straddles five 64-byte cache lines instead of four,
and every row a step reads or writes at a scattered position costs a fifth more memory traffic.
The executor's tables and slots (``state``) and the compiled step's large outputs
(``engines.numba_step``: activations, summed gradients) are allocated here instead: the data
starts at a multiple of :data:`ALIGNMENT`, so with a dimension that is a multiple of 16 every row
covers whole lines, and the forward pass can write its activations with aligned streaming
stores (``engines.jit.stream_row``). ``docs/performance.md`` gives the step's measured gain.

The arrays are ordinary C-contiguous NumPy arrays (a view of a slightly larger byte buffer, which
they keep alive through ``.base``); the values are the same as with ``np.empty``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ALIGNMENT", "aligned_empty", "is_aligned"]

#: Bytes: one cache line of the x86-64 and ARM64 processors the executor runs on.
ALIGNMENT = 64


def aligned_empty(shape: int | tuple[int, ...], dtype: type | np.dtype = np.float32) -> np.ndarray:
    """As ``np.empty(shape, dtype)`` (uninitialized, C-contiguous), the data starting at a
    multiple of :data:`ALIGNMENT` bytes."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    kind = np.dtype(dtype)
    nbytes = int(np.prod(dims, dtype=np.int64)) * kind.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(kind).reshape(dims)


def is_aligned(array: np.ndarray) -> bool:
    """Whether ``array``'s data starts at a multiple of :data:`ALIGNMENT` bytes."""
    return array.ctypes.data % ALIGNMENT == 0
