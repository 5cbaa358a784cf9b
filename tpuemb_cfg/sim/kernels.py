"""The synthetic workload's arithmetic: Zipf ids, the teacher, the loss and its gradients.

Each function here has one definition of its numbers, evaluated by compiled kernels when numba
can be imported (whatever engine the executor runs, so a run's data never depends on the
engine) and by NumPy otherwise, with the same float operations in the same order:

``zipf_ids(u, vocab, multiplier, offset, exponent=1.1)``
    ranks from uniforms ``u`` by inverting the continuous power law of exponent S on
    [1, V + 1) (``executor.workload``): for the default S = 1.1,
    ``x = (1 - u (1 - (V + 1)^-0.1))^-10``, the tenth power four float64 products and a
    division; for another S, ``x = (1 - u (1 - (V + 1)^a))^(1/a)`` with ``a = 1 - S``
    (``(V + 1)^u`` for S = 1) through ``numerics.pow64``'s code; both identical everywhere.
    ``rank = min(floor(x) - 1, V - 1)`` (at least 0), and ranks are scattered over the table:
    ``id = (rank * multiplier + offset) mod V``.
``uniform_ids(u, vocab)``
    ``min(floor(u V), V - 1)``: every row equally likely (one correctly rounded product).
``teacher_weights(key, ids)`` and ``teacher_basis(key, dimension)``
    the teacher row of id i, which exists for every id without being stored, has rank 4:
    ``y(i) = sum over k < 4 of u_k(i) * basis[k]``, with ``u_k(i) = unit(4 i + k)`` and
    ``basis[k, d] = unit(2^60 + k D + d) / (2 sqrt(D))``, where ``unit(c)`` is
    ``((z >> 40) + 1/2) / 2^23 - 1`` (uniform in (-1, 1), rounded to float32) and z the
    SplitMix64 word (``executor.counter.mix``) of counter c in the table's stream ``key``.
``loss_gradients(activations, key, basis, ids, gains, row_splits)``
    per bag b, the teacher activation with the forward pass's gains, in position order:
    ``s_k = sum over j in the bag of gains[j] * u_k(ids[j])`` and
    ``Y_b = ((s_0 basis[0] + s_1 basis[1]) + s_2 basis[2]) + s_3 basis[3]``; the error
    ``E = A - Y``, the gradient ``dA = E / B`` (float32) and the float64 sum of E^2. A rank-4
    teacher needs 4 numbers per id instead of a row: the pass streams the activations and the
    gradient, with no scattered reads (a gathered teacher row per bag made it as slow as the
    executor's own forward pass).

Ranges of ids and bags run on several threads (``numba_update.run_ranges``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from tpuemb_cfg.base.numerics import pow64, pow_core, row_sumsq, total

from ..executor.counter import G, mix

__all__ = [
    "RANK",
    "compiled",
    "loss_gradients",
    "teacher_basis",
    "teacher_rows",
    "teacher_weights",
    "uniform_ids",
    "zipf_base",
    "zipf_ids",
]

F32 = np.float32
RANK = 4
BASIS_COUNTER = 1 << 60  # the basis' counters: apart from every id's (4 i + k < 2^50)
_S40 = np.uint64(40)
_SCALE_23 = 1.0 / 2.0**23
ZIPF_EXPONENT = 1.1


@functools.cache
def compiled() -> Any:
    """The compiled kernels (``executor.engines.numba_sim``), or None without numba (or with
    ``NUMBA_DISABLE_JIT``: ``base.jit_availability``)."""
    try:
        from ..executor.engines import numba_sim
    except ImportError:
        return None
    return numba_sim


def _unit(key: np.uint64, counters: np.ndarray) -> np.ndarray:
    z = mix(key + G * counters)
    unit: np.ndarray = (((z >> _S40).astype(np.float64) + 0.5) * _SCALE_23 - 1.0).astype(F32)
    return unit


def zipf_base(vocab: int) -> float:
    """``1 - (V + 1)^-0.1``: the constant of ``zipf_ids`` for a vocabulary of ``vocab`` rows
    (``numerics.pow64``: the same bits on every machine, unlike libm's ``pow``)."""
    return 1.0 - pow64(vocab + 1.0, 1.0 - ZIPF_EXPONENT)


def zipf_ids(u: np.ndarray, vocab: int, multiplier: int, offset: int,
             exponent: float = ZIPF_EXPONENT) -> np.ndarray:
    """int64 ids from the float64 uniforms ``u`` in [0, 1) (module docstring)."""
    u = np.ascontiguousarray(u, dtype=np.float64)
    if exponent != ZIPF_EXPONENT:
        return _zipf_general(u, vocab, multiplier, offset, float(exponent))
    base = zipf_base(vocab)
    kernels = compiled()
    if kernels is not None:
        return kernels.zipf_ids(u, vocab, base, multiplier, offset)  # type: ignore[no-any-return]
    y = 1.0 - u * base
    y2 = y * y
    y4 = y2 * y2
    y8 = y4 * y4
    x = 1.0 / (y8 * y2)
    rank = np.minimum(np.floor(x).astype(np.int64) - 1, vocab - 1)
    return (rank * multiplier + offset) % vocab


def _zipf_general(u: np.ndarray, vocab: int, multiplier: int, offset: int,
                  exponent: float) -> np.ndarray:
    """``zipf_ids`` for an exponent other than 1.1: the power through ``numerics.pow_core``."""
    a = 1.0 - exponent
    top = vocab + 1.0
    # a = 0 (S = 1): x = (V + 1)^u; else x = y^(1/a), y = 1 - u (1 - (V + 1)^a).
    base = 1.0 - pow64(top, a) if a != 0.0 else 0.0
    power = 1.0 / a if a != 0.0 else 0.0
    kernels = compiled()
    if kernels is not None:
        return kernels.zipf_general(  # type: ignore[no-any-return]
            u, vocab, a == 0.0, base, power, multiplier, offset)
    with np.errstate(all="ignore"):
        x = (pow_core(np.full_like(u, top), u) if a == 0.0
             else pow_core(1.0 - u * base, np.float64(power)))
    x = np.where((x > top) | np.isnan(x), top, x)  # rounding, or a huge power: the last rank
    rank = np.clip(np.floor(x).astype(np.int64) - 1, 0, vocab - 1)
    return (rank * multiplier + offset) % vocab


def uniform_ids(u: np.ndarray, vocab: int) -> np.ndarray:
    """int64 ids ``min(floor(u V), V - 1)`` from the float64 uniforms ``u`` in [0, 1)."""
    ids = np.floor(np.asarray(u, dtype=np.float64) * float(vocab)).astype(np.int64)
    return np.minimum(ids, vocab - 1)


def teacher_basis(key: np.uint64, dimension: int) -> np.ndarray:
    """float32 [RANK, dimension]: the teacher's basis rows (module docstring)."""
    counters = np.uint64(BASIS_COUNTER) + np.arange(RANK * dimension, dtype=np.uint64)
    scale = F32(1.0 / (2.0 * math.sqrt(dimension)))
    return (_unit(key, counters) * scale).reshape(RANK, dimension)


def teacher_weights(key: np.uint64, ids: np.ndarray) -> np.ndarray:
    """float32 [len(ids), RANK]: ``u_k(i)`` of every id (module docstring)."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    kernels = compiled()
    if kernels is not None:
        return kernels.teacher_weights(key, ids)  # type: ignore[no-any-return]
    counters = (ids.astype(np.uint64)[:, None] * np.uint64(RANK)
                + np.arange(RANK, dtype=np.uint64)[None, :])
    return _unit(key, counters)


def _combine(weights: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """``((w_0 b_0 + w_1 b_1) + w_2 b_2) + w_3 b_3`` row by row (float32)."""
    out: np.ndarray = weights[:, 0:1] * basis[0]
    for k in range(1, RANK):
        out = out + weights[:, k:k + 1] * basis[k]
    return out


def teacher_rows(key: np.uint64, basis: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float32 [len(ids), D]: the teacher rows of ``ids`` (module docstring)."""
    return _combine(teacher_weights(key, ids), basis).astype(F32)


def loss_gradients(
    activations: np.ndarray, key: np.uint64, basis: np.ndarray, ids: np.ndarray,
    gains: np.ndarray, row_splits: np.ndarray, out: np.ndarray | None = None,
) -> tuple[float, np.ndarray]:
    """``(sum of E^2, dA)`` of one feature (module docstring); ``out``: an array to write dA
    into, used when it has dA's shape and dtype."""
    if out is None or out.shape != np.shape(activations) or out.dtype != F32:
        out = np.empty(np.shape(activations), dtype=F32)
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    gains = np.ascontiguousarray(gains, dtype=F32)
    row_splits = np.ascontiguousarray(row_splits, dtype=np.int64)
    kernels = compiled()
    if kernels is not None:
        return kernels.loss_gradients(  # type: ignore[no-any-return]
            np.ascontiguousarray(activations, dtype=F32), key, basis, ids, gains, row_splits, out
        )
    bags = row_splits.shape[0] - 1
    weights = teacher_weights(key, ids)
    sums = np.zeros((bags, RANK), dtype=F32)
    lengths = np.diff(row_splits)
    for k in range(int(lengths.max(initial=0))):
        # The k-th occurrence of every bag that has one, added in position order.
        has = np.flatnonzero(lengths > k)
        j = row_splits[has] + k
        sums[has] += gains[j, None] * weights[j]
    teacher = _combine(sums, basis)
    error = activations - teacher
    loss = total(row_sumsq(activations, teacher))  # numerics: bags in order, lanes in a bag
    np.divide(error, F32(max(bags, 1)), out=out)
    return loss, out
