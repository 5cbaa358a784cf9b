"""The ids of the batches in ``jax_cases.json.gz``, from integers only (NumPy, no jax).

Used by ``generate_jax.py`` to make the batches keras-rs preprocessed and by
``tests/test_keras_rs_jax.py`` to make the same ones (``ids_sha256`` in each case checks it).
"""

from __future__ import annotations

import numpy as np

MASK32 = (1 << 32) - 1


def batch_ids(rows: int, k: int, feature_index: int, vocab: int, span: int, spread: int,
              salt: int) -> np.ndarray:
    """One feature's ids, ``[rows, k]`` int32: ``(h >> 8) % span * spread % vocab`` with ``h`` a
    multiplicative hash of (row, position, feature, salt) mod 2^32. ``spread`` = N sends every
    id of a table to one partition."""
    r = np.arange(rows, dtype=np.uint64)[:, None]
    p = np.arange(k, dtype=np.uint64)[None, :]
    h = (r * np.uint64(2654435761) + p * np.uint64(2246822519)
         + np.uint64(feature_index * 3266489917 + salt)) & np.uint64(MASK32)
    h = (h * np.uint64(668265263)) & np.uint64(MASK32)
    ids = ((h >> np.uint64(8)) % np.uint64(span)) * np.uint64(spread) % np.uint64(vocab)
    return ids.astype(np.int32)
