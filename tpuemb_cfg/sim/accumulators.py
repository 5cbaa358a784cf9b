"""TensorFlow's conditional accumulators, simulated deterministically (spec: ``accumulator.md``).

TensorFlow aggregates the gradients of several workers with conditional accumulators
(``ConditionalAccumulator``, ``SparseConditionalAccumulator``); the optimizer wrappers that drive
them (``DropStaleGradientOptimizer``, ``SyncReplicasOptimizer``) live in :mod:`.staleness`.
TensorFlow drops stale gradients without a trace and blocks when too few gradients exist. This
module reproduces the same decisions in plain Python and NumPy, one operation at a time, and makes
each of them visible:

- every accumulator operation appends a frozen :class:`AccumulatorEvent` to ``events``, drops
  included (``kind="drop"``, ``reason="stale"``);
- a take TensorFlow would block on raises :class:`WouldBlock` instead (a single thread cannot wait);
- invalid arguments and shape errors raise ``ValueError`` worded like TensorFlow's kernels.

A failed call (any exception) changes no state and records no event.

Arithmetic happens in the accumulator's dtype, in arrival order: a float32 MEAN is the float32 sum
of the accepted gradients, added one after another as they arrived, divided by ``float32(count)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from ._args import (
    Shape,
    as_array,
    as_indices,
    compatible,
    format_shape,
    int_scalar,
    parse_dtype,
    parse_reduction,
    parse_shape,
)

__all__ = [
    "AccumulatorEvent",
    "ConditionalAccumulator",
    "GlobalStepWarning",
    "IndexedSlices",
    "SparseConditionalAccumulator",
    "WouldBlock",
]

EventKind = Literal["apply", "drop", "take", "set_global_step"]


class WouldBlock(RuntimeError):
    """Raised where TensorFlow would block: a take before enough gradients (or a missing token).

    A single-threaded simulation cannot wait for another worker, so it reports the wait instead and
    changes nothing; the caller applies more gradients and retries.
    """

    def __init__(self, message: str, *, num_required: int = 0, num_accumulated: int = 0,
                 global_step: int = 0) -> None:
        super().__init__(message)
        self.num_required = num_required
        self.num_accumulated = num_accumulated
        self.global_step = global_step


class GlobalStepWarning(UserWarning):
    """``set_global_step`` moved an accumulator's clock backwards (TensorFlow only logs this)."""


@dataclass(frozen=True)
class AccumulatorEvent:
    """One accumulator operation that changed (or, for a drop, deliberately did not change) state.

    ``global_step`` is the clock after the operation and ``counter`` the number of accumulated
    gradients after it. ``accepted`` is True for ``apply``, False for ``drop``, None otherwise.
    For ``take``, ``num_required`` is the argument and ``num_reduced`` how many gradients the
    result reduced (all accepted since the previous take, which may exceed ``num_required``).
    """

    kind: EventKind
    global_step_before: int
    global_step: int
    counter: int
    local_step: int | None = None
    accepted: bool | None = None
    reason: str | None = None
    backwards: bool = False
    num_required: int | None = None
    num_reduced: int | None = None


class IndexedSlices(NamedTuple):
    """A sparse gradient: ``values[k]`` is the gradient of row ``indices[k]`` of a dense tensor."""

    indices: Any
    values: Any
    dense_shape: Any = None



