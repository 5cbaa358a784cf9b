"""Multi-worker gradient aggregation, simulated deterministically (spec: ``accumulator.md``).

TensorFlow aggregates the gradients of several workers with conditional accumulators
(``ConditionalAccumulator``, ``SparseConditionalAccumulator``), the ``DropStaleGradientOptimizer``
wrapper and ``SyncReplicasOptimizer``. TensorFlow drops stale gradients without a trace and blocks
when too few gradients or tokens exist. This module reproduces the same decisions in plain Python
and NumPy, one operation at a time, and makes each of them visible:

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
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "AccumulatorEvent",
    "ConditionalAccumulator",
    "DropStaleGradient",
    "GlobalStepWarning",
    "IndexedSlices",
    "SparseConditionalAccumulator",
    "StaleDecision",
    "SyncEvent",
    "SyncReplicas",
    "WouldBlock",
]

Shape = tuple[int | None, ...]
"""A declared shape: one entry per dimension, ``None`` for an unknown dimension."""

EventKind = Literal["apply", "drop", "take", "set_global_step"]

_DTYPES = ("float16", "float32", "float64")
_REDUCTIONS = ("MEAN", "SUM")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


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


# --------------------------------------------------------------------------------------------
# argument helpers


def _format_shape(shape: Sequence[int | None] | None) -> str:
    """Write a shape the way TensorFlow's messages do: ``[2,3]``, ``[?,3]``, ``<unknown>``."""
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _int_scalar(value: object, name: str) -> int:
    """An int64 scalar argument (Python or NumPy integer, or a 0-d integer array)."""
    if isinstance(value, bool) or isinstance(value, np.bool_):
        raise ValueError(f"Argument {name} must be an integer scalar, got bool {value!r}")
    if isinstance(value, int):
        number = value
    else:
        array = np.asarray(value)
        if array.ndim != 0:
            raise ValueError(
                f"Argument {name} must be scalar, but had bad shape {_format_shape(array.shape)}"
            )
        if array.dtype.kind not in "iu":
            raise ValueError(
                f"Argument {name} must be an integer scalar, got {array.dtype} {value!r}"
            )
        number = int(array)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise ValueError(f"Argument {name} must fit in int64, got {number}")
    return number


def _parse_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
    try:
        parsed = np.dtype(dtype)
    except TypeError:
        parsed = None
    if parsed is None or parsed.name not in _DTYPES:
        raise ValueError(
            f"dtype: got {dtype!r}; allowed: {', '.join(_DTYPES)} "
            "(TensorFlow's accumulator kernels exist for these floating types only)"
        )
    return parsed


def _parse_reduction(reduction_type: object) -> str:
    if not isinstance(reduction_type, str) or reduction_type not in _REDUCTIONS:
        raise ValueError(
            f"reduction_type: got {reduction_type!r}; allowed: 'MEAN', 'SUM' (case-sensitive)"
        )
    return reduction_type


def _parse_shape(shape: Sequence[int | None] | None) -> Shape | None:
    if shape is None:
        return None
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise ValueError(
            f"shape: got {shape!r}; expected None or a sequence of dimensions (int >= 0 or None)"
        )
    dims: list[int | None] = []
    for i, dim in enumerate(shape):
        if dim is None:
            dims.append(None)
            continue
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)) or dim < 0:
            raise ValueError(
                f"shape: dimension {i} is {dim!r}; a dimension must be an int >= 0, or None when "
                "unknown"
            )
        dims.append(int(dim))
    return tuple(dims)


def _compatible(declared: Shape | None, actual: tuple[int, ...]) -> bool:
    if declared is None:
        return True
    if len(declared) != len(actual):
        return False
    return all(d is None or d == a for d, a in zip(declared, actual, strict=True))


