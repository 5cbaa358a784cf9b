"""What every family module shares: the step context, the registry record and ``register``.

An optimizer is one pure function over a block of gathered rows, in the shape of optax's
``update_fn`` specialised to sparse rows::

    update(params, state, grad, lr, hyper, ctx) -> (params, state)

- ``params``: float32 ``[n, D]``, the rows being updated (after weight decay);
- ``state``: the optimizer's NamedTuple of slots, one float32 ``[n, D]`` array per slot, its
  fields named after the slots of the algorithm table (``table``) in
  TensorFlow's state-variable order;
- ``grad``: float32 ``[n, D]``, de-duplicated, accumulated and clipped;
- ``lr``: the float32 learning rate of the step;
- ``hyper``: the optimizer's NamedTuple of hyper-parameters, already float32 (or bool/int):
  ``bind(message)`` converts the proto sub-message ONCE, when the plan is built, so nothing in a
  step reads protobuf;
- ``ctx``: the step number and the dynamic inputs (``UpdateContext``).

Gradient clipping, weight decay, laziness and weight clipping wrap the function in the executor
(spec section 6, ``tpuemb_cfg.executor.pipeline``); nothing here knows about them. Slot names,
default initial values, laziness and support come from the algorithm table, never from here.
``tpuemb_cfg.executor.optimizers`` re-exports what a user of the registry needs; ``binder``,
``f32`` and the scalar helpers serve the family modules.

The element: each family writes each optimizer's equations once, for one element,
``element(w, a, b, c, g, lr, h) -> (w, a, b, c)`` (the parameter, up to three slot values in the
table's order, the gradient, the rate and the hyper-parameters read BY FIELD NAME,
``h.epsilon``, plus the per-step inputs of the table, ``h.global_step``), and registers it with
``register_element``, which makes the NumPy update from it: the same code run on whole arrays,
the helpers below (``sign``, ``soft``, ``clip``, ``pow32``, ``where`` and the builtins
``min``/``max``) rebound to their NumPy versions (``ARRAY_HELPERS``; ``rebind``). The numba
engine compiles its kernels from the same elements, rebinding the helpers to its compiled ones,
and the non-finite replay to traced ones. So an element makes every choice that depends on the
data with ``where`` (both values computed), never an ``if`` on an array value. ``ZERO``,
``ONE`` and ``TWO`` are float32 constants (a bare ``1.0`` would promote the arithmetic to
float64). ``register`` takes a hand-written update (a custom optimizer's).

Numbers: every array is float32 and every hyper-parameter is a float32 scalar, so each
intermediate is rounded to float32 exactly as the spec's equations are written (spec
"Numbers"). Each equation line is evaluated the way Python evaluates the same text, left to
right (``a * G * G`` is ``(a * G) * G``).
"""

from __future__ import annotations

import importlib
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from tpuemb_cfg.base.numerics import pow32

from .base import Algorithm, Slot
from .table import ALGORITHMS

if TYPE_CHECKING:
    from google.protobuf.message import Message


@dataclass(frozen=True)
class UpdateContext:
    """What a step knows beyond the rows: the step number and the per-step dynamic inputs."""

    step: int
    dynamic_inputs: Sequence[float]


UpdateFn = Callable[
    [np.ndarray, Any, np.ndarray, np.float32, Any, UpdateContext],
    tuple[np.ndarray, Any],
]


class NoHyper(NamedTuple):
    """The hyper-parameters of an optimizer that has none the update reads."""


class NoState(NamedTuple):
    """The state of an optimizer without slots."""


def f32(value: Any) -> np.float32:
    """``value`` rounded to a float32 scalar (proto floats arrive as Python floats)."""
    return np.float32(value)


_CONVERTERS: dict[Any, Callable[[Any], Any]] = {np.float32: f32, bool: bool, int: int}


_BOUND_AS: dict[str, Any] = {"float": np.float32, "bool": bool, "int": int}


