"""Slot-less optimizers: stochastic gradient descent (spec 12.1) and assign (spec 12.19)."""

from __future__ import annotations

import numpy as np

from .base import NoHyper, NoState, UpdateContext, f32, register


@register("stochastic_gradient_descent")
def sgd_update(
    params: np.ndarray,
    state: NoState,
    grad: np.ndarray,
    lr: np.float32,
    hyper: NoHyper,
    ctx: UpdateContext,
) -> tuple[np.ndarray, NoState]:
    """Stochastic gradient descent (``stochastic_gradient_descent``; TPU-OSS, CPU-KERNEL).

    Slots: none. ::

        w = w - lr * G

    Returns a new parameter array and the empty state; the inputs are not modified.
    """
    return params - f32(lr) * grad, NoState()


@register("assign")
def assign_update(
    params: np.ndarray,
    state: NoState,
    grad: np.ndarray,
    lr: np.float32,
    hyper: NoHyper,
    ctx: UpdateContext,
) -> tuple[np.ndarray, NoState]:
    """Assign (``assign``; PROTO): the row becomes its de-duplicated gradient.

    Slots: none. ::

        w = G

    ``G`` is the summed gradient of the partial; the learning rate is not used. Returns a copy of
    ``grad`` (float32) and the empty state; the inputs are not modified.
    """
    return np.array(grad, dtype=np.float32, copy=True), NoState()