def _as_array(value: object, name: str, dtype: np.dtype[Any]) -> np.ndarray:
    """Convert a gradient to a fresh array of ``dtype`` (TensorFlow converts before the op runs)."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} cannot be converted to an array: {exc}") from None
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold real numbers, got an array of {array.dtype}")
    return array.astype(dtype, copy=True)


def _as_indices(value: object, name: str) -> np.ndarray:
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} cannot be converted to an array: {exc}") from None
    if array.size == 0 and array.dtype.kind == "f":  # [] becomes float64 in NumPy
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers, got an array of {array.dtype}")
    return array.astype(np.int64, copy=True)


# --------------------------------------------------------------------------------------------
# accumulators


class _Accumulator:
    """State and rules shared by the dense and sparse accumulators (spec 1.2, 1.4-1.6)."""

    def __init__(self, shape: Sequence[int | None] | None, dtype: npt.DTypeLike,
                 reduction_type: str) -> None:
        self._dtype = _parse_dtype(dtype)
        self._reduction = _parse_reduction(reduction_type)
        self._shape = _parse_shape(shape)
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
        step = _int_scalar(new_global_step, "new_global_step")
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
        required = _int_scalar(num_required, "num_required")
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
            f"{type(self).__name__}(shape={_format_shape(self._shape)}, dtype={self._dtype.name}, "
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
        array = _as_array(grad, "grad", self._dtype)
        step = _int_scalar(local_step, "local_step")
        if self._is_stale(step):
            return False
        if self._buffer is not None and self._buffer.shape != array.shape:
            raise ValueError(
                f"Shape mismatch: expected {_format_shape(self._buffer.shape)}, "
                f"got {_format_shape(array.shape)}"
            )
        if not _compatible(self._shape, array.shape):
            raise ValueError(
                f"Shape mismatch: expected {_format_shape(self._shape)}, "
                f"got {_format_shape(array.shape)}"
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
        idx = _as_indices(indices, "indices")
        vals = _as_array(values, "values", self._dtype)
        step = _int_scalar(local_step, "local_step")
        dense = None if dense_shape is None else _as_indices(dense_shape, "dense_shape")
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
                f"Input indices should be vector but received shape: {_format_shape(idx.shape)}"
            )
        if vals.ndim == 0:
            raise ValueError("Values cannot be 0-dimensional.")
        if vals.shape[0] != idx.shape[0]:
            raise ValueError(f"Expected {idx.shape[0]} non-empty input values, got {vals.shape[0]}")
        if dense is not None:
            if dense.ndim != 1:
                raise ValueError(
                    f"dense_shape must be a vector, got shape {_format_shape(dense.shape)}"
                )
            if declared is not None:
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
        if declared and declared[0] is not None:
            over = np.flatnonzero(idx >= declared[0])
            if over.size:
                i = int(over[0])
                raise ValueError(
                    f"Shape mismatch: index of slice {i} exceeded limits of shape; "
                    f"index is {idx[i]} exceeded {declared[0]}"
                )
        if self._sums is not None:
            held = self._sums
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
        elif declared is not None:
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
        # Project decision (spec 2.1): TensorFlow assumes sorted unique non-negative indices and
        # returns garbage otherwise; refuse them instead.
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


# --------------------------------------------------------------------------------------------
# DropStaleGradientOptimizer


@dataclass(frozen=True)
class StaleDecision:
    """One staleness decision of :class:`DropStaleGradient`."""

    local_step: int
    global_step: int
    staleness: int
    applied: bool


class DropStaleGradient:
    """TensorFlow 1.x's ``DropStaleGradientOptimizer`` rule (spec section 3).

    A worker snapshots the global step before computing its gradients (its ``local_step``). When
    it applies them, ``staleness = global_step - local_step``; with ``staleness <= max_staleness``
    the whole step is applied and the global step advances, otherwise the whole step (every
    variable) is dropped, the global step stays, and ``stale_counter`` grows by one. A negative
    ``max_staleness`` drops everything.

    Two ways to use it: :meth:`should_apply` when the caller owns the global step, or
    :meth:`apply_gradients` to let this object hold the shared global step as TensorFlow's
    variable does. Both record a :class:`StaleDecision` in ``decisions`` and count drops.
    """

    def __init__(self, max_staleness: int, global_step: int = 0) -> None:
        self._max_staleness = _int_scalar(max_staleness, "max_staleness")
        self._global_step = _int_scalar(global_step, "global_step")
        self._stale_counter = 0
        self._decisions: list[StaleDecision] = []

    @property
    def max_staleness(self) -> int:
        return self._max_staleness

    @property
    def global_step(self) -> int:
        """The shared global step held for :meth:`apply_gradients` (+1 per applied step)."""
        return self._global_step

    @property
    def stale_counter(self) -> int:
        """The number of dropped steps."""
        return self._stale_counter

    @property
    def decisions(self) -> list[StaleDecision]:
        """A copy of every decision, oldest first."""
        return list(self._decisions)

    def staleness(self, local_step: int, global_step: int) -> int:
        """``global_step - local_step``: how many updates happened since the snapshot."""
        return _int_scalar(global_step, "global_step") - _int_scalar(local_step, "local_step")

    def should_apply(self, local_step: int, global_step: int) -> bool:
        """Decide one step: True (apply) when ``global_step - local_step <= max_staleness``.

        Records the decision and counts a drop in ``stale_counter``; does not touch
        ``self.global_step`` (the caller advances its own step when this returns True).
        """
        staleness = self.staleness(local_step, global_step)
        applied = staleness <= self._max_staleness
        if not applied:
            self._stale_counter += 1
        self._decisions.append(StaleDecision(
            local_step=int(local_step), global_step=int(global_step), staleness=staleness,
            applied=applied,
        ))
        return applied

    def apply_gradients(self, local_step: int, apply: Callable[[], object] | None = None) -> bool:
        """One worker's ``apply_gradients`` against the held global step, decided atomically.

        If the step is fresh enough, calls ``apply()`` (the wrapped optimizer's update for every
        variable) and advances ``global_step``; otherwise nothing is applied.
        """
        applied = self.should_apply(local_step, self._global_step)
        if applied:
            if apply is not None:
                apply()
            self._global_step += 1
        return applied

    def staleness_percentage(self, global_step: int | None = None) -> float:
        """TensorFlow's summary "Gradient staleness percentage": ``stale_counter / (step + 1)``."""
        step = self._global_step if global_step is None else _int_scalar(global_step, "global_step")
        return self._stale_counter / (step + 1)


