"""The executor side of ``CustomOptimizer`` and ``CustomCombiner`` (TensorFlow 2.21's SparseCore
extension points, ``tpuemb_cfg.embedding.custom``): the user's NumPy callables run inside a step.

How they get here: ``build_config`` records the objects on the tables and features, and
``prepare`` (``Executor(compiled)``, a ``.py`` spec file, ``tpuemb simulate model.py``) carries
them into the plan by table and feature (``plan.build_plan(custom_optimizers=,
custom_combiners=)``). A table that runs a callable is marked ``TablePlan.custom``; the executor
runs it on the NumPy path (the numba engine says so once and keeps its kernels for the others).

**CustomOptimizer** (:func:`optimizer_record`): an ``optimizers.Optimizer`` record whose
``update`` calls ``custom_computation(gradient, embedding_table, slot_variables, learning_rate,
hyperparameters)`` once per partial (once per table per step with one TensorCore) on the touched
rows gathered: ``gradient`` the de-duplicated summed gradient rows, ``embedding_table`` the
rows, ``slot_variables`` one array per declared slot name (``[n, dim]``, or ``[n, 1]`` for a
``slot_dims`` 1 slot), ``learning_rate`` the table's float32 rate of the step (constant or
dynamic tag), ``hyperparameters`` a tuple of float32 scalars (callables evaluated at each call).
The per-row pipeline of spec section 6 wraps it like a built-in optimizer; TensorFlow's
``CustomOptimizer`` has no clipping and no weight decay, so 6.1, 6.2 and 6.4 are no-ops and the
callable sees exactly the summed gradient. What it returns is checked (:class:`CustomError`):
the new rows and one array per slot, float32, the input shapes, finite.

**CustomCombiner** (:class:`CombinerPlan`): the forward pass calls ``combiner_computation
(valency, vectors[, weights])`` per non-empty bag with the looked-up rows (times the ids'
weights, 1 unless given) padded with zeros to ``[max_valency, dim]``; ids beyond
``max_valency`` are dropped (gain 0; they still touch their row, like an id of weight 0). The
back-propagation needs the combiner's derivative, which a NumPy callable does not give: the
executor requires a combiner **linear in the vectors with one gain per position**,
``out = sum_j c_j * vectors[j]`` with ``c_j`` depending only on the valency and the combiner's
weights (sum, mean, a weighted sum with learned position weights). It finds ``c_j`` by calling the
computation on unit probes (one per position and valency, cached), back-propagates with those
gains, and checks every bag's output against ``sum_j c_j * vectors[j]``: a combiner that is not
linear (max pooling, a bias) is refused with the bag and both values. The combiner's weights stay
at their initializer's values (training them, ``combiner_weights_learning_rate``, is not
modelled). Empty bags are not passed to the computation: their activation is 0 (spec 3.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.usercode import ExitCalled, exit_guard, user_value

from ..algorithms import Slot
from .optimizers import NoHyper, Optimizer, UpdateContext
from .warn import warn_once

__all__ = [
    "CombinerPlan",
    "CustomError",
    "CustomUpdate",
    "combine_custom",
    "custom_gains",
    "note_fallback",
    "optimizer_record",
]

F32 = np.float32
OPTIMIZER_NAME = "custom_optimizer"
# How far a combiner's output may be from sum_j c_j * vectors[j] (relative to the terms' size).
LINEAR_RTOL = 1e-4


class CustomError(InputError):
    """A ``CustomOptimizer`` or ``CustomCombiner`` computation raised or returned something the
    executor cannot use; the message names the table or feature, what was found and expected."""


def _show(values: Any, count: int = 4) -> str:
    flat = np.asarray(values).reshape(-1)
    shown = ", ".join(f"{v:.8g}" for v in flat[:count].tolist())
    return f"[{shown}{', ...' if flat.size > count else ''}]"


def _call(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; whatever it raises (``SystemExit`` and other ``BaseException`` subclasses
    included, not Ctrl-C) and a call of ``os._exit`` become a ``CustomError`` naming ``what``
    (``tpuemb_cfg.base.usercode``)."""
    try:
        with exit_guard() as exits:
            result = fn(*args)
    except ExitCalled as exc:
        raise CustomError(f"{what} called os._exit({exc.code!r}), which would end the run at "
                          "once with nothing written") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the user's code: any exception, reported as input
        raise CustomError(f"{what} raised {type(exc).__name__}: {exc}") from exc
    if exits:
        raise CustomError(f"{what} called os._exit({exits[0]!r}) (and caught what tpuemb raised "
                          "for it), which would end the run at once with nothing written")
    return result


