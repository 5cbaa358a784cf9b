"""The numba engine: compiled versions of the executor's hot loops, and ``ENGINE``.

Import this module only through ``tpuemb_cfg.executor.engines.get_engine``: it imports numba at
the top, and ``import tpuemb_cfg`` and ``tpuemb validate`` must never pay for that.

Every kernel computes what its namesake in ``engines.numpy`` (or the optimizer's NumPy update in
``tpuemb_cfg.algorithms``) computes, in float32, in the same order of operations, so the two
engines give the same bits (docs/numerics.md):

- ``deduplicate``: a bitmap of the ids when they are below 256 times their count, else an
  open-addressing hash table of the ids, then a radix sort of the *unique* ids only; either
  way the result is exactly ``np.unique``'s (``numba_step.deduplicate``);
- ``segment_sum`` / ``backprop_sum``: one pass over the occurrences in order (the spec's
  reference order within each row), adding each into its row's sum, with no [occurrences, D]
  temporary of contributions;
- ``gather`` / ``scatter`` / ``gather_combine``: whole rows, ranges of rows or bags on several
  threads (``gather_combine`` forms the activations without the gathered copy of the rows);
- ``change_rows``: each row's squared change for the report's update norm, without
  temporaries;
- ``update_rows``: the whole per-row pipeline of spec section 6 fused into one pass over each
  updated row, for every optimizer (``numba_update``).

``fused`` (:class:`FusedStep`) is the compiled step the executor runs when the tables live in
this process: de-duplication with the rows' occurrence lists, the forward pass read straight
from the table, back-propagation with the input check, and the fused update returning the
update norm (``numba_step``, ``numba_update``).

Scalars arrive as ``np.float32`` and every literal is a float32 constant, so numba keeps the
arithmetic in float32 (a bare ``1.0`` would promote the expression to float64). Absent clip
bounds are passed as -inf/+inf: ``x < -inf`` is never true, so NaN stays NaN as in the NumPy
engine's ``clip``. The kernels are serial and ``nogil``; ``numba_update.run_ranges`` splits the
work over threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from tpuemb_cfg.base import numerics

from . import numba_step
from . import numpy as reference
from .base import Engine
from .jit import njit, threads
from .numba_numerics import row_sumsq
from .numba_update import Occurrences, alongside, kind_of, parallel, run_ranges, update

if TYPE_CHECKING:
    from ...algorithms.update import UpdateContext
    from ..plan import TablePlan

__all__ = [
    "ENGINE",
    "FusedStep",
    "backprop_sum",
    "change_rows",
    "fused_update",
    "gather",
    "gather_combine",
    "scatter",
    "segment_sum",
]

F32 = np.float32
_ZERO = np.float32(0.0)
_INF = F32(np.inf)


def _i64(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)


def _f32(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=F32)


# --------------------------------------------------------------------------------------------
# Segment sums


@njit(nogil=True, cache=True, error_model="numpy")
def _backprop_sum(
    d_activations: np.ndarray,
    sample: np.ndarray,
    gains: np.ndarray,
    segments: np.ndarray,
    out: np.ndarray,
) -> None:
    # A segment's first contribution as is, then the others added (numerics: a sum starts
    # from its first term, so -0.0 stays -0.0); a segment with none stays 0.
    seen = np.zeros(out.shape[0], dtype=np.bool_)
    for j in range(segments.shape[0]):
        s = segments[j]
        g = gains[j]
        b = sample[j]
        if seen[s]:
            for d in range(d_activations.shape[1]):
                out[s, d] += g * d_activations[b, d]
        else:
            seen[s] = True
            for d in range(d_activations.shape[1]):
                out[s, d] = g * d_activations[b, d]


def segment_sum(values: np.ndarray, segments: np.ndarray, num_segments: int) -> np.ndarray:
    """As ``engines.numpy.segment_sum``: per segment, the sum of its rows of ``values`` in order."""
    out = np.zeros((num_segments, values.shape[1]), dtype=F32)
    ones = np.ones(values.shape[0], dtype=F32)
    _backprop_sum(values, np.arange(values.shape[0], dtype=np.int64), ones, segments, out)
    return out


def backprop_sum(d_activations: np.ndarray, sample: np.ndarray, gains: np.ndarray,
                 segments: np.ndarray, num_segments: int) -> np.ndarray:
    """Per segment, the sum over its occurrences j of ``gains[j] * d_activations[sample[j]]``.

    Spec section 4 in one sequential pass, occurrences in order: each contribution is formed
    and added to its row's sum without materialising the [occurrences, D] array of
    contributions (``1 * x`` is exact, so ``segment_sum`` is the same pass with unit gains).
    Any dtypes and layouts: converted to what the kernel takes.
    """
    out = np.zeros((int(num_segments), d_activations.shape[1]), dtype=F32)
    _backprop_sum(_f32(d_activations), _i64(sample), _f32(gains), _i64(segments), out)
    return out


# --------------------------------------------------------------------------------------------
# Whole rows


@njit(nogil=True, cache=True, error_model="numpy")
def _gather(table: np.ndarray, rows: np.ndarray, out: np.ndarray, start: int, stop: int) -> float:
    for i in range(start, stop):
        r = rows[i]
        for d in range(table.shape[1]):
            out[i, d] = table[r, d]
    return 0.0


@njit(nogil=True, cache=True, error_model="numpy")
def _scatter(table: np.ndarray, rows: np.ndarray, values: np.ndarray, start: int,
             stop: int) -> float:
    for i in range(start, stop):
        r = rows[i]
        for d in range(table.shape[1]):
            table[r, d] = values[i, d]
    return 0.0


@njit(nogil=True, cache=True, error_model="numpy")
def _change_norms(params: np.ndarray, rows: np.ndarray, before: np.ndarray, out: np.ndarray,
                  start: int, stop: int) -> float:
    lanes = np.empty(8, dtype=np.float64)
    for i in range(start, stop):
        out[i] = row_sumsq(params, rows[i] if rows.shape[0] else i, before[i], lanes)
    return 0.0


#: Below this many elements a gather or scatter is NumPy's indexing: the same copy, without
#: the compiled call's dispatch (several microseconds, more than copying a few rows).
_SMALL_COPY = 2048


def gather(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` of ``table`` as a new [n, D] array (as ``table[rows]``)."""
    if rows.shape[0] * table.shape[1] < _SMALL_COPY:
        small: np.ndarray = table[rows]
        return small
    out = np.empty((rows.shape[0], table.shape[1]), dtype=table.dtype)
    run_ranges(_gather, rows.shape[0], out.size, table, rows, out)
    return out