# --------------------------------------------------------------------------------------------
# SyncReplicasOptimizer


@dataclass(frozen=True)
class SyncEvent:
    """One event of a :class:`SyncReplicas` run.

    ``kind``: ``"apply"`` (a replica's gradient for ``variable``: ``accepted`` tells whether the
    accumulator kept it), ``"token"`` (``replica`` dequeued a token holding ``step``), ``"wait"``
    (``replica`` found the token queue empty), ``"take"`` (the chief's take for ``variable`` fired),
    ``"update"`` (the chief applied the aggregated gradients; ``step`` is the new global step),
    ``"enqueue"`` (``count`` tokens holding ``step`` were added to the queue).
    """

    kind: Literal["apply", "token", "wait", "take", "update", "enqueue"]
    global_step: int
    replica: int | None = None
    variable: str | None = None
    local_step: int | None = None
    accepted: bool | None = None
    step: int | None = None
    count: int | None = None


Gradient = npt.ArrayLike | IndexedSlices | tuple[Any, Any]


class SyncReplicas:
    """``tf.compat.v1.train.SyncReplicasOptimizer`` as a deterministic, single-threaded model.

    ``R = replicas_to_aggregate`` of ``N = total_num_replicas`` replicas contribute to each update.
    Each variable has its own accumulator (dense, with its declared shape, or sparse with per-row
    MEAN); replicas apply with their ``local_step`` and then dequeue a token holding the step to use
    next; the chief takes ``R`` gradients per variable, updates, advances the global step and
    enqueues ``max(N, R)`` tokens. Where TensorFlow blocks, this model raises :class:`WouldBlock`
    (chief) or marks the replica as waiting (replica), so hangs become visible.
    """

    def __init__(self, replicas_to_aggregate: int, total_num_replicas: int | None = None, *,
                 dense: Mapping[str, Sequence[int | None] | None] | None = None,
                 sparse: Iterable[str] = (), dtype: npt.DTypeLike = np.float32,
                 global_step: int = 0) -> None:
        self.replicas_to_aggregate = _int_scalar(replicas_to_aggregate, "replicas_to_aggregate")
        if self.replicas_to_aggregate < 1:
            raise ValueError(
                f"replicas_to_aggregate must be >= 1, got {self.replicas_to_aggregate}"
            )
        total = self.replicas_to_aggregate if total_num_replicas is None else total_num_replicas
        self.total_num_replicas = _int_scalar(total, "total_num_replicas")
        if self.total_num_replicas < 1:
            raise ValueError(f"total_num_replicas must be >= 1, got {self.total_num_replicas}")
        self.tokens_per_step = max(self.total_num_replicas, self.replicas_to_aggregate)
        self.accumulators: dict[str, ConditionalAccumulator | SparseConditionalAccumulator] = {}
        for name, shape in (dense or {}).items():
            self.accumulators[name] = ConditionalAccumulator(shape, dtype)
        for name in sparse:
            if name in self.accumulators:
                raise ValueError(f"variable {name!r} is declared both dense and sparse")
            self.accumulators[name] = SparseConditionalAccumulator(None, dtype)
        if not self.accumulators:
            raise ValueError("Must supply at least one variable (pass dense= or sparse=)")
        self._global_step = _int_scalar(global_step, "global_step")
        self.local_steps = [self._global_step] * self.total_num_replicas
        self.tokens: deque[int] = deque()
        self._waiting: deque[int] = deque()
        self._taken: dict[str, Any] = {}
        self._events: list[SyncEvent] = []

    @property
    def global_step(self) -> int:
        return self._global_step

    @property
    def events(self) -> list[SyncEvent]:
        """A copy of the event log, oldest first (accumulator drops: see ``accumulators``)."""
        return list(self._events)

    @property
    def waiting(self) -> list[int]:
        """Replicas blocked on an empty token queue, in the order they will be served."""
        return list(self._waiting)

    def chief_init(self) -> None:
        """Align every accumulator's clock with the global step (TensorFlow's chief init op)."""
        for accumulator in self.accumulators.values():
            accumulator.set_global_step(self._global_step)

    def init_tokens(self, num_tokens: int = -1) -> int:
        """``get_init_tokens_op``: put the first tokens in the queue; returns how many.

        ``-1`` means ``R`` tokens; fewer than ``R - N`` cannot finish the first step (ValueError).
        """
        count = _int_scalar(num_tokens, "num_tokens")
        needed = self.replicas_to_aggregate - self.total_num_replicas
        if count == -1:
            count = self.replicas_to_aggregate
        elif count < needed:
            raise ValueError(
                f"Too few tokens to finish the first step: {count} (given) vs {needed} (needed)"
            )
        if count > 0:
            self._enqueue(count)
        return max(count, 0)

    def start(self, num_init_tokens: int = -1) -> None:
        """The chief's start-up: :meth:`chief_init`, then :meth:`init_tokens`."""
        self.chief_init()
        self.init_tokens(num_init_tokens)

    def replica_step(self, replica: int, grads: Mapping[str, Gradient]) -> dict[str, bool]:
        """One replica's train op: apply its gradients with its ``local_step``, then take a token.

        ``grads`` maps variable names to dense arrays or sparse ``IndexedSlices`` /
        ``(indices, values)``; a variable left out has no gradient this step. Returns, per
        variable, whether the accumulator accepted the gradient. Raises :class:`WouldBlock` if the
        replica is still waiting for a token from its previous step. Gradients go to the
        accumulators one variable at a time, in ``grads`` order: a gradient refused with
        ``ValueError`` (a shape error) stops the step, the variables before it keep theirs.
        """
        rid = self._replica(replica)
        if rid in self._waiting:
            raise WouldBlock(
                f"replica {rid} is still waiting for a token (queue empty); the chief must finish "
                f"step {self._global_step} first",
                global_step=self._global_step,
            )
        parsed = [(name, self._split(name, grad)) for name, grad in grads.items()]
        local_step = self.local_steps[rid]
        accepted: dict[str, bool] = {}
        for name, grad in parsed:
            accumulator = self.accumulators[name]
            if isinstance(accumulator, SparseConditionalAccumulator):
                assert isinstance(grad, IndexedSlices)
                ok = accumulator.apply_indexed_slices_grad(
                    grad.indices, grad.values, local_step, grad.dense_shape)
            else:
                ok = accumulator.apply_grad(grad, local_step)
            accepted[name] = ok
            self._events.append(SyncEvent(
                kind="apply", global_step=self._global_step, replica=rid, variable=name,
                local_step=local_step, accepted=ok,
            ))
        if self.tokens:
            self._give_token(rid)
        else:
            self._waiting.append(rid)
            self._events.append(SyncEvent(kind="wait", global_step=self._global_step, replica=rid))
        return accepted

    def chief_step(self, update: Callable[[dict[str, Any]], object] | None = None
                   ) -> dict[str, Any]:
        """The chief's train op: take ``R`` gradients per variable, update, enqueue tokens.

        Takes fire per variable as soon as that accumulator holds ``R`` gradients (as TensorFlow's
        independent take ops do), so a call may fire some takes and then raise :class:`WouldBlock`
        naming the variables still short; the fired ones are kept for the next call. When every
        take has fired, ``update(aggregated)`` runs (the wrapped optimizer), the global step
        advances, ``max(N, R)`` tokens are enqueued and waiting replicas are served in order.
        Returns the aggregated gradients (dense arrays, or ``(indices, values)`` for sparse).
        """
        required = self.replicas_to_aggregate
        for name, accumulator in self.accumulators.items():
            if name in self._taken or accumulator.num_accumulated() < required:
                continue
            if isinstance(accumulator, SparseConditionalAccumulator):
                self._taken[name] = accumulator.take_indexed_slices_grad(required)
            else:
                self._taken[name] = accumulator.take_grad(required)
            self._events.append(SyncEvent(kind="take", global_step=self._global_step,
                                          variable=name))
        short = {name: acc.num_accumulated() for name, acc in self.accumulators.items()
                 if name not in self._taken}
        if short:
            detail = ", ".join(f"{name!r} has {count}" for name, count in short.items())
            raise WouldBlock(
                f"chief step {self._global_step} would block: each variable needs {required} fresh "
                f"gradients; {detail}",
                num_required=required, num_accumulated=min(short.values()),
                global_step=self._global_step,
            )
        aggregated = self._taken
        if update is not None:
            update(aggregated)  # if this raises, the takes are kept and the next call retries
        self._taken = {}
        self._global_step += 1
        self._events.append(SyncEvent(kind="update", global_step=self._global_step,
                                      step=self._global_step))
        self._enqueue(self.tokens_per_step)
        return aggregated

    def num_dropped(self) -> dict[str, int]:
        """Stale gradients dropped so far, per variable."""
        return {name: acc.num_dropped for name, acc in self.accumulators.items()}

    def _replica(self, replica: int) -> int:
        rid = _int_scalar(replica, "replica")
        if not 0 <= rid < self.total_num_replicas:
            raise ValueError(
                f"replica {rid} does not exist: replicas are 0..{self.total_num_replicas - 1}"
            )
        return rid

    def _split(self, name: str, grad: Gradient) -> Any:
        accumulator = self.accumulators.get(name)
        if accumulator is None:
            raise ValueError(
                f"unknown variable {name!r}: declared variables are {sorted(self.accumulators)}"
            )
        sparse = isinstance(accumulator, SparseConditionalAccumulator)
        if sparse and type(grad) is tuple and len(grad) == 2:
            grad = IndexedSlices(grad[0], grad[1])
        if sparse != isinstance(grad, IndexedSlices):
            kind = "sparse (IndexedSlices)" if sparse else "dense (an array)"
            raise ValueError(f"Unknown grad type! variable {name!r} takes {kind} gradients")
        return grad

    def _give_token(self, rid: int) -> None:
        token = self.tokens.popleft()
        self.local_steps[rid] = token
        self._events.append(SyncEvent(kind="token", global_step=self._global_step, replica=rid,
                                      step=token))

    def _enqueue(self, count: int) -> None:
        self.tokens.extend([self._global_step] * count)
        self._events.append(SyncEvent(kind="enqueue", global_step=self._global_step,
                                      step=self._global_step, count=count))
        while self._waiting and self.tokens:
            self._give_token(self._waiting.popleft())