def hyper_tuple(typename: str, algorithm: str, module: str) -> Any:
    """The NamedTuple class ``typename`` (of module ``module``) of the bound hyper-parameters of
    ``algorithm``: one field per hyper-parameter of the algorithm table the update reads
    (``bound``), in its order, of its ``kind``, then the tag of each per-step input (an int)."""
    entry = ALGORITHMS[algorithm]
    fields = [(h.field, _BOUND_AS[h.kind]) for h in entry.hyper if h.bound]
    fields += [(step_input.tag, int) for step_input in entry.step_inputs]
    made = NamedTuple(typename, fields)  # type: ignore[misc]
    made.__module__ = module
    return made


def binder(hyper: type) -> Callable[[Message | None], Any]:
    """The default ``bind`` of the NamedTuple class ``hyper``: read each of its fields from the
    proto sub-message by name, converting it to the field's annotated type (float32, bool, int).
    """
    hints = typing.get_type_hints(hyper)
    fields: tuple[str, ...] = hyper._fields  # type: ignore[attr-defined]
    converters = [(name, _CONVERTERS[hints[name]]) for name in fields]

    def bind(message: Message | None) -> Any:
        return hyper(**{name: convert(getattr(message, name)) for name, convert in converters})

    return bind


@dataclass(frozen=True)
class Optimizer:
    """A registered optimizer: its update, state and hyper-parameter types, and ``bind``.

    ``name`` is the ``OptimizationParameters.parameters`` oneof member; ``algorithm`` its entry
    of the algorithm table (slots, laziness, the spec's confidence label).
    """

    name: str
    update: UpdateFn
    state: type
    hyper: type
    bind: Callable[[Message | None], Any]
    elements: tuple[Callable[..., Quad], ...] = ()
    variant: Callable[[Any], int] | None = None

    @property
    def algorithm(self) -> Algorithm:
        """Its entry of the algorithm table (a bare entry for a record outside the table, as a
        custom optimizer's: a learning rate, no step inputs)."""
        return ALGORITHMS.get(self.name) or Algorithm(self.name, "")

    @property
    def slots(self) -> tuple[Slot, ...]:
        """The slots (name, default initial value) in TensorFlow's state-variable order."""
        return self.algorithm.slots

    @property
    def equations(self) -> str:
        return self.algorithm.equations

    def lazy(self, message: Message | None) -> bool:
        """Whether only touched rows update, from the proto sub-message (plan time only)."""
        return self.algorithm.lazy(message)


#: Every simulatable optimizer by oneof member name (filled by ``register``).
REGISTRY: dict[str, Optimizer] = {}


def register(
    name: str,
    *,
    state: type = NoState,
    hyper: type = NoHyper,
    bind: Callable[[Message | None], Any] | None = None,
    element: Callable[..., Quad] | Sequence[Callable[..., Quad]] = (),
    variant: Callable[[Any], int] | None = None,
) -> Callable[[UpdateFn], UpdateFn]:
    """Register the decorated update function as optimizer ``name``.

    ``state``: its NamedTuple of slots (fields: the algorithm table's slot names, in order);
    ``hyper``: its NamedTuple of bound hyper-parameters; ``bind``: proto sub-message -> ``hyper``
    (default: ``binder(hyper)``, field by field); ``element``: its scalar element (module
    docstring), or several, ``variant(hyper)`` choosing the one a table runs (each is its own
    compiled kernel).
    """
    elements = (element,) if callable(element) else tuple(element)

    def decorate(update: UpdateFn) -> UpdateFn:
        REGISTRY[name] = Optimizer(
            name, update, state, hyper, bind or binder(hyper), elements, variant
        )
        return update

    return decorate


# --------------------------------------------------------------------------------------------
# Scalar helpers of the elements (the numba engine rebinds them to its compiled ones).

F = np.float32
Quad = tuple[F, F, F, F]  # (w, a, b, c): a parameter and its three slot values
ZERO = np.float32(0.0)
ONE = np.float32(1.0)
TWO = np.float32(2.0)

