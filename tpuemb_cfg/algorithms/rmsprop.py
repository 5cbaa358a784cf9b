"""Running-average preconditioners: rms_prop (12.10), centered_rms_prop (12.11) and adadelta
(12.13)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .update import ONE, F, Quad, UpdateContext, f32, hyper_tuple, register


class RmsPropState(NamedTuple):
    ms: np.ndarray
    mom: np.ndarray


#: rho, momentum, epsilon (the table's, shared by both RMSProp variants).
RmsPropHyper = hyper_tuple("RmsPropHyper", "rms_prop", __name__)


def rms_prop_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    a = h.rho * a + (ONE - h.rho) * g * g
    b = h.momentum * b + lr * g / np.sqrt(a + h.epsilon)
    w = w - b
    return w, a, b, c


@register("rms_prop", state=RmsPropState, hyper=RmsPropHyper, element=rms_prop_element)
def rms_prop_update(
    params: np.ndarray,
    state: RmsPropState,
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, RmsPropState]:
    """RMSProp (``rms_prop``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``rho``, ``momentum``, ``epsilon``. Slots: ``ms`` (default 0), ``mom``
    (default 0). ::

        ms  = rho * ms + (1 - rho) * G * G
        mom = momentum * mom + lr * G / sqrt(ms + epsilon)     (epsilon inside the root)
        w   = w - mom

    Returns new arrays; the inputs are not modified.
    """
    lr = f32(lr)
    rho, mu, eps = hyper.rho, hyper.momentum, hyper.epsilon
    one = f32(1.0)
    ms = rho * state.ms + (one - rho) * grad * grad
    mom = mu * state.mom + lr * grad / np.sqrt(ms + eps)
    w = params - mom
    return w, RmsPropState(ms, mom)


class CenteredRmsPropState(NamedTuple):
    ms: np.ndarray
    mom: np.ndarray
    mg: np.ndarray


def centered_rms_prop_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    c = h.rho * c + (ONE - h.rho) * g
    a = h.rho * a + (ONE - h.rho) * g * g
    b = h.momentum * b + lr * g / np.sqrt(a - c * c + h.epsilon)
    w = w - b
    return w, a, b, c


@register(
    "centered_rms_prop",
    state=CenteredRmsPropState,
    hyper=RmsPropHyper,
    element=centered_rms_prop_element,
)
def centered_rms_prop_update(
    params: np.ndarray,
    state: CenteredRmsPropState,
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, CenteredRmsPropState]:
    """Centered RMSProp (``centered_rms_prop``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``rho``, ``momentum``, ``epsilon``. Slots: ``ms`` (default 0), ``mom``
    (default 0), ``mg`` (default 0). ::

        mg  = rho * mg + (1 - rho) * G
        ms  = rho * ms + (1 - rho) * G * G
        mom = momentum * mom + lr * G / sqrt(ms - mg * mg + epsilon)
        w   = w - mom

    Returns new arrays; the inputs are not modified.
    """
    lr = f32(lr)
    rho, mu, eps = hyper.rho, hyper.momentum, hyper.epsilon
    one = f32(1.0)
    mg = rho * state.mg + (one - rho) * grad
    ms = rho * state.ms + (one - rho) * grad * grad
    mom = mu * state.mom + lr * grad / np.sqrt(ms - mg * mg + eps)
    w = params - mom
    return w, CenteredRmsPropState(ms, mom, mg)


class AdadeltaState(NamedTuple):
    accumulators: np.ndarray
    updates: np.ndarray


#: rho, epsilon.
AdadeltaHyper = hyper_tuple("AdadeltaHyper", "adadelta", __name__)


def adadelta_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    a = h.rho * a + (ONE - h.rho) * g * g
    u = np.sqrt(b + h.epsilon) / np.sqrt(a + h.epsilon) * g
    w = w - lr * u
    b = h.rho * b + (ONE - h.rho) * u * u
    return w, a, b, c


@register("adadelta", state=AdadeltaState, hyper=AdadeltaHyper, element=adadelta_element)
def adadelta_update(
    params: np.ndarray,
    state: AdadeltaState,
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, AdadeltaState]:
    """Adadelta (``adadelta``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``rho``, ``epsilon``. Slots: ``accumulators`` acc (default 0), ``updates``
    upd (default 0). ::

        acc = rho * acc + (1 - rho) * G * G
        u   = sqrt(upd + epsilon) / sqrt(acc + epsilon) * G     (the old upd, the new acc)
        w   = w - lr * u                                        (lr is usually 1.0)
        upd = rho * upd + (1 - rho) * u * u

    Returns new arrays; the inputs are not modified.
    """
    lr = f32(lr)
    rho, eps = hyper.rho, hyper.epsilon
    one = f32(1.0)
    upd = state.updates
    acc = rho * state.accumulators + (one - rho) * grad * grad
    u = np.sqrt(upd + eps) / np.sqrt(acc + eps) * grad
    w = params - lr * u
    upd = rho * upd + (one - rho) * u * u
    return w, AdadeltaState(acc, upd)
