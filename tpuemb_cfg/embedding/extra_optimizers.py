"""Optimizer classes for the proto's other algorithms (project classes; TensorFlow 2.21 has none).

``Momentum``, ``Lion``, ``RMSProp``, ``CenteredRMSProp``, ``Adadelta``, ``ProximalAdagrad``,
``BoundedAdagrad``, ``FrequencyAwareAdagrad``, ``ProximalYogi``, ``OnlineYogi``,
``MDLAdagradLight``, ``FrequencyEstimator`` and ``Assign`` take the base arguments of
:class:`~tpuemb_cfg.embedding.optimizers.Optimizer` plus one argument per field of their proto
message, named like the field and in the message's order, after ``learning_rate``; each
docstring gives the defaults and where they come from. :data:`BY_ALGORITHM` maps every oneof name,
TensorFlow's five included, to its class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpuemb_cfg.embedding import _checks as chk
from tpuemb_cfg.embedding.optimizers import (
    FTRL,
    SGD,
    Adagrad,
    AdagradMomentum,
    Adam,
    Optimizer,
    TagOf,
    base_arguments,
    require_positive,
)


def _non_negative(owner: str, name: str, value: Any, why: str) -> Any:
    """``value`` unchanged when it is a number >= 0; else ``name must be >= 0 (why)``."""
    if not chk.compared(owner, name, value) >= 0:
        raise chk.fail(owner, f"`{name}` must be >= 0 ({why}); received {chk.show(value)}")
    return value


#: Why an Adagrad-like accumulator must start above 0.
_DIVIDES = "the step divides by the square root of the accumulator"
#: Why a Yogi second moment must not start below 0.
_SECOND_MOMENT = "it is the initial second moment"


class Momentum(Optimizer):
    """Momentum: ``m = momentum * m + g; w -= lr * m`` (Nesterov: ``w -= lr * (g + momentum * m)``).

    Defaults: ``momentum=0.0`` (Keras ``SGD``'s default), ``use_nesterov=False``. Slot ``momenta``
    starts at 0.
    """

    algorithm = "momentum"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())


class Lion(Optimizer):
    """Lion (sign of an interpolated momentum). Defaults ``beta1=0.9``, ``beta2=0.99`` as Keras'
    ``Lion``; ``use_non_lazy_lion=False``. Slot ``momenta`` starts at 0."""

    algorithm = "lion"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())


class RMSProp(Optimizer):
    """RMSProp with epsilon inside the square root. Defaults ``rho=0.9``, ``momentum=0.0``,
    ``epsilon=1e-10`` (``tf.compat.v1.train.RMSPropOptimizer``). Slots ``ms``, ``mom`` start
    at 0."""

    algorithm = "rms_prop"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())
        self._check_ranges(locals())


class CenteredRMSProp(RMSProp):
    """Centered RMSProp (divides by the variance estimate ``ms - mg**2``); same arguments and
    defaults as :class:`RMSProp`. Slots ``ms``, ``mom``, ``mg`` start at 0."""

    algorithm = "centered_rms_prop"


class Adadelta(Optimizer):
    """Adadelta. Defaults ``rho=0.95``, ``epsilon=1e-8`` (``tf.compat.v1.train.AdadeltaOptimizer``).
    Slots ``accumulators``, ``updates`` start at 0."""

    algorithm = "adadelta"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())
        self._check_ranges(locals())


class ProximalAdagrad(Optimizer):
    """Adagrad with a proximal L1/L2 step. Defaults ``l1=l2=0``; slot ``accumulators`` starts at
    ``initial_accumulator_value=0.1`` (the older TPU API's default; not written to the proto)."""

    algorithm = "proximal_adagrad"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())
        self.initial_accumulator_value = require_positive(
            self._owner(), "initial_accumulator_value", initial_accumulator_value, _DIVIDES
        )


class BoundedAdagrad(Optimizer):
    """Adagrad with optional caps on the accumulator and on one step's change (0 = no cap).
    Defaults ``update_accumulator_first=False``, ``max_var_update=0``, ``max_accumulator=0``;
    slot ``accumulators`` starts at ``initial_accumulator_value=0.1`` (not written to the proto)."""

    algorithm = "bounded_adagrad"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())
        self.initial_accumulator_value = require_positive(
            self._owner(), "initial_accumulator_value", initial_accumulator_value, _DIVIDES
        )