__all__ = [
    "ONE",
    "F",
    "Quad",
    "REGISTRY",
    "TWO",
    "ZERO",
    "NoHyper",
    "NoState",
    "Optimizer",
    "UpdateContext",
    "UpdateFn",
    "binder",
    "clip",
    "f32",
    "get",
    "hyper_tuple",
    "load",
    "pow32",
    "rebind",
    "register",
    "register_element",
    "sign",
    "soft",
    "unsupported",
    "where",
]


def clip(x: np.float32, lower: np.float32, upper: np.float32) -> np.float32:
    """``x`` held within ``[lower, upper]`` (NaN stays NaN)."""
    if x < lower:
        x = lower
    if x > upper:
        x = upper
    return x


def sign(x: np.float32) -> np.float32:
    """``np.sign`` of a scalar: 1, -1, 0 (and NaN for NaN)."""
    if x > ZERO:
        return ONE
    if x < ZERO:
        return -ONE
    return x * ZERO


def soft(p: np.float32, threshold: np.float32) -> np.float32:
    """``sign(p) * max(|p| - threshold, 0)``: the L1 proximal operator."""
    return sign(p) * max(abs(p) - threshold, ZERO)


def where(condition: bool, yes: F, no: F) -> F:
    """``yes`` if ``condition`` else ``no``: an element's choice that depends on the data (over
    arrays it is ``np.where``, both sides computed, so an element computes both)."""
    return yes if condition else no


def _soft_arrays(p: np.ndarray, threshold: Any) -> np.ndarray:
    shrunk: np.ndarray = np.sign(p) * np.maximum(np.abs(p) - threshold, ZERO)
    return shrunk


def _clip_arrays(x: np.ndarray, lower: Any, upper: Any) -> np.ndarray:
    clipped: np.ndarray = np.minimum(np.maximum(x, lower), upper)
    return clipped


#: The helpers over arrays, the builtins ``min``/``max`` included: an element run with these on
#: whole [n, D] arrays is its NumPy update (``register_element``), operation for operation.
ARRAY_HELPERS: dict[str, Any] = {
    "sign": np.sign, "soft": _soft_arrays, "clip": _clip_arrays, "pow32": pow32,
    "where": np.where, "min": np.minimum, "max": np.maximum,
}


def rebind(function: Callable[..., Any], helpers: dict[str, Any],
           wrap: Callable[[Callable[..., Any]], Any] | None = None) -> Any:
    """``function`` (an element) with the names in ``helpers`` rebound, and every plain function
    of its own module it calls (``_ftrl_step``) rebound the same way; ``wrap`` (numba's
    ``njit``) applied to each. How one element becomes the NumPy update (``ARRAY_HELPERS``),
    the numba engine's kernel and the non-finite replay (their scalar helpers)."""
    scope = {**function.__globals__, **helpers}
    for name in function.__code__.co_names:
        value = function.__globals__.get(name)
        if (name not in helpers and isinstance(value, types.FunctionType)
                and value.__module__ == function.__module__):
            scope[name] = rebind(value, helpers, wrap)
    made = types.FunctionType(function.__code__, scope, function.__name__)
    made.__qualname__ = function.__qualname__
    return wrap(made) if wrap is not None else made


def _fresh(value: Any, shape: tuple[int, ...], inputs: tuple[Any, ...]) -> np.ndarray:
    """``value`` as a new float32 array of ``shape`` (a scalar broadcast, an input copied)."""
    if (isinstance(value, np.ndarray) and value.shape == shape and value.dtype == np.float32
            and not any(value is given for given in inputs)):
        return value
    return np.array(np.broadcast_to(np.asarray(value, dtype=np.float32), shape))


