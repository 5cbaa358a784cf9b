"""Moment-based optimizers with an optional non-lazy mode: adam (12.7) and lion (12.9).

Laziness (``use_non_lazy_adam``, ``use_non_lazy_lion``) is read from the algorithm table when the
plan is built; the updates below never see it. Each optimizer is written once, as its scalar
element; ``register_element`` makes its NumPy update from it (``update``). Adam's bias
correction of the rate lives here too (``bias_correction``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from tpuemb_cfg.base.numerics import pow64

from .update import ONE, ZERO, F, Quad, hyper_tuple, register_element, sign


class AdamState(NamedTuple):
    momenta: np.ndarray
    velocities: np.ndarray


#: beta1, beta2, epsilon, use_sum_inside_sqrt (the table's bound fields).
AdamHyper = hyper_tuple("AdamHyper", "adam", __name__)


def adam_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Adam without bias correction (``adam``; TPU-OSS; CPU-KERNEL if not use_sum_inside_sqrt).

    Hyper-parameters: ``beta1``, ``beta2``, ``epsilon``, ``use_sum_inside_sqrt``.
    Slots: ``momenta`` m (default 0), ``velocities`` v (default 0). ::

        m   = beta1 * m + (1 - beta1) * G
        v   = beta2 * v + (1 - beta2) * G * G
        den = sqrt(v + epsilon * epsilon)        if use_sum_inside_sqrt
        den = sqrt(v) + epsilon                  otherwise
        w   = w - lr * m / den                   (the new m and v)

    A bias-corrected rate, if wanted, comes in as ``lr`` (``bias_corrected_rate``).
    """
    beta1, beta2, eps = h.beta1, h.beta2, h.epsilon
    a = beta1 * a + (ONE - beta1) * g
    b = beta2 * b + (ONE - beta2) * g * g
    den = np.sqrt(b + eps * eps) if h.use_sum_inside_sqrt != ZERO else np.sqrt(b) + eps
    w = w - lr * a / den
    return w, a, b, c


adam_update = register_element("adam", state=AdamState, hyper=AdamHyper, element=adam_element)


def bias_correction(beta1: float, beta2: float, step: int) -> float:
    """The factor that makes TPU Adam (no bias correction) behave like bias-corrected Adam at
    global step ``step`` (0 at the first step): ``sqrt(1 - beta2^n) / (1 - beta1^n)``, n = step +
    1, the denominator at least 1e-12 (``beta1`` 0 aside, it is never smaller). Float64, the
    powers by ``numerics.pow64`` (no libm power: the same bits on every machine). What
    jax-tpu-embedding's ``AdamOptimizerSpec.get_hyperparameters(step)`` applies to the rate
    (there in float32: ``lr * c_2 / (1 - beta1^n)``)."""
    n = step + 1
    return math.sqrt(1.0 - pow64(beta2, n)) / max(1.0 - pow64(beta1, n), 1e-12)


def bias_corrected_rate(learning_rate: float, beta1: float, beta2: float, step: int) -> float:
    """``learning_rate * bias_correction(beta1, beta2, step)`` (float64): the rate to feed Adam
    at ``step``; the synthetic run's Adam tags and the ``adam_bias_correction`` schedule."""
    return learning_rate * bias_correction(beta1, beta2, step)


class LionState(NamedTuple):
    momenta: np.ndarray


#: beta1, beta2.
LionHyper = hyper_tuple("LionHyper", "lion", __name__)


def lion_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Lion (``lion``; PROTO; equals Keras 3 Lion).

    Hyper-parameters: ``beta1``, ``beta2``. Slots: ``momenta`` m (default 0). ::

        c = beta1 * m + (1 - beta1) * G          (the old m)
        w = w - lr * sign(c)
        m = beta2 * m + (1 - beta2) * G

    ``sign(0) = 0``: a row whose interpolated direction is exactly 0 does not move.
    """
    direction = h.beta1 * a + (ONE - h.beta1) * g
    w = w - lr * sign(direction)
    a = h.beta2 * a + (ONE - h.beta2) * g
    return w, a, b, c


lion_update = register_element("lion", state=LionState, hyper=LionHyper, element=lion_element)
