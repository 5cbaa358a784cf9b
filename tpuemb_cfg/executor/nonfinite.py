"""Non-finite results: what made a parameter NaN or infinite, found after the fact.

TensorFlow's kernels compute through NaN and infinities (Adagrad with a zero accumulator and a
zero gradient gives ``0 / sqrt(0)``: NaN), and so does the executor: its results stay
TensorFlow's. Detection costs nothing in a step that stays finite: the update norm the step
computes anyway is then finite (``Executor._check_finite``). When it is not, the first
non-finite parameter is located and its update is replayed here, on that one element, in
float32 with the same operations in the same order as the update (the optimizer's scalar
element, spec section 6's clipping and decay around it), each value carrying the expression
it came from: the first operation whose operands are finite and whose result is not is the
cause (``0 / 0``, a division by zero, an overflow past 3.4e38, the square root of a negative
number), and an input already non-finite (a gradient sum that overflowed, a table loaded with
NaN) is named as such.

The replay starts from the values the step read: the executor keeps the slots (and, where
the compiled update works in place, the parameters) of the rows a lazy update changes before
it runs (``Executor._keep_before``: copies of those rows only, about 1% of a step). A non-lazy
update (every row of the table) and a remote storage keep no copy; their replay starts from
the values the step left, and says so. The learning rate is blamed only when the failing
operation is an overflow fed by it. The first non-finite value of a loaded state
(``loaded``) is named by its file, key and row.
"""

from __future__ import annotations

import math
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.errors import parameter as arg
from tpuemb_cfg.base.numerics import pow32 as _pow32

from ..algorithms import update as helpers
from .fused import stacked

__all__ = ["NonFinite", "NonFiniteWarning", "diagnose", "first_nonfinite", "loaded",
           "row_gradient", "warn"]

F32 = np.float32


class NonFiniteWarning(RuntimeWarning):
    """A step (or a loaded state) left a table's parameters NaN or infinite; ``event`` says
    where and why (a ``NonFinite``)."""

    def __init__(self, event: NonFinite) -> None:
        super().__init__(event.message)
        self.event = event


