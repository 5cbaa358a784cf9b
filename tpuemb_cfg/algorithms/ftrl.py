"""Follow-the-regularized-leader (spec 12.6).

Written once, as its scalar elements (one per kind of power); ``register_element`` makes its
NumPy update from them."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .update import TWO, ZERO, F, Quad, clip, f32, hyper_tuple, pow32, register_element, where


class FtrlState(NamedTuple):
    accumulators: np.ndarray
    linears: np.ndarray


#: l1, l2, lr_power, beta, multiply_linear_by_lr.
FtrlHyper = hyper_tuple("FtrlHyper", "ftrl", __name__)


def ftrl_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """FTRL-Proximal (``ftrl``; TPU-OSS, CPU-KERNEL).

    Hyper-parameters: ``l1``, ``l2``, ``lr_power``, ``beta``, ``multiply_linear_by_lr`` (mlbl).
    Slots: ``accumulators`` acc (default 0.1), ``linears`` lin (default 0). ::

        acc_new = acc + G * G
        p_old   = pow(acc, -lr_power);   p_new = pow(acc_new, -lr_power);   dp = p_new - p_old
        if mlbl:   lin = lin + lr * G - dp * w;   L1 = lr * l1;   den = p_new + 2 * lr * l2 + beta
        else:      lin = lin + G - dp * w / lr;   L1 = l1;        den = (p_new + beta) / lr + 2 * l2
        num     = -lin                              if l1 == 0
        num     = min(max(lin, -L1), L1) - lin       otherwise      (0 whenever |lin| <= L1)
        w       = num / den;   where den == 0: w = 0
        acc     = acc_new

    ``w`` on the right is the weight before this step (after decay). ``den`` is 0 only when
    acc_new = 0 and beta = l2 = 0; the weight is then 0 instead of NaN (executor's choice).
    A rate of 0 without mlbl divides by zero (validator OPT014) and gives inf/NaN here.

    This element is lr_power -0.5's: the powers are exact square roots (``sqrt`` is correctly
    rounded; TensorFlow's FTRL kernels special-case lr_power == -0.5 the same way).
    """
    fresh = a + g * g
    w, b = _ftrl_step(w, b, g, lr, h, np.sqrt(a), np.sqrt(fresh))
    return w, fresh, b, c


def ftrl_pow_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """Any other lr_power: ``numerics.pow32``, the same bits on every machine (docs/numerics.md;
    a kernel of its own, so the usual exponent's kernel stays two square roots)."""
    fresh = a + g * g
    exponent = -h.lr_power
    w, b = _ftrl_step(w, b, g, lr, h, pow32(a, exponent), pow32(fresh, exponent))
    return w, fresh, b, c


def _ftrl_step(w: F, b: F, g: F, lr: F, h: Any, p_old: F, p_new: F) -> tuple[F, F]:
    """The new weight and linear slot; ``p_*`` = acc^-lr_power before and after the step."""
    l1, l2, beta = h.l1, h.l2, h.beta
    dp = p_new - p_old
    by_lr = h.multiply_linear_by_lr != ZERO
    b = (b + lr * g - dp * w) if by_lr else (b + g - dp * w / lr)
    big_l1 = lr * l1 if by_lr else l1
    den = (p_new + TWO * lr * l2 + beta) if by_lr else ((p_new + beta) / lr + TWO * l2)
    num = -b if l1 == ZERO else clip(b, -big_l1, big_l1) - b
    quotient = num / den
    w = where(den == ZERO, ZERO, quotient)
    return w, b


def _ftrl_variant(hyper: Any) -> int:
    """The element a table runs: 0 (square roots) for lr_power -0.5, else 1 (``pow32``)."""
    return 0 if hyper.lr_power == f32(-0.5) else 1


ftrl_update = register_element(
    "ftrl",
    state=FtrlState,
    hyper=FtrlHyper,
    element=(ftrl_element, ftrl_pow_element),
    variant=_ftrl_variant,
)
