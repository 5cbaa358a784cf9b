"""Compiled kernels of the synthetic workload (``tpuemb_cfg.sim.kernels`` states the maths).

The same float operations in the same order as the NumPy versions in ``sim.kernels``: Zipf ids
by four products and a division, the teacher's weights by the very ``counter.mix`` hash, and
the loss pass, which forms each bag's teacher activation (four weighted sums, then four rows of
the basis), its error and its gradient in one pass that streams the activations in and the
gradient out. Ranges of ids and bags run on several threads (``numba_update.run_ranges``).
"""

from __future__ import annotations

import numpy as np

from tpuemb_cfg.base import numerics

from .. import counter
from .jit import njit
from .numba_numerics import pow64, row_sumsq
from .numba_update import run_ranges

__all__ = ["loss_gradients", "teacher_weights", "zipf_general", "zipf_ids"]

F32 = np.float32
_ZERO = np.float32(0.0)
_S40 = np.uint64(40)
_SCALE_23 = 1.0 / 2.0**23
_G = counter.G
_RANK = 4

_mix = njit(inline="always")(counter.mix)


@njit(nogil=True, cache=True, error_model="numpy")
def _zipf(u: np.ndarray, vocab: int, base: float, multiplier: int, offset: int,
          out: np.ndarray, start: int, stop: int) -> float:
    for k in range(start, stop):
        y = 1.0 - u[k] * base
        y2 = y * y
        y4 = y2 * y2
        y8 = y4 * y4
        rank = np.int64(np.floor(1.0 / (y8 * y2))) - 1
        if rank > vocab - 1:
            rank = np.int64(vocab - 1)
        out[k] = (rank * multiplier + offset) % vocab
    return 0.0


def zipf_ids(u: np.ndarray, vocab: int, base: float, multiplier: int, offset: int) -> np.ndarray:
    """``sim.kernels.zipf_ids``, compiled."""
    out = np.empty(u.shape[0], dtype=np.int64)
    run_ranges(_zipf, u.shape[0], u.shape[0] * 8, u, int(vocab), float(base), int(multiplier),
               int(offset), out)
    return out


@njit(nogil=True, cache=True, error_model="numpy")
def _zipf_general(u: np.ndarray, vocab: int, log_law: bool, base: float, power: float,
                  multiplier: int, offset: int, out: np.ndarray, start: int, stop: int) -> float:
    top = vocab + 1.0
    for k in range(start, stop):
        x = pow64(top, u[k]) if log_law else pow64(1.0 - u[k] * base, power)
        if x > top or x != x:  # rounding, or an overflow of a huge power: the last rank
            x = top
        rank = np.int64(np.floor(x)) - 1
        if rank > vocab - 1:
            rank = np.int64(vocab - 1)
        if rank < 0:
            rank = np.int64(0)
        out[k] = (rank * multiplier + offset) % vocab
    return 0.0


def zipf_general(u: np.ndarray, vocab: int, log_law: bool, base: float, power: float,
                 multiplier: int, offset: int) -> np.ndarray:
    """``sim.kernels._zipf_general`` (an exponent other than 1.1), compiled."""
    out = np.empty(u.shape[0], dtype=np.int64)
    run_ranges(_zipf_general, u.shape[0], u.shape[0] * 64, u, int(vocab), bool(log_law),
               float(base), float(power), int(multiplier), int(offset), out)
    return out


@njit(inline="always")
def _unit(key: np.uint64, counter_value: np.uint64) -> np.float32:
    z = _mix(key + _G * counter_value)
    return np.float32((np.float64(np.int64(z >> _S40)) + 0.5) * _SCALE_23 - 1.0)


@njit(nogil=True, cache=True, error_model="numpy")
def _weights(key: np.uint64, ids: np.ndarray, out: np.ndarray, start: int, stop: int) -> float:
    for i in range(start, stop):
        base = np.uint64(ids[i]) * np.uint64(_RANK)
        for k in range(_RANK):
            out[i, k] = _unit(key, base + np.uint64(k))
    return 0.0


def teacher_weights(key: np.uint64, ids: np.ndarray) -> np.ndarray:
    """``sim.kernels.teacher_weights``, compiled."""
    out = np.empty((ids.shape[0], _RANK), dtype=F32)
    run_ranges(_weights, ids.shape[0], ids.shape[0] * 64, np.uint64(key), ids, out)
    return out


@njit(nogil=True, cache=True, error_model="numpy")
def _loss(activations: np.ndarray, key: np.uint64, basis: np.ndarray, ids: np.ndarray,
          gains: np.ndarray, row_splits: np.ndarray, bags: np.float32, out: np.ndarray,
          squares: np.ndarray, start: int, stop: int) -> float:
    dim = activations.shape[1]
    teacher = np.empty(dim, dtype=np.float32)
    lanes = np.empty(8, dtype=np.float64)
    for b in range(start, stop):
        s0 = s1 = s2 = s3 = _ZERO
        for j in range(row_splits[b], row_splits[b + 1]):
            g = gains[j]
            base = np.uint64(ids[j]) * np.uint64(_RANK)
            s0 += g * _unit(key, base)
            s1 += g * _unit(key, base + np.uint64(1))
            s2 += g * _unit(key, base + np.uint64(2))
            s3 += g * _unit(key, base + np.uint64(3))
        for d in range(dim):
            y = s0 * basis[0, d]
            y = y + s1 * basis[1, d]
            y = y + s2 * basis[2, d]
            y = y + s3 * basis[3, d]
            teacher[d] = y
            out[b, d] = (activations[b, d] - y) / bags
        squares[b] = row_sumsq(activations, b, teacher, lanes)
    return 0.0


def loss_gradients(
    activations: np.ndarray, key: np.uint64, basis: np.ndarray, ids: np.ndarray,
    gains: np.ndarray, row_splits: np.ndarray, out: np.ndarray,
) -> tuple[float, np.ndarray]:
    """``sim.kernels.loss_gradients``, compiled, into ``out``."""
    count = row_splits.shape[0] - 1
    squares = np.empty(count, dtype=np.float64)  # per bag: added in bag order, any threads
    run_ranges(_loss, count, activations.size, activations, np.uint64(key),
               np.ascontiguousarray(basis, dtype=F32), ids, gains, row_splits,
               F32(max(count, 1)), out, squares)
    return numerics.total(squares), out
