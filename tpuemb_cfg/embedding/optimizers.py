"""Optimizer classes: the base class and TensorFlow 2.21's five.

``SGD``, ``Adagrad``, ``AdagradMomentum``, ``Adam`` and ``FTRL`` take TensorFlow 2.21's arguments
in TensorFlow's order with TensorFlow's defaults, apply TensorFlow's constructor checks (CTOR001 to
CTOR011 of ``validation-rules.md``, with correct messages) and write the proto fields of
``compile.md`` section 4. The classes of the proto's other algorithms (``Momentum``, ``Lion``,
``RMSProp``, ...) are in :mod:`tpuemb_cfg.embedding.extra_optimizers`.

Every optimizer writes, into an ``OptimizationParameters`` message:

- the learning rate: ``constant`` (float32) or ``dynamic.tag`` for a zero-argument callable (the
  tag is the callable's position in the learning-rate list, assigned by ``build_config``);
- the base part: gradient accumulation ``ENABLED``/``DISABLED``, weight clipping
  (``clip_weight_min``/``clip_weight_max``), gradient clipping (``clipvalue``), weight decay
  (only a non-zero factor; the multiply-by-learning-rate flag only with it), the
  low-dimensional packing status as the enum value TensorFlow writes for the argument (``True``:
  ``ENABLED``, ``2`` or ``"DISABLED"``: ``DISABLED``, ``False``: nothing);
- its algorithm: the oneof member, selected explicitly (present even when every field is 0).

Values are taken as TensorFlow takes them (``pbvalues``): ``True`` is 1.0 where a number is
expected, flags are truth values, and optimizers compare by value (``SGD(0.1) == SGD(0.1)``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from tpuemb_cfg.algorithms import ALGORITHMS, slot_names
from tpuemb_cfg.algorithms.table import ADAM_BETA_1, ADAM_BETA_2
from tpuemb_cfg.base.schema import AccumulationStatus, PackingStatus, value_names
from tpuemb_cfg.embedding import _checks as chk
from tpuemb_cfg.embedding import origins, pbvalues
from tpuemb_cfg.embedding.equality import ValueEquality
from tpuemb_cfg.embedding.errors import EmbeddingOverflowError

#: Maps a dynamic input (a learning-rate callable or a step counter) to its tag.
TagOf = Callable[[Any], int]

PACKING_STATUS = {name: number for number, name in value_names(PackingStatus).items()}


def _normalise_clipvalue(owner: str, clipvalue: Any) -> tuple[Any, Any]:
    """``clipvalue`` as (lower, upper): None -> none, (a, b) -> a, b, v -> (-v, v) (CTOR003)."""
    if clipvalue is None:
        return None, None
    if isinstance(clipvalue, tuple):
        if len(clipvalue) != 2:
            raise chk.fail(
                owner,
                f"`clipvalue` must be a number v (clips gradients to [-v, v]) or a (min, max) "
                f"tuple of 2 entries; received a tuple of {len(clipvalue)}: {chk.show(clipvalue)}",
            )
        for bound in clipvalue:
            if bound is not None and not chk.is_real(bound):
                raise chk.fail_type(
                    owner,
                    f"`clipvalue` bounds must be numbers or None; received {chk.show(clipvalue)}",
                )
        return clipvalue[0], clipvalue[1]
    if not chk.is_real(clipvalue):
        raise chk.fail_type(
            owner,
            f"`clipvalue` must be None, a number v (clips gradients to [-v, v]) or a (min, max) "
            f"tuple; received {chk.show(clipvalue)} ({chk.type_name(clipvalue)})",
        )
    try:
        return -1.0 * clipvalue, clipvalue  # TensorFlow's (-1.0 * 0 is -0.0, written as such)
    except OverflowError:
        raise EmbeddingOverflowError(
            f"{owner}: `clipvalue` {chk.show(clipvalue)} is beyond the range of a float, so "
            f"-clipvalue cannot be formed (TensorFlow raises OverflowError here too); pass a "
            f"number in range"
        ) from None


#: The arguments of :class:`Optimizer` (every algorithm's shared part).
_BASE_ARGUMENTS = (
    "learning_rate", "use_gradient_accumulation", "clip_weight_min", "clip_weight_max",
    "weight_decay_factor", "multiply_weight_decay_factor_by_learning_rate", "clipvalue",
    "slot_variable_creation_fn", "low_dimensional_packing_status",
)


def base_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The shared arguments among a subclass constructor's ``locals()``.

    Each class keeps TensorFlow's explicit signature (names, order, defaults) and hands the
    shared part to :class:`Optimizer` by name, so no constructor restates the nine of them.
    """
    return {name: arguments[name] for name in _BASE_ARGUMENTS if name in arguments}