class FrequencyAwareAdagrad(Optimizer):
    """Adagrad whose step grows for rarely updated rows.

    ``step_counter`` is a zero-argument callable returning the global step; it gets a dynamic tag
    like a learning-rate callable (after the table's learning rate, in table order), so the
    learning-rate list carries the step at that position. Defaults reduce to Adagrad with an
    accumulator floor: ``probability_exponent=0``, ``max_lr_multiplier=1``,
    ``accumulator_decay=1``, ``initial_accumulator_value=0.1`` (a proto field here: the floor and
    the initial value of ``accumulators``), no L1/L2. Slot ``counters`` starts at 0.
    """

    algorithm = "frequency_aware_adagrad"
    initial_accumulator_value: float

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())
        self._check_ranges(locals())
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

    def _write_algorithm(self, params: Any, tag_of: TagOf) -> None:
        super()._write_algorithm(params, tag_of)
        msg = params.frequency_aware_adagrad
        msg.step_counter.SetInParent()
        msg.step_counter.tag = tag_of(self.step_counter)


class ProximalYogi(Optimizer):
    """Yogi with a proximal L1/L2 step, no bias correction. Defaults are the older TPU API's:
    ``l1=l2=0``, ``beta1=0.0``, ``beta2=0.999``, ``epsilon=1e-3``; slot ``v`` starts at
    ``initial_accumulator_value=1e-6`` (not written to the proto), ``m`` at 0."""

    algorithm = "proximal_yogi"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())
        self.initial_accumulator_value = _non_negative(
            self._owner(), "initial_accumulator_value", initial_accumulator_value, _SECOND_MOMENT
        )


class OnlineYogi(Optimizer):
    """Yogi with FTRL-style L1/L2 (no public equations; not simulated). Defaults ``l1=l2=0``,
    ``beta2=0.999`` (Yogi's); slot ``vs`` starts at ``initial_accumulator_value=0.1`` (not written
    to the proto), ``linears`` at 0."""

    algorithm = "online_yogi"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())
        self.initial_accumulator_value = _non_negative(
            self._owner(), "initial_accumulator_value", initial_accumulator_value, _SECOND_MOMENT
        )


class MDLAdagradLight(Optimizer):
    """MDL-regularized Adagrad "light" (no public equations; not simulated). Every field defaults
    to 0/False; weight decay is not supported by the algorithm (the validator rejects it). Slots
    ``accumulators`` (``initial_accumulator_value=0.1``), ``weights`` and ``benefits`` (0)."""

    algorithm = "mdl_adagrad_light"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())
        self.initial_accumulator_value = require_positive(
            self._owner(), "initial_accumulator_value", initial_accumulator_value, _DIVIDES
        )


class FrequencyEstimator(Optimizer):
    """Not a learning algorithm: each row (dimension 1) estimates the steps D between two hits
    of its id. ``learning_rate`` must carry the global step, so it is normally a callable.
    ``tau``, ``max_delta``, ``outlier_threshold`` and ``weight_exponent`` have no defaults (as
    in the older TPU API). The table starts at ``max_delta``; slot ``last_hit_step`` at 0."""

    algorithm = "frequency_estimator"

    def __init__(  # noqa: PLR0913  (TensorFlow's optimizer signature)
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
        super().__init__(**base_arguments(locals()))
        self._set_fields(locals())


class Assign(Optimizer):
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
        super().__init__(**base_arguments(locals()))


#: Every optimizer class by its oneof name.
BY_ALGORITHM: dict[str, type[Optimizer]] = {
    cls.algorithm: cls
    for cls in (
        SGD, Adagrad, AdagradMomentum, Adam, FTRL, Momentum, Lion, RMSProp, CenteredRMSProp,
        Adadelta, ProximalAdagrad, BoundedAdagrad, FrequencyAwareAdagrad, ProximalYogi,
        OnlineYogi, MDLAdagradLight, FrequencyEstimator, Assign,
    )
}
