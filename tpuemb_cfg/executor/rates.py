"""The value of every dynamic learning-rate tag at a step, from a compiled spec's callables.

TensorFlow sends ``[float32(fn()) for fn in dynamic_learning_rates]`` every step: position k is
the value of the callable that got tag k (``docs/compile.md``). A compiled spec carries those
callables (``CompiledConfig.dynamic_learning_rates``); ``prepare`` records one :class:`TagRate`
per tag in the plan (``Plan.tag_rates``), and the executor (``learning_rates=None``), the
synthetic run and the multi-worker run evaluate them every step. A plain configuration has none:
its tags get the run's values.

The step is the global step, 0 at the first training step (the optimizer's ``iterations``,
what TFRS and keras-rs hand to a Keras schedule). At executor step s, tag k gets:

- a :class:`~tpuemb_cfg.embedding.keras.KerasSchedule` (``from_keras``: Keras' built-in
  schedules and Model Garden's ``WarmUpAndPolyDecay``), a
  :class:`~tpuemb_cfg.embedding.schedules.Schedule` (tpuemb's named kinds, TOML specs), or any
  object of their protocol (a ``value(step)`` method and a ``step`` attribute that its
  zero-argument call reads, as ``examples/models/dlrm_criteo.py``'s schedule):
  ``value(s)``, TensorFlow's float32 for the Keras kinds (``embedding.keras_schedules``);
- a callable with one required positional parameter (a Keras ``LearningRateSchedule`` object
  given as the learning rate, ``lambda step: ...``): ``fn(s)``;
- any other callable (TensorFlow's zero-argument callable, a constant one included): ``fn()``,
  once per step, in step order.

The result is rounded to float32 once. It must be a finite real number (a NumPy scalar, a 0-d
array or an object with ``.numpy()``, such as a TensorFlow tensor, counts); an exception, another
value or NaN/infinity raises :class:`RateError` (an ``InputError``) naming the tag, its tables,
the step and the callable, before any table changes.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.usercode import ExitCalled, exit_guard

if TYPE_CHECKING:
    from .plan import Plan

__all__ = ["RateError", "TagRate", "spec_learning_rates", "tag_rates"]

F32 = np.float32


class RateError(InputError):
    """A learning-rate callable of the spec raised or returned something that is not a finite
    number; the message names the tag, its tables, the step and the callable."""


@dataclass(frozen=True)
class TagRate:
    """Tag ``tag``'s callable ``fn`` and how it is called (module docstring); ``source``: its
    description (``name = formula`` for a schedule, the qualified name and place of a
    function)."""

    tag: int
    fn: Any
    source: str
    mode: str  # "value": fn.value(step); "step": fn(step); "call": fn()

    def describe(self) -> str:
        return self.source

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled without the callable: a plan goes to the Ray hosts, which never call it (the
        driver sends the rates), and the spec's function need not be importable there."""
        return (TagRate, (self.tag, None, self.source, self.mode))

    def value(self, step: int, users: str = "") -> np.float32:
        """The float32 learning rate at global step ``step``; ``users``: the tables reading the
        tag, for messages."""
        what = (f"the learning rate of tag {self.tag}{f' ({users})' if users else ''}, "
                f"{self.source}, at step {step}")
        call: Callable[[], Any] = (
            (lambda: self.fn.value(step)) if self.mode == "value"
            else (lambda: self.fn(step)) if self.mode == "step"
            else self.fn
        )
        try:
            with exit_guard() as exits:
                result = call()
        except ExitCalled as exc:
            raise RateError(f"{what}: the callable called os._exit({exc.code!r})") from None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the user's code: any exception, reported as input
            raise RateError(f"{what}: the callable raised {type(exc).__name__}: {exc}") from exc
        if exits:
            raise RateError(f"{what}: the callable called os._exit({exits[0]!r})")
        return _float32(result, what)


def _float32(result: Any, what: str) -> np.float32:
    """``result`` as a finite float32, or ``RateError`` saying what it was."""
    number = getattr(result, "numpy", None)
    if callable(number) and not isinstance(result, np.ndarray | np.generic):
        result = number()
    value = result
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        shown = repr(result)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise RateError(f"{what}: the callable returned {shown} ({type(result).__name__}); "
                        "expected a number (a learning rate)")
    with np.errstate(over="ignore"):
        rate = F32(float(value))
    if not np.isfinite(rate):
        raise RateError(f"{what}: the callable returned {float(value)!r}, which is "
                        f"{'not finite' if not np.isfinite(float(value)) else 'beyond float32'}"
                        "; a learning rate must be a finite float32")
    return rate


def _mode(fn: Any) -> str:
    if callable(getattr(fn, "value", None)) and hasattr(fn, "step"):
        return "value"  # Schedule, KerasSchedule and objects of their protocol
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a built-in without a signature: called as TensorFlow does
        return "call"
    required = [p for p in parameters if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return "step" if len(required) == 1 else "call"


def tag_rates(callables: Sequence[Any], sources: Sequence[str]) -> tuple[TagRate, ...]:
    """One :class:`TagRate` per callable of ``CompiledConfig.dynamic_learning_rates`` (position
    k: tag k); ``sources``: each callable's description (``embedding.tag_table
    .describe_callable``), for messages."""
    return tuple(TagRate(tag, fn, source, _mode(fn))
                 for tag, (fn, source) in enumerate(zip(callables, sources, strict=True)))


def spec_learning_rates(plan: Plan, step: int) -> np.ndarray:
    """float32 [K]: every tag's value at ``step`` from ``plan.tag_rates`` (one per tag)."""
    rates = np.zeros(plan.num_learning_rates, dtype=F32)
    for rate in plan.tag_rates:
        rates[rate.tag] = rate.value(step, ", ".join(plan.tag_users.get(rate.tag, ())))
    return rates