def require_positive(owner: str, name: str, value: Any, why: str) -> Any:
    """``value`` unchanged when it is a number > 0 (NaN is not); else ``name must be > 0 (why)``.
    Compared as TensorFlow compares it: ``10**400`` and ``numpy.array(0.1)`` pass."""
    if not chk.compared(owner, name, value) > 0:
        raise chk.fail(owner, f"`{name}` must be > 0 ({why}); received {chk.show(value)}")
    return value


def _learning_rate_value(owner: str, learning_rate: Any) -> float:
    if not chk.is_real(learning_rate):
        raise chk.fail_type(
            owner,
            f"`learning_rate` must be a number or a callable taking no arguments (a dynamic "
            f"learning rate); received {chk.show(learning_rate)} ({chk.type_name(learning_rate)})",
        )
    return chk.real(owner, "learning_rate", learning_rate)


#: How each kind of :attr:`Optimizer._fields` entry is written to the algorithm's message
#: (owner, argument, value).
_WRITTEN: dict[str, Callable[[str, str, Any], Any]] = {
    "float": chk.real, "bool": pbvalues.to_bool,
    "not": lambda owner, name, value: not value,
}


def _fields_of(cls: type[Optimizer]) -> tuple[tuple[str, ...], ...]:
    """The :attr:`Optimizer._fields` of ``cls``: its own arguments in its signature's order
    (the base arguments and the step inputs aside), each hyper-parameter of the algorithm table
    as ``(argument, kind, field)``, any other argument ``(argument, "kept")``. ``TypeError``
    when a hyper-parameter of the table has no argument in the signature."""
    algorithm = ALGORITHMS[cls.algorithm]
    by_argument = {h.arg: h for h in algorithm.hyper}
    parameters = inspect.signature(cls.__init__).parameters
    missing = sorted(set(by_argument) - set(parameters))
    if missing:
        raise TypeError(f"{cls.__name__} takes no argument for the table's {missing}")
    skip = {"self", *_BASE_ARGUMENTS, *(s.message_field for s in algorithm.step_inputs)}
    fields: list[tuple[str, ...]] = []
    for name in parameters:
        hyper = by_argument.get(name)
        if hyper is not None:
            fields.append((name, "not" if hyper.negated else hyper.kind, hyper.field))
        elif name not in skip:
            fields.append((name, "kept"))
    return tuple(fields)


