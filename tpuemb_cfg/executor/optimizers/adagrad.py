"""The Adagrad family: adagrad (12.2), adagrad_momentum (12.3), bounded_adagrad (12.4) and
frequency_aware_adagrad (12.5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import OptimizerSpec, SlotSpec, UpdateContext, always_lazy, constant, f32, hyper_f32


def adagrad_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Adagrad (``adagrad``; TPU-OSS, CPU-KERNEL).

    Slots: ``accumulators`` (default 0.1; must be > 0, there is no epsilon). ::

        acc = acc + G * G
        w   = w - lr * G / sqrt(acc)            (the new accumulator)

    Returns new arrays ``(w, (acc,))``; the inputs are not modified.
    """
    (acc,) = slots
    lr = f32(lr)
    acc = acc + grad * grad
    w = params - lr * grad / np.sqrt(acc)
    return w, (acc,)


def adagrad_momentum_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Adagrad with momentum (``adagrad_momentum``; TPU-OSS).

    Hyper-parameters: ``momentum`` mu, ``use_nesterov``, ``exponent`` k, ``beta2``, ``epsilon`` eps.
    Slots: ``accumulators`` (default 0), ``momenta`` (default 0). ::

        if beta2 == 1.0 (exact):  acc = acc + G * G
        else:                     acc = beta2 * acc + (1 - beta2) * G * G
        s   = pow(acc + eps, -(1 / k)) * G        (1/k computed in float32; the new accumulator)
        m   = mu * m + s
        w   = w - lr * (mu * m + s)               if use_nesterov (the new m)
        w   = w - lr * m                          otherwise

    The preconditioned gradient ``s`` enters the momentum (TensorFlow's SparseCore builder and the
    JAX lowering), not the bare preconditioner of the proto comment. Returns new arrays
    ``(w, (acc, m))``; the inputs are not modified.
    """
    acc, m = slots
    lr = f32(lr)
    mu = hyper_f32(hyper, "momentum")
    beta2 = hyper_f32(hyper, "beta2")
    eps = hyper_f32(hyper, "epsilon")
    k = hyper_f32(hyper, "exponent")
    one = f32(1.0)
    if beta2 == one:
        acc = acc + grad * grad
    else:
        acc = beta2 * acc + (one - beta2) * grad * grad
    s = np.power(acc + eps, -(one / k)) * grad
    m = mu * m + s
    if hyper.use_nesterov:
        w = params - lr * (mu * m + s)
    else:
        w = params - lr * m
    return w, (acc, m)


def bounded_adagrad_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Bounded Adagrad (``bounded_adagrad``; RECON).

    Hyper-parameters: ``update_accumulator_first``, ``max_var_update``, ``max_accumulator``
    (a bound <= 0 is disabled). Slots: ``accumulators`` (default 0.1). ::

        acc_new = acc + G * G
        if max_accumulator > 0:  acc_new = min(acc_new, max_accumulator)
        a       = acc_new if update_accumulator_first else acc
        delta   = lr * G / sqrt(a)
        if max_var_update > 0:   delta = min(max(delta, -max_var_update), max_var_update)
        w       = w - delta
        acc     = acc_new

    ``max_var_update`` bounds the step, not the gradient. Returns new arrays ``(w, (acc,))``; the
    inputs are not modified.
    """
    (acc,) = slots
    lr = f32(lr)
    max_accumulator = hyper_f32(hyper, "max_accumulator")
    max_var_update = hyper_f32(hyper, "max_var_update")
    acc_new = acc + grad * grad
    if max_accumulator > 0:
        acc_new = np.minimum(acc_new, max_accumulator)
    a = acc_new if hyper.update_accumulator_first else acc
    delta = lr * grad / np.sqrt(a)
    if max_var_update > 0:
        delta = np.minimum(np.maximum(delta, -max_var_update), max_var_update)
    w = params - delta
    return w, (acc_new,)


