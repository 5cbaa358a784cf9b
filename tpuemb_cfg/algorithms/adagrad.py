"""The Adagrad family: adagrad (12.2), adagrad_momentum (12.3), bounded_adagrad (12.4) and
frequency_aware_adagrad (12.5)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .table import ALGORITHMS
from .update import (
    ONE,
    ZERO,
    F,
    Quad,
    f32,
    hyper_tuple,
    pow32,
    register_element,
    sign,
)


class AdagradState(NamedTuple):
    accumulators: np.ndarray


def adagrad_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Adagrad (``adagrad``; TPU-OSS, CPU-KERNEL).

    Slots: ``accumulators`` acc (default 0.1; must be > 0, there is no epsilon). ::

        acc = acc + G * G
        w   = w - lr * G / sqrt(acc)            (the new accumulator)
    """
    a = a + g * g
    w = w - lr * g / np.sqrt(a)
    return w, a, b, c


adagrad_update = register_element("adagrad", state=AdagradState, element=adagrad_element)


class AdagradMomentumState(NamedTuple):
    accumulators: np.ndarray
    momenta: np.ndarray


AdagradMomentumHyper = hyper_tuple("AdagradMomentumHyper", "adagrad_momentum", __name__)


def adagrad_momentum_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Adagrad with momentum (``adagrad_momentum``; TPU-OSS).

    Hyper-parameters: ``momentum`` mu, ``use_nesterov``, ``exponent`` k, ``beta2``, ``epsilon`` eps.
    Slots: ``accumulators`` acc (default 0), ``momenta`` m (default 0). ::

        if beta2 == 1.0 (exact):  acc = acc + G * G
        else:                     acc = beta2 * acc + (1 - beta2) * G * G
        s   = pow(acc + eps, -(1 / k)) * G        (1/k in float32, pow: numerics.pow32)
        m   = mu * m + s
        w   = w - lr * (mu * m + s)               if use_nesterov (the new m)
        w   = w - lr * m                          otherwise

    The preconditioned gradient ``s`` enters the momentum (TensorFlow's SparseCore builder and the
    JAX lowering), not the bare preconditioner of the proto comment.
    """
    mu, beta2 = h.momentum, h.beta2
    if beta2 == ONE:
        a = a + g * g
    else:
        a = beta2 * a + (ONE - beta2) * g * g
    s = pow32(a + h.epsilon, -(ONE / h.exponent)) * g
    b = mu * b + s
    if h.use_nesterov != ZERO:
        w = w - lr * (mu * b + s)
    else:
        w = w - lr * b
    return w, a, b, c


adagrad_momentum_update = register_element(
    "adagrad_momentum",
    state=AdagradMomentumState,
    hyper=AdagradMomentumHyper,
    element=adagrad_momentum_element,
)


#: update_accumulator_first, max_var_update, max_accumulator.
BoundedAdagradHyper = hyper_tuple("BoundedAdagradHyper", "bounded_adagrad", __name__)


def bounded_adagrad_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Bounded Adagrad (``bounded_adagrad``; RECON).

    Hyper-parameters: ``update_accumulator_first``, ``max_var_update``, ``max_accumulator``
    (a bound <= 0 is disabled). Slots: ``accumulators`` acc (default 0.1). ::

        acc_new = acc + G * G
        if max_accumulator > 0:  acc_new = min(acc_new, max_accumulator)
        a       = acc_new if update_accumulator_first else acc
        delta   = lr * G / sqrt(a)
        if max_var_update > 0:   delta = min(max(delta, -max_var_update), max_var_update)
        w       = w - delta
        acc     = acc_new

    ``max_var_update`` bounds the step, not the gradient.
    """
    fresh = a + g * g
    if h.max_accumulator > ZERO:
        fresh = min(fresh, h.max_accumulator)
    delta = lr * g / np.sqrt(fresh if h.update_accumulator_first != ZERO else a)
    if h.max_var_update > ZERO:
        delta = min(max(delta, -h.max_var_update), h.max_var_update)
    w = w - delta
    a = fresh
    return w, a, b, c


bounded_adagrad_update = register_element(
    "bounded_adagrad",
    state=AdagradState,
    hyper=BoundedAdagradHyper,
    element=bounded_adagrad_element,
)


_GLOBAL_STEP = ALGORITHMS["frequency_aware_adagrad"].step_inputs[0]


class FrequencyAwareAdagradState(NamedTuple):
    accumulators: np.ndarray
    counters: np.ndarray


#: The table's float fields, then ``step_counter_tag`` (the step input's tag).
FrequencyAwareAdagradHyper = hyper_tuple(
    "FrequencyAwareAdagradHyper", "frequency_aware_adagrad", __name__
)
_FLOATS = FrequencyAwareAdagradHyper._fields[:-1]


def _bind_frequency_aware(message: Any) -> Any:
    """The float fields, plus ``step_counter.tag`` (0 when ``step_counter`` is unset)."""
    counter = getattr(message, _GLOBAL_STEP.message_field, None)
    return FrequencyAwareAdagradHyper(
        *(f32(getattr(message, name)) for name in _FLOATS),
        int(getattr(counter, "tag", 0)) if counter is not None else 0,
    )


def frequency_aware_adagrad_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Frequency-aware Adagrad (``frequency_aware_adagrad``; RECON from a garbled proto comment).

    Slots: ``accumulators`` acc (default ``initial_accumulator_value``), ``counters`` (default 0).
    Input: ``n_global = ctx.dynamic_inputs[step_counter.tag]`` (tag 0 if unset). ::

        counter = counter + 1
        acc     = max(accumulator_decay * acc + G * G, initial_accumulator_value)
        scale   = min(pow(n_global / counter, probability_exponent), max_lr_multiplier)
        u       = G * scale / sqrt(acc)
        if l1_regularization_strength > 0:  u = u + l1_regularization_strength * sign(w)
        if l2_regularization_strength > 0:  u = u + l2_regularization_strength * w
        w       = w - lr * u

    ``counter`` is the row's update counter (every element of a row holds the same count). The
    update raises ``ValueError`` when the dynamic inputs have no element for the step-counter
    tag.
    """
    b = b + ONE
    a = max(h.accumulator_decay * a + g * g, h.initial_accumulator_value)
    scale = min(pow32(h.global_step / b, h.probability_exponent), h.max_lr_multiplier)
    u = g * scale / np.sqrt(a)
    if h.l1_regularization_strength > ZERO:
        u = u + h.l1_regularization_strength * sign(w)
    if h.l2_regularization_strength > ZERO:
        u = u + h.l2_regularization_strength * w
    w = w - lr * u
    return w, a, b, c


frequency_aware_adagrad_update = register_element(
    "frequency_aware_adagrad",
    state=FrequencyAwareAdagradState,
    hyper=FrequencyAwareAdagradHyper,
    bind=_bind_frequency_aware,
    element=frequency_aware_adagrad_element,
)
