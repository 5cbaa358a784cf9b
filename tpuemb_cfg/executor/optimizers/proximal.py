"""Proximal-step optimizers: proximal_adagrad (12.14) and proximal_yogi (12.16)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import OptimizerSpec, SlotSpec, UpdateContext, always_lazy, constant, f32, hyper_f32


def _soft_threshold(p: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """``sign(p) * max(|p| - threshold, 0)``: the L1 proximal operator."""
    return np.sign(p) * np.maximum(np.abs(p) - threshold, f32(0.0))


def proximal_adagrad_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Proximal Adagrad (``proximal_adagrad``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``l1``, ``l2``. Slots: ``accumulators`` (default 0.1). ::

        acc = acc + G * G
        eta = lr / sqrt(acc)
        p   = w - eta * G
        w   = sign(p) * max(|p| - eta * l1, 0) / (1 + eta * l2)    if l1 > 0
        w   = p / (1 + eta * l2)                                   otherwise

    Returns new arrays ``(w, (acc,))``; the inputs are not modified.
    """
    (acc,) = slots
    lr = f32(lr)
    l1 = hyper_f32(hyper, "l1")
    l2 = hyper_f32(hyper, "l2")
    one = f32(1.0)
    acc = acc + grad * grad
    eta = lr / np.sqrt(acc)
    p = params - eta * grad
    if l1 > 0:
        w = _soft_threshold(p, eta * l1) / (one + eta * l2)
    else:
        w = p / (one + eta * l2)
    return w, (acc,)


def proximal_yogi_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Proximal Yogi (``proximal_yogi``; RECON from TensorFlow Addons' Yogi).

    Hyper-parameters: ``l1``, ``l2``, ``beta1``, ``beta2``, ``epsilon``.
    Slots: ``v`` (default 1e-6), ``m`` (default 0). ::

        m   = beta1 * m + (1 - beta1) * G
        v   = v + (1 - beta2) * sign(G * G - v) * G * G
        eta = lr / (sqrt(v) + epsilon)
        p   = w - eta * m
        w   = sign(p) * max(|p| - eta * l1, 0) / (1 + eta * l2)    if l1 > 0
        w   = p / (1 + eta * l2)                                   elif l2 > 0
        w   = p                                                    otherwise

    No bias correction; lazy momentum. Returns new arrays ``(w, (v, m))`` (slots in state order
    ``v``, ``m``); the inputs are not modified.
    """
    v, m = slots
    lr = f32(lr)
    l1 = hyper_f32(hyper, "l1")
    l2 = hyper_f32(hyper, "l2")
    beta1 = hyper_f32(hyper, "beta1")
    beta2 = hyper_f32(hyper, "beta2")
    eps = hyper_f32(hyper, "epsilon")
    one = f32(1.0)
    m = beta1 * m + (one - beta1) * grad
    v = v + (one - beta2) * np.sign(grad * grad - v) * grad * grad
    eta = lr / (np.sqrt(v) + eps)
    p = params - eta * m
    if l1 > 0:
        w = _soft_threshold(p, eta * l1) / (one + eta * l2)
    elif l2 > 0:
        w = p / (one + eta * l2)
    else:
        w = p
    return w, (v, m)


SPECS = (
    OptimizerSpec(
        name="proximal_adagrad",
        slots=(SlotSpec("accumulators", constant(0.1)),),
        update=proximal_adagrad_update,
        lazy=always_lazy,
        equations="PROTO, CPU-KERNEL",
    ),
    OptimizerSpec(
        name="proximal_yogi",
        slots=(SlotSpec("v", constant(1e-6)), SlotSpec("m", constant(0.0))),
        update=proximal_yogi_update,
        lazy=always_lazy,
        equations="RECON",
    ),
)