def step_counter_tag(hyper: Any) -> int:
    """The dynamic-input tag carrying the global step count (0 when ``step_counter`` is unset)."""
    counter = getattr(hyper, "step_counter", None)
    return int(getattr(counter, "tag", 0)) if counter is not None else 0


def frequency_aware_adagrad_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Frequency-aware Adagrad (``frequency_aware_adagrad``; RECON from a garbled proto comment).

    Slots: ``accumulators`` (default ``initial_accumulator_value``), ``counters`` (default 0).
    Input: ``n_global = ctx.dynamic_inputs[step_counter.tag]`` (tag 0 if unset). ::

        counter = counter + 1
        acc     = max(accumulator_decay * acc + G * G, initial_accumulator_value)
        scale   = min(pow(n_global / counter, probability_exponent), max_lr_multiplier)
        u       = G * scale / sqrt(acc)
        if l1_regularization_strength > 0:  u = u + l1_regularization_strength * sign(w)
        if l2_regularization_strength > 0:  u = u + l2_regularization_strength * w
        w       = w - lr * u

    ``counter`` is the row's update counter (every element of a row holds the same count).
    Returns new arrays ``(w, (acc, counter))``; the inputs are not modified. Raises ``ValueError``
    when the dynamic inputs have no element for the step-counter tag.
    """
    acc, counter = slots
    lr = f32(lr)
    tag = step_counter_tag(hyper)
    if not 0 <= tag < len(ctx.dynamic_inputs):
        raise ValueError(
            f"frequency_aware_adagrad reads the global step count from dynamic input "
            f"{tag} (step_counter.tag), but the step has {len(ctx.dynamic_inputs)} dynamic "
            f"input(s); pass a learning-rate list with the step count at position {tag}"
        )
    n_global = f32(ctx.dynamic_inputs[tag])
    decay = hyper_f32(hyper, "accumulator_decay")
    floor = hyper_f32(hyper, "initial_accumulator_value")
    exponent = hyper_f32(hyper, "probability_exponent")
    max_multiplier = hyper_f32(hyper, "max_lr_multiplier")
    l1 = hyper_f32(hyper, "l1_regularization_strength")
    l2 = hyper_f32(hyper, "l2_regularization_strength")
    counter = counter + f32(1.0)
    acc = np.maximum(decay * acc + grad * grad, floor)
    scale = np.minimum(np.power(n_global / counter, exponent), max_multiplier)
    u = grad * scale / np.sqrt(acc)
    if l1 > 0:
        u = u + l1 * np.sign(params)
    if l2 > 0:
        u = u + l2 * params
    w = params - lr * u
    return w, (acc, counter)


def _initial_accumulator_value(hyper: Any) -> float:
    return float(hyper_f32(hyper, "initial_accumulator_value"))


SPECS = (
    OptimizerSpec(
        name="adagrad",
        slots=(SlotSpec("accumulators", constant(0.1)),),
        update=adagrad_update,
        lazy=always_lazy,
        equations="TPU-OSS, CPU-KERNEL",
    ),
    OptimizerSpec(
        name="adagrad_momentum",
        slots=(SlotSpec("accumulators", constant(0.0)), SlotSpec("momenta", constant(0.0))),
        update=adagrad_momentum_update,
        lazy=always_lazy,
        equations="TPU-OSS",
    ),
    OptimizerSpec(
        name="bounded_adagrad",
        slots=(SlotSpec("accumulators", constant(0.1)),),
        update=bounded_adagrad_update,
        lazy=always_lazy,
        equations="RECON",
    ),
    OptimizerSpec(
        name="frequency_aware_adagrad",
        slots=(
            SlotSpec("accumulators", _initial_accumulator_value),
            SlotSpec("counters", constant(0.0)),
        ),
        update=frequency_aware_adagrad_update,
        lazy=always_lazy,
        equations="RECON",
    ),
)
