"""What every optimizer module shares: the step context, the registry record and ``register``.

An optimizer is one pure function over a block of gathered rows, in the shape of optax's
``update_fn`` specialised to sparse rows::

    update(params, state, grad, lr, hyper, ctx) -> (params, state)

- ``params``: float32 ``[n, D]``, the rows being updated (after weight decay);
- ``state``: the optimizer's NamedTuple of slots, one float32 ``[n, D]`` array per slot, its
  fields named after the slots of the algorithm table (``tpuemb_cfg.algorithms``) in
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
The package (``tpuemb_cfg.executor.optimizers``) re-exports what a user of the registry needs;
``binder`` and ``f32`` serve the family modules.

Numbers: every array is float32 and every hyper-parameter is a float32 scalar, so each
intermediate is rounded to float32 exactly as the spec's equations are written (spec
"Numbers"). Each equation line is evaluated the way Python evaluates the same text, left to
right (``a * G * G`` is ``(a * G) * G``).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ...algorithms import ALGORITHMS, Algorithm, Slot


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


def binder(hyper: type) -> Callable[[Any], Any]:
    """The default ``bind`` of the NamedTuple class ``hyper``: read each of its fields from the
    proto sub-message by name, converting it to the field's annotated type (float32, bool, int).
    """
    hints = typing.get_type_hints(hyper)
    fields: tuple[str, ...] = hyper._fields  # type: ignore[attr-defined]
    converters = [(name, _CONVERTERS[hints[name]]) for name in fields]

    def bind(message: Any) -> Any:
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
    bind: Callable[[Any], Any]

    @property
    def algorithm(self) -> Algorithm:
        return ALGORITHMS[self.name]

    @property
    def slots(self) -> tuple[Slot, ...]:
        """The slots (name, default initial value) in TensorFlow's state-variable order."""
        return self.algorithm.slots

    @property
    def equations(self) -> str:
        return self.algorithm.equations

    def lazy(self, message: Any) -> bool:
        """Whether only touched rows update, from the proto sub-message (plan time only)."""
        return self.algorithm.lazy(message)


#: Every simulatable optimizer by oneof member name (filled by ``register``).
REGISTRY: dict[str, Optimizer] = {}


def register(
    name: str,
    *,
    state: type = NoState,
    hyper: type = NoHyper,
    bind: Callable[[Any], Any] | None = None,
) -> Callable[[UpdateFn], UpdateFn]:
    """Register the decorated update function as optimizer ``name``.

    ``state``: its NamedTuple of slots (fields: the algorithm table's slot names, in order);
    ``hyper``: its NamedTuple of bound hyper-parameters; ``bind``: proto sub-message -> ``hyper``
    (default: ``binder(hyper)``, field by field).
    """

    def decorate(update: UpdateFn) -> UpdateFn:
        REGISTRY[name] = Optimizer(name, update, state, hyper, bind or binder(hyper))
        return update

    return decorate