class _Accumulator:
    """State and rules shared by the dense and sparse accumulators (spec 1.2, 1.4-1.6)."""

    def __init__(self, shape: Sequence[int | None] | None, dtype: npt.DTypeLike,
                 reduction_type: str) -> None:
        self._dtype = parse_dtype(dtype)
        self._reduction = parse_reduction(reduction_type)
        self._shape = parse_shape(shape)
        self._global_step = 0
        self._counter = 0
        self._num_dropped = 0
        self._events: list[AccumulatorEvent] = []

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._dtype

    @property
    def shape(self) -> Shape | None:
        """The declared shape (None: unknown rank; None entries: unknown dimensions)."""
        return self._shape

    @property
    def reduction_type(self) -> str:
        return self._reduction

    @property
    def global_step(self) -> int:
        """The accumulator's own clock: +1 per successful take, or as set by ``set_global_step``."""
        return self._global_step

    @property
    def events(self) -> list[AccumulatorEvent]:
        """A copy of the operation log, oldest first."""
        return list(self._events)

    @property
    def num_dropped(self) -> int:
        """How many stale gradients were dropped since construction (TensorFlow keeps no count)."""
        return self._num_dropped

    def num_accumulated(self) -> int:
        """The number of gradients accepted since the last take."""
        return self._counter

    def set_global_step(self, new_global_step: int) -> None:
        """Set the clock unconditionally; going backwards warns (``GlobalStepWarning``).

        Accumulated gradients stay and are returned by the next take.
        """
        step = int_scalar(new_global_step, "new_global_step")
        before = self._global_step
        backwards = step < before
        if backwards:
            warnings.warn(
                f"set_global_step moved the accumulator clock backwards from {before} to {step}: "
                f"gradients with local_step >= {step} are accepted again",
                GlobalStepWarning,
                stacklevel=2,
            )
        self._global_step = step
        self._events.append(AccumulatorEvent(
            kind="set_global_step", global_step_before=before, global_step=step,
            counter=self._counter, backwards=backwards,
        ))

    def _is_stale(self, local_step: int) -> bool:
        """Spec 1.3 step 2: drop (and record) a gradient computed before the current clock."""
        if local_step >= self._global_step:
            return False
        self._num_dropped += 1
        self._events.append(AccumulatorEvent(
            kind="drop", global_step_before=self._global_step, global_step=self._global_step,
            counter=self._counter, local_step=local_step, accepted=False, reason="stale",
        ))
        return True

    def _record_apply(self, local_step: int) -> None:
        self._counter += 1
        self._events.append(AccumulatorEvent(
            kind="apply", global_step_before=self._global_step, global_step=self._global_step,
            counter=self._counter, local_step=local_step, accepted=True,
        ))

    def _check_take(self, num_required: object, method: str) -> int:
        required = int_scalar(num_required, "num_required")
        if required < 1:
            raise ValueError(f"Argument num_required must be positive, but was {required}")
        if self._counter < required:
            missing = required - self._counter
            raise WouldBlock(
                f"{method}({required}) would block: {self._counter} of {required} gradients "
                f"accumulated at global step {self._global_step}; TensorFlow would wait for "
                f"{missing} more with local_step >= {self._global_step}",
                num_required=required, num_accumulated=self._counter,
                global_step=self._global_step,
            )
        return required

    def _record_take(self, required: int) -> int:
        """Advance the clock, log the take, reset the counter; returns the number reduced."""
        reduced = self._counter
        before = self._global_step
        self._global_step += 1
        self._counter = 0
        self._events.append(AccumulatorEvent(
            kind="take", global_step_before=before, global_step=self._global_step, counter=0,
            num_required=required, num_reduced=reduced,
        ))
        return reduced

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(shape={format_shape(self._shape)}, dtype={self._dtype.name}, "
            f"reduction_type={self._reduction!r}, global_step={self._global_step}, "
            f"num_accumulated={self._counter}, num_dropped={self._num_dropped})"
        )


class ConditionalAccumulator(_Accumulator):
    """TensorFlow's dense ``ConditionalAccumulator`` (spec section 1).

    ``apply_grad`` accepts a gradient whose ``local_step`` is at least the accumulator's
    ``global_step`` and silently (here: visibly, in ``events``) drops older ones; ``take_grad``
    returns the MEAN or SUM of everything accepted since the previous take and advances the clock.
    """

    def __init__(self, shape: Sequence[int | None] | None = None,
                 dtype: npt.DTypeLike = np.float32, reduction_type: str = "MEAN") -> None:
        super().__init__(shape, dtype, reduction_type)
        self._buffer: np.ndarray | None = None

    def apply_grad(self, grad: npt.ArrayLike, local_step: int = 0) -> bool:
        """Add ``grad`` computed at ``local_step``; returns True if accepted, False if dropped.

        Order as TensorFlow's kernel: a stale gradient (``local_step < global_step``) is dropped
        before, and therefore without, any shape check. A fresh one must have the buffer's shape
        (while gradients are accumulated) and be compatible with the declared shape.
        """
        array = as_array(grad, "grad", self._dtype)
        step = int_scalar(local_step, "local_step")
        if self._is_stale(step):
            return False
        if self._buffer is not None and self._buffer.shape != array.shape:
            raise ValueError(
                f"Shape mismatch: expected {format_shape(self._buffer.shape)}, "
                f"got {format_shape(array.shape)}"
            )
        if not compatible(self._shape, array.shape):
            raise ValueError(
                f"Shape mismatch: expected {format_shape(self._shape)}, "
                f"got {format_shape(array.shape)}"
            )
        if self._buffer is None:
            self._buffer = array
        else:
            np.add(self._buffer, array, out=self._buffer)
        self._record_apply(step)
        return True

    def take_grad(self, num_required: int) -> np.ndarray:
        """Reduce all accumulated gradients once at least ``num_required`` exist.

        Raises ``ValueError`` if ``num_required < 1`` and :class:`WouldBlock` if fewer than
        ``num_required`` gradients are accumulated (TensorFlow would wait). On success the clock
        advances by one and the buffer is released. MEAN divides the arrival-order sum by the count
        converted to the dtype.
        """
        required = self._check_take(num_required, "take_grad")
        buffer = self._buffer
        assert buffer is not None  # counter >= required >= 1
        if self._reduction == "MEAN":
            np.divide(buffer, self._dtype.type(self._counter), out=buffer)
        self._buffer = None
        self._record_take(required)
        return buffer


