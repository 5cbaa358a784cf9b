"""Slot-less optimizers: stochastic gradient descent (spec 12.1) and assign (spec 12.19)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .update import F, NoHyper, NoState, Quad, UpdateContext, UpdateFn, f32, register

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


def sgd_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    w = w - lr * g
    return w, a, b, c


@register("stochastic_gradient_descent", element=sgd_element)
@slotless
def sgd_update(params: np.ndarray, grad: np.ndarray, lr: np.float32) -> np.ndarray:
    """Stochastic gradient descent (``stochastic_gradient_descent``; TPU-OSS, CPU-KERNEL).

    Slots: none. ::

        w = w - lr * G

    Returns a new parameter array and the empty state; the inputs are not modified.
    """
    return params - f32(lr) * grad


def assign_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    w = g
    return w, a, b, c


@register("assign", element=assign_element)
@slotless
def assign_update(params: np.ndarray, grad: np.ndarray, lr: np.float32) -> np.ndarray:
    """Assign (``assign``; PROTO): the row becomes its de-duplicated gradient.

    Slots: none. ::

        w = G

    ``G`` is the summed gradient of the partial; the learning rate is not used. Returns a copy of
    ``grad`` (float32) and the empty state; the inputs are not modified.
    """
    return np.array(grad, dtype=np.float32, copy=True)