def scatter(table: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """Write ``values`` [n, D] into the distinct rows ``rows`` of ``table`` in place."""
    if values.size < _SMALL_COPY:
        table[rows] = values
        return
    run_ranges(_scatter, rows.shape[0], values.size, table, rows, values)


def gather_combine(
    rows: np.ndarray, index: np.ndarray, gains: np.ndarray, row_splits: np.ndarray
) -> np.ndarray:
    """``combine(gather(rows, index), gains, row_splits)`` without the gathered [nnz, D] copy.

    Per bag b, ``sum over j in the bag of gains[j] * rows[index[j]]``, in position order.
    """
    return numba_step.lookup(rows, index, None, gains, row_splits)


def change_rows(params: np.ndarray, rows: np.ndarray | None, before: np.ndarray) -> np.ndarray:
    """Per row, the squared length of ``params[rows] - before`` (every row when ``rows`` is
    None): ``numerics.row_sumsq``, rows split over threads, without [rows, D] temporaries."""
    ids = np.zeros(0, dtype=np.int64) if rows is None else rows
    norms = np.empty(before.shape[0], dtype=np.float64)
    run_ranges(_change_norms, before.shape[0], before.size, params, ids, before, norms)
    return norms


# --------------------------------------------------------------------------------------------
# The fused update and the compiled step


def _bounds(limits: tuple[np.float32 | None, np.float32 | None] | None) -> tuple[F32, F32]:
    """Clip bounds as float32 with -inf/+inf for an absent bound (or no clipping at all)."""
    if limits is None:
        return -_INF, _INF
    lower, upper = limits
    return (-_INF if lower is None else F32(lower)), (_INF if upper is None else F32(upper))


def _hyper(table: TablePlan, ctx: UpdateContext | None) -> tuple[float, ...]:
    """The table's bound hyper-parameters in field order, then the per-step inputs its algorithm
    reads from ``ctx`` (the algorithm table's ``step_inputs``)."""
    values = [float(v) for v in table.hyper]
    inputs = () if ctx is None else ctx.dynamic_inputs
    name = table.optimizer.name
    for step_input in table.optimizer.algorithm.step_inputs:
        values.append(float(F32(step_input.read(name, table.hyper, inputs))))
    return tuple(values)


def fused_update(
    table: TablePlan, params: np.ndarray, slots: tuple[np.ndarray, ...], rows: np.ndarray,
    grad: np.ndarray | Occurrences, lr: np.float32, ctx: UpdateContext | None = None,
    kept: tuple[np.ndarray, ...] | None = None,
) -> np.ndarray:
    """Spec 6.1-6.4 on ``rows`` of ``table`` (every row, the others with a zero gradient, when
    the table is not lazy), in place; returns per updated row the squared length of its
    parameters' change (``numerics.row_sumsq``; ``numerics.total`` of it is the squared update
    norm). ``grad``: the rows' summed gradient, or their ``Occurrences`` (spec section 4 fused
    in). ``kept``: a lazy table's arrays receiving the values before the update of the rows
    whose change is not finite (``numba_update.update``)."""
    g_lo, g_hi = _bounds(table.clip_gradients)
    w_lo, w_hi = _bounds(table.clip_weights)
    lr = F32(lr)
    decay = table.weight_decay * lr if table.decay_by_lr else table.weight_decay
    kind = kind_of(table.optimizer.name, table.hyper)
    return update(
        kind, params, slots, rows, grad, lr, (g_lo, g_hi, w_lo, w_hi),
        F32(decay), bool(table.weight_decay != 0), _hyper(table, ctx), not table.lazy, kept,
    )


class FusedStep:
    """The compiled step's pieces, for the executor (``numba_step``, ``fused_update``).

    ``backprop`` returns ``(grad, finite)``: the rows' summed gradient [rows, D] (one pass over
    the occurrences in order, the gradient rows read sequentially into a sum the caches hold),
    or - when that sum would exceed ``fuse_above_bytes`` - the occurrences grouped by row
    (``numba_update.Occurrences``), which ``update`` sums row by row inside the fused update:
    back-propagation fused into the update, on every thread, with no [rows, D] array written
    and read back from memory. The grouped pass reads each gradient row at a scattered place:
    it loses when the sum stays in the caches and wins when it does not
    (``docs/performance.md``). Both give the same bits.
    ``alongside`` runs a background task on another thread while the calling thread runs its
    own (``numba_update.alongside``; ``fused.forward_backprop``).
    """

    fuse_above_bytes = 8 << 20

    deduplicate = staticmethod(numba_step.deduplicate)
    lookup = staticmethod(numba_step.lookup)
    missing_rows = staticmethod(numba_step.missing_rows)
    update = staticmethod(fused_update)
    parallel = staticmethod(parallel)
    alongside = staticmethod(alongside)
    threads = staticmethod(threads)

    def backprop(
        self, d_activations: np.ndarray, sample: np.ndarray, gains: np.ndarray,
        inverse: np.ndarray, rows: int,
    ) -> tuple[np.ndarray | Occurrences, bool]:
        if rows * d_activations.shape[1] * 4 > self.fuse_above_bytes:
            return numba_step.occurrences(d_activations, sample, gains, inverse, rows)
        return numba_step.backprop(d_activations, sample, gains, inverse, rows)


# --------------------------------------------------------------------------------------------
# The engine: the compiled kernels behind the interface of ``engines.base``, with the argument
# conversions they need (contiguous int64 ids, float32 values). Anything unusual falls back to
# the NumPy engine.


def _engine() -> Engine:
    def engine_deduplicate(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return numba_step.deduplicate(_i64(ids))

    def engine_segment_sum(
        values: np.ndarray, segments: np.ndarray, num_segments: int
    ) -> np.ndarray:
        return segment_sum(_f32(values), _i64(segments), int(num_segments))

    def engine_gather(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if table.ndim != 2 or table.dtype != F32:
            return reference.gather(table, rows)
        return gather(np.ascontiguousarray(table), _i64(rows))

    def engine_scatter(table: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
        if table.ndim != 2 or table.dtype != F32 or not table.flags.c_contiguous:
            reference.scatter(table, rows, values)
            return
        scatter(table, _i64(rows), _f32(values))

    def engine_combine(rows: np.ndarray, gains: np.ndarray, row_splits: np.ndarray) -> np.ndarray:
        return gather_combine(
            _f32(rows), np.arange(rows.shape[0], dtype=np.int64), _f32(gains), _i64(row_splits)
        )

    def engine_gather_combine(
        rows: np.ndarray, index: np.ndarray, gains: np.ndarray, row_splits: np.ndarray
    ) -> np.ndarray:
        return gather_combine(_f32(rows), _i64(index), _f32(gains), _i64(row_splits))

    def engine_change_rows(
        params: np.ndarray, rows: np.ndarray | None, before: np.ndarray
    ) -> np.ndarray:
        if params.dtype != F32 or not params.flags.c_contiguous:
            return reference.change_rows(params, rows, before)
        return change_rows(params, None if rows is None else _i64(rows), _f32(before))

    def engine_change_norm(
        params: np.ndarray, rows: np.ndarray | None, before: np.ndarray
    ) -> float:
        return float(np.sqrt(numerics.total(engine_change_rows(params, rows, before))))

    def update_rows(
        table: TablePlan,
        params: np.ndarray,
        slots: Sequence[np.ndarray],
        rows: np.ndarray | None,
        grad: np.ndarray,
        lr: np.float32,
        ctx: UpdateContext | None = None,
    ) -> bool:
        arrays = (params, *slots)
        # A table running a Python callable (``TablePlan.custom``) has no compiled kernel: the
        # pipeline's NumPy path runs it, as for arrays the kernels cannot take.
        if rows is None or getattr(table, "custom", False) or not all(
            a.dtype == F32 and a.ndim == 2 and a.flags.c_contiguous and a.flags.writeable
            for a in arrays
        ):
            return False
        fused_update(table, params, tuple(slots), _i64(rows), _f32(grad), lr, ctx)
        return True

    return replace(
        reference.ENGINE,
        name="numba",
        requested="numba",
        fused=FusedStep(),
        update_rows=update_rows,
        backprop_sum=backprop_sum,
        deduplicate=engine_deduplicate,
        segment_sum=engine_segment_sum,
        gather=engine_gather,
        scatter=engine_scatter,
        combine=engine_combine,
        gather_combine=engine_gather_combine,
        change_rows=engine_change_rows,
        change_norm=engine_change_norm,
    )


ENGINE = _engine()
