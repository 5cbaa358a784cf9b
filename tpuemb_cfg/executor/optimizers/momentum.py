"""Momentum, plain and Nesterov (spec 12.8)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import OptimizerSpec, SlotSpec, UpdateContext, always_lazy, constant, f32, hyper_f32


def momentum_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Momentum (``momentum``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``momentum``, ``use_nesterov``. Slots: ``momenta`` (default 0). ::

        m = momentum * m + G
        w = w - lr * m                           (plain)
        w = w - (lr * G + lr * momentum * m)     (use_nesterov; the new m)

    The momentum is stored un-scaled (``ResourceSparseApplyMomentum``), so a changing dynamic rate
    scales the whole accumulated step. Returns new arrays ``(w, (m,))``; the inputs are not
    modified.
    """
    (m,) = slots
    lr = f32(lr)
    mu = hyper_f32(hyper, "momentum")
    m = mu * m + grad
    if hyper.use_nesterov:
        w = params - (lr * grad + lr * mu * m)
    else:
        w = params - lr * m
    return w, (m,)


SPECS = (
    OptimizerSpec(
        name="momentum",
        slots=(SlotSpec("momenta", constant(0.0)),),
        update=momentum_update,
        lazy=always_lazy,
        equations="PROTO, CPU-KERNEL",
    ),
)