class SparseConditionalAccumulator(_Accumulator):
    """TensorFlow's ``SparseConditionalAccumulator`` (spec section 2).

    Gradients are indexed slices (row indices and one values row per index). The take returns the
    rows touched since the previous take, sorted, each reduced over the gradients that touched that
    row: MEAN divides a row's sum by the row's own count, not by the number of gradients.
    """

    def __init__(self, shape: Sequence[int | None] | None = None,
                 dtype: npt.DTypeLike = np.float32, reduction_type: str = "MEAN") -> None:
        super().__init__(shape, dtype, reduction_type)
        self._indices = np.zeros(0, np.int64)
        self._sums: np.ndarray | None = None
        self._counts = np.zeros(0, np.int64)

    def apply_indexed_slices_grad(self, indices: npt.ArrayLike, values: npt.ArrayLike,
                                  local_step: int = 0,
                                  dense_shape: npt.ArrayLike | None = None) -> bool:
        """Add a sparse gradient computed at ``local_step``; True if accepted, False if dropped.

        ``indices`` must be a vector of distinct non-negative row indices in ascending order and
        ``values`` an array with one row per index. ``dense_shape`` (optional) is only checked
        against the declared shape, as TensorFlow does. Stale gradients are dropped unchecked.
        """
        idx = as_indices(indices, "indices")
        vals = as_array(values, "values", self._dtype)
        step = int_scalar(local_step, "local_step")
        dense = None if dense_shape is None else as_indices(dense_shape, "dense_shape")
        if self._is_stale(step):
            return False
        self._check_fresh(idx, vals, dense)
        self._merge(idx, vals)
        self._record_apply(step)
        return True

    def apply_grad(self, grad_indices: npt.ArrayLike, grad_values: npt.ArrayLike,
                   grad_shape: npt.ArrayLike | None = None, local_step: int = 0) -> bool:
        """TensorFlow's argument order for :meth:`apply_indexed_slices_grad`."""
        return self.apply_indexed_slices_grad(grad_indices, grad_values, local_step, grad_shape)

    def take_indexed_slices_grad(self, num_required: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(indices, values)``: every row touched since the last take, sorted ascending.

        Same preconditions, errors and clock rules as the dense ``take_grad``.
        """
        required = self._check_take(num_required, "take_indexed_slices_grad")
        indices, values = self._indices, self._sums
        assert values is not None  # counter >= 1
        if self._reduction == "MEAN":
            counts = self._counts.astype(self._dtype).reshape((-1,) + (1,) * (values.ndim - 1))
            np.divide(values, counts, out=values)
        self._indices = np.zeros(0, np.int64)
        self._sums = None
        self._counts = np.zeros(0, np.int64)
        self._record_take(required)
        return indices, values

    def take_grad(self, num_required: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Like TensorFlow's sparse ``take_grad``: ``(indices, values, dense_shape)``.

        ``dense_shape`` is the declared first dimension (-1 when unknown) followed by the
        values' trailing dimensions.
        """
        indices, values = self.take_indexed_slices_grad(num_required)
        first = -1 if not self._shape or self._shape[0] is None else self._shape[0]
        dense_shape = np.array((first,) + values.shape[1:], dtype=np.int64)
        return indices, values, dense_shape

    def _check_fresh(self, idx: np.ndarray, vals: np.ndarray, dense: np.ndarray | None) -> None:
        """Spec 2.1 step 2, in TensorFlow's order, then the project's index checks."""
        declared = self._shape
        if idx.ndim != 1:
            raise ValueError(
                f"Input indices should be vector but received shape: {format_shape(idx.shape)}"
            )
        if vals.ndim == 0:
            raise ValueError("Values cannot be 0-dimensional.")
        if vals.shape[0] != idx.shape[0]:
            raise ValueError(f"Expected {idx.shape[0]} non-empty input values, got {vals.shape[0]}")
        if dense is not None:
            _check_dense_shape(declared, dense)
        if declared and declared[0] is not None:
            over = np.flatnonzero(idx >= declared[0])
            if over.size:
                i = int(over[0])
                raise ValueError(
                    f"Shape mismatch: index of slice {i} exceeded limits of shape; "
                    f"index is {idx[i]} exceeded {declared[0]}"
                )
        if self._sums is not None:
            _check_values_like_held(self._sums, vals)
        elif declared is not None:
            _check_values_like_declared(declared, vals)
        _check_indices_ascending(idx)

    def _merge(self, idx: np.ndarray, vals: np.ndarray) -> None:
        """Add each row to its stored sum in arrival order; a new row is copied, not added to 0."""
        if self._sums is None:
            self._indices, self._sums = idx, vals
            self._counts = np.ones(idx.shape[0], np.int64)
            return
        rows = np.union1d(self._indices, idx)
        sums = np.empty((rows.shape[0],) + vals.shape[1:], self._dtype)
        counts = np.zeros(rows.shape[0], np.int64)
        old = np.searchsorted(rows, self._indices)
        sums[old] = self._sums
        counts[old] = self._counts
        new = np.searchsorted(rows, idx)
        seen = np.isin(idx, self._indices, assume_unique=True)
        sums[new[seen]] += vals[seen]
        sums[new[~seen]] = vals[~seen]
        counts[new] += 1
        self._indices, self._sums, self._counts = rows, sums, counts


def _check_dense_shape(declared: tuple[int | None, ...] | None, dense: np.ndarray) -> None:
    """A sparse gradient's ``dense_shape``: a vector that agrees with the declared shape."""
    if dense.ndim != 1:
        raise ValueError(
            f"dense_shape must be a vector, got shape {format_shape(dense.shape)}"
        )
    if declared is None:
        return
    if len(declared) > dense.shape[0]:
        raise ValueError(
            f"Shape mismatch: expected shape rank at least {len(declared)}, "
            f"got {dense.shape[0]}"
        )
    for i, dim in enumerate(declared):
        if dim is not None and dim != dense[i]:
            raise ValueError(
                f"Shape mismatch: expected shape dim {i} to be {dim}, got {dense[i]}"
            )


def _check_values_like_held(held: np.ndarray, vals: np.ndarray) -> None:
    """A sparse gradient's values: the rank and row shape of the sums held."""
    if held.ndim != vals.ndim:
        raise ValueError(
            f"Shape mismatch: expected values rank {held.ndim}, got {vals.ndim}"
        )
    for i in range(1, vals.ndim):
        if held.shape[i] != vals.shape[i]:
            raise ValueError(
                f"Shape mismatch: expected values dim {i} to be {held.shape[i]}, "
                f"got {vals.shape[i]}"
            )


def _check_values_like_declared(declared: tuple[int | None, ...], vals: np.ndarray) -> None:
    """A sparse gradient's values: at least the declared rank, the declared row shape."""
    if len(declared) > vals.ndim:
        raise ValueError(
            f"Shape mismatch: expected values rank at least {len(declared)}, "
            f"got {vals.ndim}"
        )
    for i in range(1, len(declared)):
        if declared[i] is not None and declared[i] != vals.shape[i]:
            raise ValueError(
                f"Shape mismatch: expected values dim {i} to be {declared[i]}, "
                f"got {vals.shape[i]}"
            )


def _check_indices_ascending(idx: np.ndarray) -> None:
    """Project decision (spec 2.1): TensorFlow assumes sorted unique non-negative indices and
    returns garbage otherwise; refuse them instead."""
    negative = np.flatnonzero(idx < 0)
    if negative.size:
        i = int(negative[0])
        raise ValueError(
            f"indices[{i}] is {idx[i]}: row indices must be >= 0"
        )
    not_increasing = np.flatnonzero(np.diff(idx) <= 0)
    if not_increasing.size:
        i = int(not_increasing[0]) + 1
        problem = "duplicate" if idx[i] == idx[i - 1] else "unsorted"
        raise ValueError(
            f"indices[{i}] is {idx[i]} after {idx[i - 1]} ({problem}): the indices of one "
            "gradient must be unique and ascending - combine duplicate rows (sum them) and "
            "sort before applying"
        )
