"""The types every optimizer module shares: slot declarations, the step context, the spec record.

An optimizer is one pure function over a block of gathered rows (the optax ``update_fn`` shape,
specialised to sparse rows) plus the declaration of its slots next to it. Gradient clipping,
weight decay, laziness and weight clipping wrap the function in the executor (spec section 6);
nothing here knows about them.

Numbers: every array is float32 and every hyper-parameter is read as a float32 scalar before it
takes part in arithmetic, so each intermediate is rounded to float32 exactly as the spec's
equations are written (spec "Numbers"). Each equation line is evaluated the way Python evaluates
the same text, left to right (``a * G * G`` is ``(a * G) * G``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["OptimizerSpec", "SlotSpec", "UpdateContext", "UpdateFn", "f32", "hyper_f32"]


@dataclass(frozen=True)
class SlotSpec:
    """One optimizer slot: its name in the spec (and in state files) and its default value."""

    name: str
    initial: Callable[[Any], float]


@dataclass(frozen=True)
class UpdateContext:
    """What a step knows beyond the rows: the step number and the per-step dynamic inputs."""

    step: int
    dynamic_inputs: Sequence[float]
    rows: np.ndarray | None = None


UpdateFn = Callable[
    [np.ndarray, tuple[np.ndarray, ...], np.ndarray, np.float32, Any, UpdateContext],
    tuple[np.ndarray, tuple[np.ndarray, ...]],
]


@dataclass(frozen=True)
class OptimizerSpec:
    """A registered optimizer: proto oneof name, slots in state order, update, laziness, source."""

    name: str
    slots: tuple[SlotSpec, ...]
    update: UpdateFn
    lazy: Callable[[Any], bool]
    equations: str


def f32(value: Any) -> np.float32:
    """``value`` rounded to a float32 scalar (proto floats arrive as Python floats)."""
    return np.float32(value)


def hyper_f32(hyper: Any, field: str) -> np.float32:
    """The float field ``field`` of the optimizer's proto sub-message, as a float32 scalar."""
    return np.float32(getattr(hyper, field))


def constant(value: float) -> Callable[[Any], float]:
    """A slot initialiser that ignores the hyper-parameters."""

    def initial(hyper: Any) -> float:
        return value

    return initial


def always_lazy(hyper: Any) -> bool:
    """Laziness of every optimizer except non-lazy Adam/Lion: only touched rows update."""
    return True
