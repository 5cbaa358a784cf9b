"""Slot-less optimizers: stochastic gradient descent (spec 12.1) and assign (spec 12.19).

Each optimizer is written once, as its scalar element; ``register_element`` makes its NumPy
update from it (``update``)."""

from __future__ import annotations

from typing import Any

from .update import F, Quad, register_element


def sgd_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Stochastic gradient descent (``stochastic_gradient_descent``; TPU-OSS, CPU-KERNEL).

    Slots: none. ::

        w = w - lr * G
    """
    w = w - lr * g
    return w, a, b, c


sgd_update = register_element("stochastic_gradient_descent", element=sgd_element)


def assign_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Assign (``assign``; PROTO): the row becomes its de-duplicated gradient.

    Slots: none. ::

        w = G

    ``G`` is the summed gradient of the partial; the learning rate is not used.
    """
    w = g
    return w, a, b, c


assign_update = register_element("assign", element=assign_element)
