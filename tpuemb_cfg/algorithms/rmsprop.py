"""Running-average preconditioners: rms_prop (12.10), centered_rms_prop (12.11) and adadelta
(12.13)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .update import ONE, F, Quad, hyper_tuple, register_element


class RmsPropState(NamedTuple):
    ms: np.ndarray
    mom: np.ndarray


#: rho, momentum, epsilon (the table's, shared by both RMSProp variants).
RmsPropHyper = hyper_tuple("RmsPropHyper", "rms_prop", __name__)


def rms_prop_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """RMSProp (``rms_prop``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``rho``, ``momentum``, ``epsilon``. Slots: ``ms`` (default 0), ``mom``
    (default 0). ::

        ms  = rho * ms + (1 - rho) * G * G
        mom = momentum * mom + lr * G / sqrt(ms + epsilon)     (epsilon inside the root)
        w   = w - mom
    """
    a = h.rho * a + (ONE - h.rho) * g * g
    b = h.momentum * b + lr * g / np.sqrt(a + h.epsilon)
    w = w - b
    return w, a, b, c


rms_prop_update = register_element(
    "rms_prop", state=RmsPropState, hyper=RmsPropHyper, element=rms_prop_element
)


class CenteredRmsPropState(NamedTuple):
    ms: np.ndarray
    mom: np.ndarray
    mg: np.ndarray


def centered_rms_prop_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Centered RMSProp (``centered_rms_prop``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``rho``, ``momentum``, ``epsilon``. Slots: ``ms`` (default 0), ``mom``
    (default 0), ``mg`` (default 0). ::

        mg  = rho * mg + (1 - rho) * G
        ms  = rho * ms + (1 - rho) * G * G
        mom = momentum * mom + lr * G / sqrt(ms - mg * mg + epsilon)
        w   = w - mom
    """
    c = h.rho * c + (ONE - h.rho) * g
    a = h.rho * a + (ONE - h.rho) * g * g
    b = h.momentum * b + lr * g / np.sqrt(a - c * c + h.epsilon)
    w = w - b
    return w, a, b, c


centered_rms_prop_update = register_element(
    "centered_rms_prop",
    state=CenteredRmsPropState,
    hyper=RmsPropHyper,
    element=centered_rms_prop_element,
)


class AdadeltaState(NamedTuple):
    accumulators: np.ndarray
    updates: np.ndarray


#: rho, epsilon.
AdadeltaHyper = hyper_tuple("AdadeltaHyper", "adadelta", __name__)


def adadelta_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Adadelta (``adadelta``; PROTO pointing at the kernel, CPU-KERNEL).

    Hyper-parameters: ``rho``, ``epsilon``. Slots: ``accumulators`` acc (default 0), ``updates``
    upd (default 0). ::

        acc = rho * acc + (1 - rho) * G * G
        u   = sqrt(upd + epsilon) / sqrt(acc + epsilon) * G     (the old upd, the new acc)
        w   = w - lr * u                                        (lr is usually 1.0)
        upd = rho * upd + (1 - rho) * u * u
    """
    a = h.rho * a + (ONE - h.rho) * g * g
    u = np.sqrt(b + h.epsilon) / np.sqrt(a + h.epsilon) * g
    w = w - lr * u
    b = h.rho * b + (ONE - h.rho) * u * u
    return w, a, b, c


adadelta_update = register_element(
    "adadelta", state=AdadeltaState, hyper=AdadeltaHyper, element=adadelta_element
)
