"""Slot-less optimizers: stochastic gradient descent (spec 12.1) and assign (spec 12.19)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import OptimizerSpec, UpdateContext, always_lazy, f32


def sgd_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Stochastic gradient descent (``stochastic_gradient_descent``; TPU-OSS, CPU-KERNEL).

    Slots: none. ::

        w = w - lr * G

    Returns a new parameter array and the empty slot tuple; the inputs are not modified.
    """
    return params - f32(lr) * grad, ()


def assign_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Assign (``assign``; PROTO): the row becomes its de-duplicated gradient.

    Slots: none. ::

        w = G

    ``G`` is the summed gradient of the partial; the learning rate is not used. Returns a copy of
    ``grad`` (float32) and the empty slot tuple; the inputs are not modified.
    """
    return np.array(grad, dtype=np.float32, copy=True), ()


SPECS = (
    OptimizerSpec(
        name="stochastic_gradient_descent",
        slots=(),
        update=sgd_update,
        lazy=always_lazy,
        equations="TPU-OSS, CPU-KERNEL",
    ),
    OptimizerSpec(
        name="assign",
        slots=(),
        update=assign_update,
        lazy=always_lazy,
        equations="PROTO",
    ),
)