def _checked(what: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as it must be: a float32 array of ``shape`` with finite values."""
    array = value if isinstance(value, np.ndarray) else None
    if array is None:
        try:
            array = np.asarray(value)
        except Exception:  # noqa: BLE001 - anything NumPy cannot read is reported
            array = np.asarray(None)
    if array.dtype.kind not in "fiub" or array.dtype == object:
        raise CustomError(
            f"{what} is {type(value).__name__} {str(value)[:60]!r}; expected a float32 array of "
            f"shape {shape}"
        )
    if array.shape != shape:
        raise CustomError(f"{what} has shape {array.shape}; expected {shape}")
    if array.dtype != F32:
        raise CustomError(
            f"{what} has dtype {array.dtype}; expected float32 (TensorFlow computes in float32: "
            "keep float32 inputs and scalars, or cast with .astype(np.float32))"
        )
    bad = ~np.isfinite(array)
    if bad.any():
        first = np.argwhere(bad)[0].tolist()
        raise CustomError(
            f"{what} holds {int(bad.sum())} NaN or infinite value(s) (the first at index "
            f"{first}: {array[tuple(first)]}); expected finite values"
        )
    return array


# --------------------------------------------------------------------------------------------
# CustomOptimizer


class SlotTuple(tuple):  # type: ignore[type-arg]
    """The state of a custom optimizer: its slot arrays in declaration order."""

    def __new__(cls, *slots: np.ndarray) -> SlotTuple:
        return super().__new__(cls, slots)


@dataclass(frozen=True)
class CustomUpdate(Optimizer):
    """The executor's record of a table's ``CustomOptimizer`` (an ``optimizers.Optimizer``).

    ``source``: the ``CustomOptimizer``; ``table``: the table's name (for messages);
    ``slot_list``: its slots with their constant initial values; ``widths``: per slot, 1 or the
    table's dimension (``slot_dims``).
    """

    source: Any = None
    table: str = ""
    slot_list: tuple[Slot, ...] = ()
    widths: tuple[int, ...] = ()

    @property
    def slots(self) -> tuple[Slot, ...]:
        return self.slot_list

    @property
    def equations(self) -> str:
        return "the CustomOptimizer's custom_computation"

    def lazy(self, message: Any) -> bool:
        """Only the touched rows are updated."""
        return True


def _slot_initial(table: str, name: str, initializer: Any, width: int) -> float:
    """The constant a slot starts at: the executor starts every slot from one value (spec 11)."""
    probe = _call(f"table {table!r}: the initializer of slot {name!r}", initializer,
                  (2, width), "float32")
    values = np.asarray(probe, dtype=np.float64).reshape(-1)
    if values.size == 0 or not np.all(values == values[0]) or not np.isfinite(values[0]):
        raise CustomError(
            f"table {table!r}: slot {name!r}'s initializer gives {_show(values)} for 2 rows; "
            "expected one finite constant (the executor starts every slot from one value; use "
            "ConstantInitializer(value), or load the slot from a state file: "
            f"initial_state={{'slot/{table}/{name}': ...}} after starting from a constant)"
        )
    return float(values[0])


def optimizer_record(
    table: str, custom: Any, dimension: int
) -> tuple[CustomUpdate, tuple[F32, ...]]:
    """The ``Optimizer`` record of ``custom`` (a ``CustomOptimizer``) on table ``table`` of
    width ``dimension``, and its slots' float32 initial values. Raises ``CustomError`` for a
    slot initializer that is not a constant."""
    names = tuple(custom.slot_names)
    dims = tuple(custom.slot_dims) or (2,) * len(names)
    widths = tuple(1 if d == 1 else dimension for d in dims)
    initial = tuple(
        _slot_initial(table, name, init, width)
        for name, init, width in zip(names, custom.slot_initializers, widths, strict=True)
    )
    slots = tuple(Slot(name, value) for name, value in zip(names, initial, strict=True))
    what = f"table {table!r}: the CustomOptimizer's custom_computation"
    def update(params: np.ndarray, state: Any, grad: np.ndarray, lr: np.float32,
               hyper: Any, ctx: UpdateContext) -> tuple[np.ndarray, SlotTuple]:
        n, d = params.shape
        given = [s if w == d else np.ascontiguousarray(s[:, :1])
                 for s, w in zip(state, widths, strict=True)]
        values = tuple(F32(_call(f"table {table!r}: hyper-parameter {i}", user_value, h))
                       for i, h in enumerate(custom.hyperparameters))
        result = _call(what, custom.custom_computation, grad.copy(), params.copy(),
                       [s.copy() for s in given], F32(lr), values)
        parts = _parts(result)
        if len(parts) != 1 + len(names):
            expected = ", ".join(["the new rows", *(f"slot {s!r}" for s in names)])
            raise CustomError(
                f"{what} returned {len(parts)} array(s) for {len(names)} slot(s); expected "
                f"{1 + len(names)}: {expected} (a single array when there are no slots)"
            )
        rows = _checked(f"{what} (step {ctx.step}): the new rows", parts[0], (n, d))
        new_slots = []
        for name, width, part in zip(names, widths, parts[1:], strict=True):
            value = _checked(f"{what} (step {ctx.step}): slot {name!r}", part, (n, width))
            new_slots.append(value if width == d else np.repeat(value, d, axis=1))
        return rows, SlotTuple(*new_slots)

    record = CustomUpdate(
        name=OPTIMIZER_NAME, update=update, state=SlotTuple, hyper=NoHyper,
        bind=lambda message: NoHyper(), source=custom, table=table, slot_list=slots,
        widths=widths,
    )
    return record, tuple(F32(v) for v in initial)


def _parts(result: Any) -> list[Any]:
    """``rows``, ``(rows, slot, ...)`` or ``(rows, [slot, ...])`` as a flat list."""
    if not isinstance(result, tuple | list):
        return [result]
    parts = list(result)
    if len(parts) == 2 and isinstance(parts[1], tuple | list):
        return [parts[0], *parts[1]]
    return parts


# --------------------------------------------------------------------------------------------
# CustomCombiner


@dataclass(frozen=True)
class CombinerPlan:
    """A feature's ``CustomCombiner`` as the executor runs it: the combiner, its (constant)
    weights and the per-position gains probed from it, by valency (cached)."""

    feature: str
    combiner: Any
    weights: np.ndarray | None
    dimension: int
    _gains: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return str(self.combiner)

    @property
    def max_valency(self) -> int:
        return int(self.combiner.max_valency)

    def what(self) -> str:
        return f"feature {self.feature!r}: the CustomCombiner's combiner_computation"

    def call(self, valency: int, vectors: np.ndarray) -> Any:
        args: list[Any] = [np.int32(valency), vectors]
        if self.weights is not None:
            args.append(self.weights.copy())
        return _call(self.what(), self.combiner.combiner_computation, *args)

    def gains(self, valency: int) -> np.ndarray:
        """``c_0 .. c_{valency-1}``: the combiner's gain of each position for ``valency`` ids,
        from unit probes (row j all ones, the others zero)."""
        cached = self._gains.get(valency)
        if cached is not None:
            return cached
        out = np.zeros(valency, dtype=F32)
        probe = np.zeros((self.max_valency, self.dimension), dtype=F32)
        zero = _checked(f"{self.what()} on all-zero vectors (valency {valency})",
                        self.call(valency, probe.copy()), (self.dimension,))
        if np.any(zero != 0):
            raise CustomError(
                f"{self.what()} gives {_show(zero)} for all-zero vectors (valency {valency}); "
                "expected zeros: the executor back-propagates through combiners linear in the "
                "vectors, out = sum_j c_j * vectors[j] (no constant term)"
            )
        for j in range(valency):
            probe[:] = 0
            probe[j] = 1
            got = _checked(f"{self.what()} (probe: valency {valency}, ones at position {j})",
                           self.call(valency, probe.copy()), (self.dimension,))
            if np.any(got != got[0]):
                raise CustomError(
                    f"{self.what()} gives {_show(got)} for ones at position {j} (valency "
                    f"{valency}); expected one value in every column: the executor "
                    "back-propagates through combiners with one gain per position, out = "
                    "sum_j c_j * vectors[j]"
                )
            out[j] = got[0]
        self._gains[valency] = out
        return out


def combiner_plan(feature: str, combiner: Any, dimension: int) -> CombinerPlan:
    """The executor's record of ``combiner`` (a ``CustomCombiner``) on a feature of a table of
    width ``dimension``; probes valency 1 at once, so a broken computation fails before any
    table is allocated."""
    weights = None
    if combiner.num_weights > 0:
        weights = _checked(f"feature {feature!r}: the CustomCombiner's initial weights",
                           np.asarray(combiner.initial_weights(), dtype=F32),
                           (int(combiner.num_weights),))
    plan = CombinerPlan(feature, combiner, weights, dimension)
    if plan.max_valency < 1:
        raise CustomError(f"feature {feature!r}: CustomCombiner max_valency is "
                          f"{plan.max_valency}; expected at least 1")
    plan.gains(1)
    return plan


def custom_gains(plan: CombinerPlan, weights: np.ndarray, row_splits: np.ndarray) -> np.ndarray:
    """The gain of every occurrence: its weight times its position's combiner gain for its
    bag's valency (0 beyond ``max_valency``), for every bag at once."""
    counts = np.diff(row_splits)
    limit = plan.max_valency
    valency = np.minimum(counts, limit)
    by_valency = np.zeros((limit + 1, limit), dtype=F32)  # [valency, position] -> c
    for v in np.unique(valency).tolist():
        if v:
            by_valency[v, :v] = plan.gains(int(v))
    bag = np.repeat(np.arange(counts.shape[0]), counts)
    position = np.arange(weights.shape[0]) - row_splits[:-1][bag]
    kept = position < valency[bag]
    gains = np.zeros(weights.shape[0], dtype=F32)
    gains[kept] = weights[kept] * by_valency[valency[bag][kept], position[kept]]
    return gains


def combine_custom(
    plan: CombinerPlan, rows: np.ndarray, index: np.ndarray, weights: np.ndarray,
    row_splits: np.ndarray, linear: np.ndarray, step: int,
) -> np.ndarray:
    """The activations of a feature with a custom combiner: the computation on every
    non-empty bag's weighted rows (``rows[index[j]] * weights[j]``, zero-padded), checked
    against ``linear`` (``sum_j gain_j * row_j``, what back-propagation assumes)."""
    out = np.zeros_like(linear)
    limit, dim = plan.max_valency, plan.dimension
    vectors = np.zeros((limit, dim), dtype=F32)
    for b in range(row_splits.shape[0] - 1):
        start, stop = int(row_splits[b]), int(row_splits[b + 1])
        valency = min(stop - start, limit)
        if valency == 0:
            continue
        vectors[:] = 0
        vectors[:valency] = rows[index[start:start + valency]] * weights[
            start:start + valency, None]
        what = f"{plan.what()} (step {step}, bag {b}, valency {valency})"
        got = _checked(what, plan.call(valency, vectors.copy()), (dim,))
        scale = float(np.abs(plan.gains(valency)[:, None] * vectors[:valency]).sum(axis=0).max())
        if np.abs(got - linear[b]).max() > LINEAR_RTOL * max(scale, 1e-30) + 1e-30:
            raise CustomError(
                f"{what} returned {_show(got)} but the linear combination of its vectors with "
                f"the gains {_show(plan.gains(valency))} probed from it is {_show(linear[b])}; "
                "the executor back-propagates through combiners linear in the vectors, "
                "out = sum_j c_j * vectors[j], c_j depending only on the valency and the weights"
            )
        out[b] = got
    return out


# --------------------------------------------------------------------------------------------
# The engine


def note_fallback(plan: Any, engine: Any) -> None:
    """Say once per process (``RuntimeWarning``, as the engine fallback does) that the numba
    engine runs the tables with a custom optimizer or combiner on the NumPy path."""
    if engine.name != "numba":
        return
    tables = [t.name for t in plan.tables if getattr(t, "custom", False)]
    if not tables:
        return
    reason = (
        f"table(s) {', '.join(repr(t) for t in tables)} run a CustomOptimizer or "
        "CustomCombiner (a Python callable), which the numba engine cannot compile: those "
        "tables run on the NumPy engine (same results), the others compiled; choose --engine "
        "numpy to silence this"
    )
    warn_once(reason, stacklevel=3)
