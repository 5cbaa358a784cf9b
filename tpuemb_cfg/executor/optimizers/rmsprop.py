"""Running-average preconditioners: rms_prop (12.10), centered_rms_prop (12.11) and adadelta
(12.13)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import OptimizerSpec, SlotSpec, UpdateContext, always_lazy, constant, f32, hyper_f32


def rms_prop_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """RMSProp (``rms_prop``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``rho``, ``momentum``, ``epsilon``. Slots: ``ms`` (default 0), ``mom``
    (default 0). ::

        ms  = rho * ms + (1 - rho) * G * G
        mom = momentum * mom + lr * G / sqrt(ms + epsilon)     (epsilon inside the root)
        w   = w - mom

    Returns new arrays ``(w, (ms, mom))``; the inputs are not modified.
    """
    ms, mom = slots
    lr = f32(lr)
    rho = hyper_f32(hyper, "rho")
    mu = hyper_f32(hyper, "momentum")
    eps = hyper_f32(hyper, "epsilon")
    one = f32(1.0)
    ms = rho * ms + (one - rho) * grad * grad
    mom = mu * mom + lr * grad / np.sqrt(ms + eps)
    w = params - mom
    return w, (ms, mom)


def centered_rms_prop_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Centered RMSProp (``centered_rms_prop``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``rho``, ``momentum``, ``epsilon``. Slots: ``ms`` (default 0), ``mom``
    (default 0), ``mg`` (default 0). ::

        mg  = rho * mg + (1 - rho) * G
        ms  = rho * ms + (1 - rho) * G * G
        mom = momentum * mom + lr * G / sqrt(ms - mg * mg + epsilon)
        w   = w - mom

    Returns new arrays ``(w, (ms, mom, mg))``; the inputs are not modified.
    """
    ms, mom, mg = slots
    lr = f32(lr)
    rho = hyper_f32(hyper, "rho")
    mu = hyper_f32(hyper, "momentum")
    eps = hyper_f32(hyper, "epsilon")
    one = f32(1.0)
    mg = rho * mg + (one - rho) * grad
    ms = rho * ms + (one - rho) * grad * grad
    mom = mu * mom + lr * grad / np.sqrt(ms - mg * mg + eps)
    w = params - mom
    return w, (ms, mom, mg)


def adadelta_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Adadelta (``adadelta``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``rho``, ``epsilon``. Slots: ``accumulators`` (default 0), ``updates``
    (default 0). ::

        acc = rho * acc + (1 - rho) * G * G
        u   = sqrt(upd + epsilon) / sqrt(acc + epsilon) * G     (the old upd, the new acc)
        w   = w - lr * u                                        (lr is usually 1.0)
        upd = rho * upd + (1 - rho) * u * u

    Returns new arrays ``(w, (acc, upd))``; the inputs are not modified.
    """
    acc, upd = slots
    lr = f32(lr)
    rho = hyper_f32(hyper, "rho")
    eps = hyper_f32(hyper, "epsilon")
    one = f32(1.0)
    acc = rho * acc + (one - rho) * grad * grad
    u = np.sqrt(upd + eps) / np.sqrt(acc + eps) * grad
    w = params - lr * u
    upd = rho * upd + (one - rho) * u * u
    return w, (acc, upd)


SPECS = (
    OptimizerSpec(
        name="rms_prop",
        slots=(SlotSpec("ms", constant(0.0)), SlotSpec("mom", constant(0.0))),
        update=rms_prop_update,
        lazy=always_lazy,
        equations="PROTO, CPU-KERNEL",
    ),
    OptimizerSpec(
        name="centered_rms_prop",
        slots=(
            SlotSpec("ms", constant(0.0)),
            SlotSpec("mom", constant(0.0)),
            SlotSpec("mg", constant(0.0)),
        ),
        update=centered_rms_prop_update,
        lazy=always_lazy,
        equations="PROTO, CPU-KERNEL",
    ),
    OptimizerSpec(
        name="adadelta",
        slots=(SlotSpec("accumulators", constant(0.0)), SlotSpec("updates", constant(0.0))),
        update=adadelta_update,
        lazy=always_lazy,
        equations="PROTO, CPU-KERNEL",
    ),
)
