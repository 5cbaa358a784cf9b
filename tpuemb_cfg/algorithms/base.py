"""The records of the algorithm table (``table``): slots, hyper-parameters and their constraints,
per-step inputs, and what a step's learning rate means.

Plain data: nothing here imports NumPy or protobuf, so ``tpuemb validate`` pays nothing for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = [
    "Algorithm",
    "Constraint",
    "Hyper",
    "REQUIRED",
    "Slot",
    "StepInput",
]


@dataclass(frozen=True)
class Slot:
    """One optimizer slot: its name (state files, TensorFlow's variable name) and default value.

    ``initial`` is the value the slot starts at when no initial state gives it; ``initial_from``,
    when set, names the hyper-parameter field of the algorithm's message that holds it instead
    (``frequency_aware_adagrad``'s ``initial_accumulator_value``).
    """

    name: str
    initial: float = 0.0
    initial_from: str | None = None

    def initial_value(self, hyper: Message | None) -> float:
        """The default initial value, reading ``hyper`` (the proto sub-message) if needed."""
        if self.initial_from is None:
            return self.initial
        return float(getattr(hyper, self.initial_from))


@dataclass(frozen=True)
class Constraint:
    """A range condition on a hyper-parameter, checked by an OPT rule and a constructor.

    ``bad(value)`` is true when the finite ``value`` is out of range; ``expected`` states the
    valid range (``"0 <= beta1 < 1"``), ``why`` what goes wrong, ``hint`` the fix; ``rule`` the
    id of the OPT rule that reports it; ``section`` the spec section it enforces.
    ``constructor_message``: what the embedding constructor says after the argument's name when
    it refuses a value (``"must be >= 0 and < 1"``, TensorFlow's wording where TensorFlow checks
    it); empty when the constructor does not check it (only the rule does).
    """

    rule: str
    bad: Callable[[float], bool]
    expected: str
    why: str
    hint: str
    section: str = ""
    constructor_message: str = ""

    def allows(self, value: float) -> bool:
        """Whether a constructor may accept ``value``: in range and not NaN (the OPT rules leave
        NaN and infinities to OPT002/OPT003; a constructor rejects NaN itself)."""
        return not math.isnan(value) and not self.bad(value)


class _Required:
    """The default of an argument without one (``REQUIRED``)."""

    def __repr__(self) -> str:
        return "REQUIRED"


#: The ``default`` of a hyper-parameter whose constructor argument has no default.
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Hyper:
    """One hyper-parameter field of the algorithm's proto message and its constraints.

    ``kind``: what the update binds it as and the constructor checks it as (``"float"``:
    float32, ``"bool"``, ``"int"``). ``argument``: the embedding constructor's argument for it,
    TensorFlow's name where TensorFlow has the class (``""``: named like the field);
    ``negated``: the argument is the field's negation (``lazy_adam`` writes
    ``use_non_lazy_adam``); ``default``: the argument's default (TensorFlow's constructor
    default; ``REQUIRED`` when it has none). ``bound``: whether the update reads it (a field of
    the family's bound hyper-parameters).
    """

    field: str
    constraints: tuple[Constraint, ...] = ()
    kind: str = "float"
    argument: str = ""
    default: Any = REQUIRED
    negated: bool = False
    bound: bool = True

    @property
    def arg(self) -> str:
        """The constructor's argument name."""
        return self.argument or self.field


@dataclass(frozen=True)
class StepInput:
    """A per-step input an update reads besides the learning rate: one of the step's dynamic
    inputs (the learning-rate list), at the tag held by the message field ``message_field``
    (a message with a ``tag``; 0 when unset). ``name``: the field of the compiled kernels'
    hyper-parameters that carries it; ``what``: what the value is; ``short``: the same, as the
    error's hint says it."""

    name: str
    message_field: str
    what: str
    short: str

    @property
    def tag(self) -> str:
        """The bound hyper-parameter field holding the tag."""
        return f"{self.message_field}_tag"

    @property
    def path(self) -> str:
        """The tag's path within the algorithm's message."""
        return f"{self.message_field}.tag"

    @property
    def label(self) -> str:
        """The input in words (``step counter``)."""
        return self.message_field.replace("_", " ")

    def read(self, algorithm: str, hyper: Any, inputs: Sequence[float]) -> float:
        """The value for this step: ``inputs[tag]``; ``ValueError`` when there is no such input."""
        tag = int(getattr(hyper, self.tag))
        if not 0 <= tag < len(inputs):
            raise ValueError(
                f"{algorithm} reads {self.what} from dynamic input {tag} ({self.path}), but the "
                f"step has {len(inputs)} dynamic input(s); pass a learning-rate list with "
                f"{self.short} at position {tag}"
            )
        return inputs[tag]


@dataclass(frozen=True)
class Algorithm:
    """Everything tpuemb knows about one optimization algorithm.

    ``name``: the oneof member of ``OptimizationParameters.parameters`` (also the executor's
    registry key). ``message``: the proto message type. ``slots``: in TensorFlow's state-variable
    order. ``non_lazy_flag``: the boolean field that, when true, makes every row update every step
    (``use_non_lazy_adam``); lazy otherwise. ``equations``: the spec's confidence label of the
    update (section 12). ``unsupported``: why the executor cannot simulate it (``None``: it can).
    ``packable``: whether low-dimensional packing can be effective. ``section``: the spec section.
    ``family``: the module of ``tpuemb_cfg.algorithms`` with its update (``""``: none).
    ``step_inputs``: what its update reads from the step's dynamic inputs besides the rate.
    ``learning_rate``: what the rate of a dynamic learning rate carries - ``"rate"`` (a
    learning rate), ``"bias_corrected"`` (a learning rate the caller bias-corrects, Adam's
    ``lr * sqrt(1 - beta2^n) / (1 - beta1^n)``: ``algorithms.adam.bias_correction``),
    ``"global_step"`` (the global step count n) or
    ``"unused"`` (the update ignores it).
    ``initial_rows_from``: the hyper-parameter field the table's rows start at when no
    initializer is given (``None``: spec section 11's default initializer).
    ``slots_from_program``: its slots (and hyper-parameters) come from the program its message
    holds, not from the table. ``rules``: the ids of the validator rules written for it alone
    (beyond its hyper-parameters' constraints); they find it here.
    """

    name: str
    message: str
    slots: tuple[Slot, ...] = ()
    hyper: tuple[Hyper, ...] = ()
    non_lazy_flag: str | None = None
    equations: str = ""
    unsupported: str | None = None
    packable: bool = False
    section: str = ""
    family: str = ""
    step_inputs: tuple[StepInput, ...] = ()
    learning_rate: str = "rate"
    initial_rows_from: str | None = None
    slots_from_program: bool = False
    rules: tuple[str, ...] = ()

    @property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(slot.name for slot in self.slots)

    def lazy(self, hyper: Message | None) -> bool:
        """Whether only touched rows update (spec 6.5): false only when the non-lazy flag is set."""
        if self.non_lazy_flag is None:
            return True
        return not bool(getattr(hyper, self.non_lazy_flag, False))

    def allows(self, field: str, value: float) -> bool:
        """Whether ``value`` of hyper-parameter ``field`` meets every constraint on it."""
        return all(
            c.allows(value) for h in self.hyper if h.field == field for c in h.constraints
        )


# --------------------------------------------------------------------------------------------
# Range predicates: true when a finite value is OUT of range.


def negative(v: float) -> bool:
    """Out of range for ``v >= 0``."""
    return v < 0


def not_positive(v: float) -> bool:
    """Out of range for ``v > 0``."""
    return v <= 0


def positive(v: float) -> bool:
    """Out of range for ``v <= 0``."""
    return v > 0


def outside_unit(lo_closed: bool, hi_closed: bool) -> Callable[[float], bool]:
    """Out of range for the interval between 0 and 1 (each end closed or open as given)."""

    def bad(v: float) -> bool:
        below = v < 0 if lo_closed else v <= 0
        above = v > 1 if hi_closed else v >= 1
        return below or above

    return bad
