"""Slot-less optimizers: stochastic gradient descent (spec 12.1) and assign (spec 12.19)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from .base import NoHyper, NoState, UpdateContext, UpdateFn, f32, register

RowRule = Callable[[np.ndarray, np.ndarray, np.float32], np.ndarray]


def slotless(rule: RowRule) -> UpdateFn:
    """The update function of an optimizer without slots or hyper-parameters.

    ``rule(params, grad, lr)`` gives the new rows; the state stays the empty ``NoState``. The
    update keeps the rule's name and docstring (its equations).
    """

    @functools.wraps(rule)
    def update(
        params: np.ndarray,
        state: NoState,
        grad: np.ndarray,
        lr: np.float32,
        hyper: NoHyper,
        ctx: UpdateContext,
    ) -> tuple[np.ndarray, NoState]:
        return rule(params, grad, lr), NoState()

    return update


@register("stochastic_gradient_descent")
@slotless
def sgd_update(params: np.ndarray, grad: np.ndarray, lr: np.float32) -> np.ndarray:
    """Stochastic gradient descent (``stochastic_gradient_descent``; TPU-OSS, CPU-KERNEL).

    Slots: none. ::

        w = w - lr * G

    Returns a new parameter array and the empty state; the inputs are not modified.
    """
    return params - f32(lr) * grad


@register("assign")
@slotless
def assign_update(params: np.ndarray, grad: np.ndarray, lr: np.float32) -> np.ndarray:
    """Assign (``assign``; PROTO): the row becomes its de-duplicated gradient.

    Slots: none. ::

        w = G

    ``G`` is the summed gradient of the partial; the learning rate is not used. Returns a copy of
    ``grad`` (float32) and the empty state; the inputs are not modified.
    """
    return np.array(grad, dtype=np.float32, copy=True)