def register_element(
    name: str,
    *,
    state: type = NoState,
    hyper: type = NoHyper,
    bind: Callable[[Message | None], Any] | None = None,
    element: Callable[..., Quad] | Sequence[Callable[..., Quad]],
    variant: Callable[[Any], int] | None = None,
) -> UpdateFn:
    """Register optimizer ``name`` from its scalar element(s) alone (``register``'s arguments)
    and return its NumPy update, made from the element: the element's own code run on the
    whole [n, D] arrays with ``ARRAY_HELPERS``, so the equations are written once and the NumPy
    and numba engines run the same operations in the same order. The update binds the per-step
    inputs of the algorithm table (``h.global_step``) from the step's dynamic inputs, takes the
    slots in the state's order as the element's ``a, b, c``, runs with division by zero and
    invalid operations quiet (inf/NaN are the update's result; the executor reports them), and
    returns new arrays (the inputs are not modified). Its docstring (the equations) is the first
    element's."""
    elements = (element,) if callable(element) else tuple(element)
    over_arrays = tuple(rebind(e, ARRAY_HELPERS) for e in elements)
    inputs = ALGORITHMS[name].step_inputs if name in ALGORITHMS else ()
    slots = len(typing.cast(Any, state)._fields)

    def update(params: np.ndarray, state_in: Any, grad: np.ndarray, lr: np.float32,
               hyper_in: Any, ctx: UpdateContext) -> tuple[np.ndarray, Any]:
        h = hyper_in
        if inputs:
            h = types.SimpleNamespace(**hyper_in._asdict(), **{
                step_input.name: f32(step_input.read(name, hyper_in, ctx.dynamic_inputs))
                for step_input in inputs
            })
        run = over_arrays[variant(hyper_in) if variant is not None else 0]
        values = (*state_in, ZERO, ZERO, ZERO)[:3]
        with np.errstate(divide="ignore", invalid="ignore"):
            out = run(params, *values, grad, f32(lr), h)
        given = (params, grad, *state_in)
        fresh = [_fresh(value, params.shape, given) for value in out[: 1 + slots]]
        return fresh[0], state(*fresh[1:])

    stem = elements[0].__name__.removesuffix("_element")
    update.__name__ = update.__qualname__ = f"{stem}_update"
    update.__module__ = elements[0].__module__
    update.__doc__ = elements[0].__doc__
    register(name, state=state, hyper=hyper, bind=bind, element=elements, variant=variant)(update)
    return update


# --------------------------------------------------------------------------------------------
# The registry


def load() -> dict[str, Optimizer]:
    """Every registered optimizer: imports the family module of each algorithm of the table."""
    for family in sorted({a.family for a in ALGORITHMS.values() if a.family}):
        importlib.import_module(f"{__package__}.{family}")
    return REGISTRY


def unsupported(name: str) -> str | None:
    """Why optimizer ``name`` cannot be simulated (the algorithm table's reason), or ``None``."""
    algorithm = ALGORITHMS.get(name)
    return algorithm.unsupported if algorithm is not None else None


def get(name: str) -> Optimizer:
    """The registered optimizer for the proto oneof member ``name``.

    Raises ``ValueError`` (never ``KeyError``) naming the optimizer and why it cannot be simulated
    when the algorithm table says so, or listing the known names when ``name`` is unknown.
    """
    registry = load()
    optimizer = registry.get(name)
    if optimizer is not None:
        return optimizer
    reason = unsupported(name)
    if reason is not None:
        raise ValueError(
            f"optimizer {name!r} cannot be simulated: {reason}; "
            f"choose another optimizer for this table or leave it out of the simulation"
        )
    if not name:
        raise ValueError(
            "the table has no optimizer (OptimizationParameters.parameters is unset); "
            f"set one of: {', '.join(sorted(registry))}"
        )
    cannot = sorted(n for n, a in ALGORITHMS.items() if a.unsupported)
    raise ValueError(
        f"unknown optimizer {name!r}: expected one of {', '.join(sorted(registry))}"
        f" (not simulatable: {', '.join(cannot)})"
    )