@dataclass(frozen=True)
class NonFinite:
    """The first non-finite value of a run: where (``step``, ``table``, ``row``, ``column``;
    ``source``/``key`` for a loaded state), what (``value``) and why (``cause``: the operation
    in words; ``operation``: the expression, e.g. ``lr * G / sqrt(accumulators)``).
    ``learning_rate``: whether an overflowing learning rate is the cause (``parameter`` then
    names the argument that set it, as ``NumericalError`` does)."""

    step: int
    table: str
    row: int
    column: int
    value: str
    cause: str
    operation: str = ""
    count: int = 1
    learning_rate: bool = False
    parameter: str | None = None
    rate: float | None = None
    source: str | None = None
    key: str | None = None

    @property
    def message(self) -> str:
        if self.key is not None:
            where = f"{self.source}: key {self.key}" if self.source else f"key {self.key}"
            return (f"{where}: {self.value} at row {self.row}, column {self.column} "
                    f"({self.count:,} non-finite value(s)); {self.cause}")
        return (f"step {self.step}: the update of table {self.table!r} left {self.count:,} "
                f"parameter(s) non-finite (first: {self.value} at row {self.row}, column "
                f"{self.column}): {self.cause}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the run's report, summary.json)."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        out["message"] = self.message
        return out


def warn(event: NonFinite) -> None:
    """Say ``event`` (a ``NonFiniteWarning``), every time: each run's first non-finite value is
    news, even when an earlier run in this process said the same words."""
    warnings.warn_explicit(NonFiniteWarning(event), NonFiniteWarning, __file__, 1,
                           module=__name__, registry=None)


def first_nonfinite(array: Any, block: int = 1 << 16) -> tuple[int, int, int, str] | None:
    """The first NaN or infinity of a 2-D ``array`` in row order, scanned a block of rows at a
    time (a memory-mapped table is not read whole): (row, column, count of all, value), or
    None when every value is finite."""
    values = np.asarray(array) if not hasattr(array, "shape") else array
    if values.ndim != 2:
        values = np.asarray(values).reshape(values.shape[0] if values.ndim else 1, -1)
    first: tuple[int, int, str] | None = None
    count = 0
    for start in range(0, values.shape[0], block):
        part = np.asarray(values[start:start + block])
        bad = ~np.isfinite(part)
        if not bad.any():
            continue
        count += int(bad.sum())
        if first is None:
            row, column = (int(i) for i in np.argwhere(bad)[0])
            first = (start + row, column, str(part[row, column]))
    if first is None:
        return None
    return first[0], first[1], count, first[2]


def loaded(plan: Any, arrays: Mapping[str, Any], source: str | None, step: int = 0, *,
           strict: bool = False) -> NonFinite | None:
    """The first NaN or infinity of a state loaded to start from (``initial_state``, a
    checkpoint), by key in ``plan``'s order (tables, then their slots), or None; ``strict``:
    ``InputError`` naming the file ``source``, the key and the row instead."""
    for table in plan.tables:
        for key in (f"table/{table.name}",
                    *(f"slot/{table.name}/{slot}" for slot in table.slot_names)):
            value = arrays.get(key)
            if value is None or getattr(value, "ndim", 2) != 2:
                continue
            found = first_nonfinite(value)
            if found is None:
                continue
            row, column, count, text = found
            if strict:
                raise InputError(
                    f"{text} at row {row}, column {column} ({count:,} non-finite value(s)); "
                    f"{arg('strict_finite')} refuses a state that is not finite: start from "
                    "another checkpoint or initial state", path=source, key=key)
            cause = ("a state to start from holds it: the step that made it, or the file, is "
                     "at fault, not the steps that read it")
            return NonFinite(step, table.name, row, column, text, cause, count=count,
                             source=source, key=key)
    return None


def row_gradient(engine: Any, table: Any, record: Any, grads: Sequence[np.ndarray],
                 row: int) -> np.ndarray:
    """Row ``row``'s summed gradient in a step (spec section 4) of ``table``, from the step's
    de-duplication ``record`` and activation gradients ``grads``: in the first partial that
    touches it; zeros for a row the step did not touch."""
    d_activations = stacked(table, grads)
    for partial in record.partials:
        where = np.flatnonzero(partial.rows == row)
        if not where.size:
            continue
        covered = partial.occurrences
        grad = engine.backprop_sum(
            d_activations,
            record.sample if covered is None else record.sample[covered],
            record.gains if covered is None else record.gains[covered],
            partial.inverse, partial.rows.shape[0])
        return np.asarray(grad[int(where[0])])
    return np.zeros(table.dimension, dtype=F32)


# --------------------------------------------------------------------------------------------
# The traced replay of one element


class _Found(Exception):
    """The first non-finite operation, raised to stop the replay there."""

    def __init__(self, expression: str, cause: str, learning_rate: bool) -> None:
        super().__init__(expression)
        self.expression = expression
        self.cause = cause
        self.learning_rate = learning_rate


def _fmt(value: np.float32) -> str:
    return f"{float(value):.9g}" if math.isfinite(float(value)) else str(float(value))


class Traced:
    """A float32 value with the expression it came from (``label``; ``lr``: whether the learning
    rate fed it). Every arithmetic operation computes in float32, as the update does, and stops
    the replay (``_Found``) at the first that makes a non-finite value of finite operands."""

    __slots__ = ("label", "lr", "value")

    def __init__(self, value: Any, label: str, lr: bool = False) -> None:
        self.value = F32(value)
        self.label = label
        self.lr = lr

    # -- the operations
    def _op(self, other: Any, symbol: str, fn: Callable[[Any, Any], Any], swap: bool = False
            ) -> Traced:
        right = other if isinstance(other, Traced) else Traced(other, _fmt(F32(other)))
        left, right = (right, self) if swap else (self, right)
        with np.errstate(all="ignore"):
            result = F32(fn(left.value, right.value))
        label = f"{_group(left.label)} {symbol} {_group(right.label)}"
        if not math.isfinite(float(result)) and math.isfinite(float(left.value)) \
                and math.isfinite(float(right.value)):
            if symbol == "/" and right.value == 0:
                what = "0 / 0" if left.value == 0 else "a division by zero"
                cause = (f"{what} in {label}: {left.label} is {_fmt(left.value)} and "
                         f"{right.label} is 0, giving {_fmt(result)}")
                raise _Found(label, cause, False)
            cause = (f"{label} overflowed: {_fmt(left.value)} {symbol} {_fmt(right.value)} is "
                     "beyond float32's 3.4e38")
            raise _Found(label, cause, left.lr or right.lr)
        return Traced(result, label, left.lr or right.lr)

    def __add__(self, o: Any) -> Traced:
        return self._op(o, "+", lambda a, b: a + b)

    def __radd__(self, o: Any) -> Traced:
        return self._op(o, "+", lambda a, b: a + b, swap=True)

    def __sub__(self, o: Any) -> Traced:
        return self._op(o, "-", lambda a, b: a - b)

    def __rsub__(self, o: Any) -> Traced:
        return self._op(o, "-", lambda a, b: a - b, swap=True)

    def __mul__(self, o: Any) -> Traced:
        return self._op(o, "*", lambda a, b: a * b)

    def __rmul__(self, o: Any) -> Traced:
        return self._op(o, "*", lambda a, b: a * b, swap=True)

    def __truediv__(self, o: Any) -> Traced:
        return self._op(o, "/", lambda a, b: a / b)

    def __rtruediv__(self, o: Any) -> Traced:
        return self._op(o, "/", lambda a, b: a / b, swap=True)

    def __neg__(self) -> Traced:
        return Traced(-self.value, f"-{_group(self.label)}", self.lr)

    def __abs__(self) -> Traced:
        return Traced(abs(self.value), f"|{self.label}|", self.lr)

    def __float__(self) -> float:
        return float(self.value)

    # -- comparisons read the value
    def __lt__(self, o: Any) -> bool:
        return bool(self.value < _value(o))

    def __le__(self, o: Any) -> bool:
        return bool(self.value <= _value(o))

    def __gt__(self, o: Any) -> bool:
        return bool(self.value > _value(o))

    def __ge__(self, o: Any) -> bool:
        return bool(self.value >= _value(o))

    def __eq__(self, o: object) -> bool:
        return bool(self.value == _value(o))

    def __ne__(self, o: object) -> bool:
        return bool(self.value != _value(o))

    __hash__ = None  # type: ignore[assignment]

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if ufunc is np.sqrt and method == "__call__" and len(inputs) == 1:
            return _sqrt(self)
        if ufunc is np.sign and method == "__call__":
            return _sign(self)
        if method == "__call__" and len(inputs) == 2 and ufunc in _BINARY:
            symbol, fn = _BINARY[ufunc]
            left, right = inputs
            if left is self:
                return self._op(right, symbol, fn)
            return self._op(left, symbol, fn, swap=True)  # a NumPy scalar on the left
        return NotImplemented


_BINARY: dict[Any, tuple[str, Callable[[Any, Any], Any]]] = {
    np.add: ("+", lambda a, b: a + b),
    np.subtract: ("-", lambda a, b: a - b),
    np.multiply: ("*", lambda a, b: a * b),
    np.true_divide: ("/", lambda a, b: a / b),
}


def _value(o: Any) -> Any:
    return o.value if isinstance(o, Traced) else o


def _group(label: str) -> str:
    """``label`` as an operand: bracketed when it is an expression."""
    return f"({label})" if " " in label and not label.startswith(("sqrt(", "pow(")) else label


def _sqrt(x: Traced) -> Traced:
    with np.errstate(all="ignore"):
        result = np.sqrt(x.value)
    label = f"sqrt({x.label})"
    if math.isnan(float(result)) and math.isfinite(float(x.value)):
        raise _Found(label, f"{label} is NaN: the square root of the negative "
                     f"{_fmt(x.value)}", False)
    return Traced(result, label, x.lr)


def _sign(x: Any) -> Any:
    if not isinstance(x, Traced):
        return helpers.sign(x)
    return Traced(helpers.sign(x.value), f"sign({x.label})", x.lr)


def _pow(x: Any, y: Any) -> Traced:
    left = x if isinstance(x, Traced) else Traced(x, _fmt(F32(x)))
    right = y if isinstance(y, Traced) else Traced(y, _fmt(F32(y)))
    result = F32(_pow32(left.value, right.value))
    label = f"pow({left.label}, {right.label})"
    if not math.isfinite(float(result)) and math.isfinite(float(left.value)) \
            and math.isfinite(float(right.value)):
        why = ("a zero raised to a negative power" if left.value == 0
               else "beyond float32's 3.4e38")
        raise _Found(label, f"{label} = pow({_fmt(left.value)}, {_fmt(right.value)}) is "
                     f"{_fmt(result)}: {why}", left.lr or right.lr)
    return Traced(result, label, left.lr or right.lr)


def _soft(p: Any, threshold: Any) -> Any:
    return _sign(p) * max(abs(p) - threshold, helpers.ZERO)


def _clip(x: Any, lower: Any, upper: Any) -> Any:
    if x < lower:
        x = lower
    if x > upper:
        x = upper
    return x


_HELPERS: dict[str, Any] = {"sign": _sign, "soft": _soft, "clip": _clip, "pow32": _pow}


def _traced(element: Callable[..., Any]) -> Callable[..., Any]:
    """``element`` with the scalar helpers replaced by the traced ones (as the numba engine
    rebinds them to its compiled ones), helpers of its own module too."""
    traced: Callable[..., Any] = helpers.rebind(element, _HELPERS)
    return traced


#: Said of a replay from the values a compiled (in-place) update left.
_IN_PLACE = ("replayed from the values the step left: the values it read were not kept, as "
             "for a non-lazy update or rows on the Ray backend's hosts")


def diagnose(table: Any, w: Any, slots: Sequence[Any], g: Any, lr: Any,
             dynamic: Sequence[float], *, exact: bool = True) -> tuple[str, str, bool]:
    """Replay spec section 6 on one element of ``table`` (a ``TablePlan``): parameter ``w``,
    slot values ``slots`` (in the table's order), gradient ``g``, learning rate ``lr``, the
    step's dynamic inputs ``dynamic``; ``exact``: ``w`` and ``slots`` are the values the step
    read (else those it left). Returns (cause in words, the expression, whether an overflowing
    learning rate is the cause)."""
    names = ["G", *table.slot_names]
    inputs = {"the gradient G": g, "the learning rate": lr,
              **{f"the slot {n}": v for n, v in zip(table.slot_names, slots, strict=False)},
              "the parameter": w}
    for what, value in inputs.items():
        if math.isfinite(float(value)):
            continue
        if what == "the gradient G":
            return (f"the row's gradient G (the sum of its contributions) is "
                    f"{_fmt(F32(value))}: the summed gradient overflowed float32", "G", False)
        if what == "the learning rate":
            return f"the learning rate is {_fmt(F32(value))}", "lr", True
        if exact:
            return f"{what} was already {_fmt(F32(value))} when the step began", what, False
        if what != "the parameter":
            return (f"{what} is {_fmt(F32(value))} after the step (made by this step or an "
                    f"earlier one; {_IN_PLACE})", what, False)
        w = F32(0)  # the parameter's old value is gone: its part of the update is not replayed
    optimizer = table.optimizer
    if not getattr(optimizer, "elements", ()):
        return ("the optimizer is a Python callable (CustomOptimizer): it returned the "
                "non-finite value", "", False)
    element = optimizer.elements[optimizer.variant(table.hyper) if optimizer.variant else 0]
    fields = dict(zip(table.hyper._fields, table.hyper, strict=True))
    hyper = {k: Traced(v, k) if isinstance(v, np.floating) else v for k, v in fields.items()}
    for step_input in optimizer.algorithm.step_inputs:
        hyper[step_input.name] = Traced(
            step_input.read(optimizer.name, table.hyper, dynamic), step_input.name)
    h = types.SimpleNamespace(**hyper)
    rate = Traced(lr, "lr", lr=True)
    tw = Traced(w, "w")
    tg = Traced(g, "G")
    padded = [Traced(v, n) for v, n in zip(slots, names[1:], strict=False)]
    while len(padded) < 3:
        padded.append(Traced(0, "0"))
    try:
        if table.clip_gradients is not None:
            tg = _clip(tg, *table.clip_gradients)
        if table.weight_decay != 0:
            factor = Traced(table.weight_decay, "weight_decay_factor")
            decay = factor * rate if table.decay_by_lr else factor
            tw = tw - decay * tw
        out = _traced(element)(tw, *padded, tg, rate, h)
        if table.clip_weights is not None:
            _clip(out[0], *table.clip_weights)
    except _Found as found:
        return (found.cause if exact else f"{found.cause} ({_IN_PLACE})", found.expression,
                found.learning_rate)
    if exact:
        return "no operation of the update gives a non-finite value on these inputs", "", False
    return f"no operation of the update gives a non-finite value when {_IN_PLACE}", "", False
