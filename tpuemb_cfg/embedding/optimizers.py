"""Optimizer classes: TensorFlow 2.21's five plus one class per other algorithm of the proto.

``SGD``, ``Adagrad``, ``AdagradMomentum``, ``Adam`` and ``FTRL`` take TensorFlow 2.21's arguments
in TensorFlow's order with TensorFlow's defaults, apply TensorFlow's constructor checks (CTOR001 to
CTOR011 of ``validation-rules.md``, with correct messages) and write the proto fields of
``compile.md`` section 4. The other classes (``Momentum``, ``Lion``, ``RMSProp``, ...) take the same
base arguments plus one argument per field of their proto message, named like the field.

Every optimizer writes, into an ``OptimizationParameters`` message:

- the learning rate: ``constant`` (float32) or ``dynamic.tag`` for a zero-argument callable (the
  tag is the callable's position in the learning-rate list, assigned by ``build_config``);
- the base part: gradient accumulation ``ENABLED``/``DISABLED``, weight clipping
  (``clip_weight_min``/``clip_weight_max``), gradient clipping (``clipvalue``), weight decay
  (only a non-zero factor; the multiply-by-learning-rate flag only with it), low-dimensional
  packing ``ENABLED`` when requested (never ``DISABLED``);
- its algorithm: the oneof member, selected explicitly (present even when every field is 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from tpuemb_cfg.embedding import _checks as chk

#: Maps a dynamic input (a learning-rate callable or a step counter) to its tag.
TagOf = Callable[[Any], int]

ACCUMULATION_ENABLED = 1
ACCUMULATION_DISABLED = 2
PACKING_ENABLED = 1


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
    return -1.0 * clipvalue, clipvalue


def _learning_rate_value(owner: str, learning_rate: Any) -> float:
    if not chk.is_real(learning_rate):
        raise chk.fail_type(
            owner,
            f"`learning_rate` must be a number or a callable taking no arguments (a dynamic "
            f"learning rate); received {chk.show(learning_rate)} ({chk.type_name(learning_rate)})",
        )
    return float(learning_rate)


class Optimizer:
    """Base class: the arguments every algorithm shares and the base part of the proto.

    Subclasses set :attr:`algorithm` (the oneof member of ``OptimizationParameters.parameters``)
    and :attr:`slot_names` (the slots in TensorFlow's state-variable order) and write their own
    message in :meth:`_write_algorithm`.
    """

    algorithm: ClassVar[str]
    slot_names: ClassVar[tuple[str, ...]] = ()

    def __init__(
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
        chk.optional_real(owner, "clip_weight_min", clip_weight_min)
        chk.optional_real(owner, "clip_weight_max", clip_weight_max)
        chk.optional_real(owner, "weight_decay_factor", weight_decay_factor)
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
        """Initial value of every slot (0 unless the algorithm says otherwise)."""
        return dict.fromkeys(self.slot_names, 0.0)

    def write(self, params: Any, tag_of: TagOf) -> None:
        """Fill an empty ``OptimizationParameters`` message (``compile.md`` section 4)."""
        lr = params.learning_rate
        if callable(self.learning_rate):
            lr.dynamic.SetInParent()
            lr.dynamic.tag = tag_of(self.learning_rate)
        else:
            lr.constant = _learning_rate_value(self._owner(), self.learning_rate)
        if self.low_dimensional_packing_status:
            params.low_dimensional_packing_status = PACKING_ENABLED
        params.gradient_accumulation_status = (
            ACCUMULATION_ENABLED if self.use_gradient_accumulation else ACCUMULATION_DISABLED
        )
        if self.clip_weight_min is not None:
            params.clipping_limits.lower.value = self.clip_weight_min
        if self.clip_weight_max is not None:
            params.clipping_limits.upper.value = self.clip_weight_max
        if self.clip_gradient_min is not None:
            params.gradient_clipping_limits.lower.value = self.clip_gradient_min
        if self.clip_gradient_max is not None:
            params.gradient_clipping_limits.upper.value = self.clip_gradient_max
        if self.weight_decay_factor:
            params.weight_decay_factor = self.weight_decay_factor
            if self.multiply_weight_decay_factor_by_learning_rate:
                params.multiply_weight_decay_factor_by_learning_rate = True
        self._write_algorithm(params, tag_of)

    def _write_algorithm(self, params: Any, tag_of: TagOf) -> None:
        getattr(params, self.algorithm).SetInParent()

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
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            None,
            low_dimensional_packing_status,
        )


class Adagrad(Optimizer):
    """Adagrad: ``acc += g*g; w -= lr * g / sqrt(acc)``; ``acc`` starts at
    ``initial_accumulator_value`` (> 0; it is not written to the proto)."""

    algorithm = "adagrad"
    slot_names = ("accumulators",)

    def __init__(
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
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        value = chk.real(self._owner(), "initial_accumulator_value", initial_accumulator_value)
        if not value > 0:
            raise chk.fail(
                self._owner(),
                f"`initial_accumulator_value` must be > 0 (Adagrad divides by the square root "
                f"of the accumulator); received {chk.show(initial_accumulator_value)}",
            )
        self.initial_accumulator_value = initial_accumulator_value

    def slot_initial_values(self) -> dict[str, float]:
        return {"accumulators": float(self.initial_accumulator_value)}


class AdagradMomentum(Optimizer):
    """Adagrad preconditioning followed by (optionally Nesterov) momentum.

    ``acc = beta2 * acc + (1 - beta2) * g*g`` (a plain sum when ``beta2 == 1``),
    ``s = (acc + epsilon) ** (-1/exponent) * g``, ``m = momentum * m + s``, ``w -= lr * m``.
    Both slots start at 0.
    """

    algorithm = "adagrad_momentum"
    slot_names = ("accumulators", "momenta")

    def __init__(
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
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        owner = self._owner()
        if not chk.real(owner, "epsilon", epsilon) > 0:
            raise chk.fail(
                owner,
                f"`epsilon` must be > 0 (it is added to the accumulator before the power); "
                f"received {chk.show(epsilon)}",
            )
        if not chk.real(owner, "exponent", exponent) > 0:
            raise chk.fail(
                owner,
                f"`exponent` (the preconditioner's k in (acc + epsilon)^(-1/k)) must be > 0; "
                f"received {chk.show(exponent)}",
            )
        chk.real(owner, "momentum", momentum)
        chk.real(owner, "beta2", beta2)
        chk.boolean(owner, "use_nesterov", use_nesterov)
        self.momentum = momentum
        self.use_nesterov = use_nesterov
        self.exponent = exponent
        self.beta2 = beta2
        self.epsilon = epsilon

    def _write_algorithm(self, params: Any, tag_of: TagOf) -> None:
        msg = params.adagrad_momentum
        msg.SetInParent()
        msg.momentum = self.momentum
        msg.use_nesterov = bool(self.use_nesterov)
        msg.exponent = self.exponent
        msg.beta2 = self.beta2
        msg.epsilon = self.epsilon


class Adam(Optimizer):
    """Adam without bias correction (feed a corrected rate through a dynamic learning rate).

    ``lazy_adam=False`` updates every row every step and needs gradient accumulation;
    ``sum_inside_sqrt=True`` divides by ``sqrt(v + epsilon**2)`` instead of ``sqrt(v) + epsilon``.
    Both slots start at 0.
    """

    algorithm = "adam"
    slot_names = ("momenta", "velocities")

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
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
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        owner = self._owner()
        for name, value in (("beta_1", beta_1), ("beta_2", beta_2)):
            if not 0 <= chk.real(owner, name, value) < 1:
                raise chk.fail(
                    owner, f"`{name}` must be >= 0 and < 1; received {chk.show(value)}"
                )
        if not chk.real(owner, "epsilon", epsilon) > 0:
            raise chk.fail(owner, f"`epsilon` must be > 0; received {chk.show(epsilon)}")
        chk.boolean(owner, "lazy_adam", lazy_adam)
        chk.boolean(owner, "sum_inside_sqrt", sum_inside_sqrt)
        if not lazy_adam and not use_gradient_accumulation:
            raise chk.fail(
                owner,
                "`lazy_adam=False` (update every row every step) needs gradient accumulation, "
                "but `use_gradient_accumulation` is False: set use_gradient_accumulation=True "
                "or lazy_adam=True",
            )
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.lazy_adam = lazy_adam
        self.sum_inside_sqrt = sum_inside_sqrt

    def _write_algorithm(self, params: Any, tag_of: TagOf) -> None:
        msg = params.adam
        msg.SetInParent()
        msg.beta1 = self.beta_1
        msg.beta2 = self.beta_2
        msg.epsilon = self.epsilon
        msg.use_non_lazy_adam = not self.lazy_adam
        msg.use_sum_inside_sqrt = bool(self.sum_inside_sqrt)


class FTRL(Optimizer):
    """Follow-the-regularized-leader (FTRL-Proximal) with optional ``beta``.

    Slots ``accumulators`` (start at ``initial_accumulator_value``) and ``linears`` (start at 0).
    Unlike TensorFlow 2.21, ``initial_accumulator_value=0`` is accepted when
    ``allow_zero_accumulator=True``, as TensorFlow's docstring promises.
    """

    algorithm = "ftrl"
    slot_names = ("accumulators", "linears")

    def __init__(
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
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        owner = self._owner()
        chk.boolean(owner, "allow_zero_accumulator", allow_zero_accumulator)
        value = chk.real(owner, "initial_accumulator_value", initial_accumulator_value)
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
        chk.real(owner, "learning_rate_power", learning_rate_power)
        chk.real(owner, "l1_regularization_strength", l1_regularization_strength)
        chk.real(owner, "l2_regularization_strength", l2_regularization_strength)
        chk.real(owner, "beta", beta)
        chk.boolean(owner, "multiply_linear_by_learning_rate", multiply_linear_by_learning_rate)
        self.learning_rate_power = learning_rate_power
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.beta = beta
        self.initial_accumulator_value = initial_accumulator_value
        self.multiply_linear_by_learning_rate = multiply_linear_by_learning_rate
        self.allow_zero_accumulator = allow_zero_accumulator

    def slot_initial_values(self) -> dict[str, float]:
        return {"accumulators": float(self.initial_accumulator_value), "linears": 0.0}

    def _write_algorithm(self, params: Any, tag_of: TagOf) -> None:
        msg = params.ftrl
        msg.SetInParent()
        msg.l1 = self.l1_regularization_strength
        msg.l2 = self.l2_regularization_strength
        msg.lr_power = self.learning_rate_power
        msg.beta = self.beta
        msg.multiply_linear_by_lr = bool(self.multiply_linear_by_learning_rate)
        msg.allow_zero_accumulator = bool(self.allow_zero_accumulator)


# ------------------------------------------------------------------------------------------------
# The other algorithms of the proto (project classes; TensorFlow 2.21 has none)


class _ProtoFieldOptimizer(Optimizer):
    """An optimizer whose arguments after ``learning_rate`` are its proto message's fields.

    ``_fields`` lists (field name, kind) with kind ``"float"`` or ``"bool"``; every field is
    written (implicit-presence zeros are simply not serialized).
    """

    _fields: ClassVar[tuple[tuple[str, str], ...]] = ()

    def _set_fields(self, values: dict[str, Any]) -> None:
        owner = self._owner()
        for name, kind in self._fields:
            value = values[name]
            if kind == "bool":
                chk.boolean(owner, name, value)
            else:
                chk.real(owner, name, value)
            setattr(self, name, value)

    def _write_algorithm(self, params: Any, tag_of: TagOf) -> None:
        msg = getattr(params, self.algorithm)
        msg.SetInParent()
        for name, kind in self._fields:
            value = getattr(self, name)
            setattr(msg, name, bool(value) if kind == "bool" else value)


def _positive(owner: str, name: str, value: Any, why: str) -> None:
    if not chk.real(owner, name, value) > 0:
        raise chk.fail(owner, f"`{name}` must be > 0 ({why}); received {chk.show(value)}")


def _non_negative(owner: str, name: str, value: Any, why: str) -> None:
    if not chk.real(owner, name, value) >= 0:
        raise chk.fail(owner, f"`{name}` must be >= 0 ({why}); received {chk.show(value)}")


class Momentum(_ProtoFieldOptimizer):
    """Momentum: ``m = momentum * m + g; w -= lr * m`` (Nesterov: ``w -= lr * (g + momentum * m)``).

    Defaults: ``momentum=0.0`` (Keras ``SGD``'s default), ``use_nesterov=False``. Slot ``momenta``
    starts at 0.
    """

    algorithm = "momentum"
    slot_names = ("momenta",)
    _fields = (("momentum", "float"), ("use_nesterov", "bool"))

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        momentum: float = 0.0,
        use_nesterov: bool = False,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({"momentum": momentum, "use_nesterov": use_nesterov})


class Lion(_ProtoFieldOptimizer):
    """Lion (sign of an interpolated momentum). Defaults ``beta1=0.9``, ``beta2=0.99`` as Keras'
    ``Lion``; ``use_non_lazy_lion=False``. Slot ``momenta`` starts at 0."""

    algorithm = "lion"
    slot_names = ("momenta",)
    _fields = (("beta1", "float"), ("beta2", "float"), ("use_non_lazy_lion", "bool"))

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.99,
        use_non_lazy_lion: bool = False,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({"beta1": beta1, "beta2": beta2, "use_non_lazy_lion": use_non_lazy_lion})


class RMSProp(_ProtoFieldOptimizer):
    """RMSProp with epsilon inside the square root. Defaults ``rho=0.9``, ``momentum=0.0``,
    ``epsilon=1e-10`` (``tf.compat.v1.train.RMSPropOptimizer``). Slots ``ms``, ``mom`` start
    at 0."""

    algorithm = "rms_prop"
    slot_names: ClassVar[tuple[str, ...]] = ("ms", "mom")
    _fields = (("rho", "float"), ("momentum", "float"), ("epsilon", "float"))

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
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
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({"rho": rho, "momentum": momentum, "epsilon": epsilon})
        _positive(self._owner(), "epsilon", epsilon, "the mean square starts at 0")


class CenteredRMSProp(RMSProp):
    """Centered RMSProp (divides by the variance estimate ``ms - mg**2``); same arguments and
    defaults as :class:`RMSProp`. Slots ``ms``, ``mom``, ``mg`` start at 0."""

    algorithm = "centered_rms_prop"
    slot_names = ("ms", "mom", "mg")


class Adadelta(_ProtoFieldOptimizer):
    """Adadelta. Defaults ``rho=0.95``, ``epsilon=1e-8`` (``tf.compat.v1.train.AdadeltaOptimizer``).
    Slots ``accumulators``, ``updates`` start at 0."""

    algorithm = "adadelta"
    slot_names = ("accumulators", "updates")
    _fields = (("rho", "float"), ("epsilon", "float"))

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        rho: float = 0.95,
        epsilon: float = 1e-8,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({"rho": rho, "epsilon": epsilon})
        _positive(self._owner(), "epsilon", epsilon, "both slots start at 0")


class ProximalAdagrad(_ProtoFieldOptimizer):
    """Adagrad with a proximal L1/L2 step. Defaults ``l1=l2=0``; slot ``accumulators`` starts at
    ``initial_accumulator_value=0.1`` (the older TPU API's default; not written to the proto)."""

    algorithm = "proximal_adagrad"
    slot_names = ("accumulators",)
    _fields = (("l1", "float"), ("l2", "float"))

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        l1: float = 0.0,
        l2: float = 0.0,
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
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({"l1": l1, "l2": l2})
        _positive(self._owner(), "initial_accumulator_value", initial_accumulator_value,
                  "the step divides by the square root of the accumulator")
        self.initial_accumulator_value = initial_accumulator_value

    def slot_initial_values(self) -> dict[str, float]:
        return {"accumulators": float(self.initial_accumulator_value)}


class BoundedAdagrad(_ProtoFieldOptimizer):
    """Adagrad with optional caps on the accumulator and on one step's change (0 = no cap).
    Defaults ``update_accumulator_first=False``, ``max_var_update=0``, ``max_accumulator=0``;
    slot ``accumulators`` starts at ``initial_accumulator_value=0.1`` (not written to the proto)."""

    algorithm = "bounded_adagrad"
    slot_names = ("accumulators",)
    _fields = (
        ("update_accumulator_first", "bool"),
        ("max_var_update", "float"),
        ("max_accumulator", "float"),
    )

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        update_accumulator_first: bool = False,
        max_var_update: float = 0.0,
        max_accumulator: float = 0.0,
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
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({
            "update_accumulator_first": update_accumulator_first,
            "max_var_update": max_var_update,
            "max_accumulator": max_accumulator,
        })
        _positive(self._owner(), "initial_accumulator_value", initial_accumulator_value,
                  "the step divides by the square root of the accumulator")
        self.initial_accumulator_value = initial_accumulator_value

    def slot_initial_values(self) -> dict[str, float]:
        return {"accumulators": float(self.initial_accumulator_value)}


class FrequencyAwareAdagrad(_ProtoFieldOptimizer):
    """Adagrad whose step grows for rarely updated rows.

    ``step_counter`` is a zero-argument callable returning the global step; it gets a dynamic tag
    like a learning-rate callable (after the table's learning rate, in table order), so the
    learning-rate list carries the step at that position. Defaults reduce to Adagrad with an
    accumulator floor: ``probability_exponent=0``, ``max_lr_multiplier=1``,
    ``accumulator_decay=1``, ``initial_accumulator_value=0.1`` (a proto field here: the floor and
    the initial value of ``accumulators``), no L1/L2. Slot ``counters`` starts at 0.
    """

    algorithm = "frequency_aware_adagrad"
    slot_names = ("accumulators", "counters")
    initial_accumulator_value: float
    _fields = (
        ("l1_regularization_strength", "float"),
        ("l2_regularization_strength", "float"),
        ("probability_exponent", "float"),
        ("max_lr_multiplier", "float"),
        ("accumulator_decay", "float"),
        ("initial_accumulator_value", "float"),
    )

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        probability_exponent: float = 0.0,
        max_lr_multiplier: float = 1.0,
        accumulator_decay: float = 1.0,
        initial_accumulator_value: float = 0.1,
        step_counter: Callable[[], float] | None = None,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({
            "l1_regularization_strength": l1_regularization_strength,
            "l2_regularization_strength": l2_regularization_strength,
            "probability_exponent": probability_exponent,
            "max_lr_multiplier": max_lr_multiplier,
            "accumulator_decay": accumulator_decay,
            "initial_accumulator_value": initial_accumulator_value,
        })
        _positive(self._owner(), "initial_accumulator_value", initial_accumulator_value,
                  "it is the accumulator's floor and the step divides by its square root")
        if not callable(step_counter):
            raise chk.fail_type(
                self._owner(),
                f"`step_counter` must be a callable taking no arguments that returns the global "
                f"step (it becomes a dynamic input with its own tag); received "
                f"{chk.show(step_counter)}",
            )
        self.step_counter = step_counter

    def dynamic_inputs(self) -> list[tuple[str, Any]]:
        return [*super().dynamic_inputs(), ("step_counter", self.step_counter)]

    def slot_initial_values(self) -> dict[str, float]:
        return {"accumulators": float(self.initial_accumulator_value), "counters": 0.0}

    def _write_algorithm(self, params: Any, tag_of: TagOf) -> None:
        super()._write_algorithm(params, tag_of)
        msg = params.frequency_aware_adagrad
        msg.step_counter.SetInParent()
        msg.step_counter.tag = tag_of(self.step_counter)


class ProximalYogi(_ProtoFieldOptimizer):
    """Yogi with a proximal L1/L2 step, no bias correction. Defaults are the older TPU API's:
    ``l1=l2=0``, ``beta1=0.0``, ``beta2=0.999``, ``epsilon=1e-3``; slot ``v`` starts at
    ``initial_accumulator_value=1e-6`` (not written to the proto), ``m`` at 0."""

    algorithm = "proximal_yogi"
    slot_names = ("v", "m")
    _fields = (
        ("l1", "float"), ("l2", "float"), ("beta1", "float"), ("beta2", "float"),
        ("epsilon", "float"),
    )

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.01,
        l1: float = 0.0,
        l2: float = 0.0,
        beta1: float = 0.0,
        beta2: float = 0.999,
        epsilon: float = 1e-3,
        initial_accumulator_value: float = 1e-6,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields(
            {"l1": l1, "l2": l2, "beta1": beta1, "beta2": beta2, "epsilon": epsilon}
        )
        _non_negative(self._owner(), "initial_accumulator_value", initial_accumulator_value,
                      "it is the initial second moment")
        self.initial_accumulator_value = initial_accumulator_value

    def slot_initial_values(self) -> dict[str, float]:
        return {"v": float(self.initial_accumulator_value), "m": 0.0}


class OnlineYogi(_ProtoFieldOptimizer):
    """Yogi with FTRL-style L1/L2 (no public equations; not simulated). Defaults ``l1=l2=0``,
    ``beta2=0.999`` (Yogi's); slot ``vs`` starts at ``initial_accumulator_value=0.1`` (not written
    to the proto), ``linears`` at 0."""

    algorithm = "online_yogi"
    slot_names = ("vs", "linears")
    _fields = (("l1", "float"), ("l2", "float"), ("beta2", "float"))

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        l1: float = 0.0,
        l2: float = 0.0,
        beta2: float = 0.999,
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
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({"l1": l1, "l2": l2, "beta2": beta2})
        _non_negative(self._owner(), "initial_accumulator_value", initial_accumulator_value,
                      "it is the initial second moment")
        self.initial_accumulator_value = initial_accumulator_value

    def slot_initial_values(self) -> dict[str, float]:
        return {"vs": float(self.initial_accumulator_value), "linears": 0.0}


class MDLAdagradLight(_ProtoFieldOptimizer):
    """MDL-regularized Adagrad "light" (no public equations; not simulated). Every field defaults
    to 0/False; weight decay is not supported by the algorithm (the validator rejects it). Slots
    ``accumulators`` (``initial_accumulator_value=0.1``), ``weights`` and ``benefits`` (0)."""

    algorithm = "mdl_adagrad_light"
    slot_names = ("accumulators", "weights", "benefits")
    _fields = (
        ("l2", "float"), ("lr_power", "float"), ("min_servable_mdl_benefit", "float"),
        ("mdl_mix_in_margin", "float"), ("mdl_benefit_rampup_coeff", "float"),
        ("mdl_min_weight", "float"), ("benefit_revisit_scale", "float"),
        ("max_event_benefit", "float"), ("max_total_benefit", "float"),
        ("mdl_hard_limit", "float"), ("hard_limit_min_benefit", "bool"),
        ("mdl_regularize", "bool"),
    )

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.001,
        l2: float = 0.0,
        lr_power: float = 0.0,
        min_servable_mdl_benefit: float = 0.0,
        mdl_mix_in_margin: float = 0.0,
        mdl_benefit_rampup_coeff: float = 0.0,
        mdl_min_weight: float = 0.0,
        benefit_revisit_scale: float = 0.0,
        max_event_benefit: float = 0.0,
        max_total_benefit: float = 0.0,
        mdl_hard_limit: float = 0.0,
        hard_limit_min_benefit: bool = False,
        mdl_regularize: bool = False,
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
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({
            "l2": l2, "lr_power": lr_power,
            "min_servable_mdl_benefit": min_servable_mdl_benefit,
            "mdl_mix_in_margin": mdl_mix_in_margin,
            "mdl_benefit_rampup_coeff": mdl_benefit_rampup_coeff,
            "mdl_min_weight": mdl_min_weight, "benefit_revisit_scale": benefit_revisit_scale,
            "max_event_benefit": max_event_benefit, "max_total_benefit": max_total_benefit,
            "mdl_hard_limit": mdl_hard_limit, "hard_limit_min_benefit": hard_limit_min_benefit,
            "mdl_regularize": mdl_regularize,
        })
        _positive(self._owner(), "initial_accumulator_value", initial_accumulator_value,
                  "the step divides by the square root of the accumulator")
        self.initial_accumulator_value = initial_accumulator_value

    def slot_initial_values(self) -> dict[str, float]:
        return {"accumulators": float(self.initial_accumulator_value), "weights": 0.0,
                "benefits": 0.0}


class FrequencyEstimator(_ProtoFieldOptimizer):
    """Not a learning algorithm: each row (dimension 1) estimates the steps D between two hits
    of its id. ``learning_rate`` must carry the global step, so it is normally a callable.
    ``tau``, ``max_delta``, ``outlier_threshold`` and ``weight_exponent`` have no defaults (as
    in the older TPU API). The table starts at ``max_delta``; slot ``last_hit_step`` at 0."""

    algorithm = "frequency_estimator"
    slot_names = ("last_hit_step",)
    _fields = (
        ("tau", "float"), ("max_delta", "float"), ("outlier_threshold", "float"),
        ("weight_exponent", "float"),
    )

    def __init__(
        self,
        learning_rate: float | Callable[[], float],
        tau: float,
        max_delta: float,
        outlier_threshold: float,
        weight_exponent: float,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        slot_variable_creation_fn: Callable[..., Any] | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            slot_variable_creation_fn, low_dimensional_packing_status,
        )
        self._set_fields({
            "tau": tau, "max_delta": max_delta, "outlier_threshold": outlier_threshold,
            "weight_exponent": weight_exponent,
        })


class Assign(_ProtoFieldOptimizer):
    """Replace each touched weight by its (accumulated) gradient. Has no slots and ignores the
    learning rate (default 0.0, which the validator does not flag for ``assign``)."""

    algorithm = "assign"

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.0,
        use_gradient_accumulation: bool = True,
        clip_weight_min: float | None = None,
        clip_weight_max: float | None = None,
        weight_decay_factor: float | None = None,
        multiply_weight_decay_factor_by_learning_rate: bool | None = None,
        clipvalue: Any = None,
        low_dimensional_packing_status: bool = False,
    ) -> None:
        super().__init__(
            learning_rate, use_gradient_accumulation, clip_weight_min, clip_weight_max,
            weight_decay_factor, multiply_weight_decay_factor_by_learning_rate, clipvalue,
            None, low_dimensional_packing_status,
        )


#: Every optimizer class by its oneof name.
BY_ALGORITHM: dict[str, type[Optimizer]] = {
    cls.algorithm: cls
    for cls in (
        SGD, Adagrad, AdagradMomentum, Adam, FTRL, Momentum, Lion, RMSProp, CenteredRMSProp,
        Adadelta, ProximalAdagrad, BoundedAdagrad, FrequencyAwareAdagrad, ProximalYogi,
        OnlineYogi, MDLAdagradLight, FrequencyEstimator, Assign,
    )
}
