"""Moment-based optimizers with an optional non-lazy mode: adam (12.7) and lion (12.9)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import OptimizerSpec, SlotSpec, UpdateContext, constant, f32, hyper_f32


def adam_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Adam without bias correction (``adam``; TPU-OSS; CPU-KERNEL if not use_sum_inside_sqrt).

    Hyper-parameters: ``beta1``, ``beta2``, ``epsilon``, ``use_sum_inside_sqrt``,
    ``use_non_lazy_adam`` (laziness only, see ``OptimizerSpec.lazy``).
    Slots: ``momenta`` (default 0), ``velocities`` (default 0). ::

        m   = beta1 * m + (1 - beta1) * G
        v   = beta2 * v + (1 - beta2) * G * G
        den = sqrt(v + epsilon * epsilon)        if use_sum_inside_sqrt
        den = sqrt(v) + epsilon                  otherwise
        w   = w - lr * m / den                   (the new m and v)

    A bias-corrected rate, if wanted, comes in as ``lr``. Returns new arrays ``(w, (m, v))``; the
    inputs are not modified.
    """
    m, v = slots
    lr = f32(lr)
    beta1 = hyper_f32(hyper, "beta1")
    beta2 = hyper_f32(hyper, "beta2")
    eps = hyper_f32(hyper, "epsilon")
    one = f32(1.0)
    m = beta1 * m + (one - beta1) * grad
    v = beta2 * v + (one - beta2) * grad * grad
    if hyper.use_sum_inside_sqrt:
        den = np.sqrt(v + eps * eps)
    else:
        den = np.sqrt(v) + eps
    w = params - lr * m / den
    return w, (m, v)


def lion_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Lion (``lion``; PROTO; equals Keras 3 Lion).

    Hyper-parameters: ``beta1``, ``beta2``, ``use_non_lazy_lion`` (laziness only).
    Slots: ``momenta`` (default 0). ::

        c = beta1 * m + (1 - beta1) * G          (the old m)
        w = w - lr * sign(c)
        m = beta2 * m + (1 - beta2) * G

    ``sign(0) = 0``: a row whose interpolated direction is exactly 0 does not move. Returns new
    arrays ``(w, (m,))``; the inputs are not modified.
    """
    (m,) = slots
    lr = f32(lr)
    beta1 = hyper_f32(hyper, "beta1")
    beta2 = hyper_f32(hyper, "beta2")
    one = f32(1.0)
    c = beta1 * m + (one - beta1) * grad
    w = params - lr * np.sign(c)
    m = beta2 * m + (one - beta2) * grad
    return w, (m,)


def _adam_lazy(hyper: Any) -> bool:
    return not hyper.use_non_lazy_adam


def _lion_lazy(hyper: Any) -> bool:
    return not hyper.use_non_lazy_lion


SPECS = (
    OptimizerSpec(
        name="adam",
        slots=(SlotSpec("momenta", constant(0.0)), SlotSpec("velocities", constant(0.0))),
        update=adam_update,
        lazy=_adam_lazy,
        equations="TPU-OSS, CPU-KERNEL",
    ),
    OptimizerSpec(
        name="lion",
        slots=(SlotSpec("momenta", constant(0.0)),),
        update=lion_update,
        lazy=_lion_lazy,
        equations="PROTO",
    ),
)