class Optimizer(ValueEquality):
    """Base class: the arguments every algorithm shares and the base part of the proto.

    Subclasses set :attr:`algorithm` (the oneof member of ``OptimizationParameters.parameters``)
    and keep TensorFlow's signature; :attr:`slot_names` (the slots in TensorFlow's state-variable
    order) and :attr:`_fields` (which argument writes which field) come from the algorithm
    table. The arguments are checked and kept by :meth:`_set_fields`, their ranges checked by
    :meth:`_check_ranges` (the table's constraints, in the constructor's wording) and written to
    the algorithm's message by :meth:`_write_algorithm`.
    """

    algorithm: ClassVar[str]
    slot_names: ClassVar[tuple[str, ...]] = ()
    #: ``(argument, kind, message field)`` or ``(argument, "kept")``, in the order the
    #: arguments are checked and kept (made by ``_fields_of``). ``kind``: ``"float"`` or
    #: ``"bool"`` (checked and written as such), ``"not"`` (any truth value, written negated:
    #: ``lazy_adam`` -> ``use_non_lazy_adam``) or ``"kept"`` (not a field of the message:
    #: checked by the constructor itself and not written). Every written field is written, even
    #: 0 (implicit presence zeros are simply not serialized).
    _fields: ClassVar[tuple[tuple[str, ...], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "algorithm" in cls.__dict__:
            cls.slot_names = slot_names(cls.algorithm)
            cls._fields = _fields_of(cls)

    def __init__(  # noqa: PLR0913  (TensorFlow's signature)
        self,
        learning_rate: float | Callable[[], float],
        use_gradient_accumulation: bool,
        clip_weight_min: float | None,
        clip_weight_max: float | None,
        weight_decay_factor: float | None,
        multiply_weight_decay_factor_by_learning_rate: bool | None,
        clipvalue: Any = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        origins.record(self)
        owner = self._owner()
        if slot_variable_creation_fn is not None and not callable(slot_variable_creation_fn):
            raise chk.fail_type(
                owner,
                f"`slot_variable_creation_fn` must be None or a callable; received "
                f"{chk.show(slot_variable_creation_fn)}",
            )
        if not use_gradient_accumulation and clipvalue is not None:
            raise chk.fail(
                owner,
                f"`clipvalue` is {chk.show(clipvalue)} but `use_gradient_accumulation` is "
                f"{chk.show(use_gradient_accumulation)}: gradient clipping needs gradient "
                f"accumulation; set use_gradient_accumulation=True or leave clipvalue=None",
            )
        clip_min, clip_max = _normalise_clipvalue(owner, clipvalue)
        # Types now; ranges (10**400, an unknown enum name) when written, as in TensorFlow.
        chk.optional_number(owner, "clip_weight_min", clip_weight_min)
        chk.optional_number(owner, "clip_weight_max", clip_weight_max)
        if weight_decay_factor:  # a false value is never written, whatever it is
            chk.number(owner, "weight_decay_factor", weight_decay_factor)
        pbvalues.check_enum(owner, "low_dimensional_packing_status",
                            low_dimensional_packing_status, PACKING_STATUS)
        self.learning_rate = learning_rate
        self.use_gradient_accumulation = use_gradient_accumulation
        self.clip_weight_min = clip_weight_min
        self.clip_weight_max = clip_weight_max
        self.weight_decay_factor = weight_decay_factor
        self.multiply_weight_decay_factor_by_learning_rate = (
            multiply_weight_decay_factor_by_learning_rate
        )
        self.clip_gradient_min = clip_min
        self.clip_gradient_max = clip_max
        self.slot_variable_creation_fn = slot_variable_creation_fn
        self.low_dimensional_packing_status = low_dimensional_packing_status

    def _owner(self) -> str:
        return type(self).__name__

    # -- what build_config asks of an optimizer ------------------------------------------------

    def dynamic_inputs(self) -> list[tuple[str, Any]]:
        """(argument, callable) for each input read every step, in tag-assignment order."""
        return [("learning_rate", self.learning_rate)] if callable(self.learning_rate) else []

    def slot_initial_values(self) -> dict[str, float]:
        """Initial value of every slot: 0, except that an optimizer taking an
        ``initial_accumulator_value`` starts its first slot (the accumulator) at that value."""
        values = dict.fromkeys(self.slot_names, 0.0)
        initial = getattr(self, "initial_accumulator_value", None)
        if initial is not None and self.slot_names:
            values[self.slot_names[0]] = chk.compared(
                self._owner(), "initial_accumulator_value", initial)
        return values

    def write(self, params: Any, tag_of: TagOf) -> None:
        """Fill an empty ``OptimizationParameters`` message (``compile.md`` section 4)."""
        lr = params.learning_rate
        if callable(self.learning_rate):
            lr.dynamic.SetInParent()
            lr.dynamic.tag = tag_of(self.learning_rate)
        else:
            lr.constant = _learning_rate_value(self._owner(), self.learning_rate)
        params.gradient_accumulation_status = (
            AccumulationStatus.ENABLED if self.use_gradient_accumulation
            else AccumulationStatus.DISABLED
        )
        owner = self._owner()
        if self.clip_weight_min is not None:
            params.clipping_limits.lower.value = chk.real(
                owner, "clip_weight_min", self.clip_weight_min)
        if self.clip_weight_max is not None:
            params.clipping_limits.upper.value = chk.real(
                owner, "clip_weight_max", self.clip_weight_max)
        if self.clip_gradient_min is not None:
            params.gradient_clipping_limits.lower.value = chk.real(
                owner, "clipvalue", self.clip_gradient_min)
        if self.clip_gradient_max is not None:
            params.gradient_clipping_limits.upper.value = chk.real(
                owner, "clipvalue", self.clip_gradient_max)
        if self.weight_decay_factor:
            params.weight_decay_factor = chk.real(
                owner, "weight_decay_factor", self.weight_decay_factor)
            if self.multiply_weight_decay_factor_by_learning_rate:
                params.multiply_weight_decay_factor_by_learning_rate = True
        # TensorFlow's order of assignments, so that of two bad values the same one fails first.
        packing = pbvalues.to_enum(owner, "low_dimensional_packing_status",
                                   self.low_dimensional_packing_status, PACKING_STATUS)
        if packing:
            params.low_dimensional_packing_status = packing
        self._write_algorithm(params, tag_of)

    def _set_fields(self, values: dict[str, Any]) -> None:
        """Check each of :attr:`_fields` among a constructor's ``locals()`` and keep it."""
        owner = self._owner()
        for name, kind, *_ in self._fields:
            value = values[name]
            if kind == "bool":
                chk.flag(owner, name, value)
            elif kind == "float":
                chk.number(owner, name, value)
            setattr(self, name, value)

    def _check_ranges(self, values: dict[str, Any]) -> None:
        """Apply each constraint of the algorithm table the constructor checks (one with a
        ``constructor_message``), in table order, to its argument among a constructor's
        ``locals()``: ``Adam: `beta_1` must be >= 0 and < 1; received 1.5``. The value is
        compared as TensorFlow compares it (an int beyond float's range is infinite)."""
        owner = self._owner()
        for hyper in ALGORITHMS[self.algorithm].hyper:
            for constraint in hyper.constraints:
                if not constraint.constructor_message:
                    continue
                value = values[hyper.arg]
                if not constraint.allows(chk.compared(owner, hyper.arg, value)):
                    raise chk.fail(
                        owner,
                        f"`{hyper.arg}` {constraint.constructor_message}; received "
                        f"{chk.show(value)}",
                    )

    def _write_algorithm(self, params: Any, tag_of: TagOf) -> None:
        """Select the algorithm (present even when every field is 0) and write :attr:`_fields`."""
        msg = getattr(params, self.algorithm)
        msg.SetInParent()
        for name, kind, *field in self._fields:
            if kind in _WRITTEN:
                value = _WRITTEN[kind](self._owner(), name, getattr(self, name))
                setattr(msg, field[0], value)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if v is not None)
        return f"{type(self).__name__}({fields})"


# ------------------------------------------------------------------------------------------------
# TensorFlow 2.21's classes


class SGD(Optimizer):
    """Stochastic gradient descent: ``w = w - lr * g``. No slots."""

    algorithm = "stochastic_gradient_descent"

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.01,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(**base_arguments(locals()))


class Adagrad(Optimizer):
    """Adagrad: ``acc += g*g; w -= lr * g / sqrt(acc)``; ``acc`` starts at
    ``initial_accumulator_value`` (> 0; it is not written to the proto)."""

    algorithm = "adagrad"

    def __init__(  # noqa: PLR0913  (TensorFlow's signature)
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        initial_accumulator_value: float = 0.1,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(**base_arguments(locals()))
        self.initial_accumulator_value = require_positive(
            self._owner(), "initial_accumulator_value", initial_accumulator_value,
            "Adagrad divides by the square root of the accumulator",
        )


class AdagradMomentum(Optimizer):
    """Adagrad preconditioning followed by (optionally Nesterov) momentum.

    ``acc = beta2 * acc + (1 - beta2) * g*g`` (a plain sum when ``beta2 == 1``),
    ``s = (acc + epsilon) ** (-1/exponent) * g``, ``m = momentum * m + s``, ``w -= lr * m``.
    Both slots start at 0.
    """

    algorithm = "adagrad_momentum"

    def __init__(  # noqa: PLR0913  (TensorFlow's signature)
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        momentum: float = 0.0,
        use_nesterov: bool = False,
        exponent: float = 2,
        beta2: float = 1,
        epsilon: float = 1e-10,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(**base_arguments(locals()))
        self._check_ranges(locals())
        self._set_fields(locals())


class Adam(Optimizer):
    """Adam without bias correction (feed a corrected rate through a dynamic learning rate).

    ``lazy_adam=False`` updates every row every step and needs gradient accumulation;
    ``sum_inside_sqrt=True`` divides by ``sqrt(v + epsilon**2)`` instead of ``sqrt(v) + epsilon``.
    Both slots start at 0.
    """

    algorithm = "adam"

    def __init__(  # noqa: PLR0913  (TensorFlow's signature)
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        beta_1: float = ADAM_BETA_1,
        beta_2: float = ADAM_BETA_2,
        epsilon: float = 1e-07,
        lazy_adam: bool = True,
        sum_inside_sqrt: bool = True,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(**base_arguments(locals()))
        self._check_ranges(locals())
        self._set_fields(locals())
        if not lazy_adam and not use_gradient_accumulation:
            raise chk.fail(
                self._owner(),
                "`lazy_adam=False` (update every row every step) needs gradient accumulation, "
                "but `use_gradient_accumulation` is False: set use_gradient_accumulation=True "
                "or lazy_adam=True",
            )


class FTRL(Optimizer):
    """Follow-the-regularized-leader (FTRL-Proximal) with optional ``beta``.

    Slots ``accumulators`` (start at ``initial_accumulator_value``) and ``linears`` (start at 0).
    Unlike TensorFlow 2.21, ``initial_accumulator_value=0`` is accepted when
    ``allow_zero_accumulator=True``, as TensorFlow's docstring promises.
    """

    algorithm = "ftrl"

    def __init__(  # noqa: PLR0913  (TensorFlow's signature)
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        learning_rate_power: float = -0.5,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        beta: float = 0.0,
        initial_accumulator_value: float = 0.1,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        multiply_linear_by_learning_rate: bool = False,
        allow_zero_accumulator: bool = False,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(**base_arguments(locals()))
        owner = self._owner()
        chk.flag(owner, "allow_zero_accumulator", allow_zero_accumulator)
        value = chk.compared(owner, "initial_accumulator_value", initial_accumulator_value)
        if value < 0 or (value == 0 and not allow_zero_accumulator) or value != value:
            allowed = (
                "must be >= 0" if allow_zero_accumulator else
                "must be > 0 (or 0 with allow_zero_accumulator=True)"
            )
            raise chk.fail(
                owner,
                f"`initial_accumulator_value` {allowed}; received "
                f"{chk.show(initial_accumulator_value)}",
            )
        self._set_fields(locals())
