"""Momentum, plain and Nesterov (spec 12.8)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .update import ZERO, F, Quad, hyper_tuple, register_element


class MomentumState(NamedTuple):
    momenta: np.ndarray


#: momentum, use_nesterov.
MomentumHyper = hyper_tuple("MomentumHyper", "momentum", __name__)


def momentum_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Momentum (``momentum``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``momentum``, ``use_nesterov``. Slots: ``momenta`` m (default 0). ::

        m = momentum * m + G
        w = w - lr * m                           (plain)
        w = w - (lr * G + lr * momentum * m)     (use_nesterov; the new m)

    The momentum is stored un-scaled (``ResourceSparseApplyMomentum``), so a changing dynamic rate
    scales the whole accumulated step.
    """
    mu = h.momentum
    a = mu * a + g
    if h.use_nesterov != ZERO:
        w = w - (lr * g + lr * mu * a)
    else:
        w = w - lr * a
    return w, a, b, c


momentum_update = register_element(
    "momentum", state=MomentumState, hyper=MomentumHyper, element=momentum_element
)
