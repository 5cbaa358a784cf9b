"""Proximal-step optimizers: proximal_adagrad (12.14) and proximal_yogi (12.16)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .adagrad import AdagradState
from .update import ONE, ZERO, F, Quad, hyper_tuple, register_element, sign, soft

#: l1, l2.
ProximalAdagradHyper = hyper_tuple("ProximalAdagradHyper", "proximal_adagrad", __name__)


def proximal_adagrad_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Proximal Adagrad (``proximal_adagrad``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``l1``, ``l2``. Slots: ``accumulators`` acc (default 0.1). ::

        acc = acc + G * G
        eta = lr / sqrt(acc)
        p   = w - eta * G
        w   = sign(p) * max(|p| - eta * l1, 0) / (1 + eta * l2)    if l1 > 0
        w   = p / (1 + eta * l2)                                   otherwise
    """
    a = a + g * g
    eta = lr / np.sqrt(a)
    p = w - eta * g
    if h.l1 > ZERO:
        w = soft(p, eta * h.l1) / (ONE + eta * h.l2)
    else:
        w = p / (ONE + eta * h.l2)
    return w, a, b, c


proximal_adagrad_update = register_element(
    "proximal_adagrad",
    state=AdagradState,
    hyper=ProximalAdagradHyper,
    element=proximal_adagrad_element,
)


class ProximalYogiState(NamedTuple):
    v: np.ndarray
    m: np.ndarray


#: beta1, beta2, epsilon, l1, l2.
ProximalYogiHyper = hyper_tuple("ProximalYogiHyper", "proximal_yogi", __name__)


def proximal_yogi_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Proximal Yogi (``proximal_yogi``; RECON from TensorFlow Addons' Yogi).

    Hyper-parameters: ``l1``, ``l2``, ``beta1``, ``beta2``, ``epsilon``.
    Slots: ``v`` (default 1e-6), ``m`` (default 0), in that state order. ::

        m   = beta1 * m + (1 - beta1) * G
        v   = v + (1 - beta2) * sign(G * G - v) * G * G
        eta = lr / (sqrt(v) + epsilon)
        p   = w - eta * m
        w   = sign(p) * max(|p| - eta * l1, 0) / (1 + eta * l2)    if l1 > 0
        w   = p / (1 + eta * l2)                                   elif l2 > 0
        w   = p                                                    otherwise

    No bias correction; lazy momentum.
    """
    b = h.beta1 * b + (ONE - h.beta1) * g
    a = a + (ONE - h.beta2) * sign(g * g - a) * g * g
    eta = lr / (np.sqrt(a) + h.epsilon)
    p = w - eta * b
    if h.l1 > ZERO:
        w = soft(p, eta * h.l1) / (ONE + eta * h.l2)
    elif h.l2 > ZERO:
        w = p / (ONE + eta * h.l2)
    else:
        w = p
    return w, a, b, c


proximal_yogi_update = register_element(
    "proximal_yogi",
    state=ProximalYogiState,
    hyper=ProximalYogiHyper,
    element=proximal_yogi_element,
)
