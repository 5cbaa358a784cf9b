"""Momentum, plain and Nesterov (spec 12.8)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .update import ZERO, F, Quad, UpdateContext, f32, hyper_tuple, register


class MomentumState(NamedTuple):
    momenta: np.ndarray


#: momentum, use_nesterov.
MomentumHyper = hyper_tuple("MomentumHyper", "momentum", __name__)


def momentum_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    mu = h.momentum
    a = mu * a + g
    if h.use_nesterov != ZERO:
        w = w - (lr * g + lr * mu * a)
    else:
        w = w - lr * a
    return w, a, b, c


@register("momentum", state=MomentumState, hyper=MomentumHyper, element=momentum_element)
def momentum_update(
    params: np.ndarray,
    state: MomentumState,
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, MomentumState]:
    """Momentum (``momentum``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``momentum``, ``use_nesterov``. Slots: ``momenta`` m (default 0). ::

        m = momentum * m + G
        w = w - lr * m                           (plain)
        w = w - (lr * G + lr * momentum * m)     (use_nesterov; the new m)

    The momentum is stored un-scaled (``ResourceSparseApplyMomentum``), so a changing dynamic rate
    scales the whole accumulated step. Returns new arrays; the inputs are not modified.
    """
    lr = f32(lr)
    mu = hyper.momentum
    m = mu * state.momenta + grad
    if hyper.use_nesterov:
        w = params - (lr * grad + lr * mu * m)
    else:
        w = params - lr * m
    return w, MomentumState(m)
