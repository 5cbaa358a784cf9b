"""Engine selection: which implementation of the hot loops the executor runs.

Two engines compute the same step (spec ``optimizers.md``) behind one interface: the functions of
``kernels`` plus four fused ones (below) the executor calls.

- ``numpy`` (default): ``kernels`` and the optimizers of ``optimizers``, plain NumPy, the readable
  reference;
- ``numba``: the compiled kernels of ``fast`` (hash de-duplication, one-pass segment sums,
  parallel row gathers, and the per-row pipeline of spec section 6 fused into one pass over each
  touched row for SGD, Adagrad, Momentum, Adam and FTRL). Everything else falls through to the
  NumPy functions. The two agree to float32 rounding (tests/test_engine_equivalence.py).

``get_engine("numba")`` imports numba only then; when numba cannot be imported it warns
(``RuntimeWarning``: why, and how to fix it) and returns the NumPy engine, whose ``name`` says
``numpy`` and whose ``fallback`` holds the message.

The additions to the ``kernels`` interface, each a fusion of ``kernels`` calls the executor
makes one after the other:

``gather_combine(rows, index, gains, row_splits)``
    ``combine(gather(rows, index), gains, row_splits)``: the activations, without the gathered
    [occurrences, D] copy;
``backprop_sum(d_activations, sample, gains, segments, num_segments)``
    per segment s, the sum over occurrences j with ``segments[j] == s`` of
    ``gains[j] * d_activations[sample[j]]`` (spec section 4: back-propagation and the duplicate
    sum in one call);
``update_rows(table, params, slots, rows, grad, lr) -> bool``
    run the per-row pipeline (gradient clipping, weight decay, the optimizer, weight clipping)
    on ``rows`` of ``params`` and ``slots`` in place and return True, or return False without
    touching anything when the engine has no fused kernel for the table (the executor then runs
    the NumPy pipeline);
``change_norm(params, rows, before) -> float``
    the Euclidean norm (float64) of ``params[rows] - before`` (``rows`` None: every row), the
    ``update_norm`` of a step's report.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import UsageError
from . import kernels

__all__ = ["ENGINES", "Engine", "get_engine"]

ENGINES = ("numpy", "numba")
F32 = np.float32
_INF = F32(np.inf)


@dataclass(frozen=True)
class Engine:
    """One implementation of the executor's hot loops (see the module docstring).

    ``name`` is the engine actually in use; ``requested`` the one asked for (they differ after a
    fallback, and ``fallback`` then says why).
    """

    name: str
    requested: str
    deduplicate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    segment_sum: Callable[[np.ndarray, np.ndarray, int], np.ndarray]
    backprop_sum: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]
    gather: Callable[[np.ndarray, np.ndarray], np.ndarray]
    scatter: Callable[[np.ndarray, np.ndarray, np.ndarray], None]
    combine: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    gather_combine: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    update_rows: Callable[..., bool]
    change_norm: Callable[[np.ndarray, np.ndarray | None, np.ndarray], float]
    fallback: str | None = None
    bag_of_occurrence: Callable[[np.ndarray], np.ndarray] = kernels.bag_of_occurrence
    bag_scales: Callable[..., tuple[np.ndarray, np.ndarray]] = kernels.bag_scales
    clip: Callable[..., np.ndarray] = kernels.clip
    quantize: Callable[..., np.ndarray] = kernels.quantize
    host_of: Callable[..., np.ndarray] = kernels.host_of


def _numpy_backprop_sum(
    d_activations: np.ndarray,
    sample: np.ndarray,
    gains: np.ndarray,
    segments: np.ndarray,
    num_segments: int,
) -> np.ndarray:
    contributions = gains[:, None] * kernels.gather(d_activations, sample)
    return kernels.segment_sum(contributions, segments, num_segments)


def _numpy_gather_combine(
    rows: np.ndarray, index: np.ndarray, gains: np.ndarray, row_splits: np.ndarray
) -> np.ndarray:
    return kernels.combine(kernels.gather(rows, index), gains, row_splits)


def _no_fused_update(*args: Any) -> bool:
    return False


def _numpy_change_norm(params: np.ndarray, rows: np.ndarray | None, before: np.ndarray) -> float:
    after = params if rows is None else kernels.gather(params, rows)
    delta = (after - before).astype(np.float64)
    return float(np.sqrt(np.sum(delta * delta)))


NUMPY = Engine(
    name="numpy",
    requested="numpy",
    deduplicate=kernels.deduplicate,
    segment_sum=kernels.segment_sum,
    backprop_sum=_numpy_backprop_sum,
    gather=kernels.gather,
    scatter=kernels.scatter,
    combine=kernels.combine,
    gather_combine=_numpy_gather_combine,
    update_rows=_no_fused_update,
    change_norm=_numpy_change_norm,
)

_numba: Engine | None = None


def get_engine(name: str | Engine = "numpy") -> Engine:
    """The engine called ``name`` (``numpy`` or ``numba``); an ``Engine`` is returned as is.

    Raises ``UsageError`` for an unknown name. ``numba`` without an importable numba warns
    (``RuntimeWarning``) and returns the NumPy engine with ``fallback`` set.
    """
    global _numba
    if isinstance(name, Engine):
        return name
    if name == "numpy":
        return NUMPY
    if name != "numba":
        raise UsageError(f"unknown engine {name!r}; expected one of: {', '.join(ENGINES)}")
    if _numba is None:
        try:
            from . import fast
        except ImportError as exc:
            reason = (
                f"the numba engine needs numba, which cannot be imported ({exc}); running the "
                "NumPy engine instead (same results, slower); install it with "
                "`pip install numba` or choose --engine numpy"
            )
            warnings.warn(reason, RuntimeWarning, stacklevel=2)
            return replace(NUMPY, requested="numba", fallback=reason)
        _numba = _numba_engine(fast)
    return _numba


def _numba_engine(fast: Any) -> Engine:
    def deduplicate(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return fast.deduplicate(np.ascontiguousarray(ids, dtype=np.int64))  # type: ignore[no-any-return]

    def segment_sum(values: np.ndarray, segments: np.ndarray, num_segments: int) -> np.ndarray:
        return fast.segment_sum(  # type: ignore[no-any-return]
            np.ascontiguousarray(values, dtype=F32),
            np.ascontiguousarray(segments, dtype=np.int64),
            int(num_segments),
        )

    def backprop_sum(
        d_activations: np.ndarray,
        sample: np.ndarray,
        gains: np.ndarray,
        segments: np.ndarray,
        num_segments: int,
    ) -> np.ndarray:
        return fast.backprop_sum(  # type: ignore[no-any-return]
            np.ascontiguousarray(d_activations, dtype=F32),
            np.ascontiguousarray(sample, dtype=np.int64),
            np.ascontiguousarray(gains, dtype=F32),
            np.ascontiguousarray(segments, dtype=np.int64),
            int(num_segments),
        )

    def gather(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if table.ndim != 2 or table.dtype != F32:
            return kernels.gather(table, rows)
        return fast.gather(  # type: ignore[no-any-return]
            np.ascontiguousarray(table), np.ascontiguousarray(rows, dtype=np.int64)
        )

    def scatter(table: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
        if table.ndim != 2 or table.dtype != F32 or not table.flags.c_contiguous:
            kernels.scatter(table, rows, values)
            return
        fast.scatter(
            table,
            np.ascontiguousarray(rows, dtype=np.int64),
            np.ascontiguousarray(values, dtype=F32),
        )

    def combine(rows: np.ndarray, gains: np.ndarray, row_splits: np.ndarray) -> np.ndarray:
        return fast.combine(  # type: ignore[no-any-return]
            np.ascontiguousarray(rows, dtype=F32),
            np.ascontiguousarray(gains, dtype=F32),
            np.ascontiguousarray(row_splits, dtype=np.int64),
        )

    def gather_combine(
        rows: np.ndarray, index: np.ndarray, gains: np.ndarray, row_splits: np.ndarray
    ) -> np.ndarray:
        return fast.gather_combine(  # type: ignore[no-any-return]
            np.ascontiguousarray(rows, dtype=F32),
            np.ascontiguousarray(index, dtype=np.int64),
            np.ascontiguousarray(gains, dtype=F32),
            np.ascontiguousarray(row_splits, dtype=np.int64),
        )

    def change_norm(params: np.ndarray, rows: np.ndarray | None, before: np.ndarray) -> float:
        if params.dtype != F32 or not params.flags.c_contiguous:
            return _numpy_change_norm(params, rows, before)
        return float(fast.change_norm(
            params,
            None if rows is None else np.ascontiguousarray(rows, dtype=np.int64),
            np.ascontiguousarray(before, dtype=F32),
        ))

    def update_rows(
        table: Any,
        params: np.ndarray,
        slots: Sequence[np.ndarray],
        rows: np.ndarray | None,
        grad: np.ndarray,
        lr: np.float32,
    ) -> bool:
        kernel = _FUSED.get(table.optimizer.name)
        arrays = (params, *slots)
        if (
            kernel is None
            or rows is None
            or not all(a.dtype == F32 and a.flags.c_contiguous for a in arrays)
        ):
            return False
        g_lo, g_hi = _bounds(table.clip_gradients)
        w_lo, w_hi = _bounds(table.clip_weights)
        decay = table.weight_decay * F32(lr) if table.decay_by_lr else table.weight_decay
        wrap = (g_lo, g_hi, F32(decay), bool(table.weight_decay != 0), w_lo, w_hi)
        kernel(
            fast,
            arrays,
            np.ascontiguousarray(rows, dtype=np.int64),
            np.ascontiguousarray(grad, dtype=F32),
            F32(lr),
            table.hyper,
            wrap,
        )
        return True

    return Engine(
        name="numba",
        requested="numba",
        deduplicate=deduplicate,
        segment_sum=segment_sum,
        backprop_sum=backprop_sum,
        gather=gather,
        scatter=scatter,
        combine=combine,
        gather_combine=gather_combine,
        update_rows=update_rows,
        change_norm=change_norm,
    )


def _bounds(limits: tuple[np.float32 | None, np.float32 | None] | None) -> tuple[F32, F32]:
    """Clip bounds as float32 with -inf/+inf for an absent bound (or no clipping at all)."""
    if limits is None:
        return -_INF, _INF
    lower, upper = limits
    return (-_INF if lower is None else F32(lower)), (_INF if upper is None else F32(upper))


def _f(hyper: Any, field: str) -> np.float32:
    return F32(getattr(hyper, field))


# Per optimizer: how to call its fused kernel with ``(arrays, rows, grad, lr, hyper, wrap)``,
# ``arrays`` being the parameters then the slots in state order and ``wrap`` the clipping and
# decay scalars of spec 6.1, 6.2 and 6.4. The hyper-parameters become float32 scalars exactly as
# the NumPy optimizers in ``optimizers`` read them.
_Fused = Callable[..., None]


def _sgd(fast: Any, a: Any, rows: Any, g: Any, lr: Any, h: Any, wrap: Any) -> None:
    fast.update_sgd(a[0], rows, g, lr, *wrap)


def _adagrad(fast: Any, a: Any, rows: Any, g: Any, lr: Any, h: Any, wrap: Any) -> None:
    fast.update_adagrad(a[0], a[1], rows, g, lr, *wrap)


def _momentum(fast: Any, a: Any, rows: Any, g: Any, lr: Any, h: Any, wrap: Any) -> None:
    fast.update_momentum(a[0], a[1], rows, g, lr, _f(h, "momentum"), bool(h.use_nesterov), *wrap)


def _adam(fast: Any, a: Any, rows: Any, g: Any, lr: Any, h: Any, wrap: Any) -> None:
    fast.update_adam(
        a[0], a[1], a[2], rows, g, lr, _f(h, "beta1"), _f(h, "beta2"), _f(h, "epsilon"),
        bool(h.use_sum_inside_sqrt), *wrap,
    )


def _ftrl(fast: Any, a: Any, rows: Any, g: Any, lr: Any, h: Any, wrap: Any) -> None:
    fast.update_ftrl(
        a[0], a[1], a[2], rows, g, lr, _f(h, "l1"), _f(h, "l2"), _f(h, "beta"),
        -_f(h, "lr_power"), bool(h.multiply_linear_by_lr), *wrap,
    )


_FUSED: dict[str, _Fused] = {
    "stochastic_gradient_descent": _sgd,
    "adagrad": _adagrad,
    "momentum": _momentum,
    "adam": _adam,
    "ftrl": _ftrl,
}
