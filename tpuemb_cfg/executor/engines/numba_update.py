"""The per-row pipeline of spec section 6, compiled: one kernel for every optimizer.

``update(kind, params, s0, s1, s2, rows, grad, ...)`` runs, for every updated row r and column
d, in one pass and in place (spec 6.1-6.4; the optimizer's equations are those of its NumPy
function in ``executor.optimizers``, evaluated in the same order, in float32)::

    G = clip(grad[i, d], g_lo, g_hi)                       6.1 (absent bounds: -inf, +inf)
    w = params[r, d];  w = w - decay * w                   6.2 (when decay is on)
    w, s0, s1, s2 = optimizer(w, s0, s1, s2, G, lr, h)      6.3 (the slots of row r, column d)
    params[r, d] = clip(w, w_lo, w_hi)                     6.4

so every touched parameter and slot element is read once and written once, rows split over
threads, and returns the squared Euclidean norm of the parameters' change (float64), the
report's ``update_norm`` without another pass. ``kind`` selects the optimizer (``KINDS``); the
switch is taken once per row, so the loop over a row's columns is straight-line code the
compiler vectorises. ``h`` holds the optimizer's bound hyper-parameters (its ``hyper``
NamedTuple, in field order, booleans as 0/1) plus any per-step input (the global step count of
``frequency_aware_adagrad``). Missing slots are passed as a [1, 1] placeholder.

Lazy tables update ``rows`` (``grad[i]`` is row ``rows[i]``'s gradient); a non-lazy table
(``dense``) steps every row, those not in ``rows`` (sorted) with a zero gradient, walking
``rows`` alongside, so no [V, D] gradient is ever built.

Scalars arrive as float32 and every literal is a float32 constant (a bare ``1.0`` would promote
the arithmetic to float64). ``x < -inf`` is never true, so NaN stays NaN in ``_clip`` as in the
NumPy engine's ``clip``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .jit import njit, prefetch, threads

__all__ = ["KINDS", "parallel", "run_ranges", "update"]

KINDS: dict[str, int] = {
    "stochastic_gradient_descent": 0,
    "adagrad": 1,
    "adagrad_momentum": 2,
    "bounded_adagrad": 3,
    "frequency_aware_adagrad": 4,
    "ftrl": 5,
    "adam": 6,
    "momentum": 7,
    "lion": 8,
    "rms_prop": 9,
    "centered_rms_prop": 10,
    "adadelta": 11,
    "proximal_adagrad": 12,
    "proximal_yogi": 13,
    "frequency_estimator": 14,
    "assign": 15,
}
FTRL_POW = 16  # ftrl with lr_power other than -0.5 (``numba.fused_update`` picks it)

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_TWO = np.float32(2.0)
_HALF = np.float32(0.5)
_AHEAD = 8  # rows: how far ahead the scattered rows are prefetched


@njit(inline="always")
def _clip(x: np.float32, lower: np.float32, upper: np.float32) -> np.float32:
    if x < lower:
        x = lower
    if x > upper:
        x = upper
    return x


@njit(inline="always")
def _sign(x: np.float32) -> np.float32:
    if x > _ZERO:
        return _ONE
    if x < _ZERO:
        return -_ONE
    return x * _ZERO  # 0 (and NaN for NaN), as np.sign


@njit(inline="always")
def _soft(p: np.float32, threshold: np.float32) -> np.float32:
    """``sign(p) * max(|p| - threshold, 0)`` (``optimizers.proximal._soft_threshold``)."""
    return _sign(p) * max(abs(p) - threshold, _ZERO)


@njit(inline="always")
def _sgd(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """stochastic_gradient_descent"""
    w = w - lr * g
    return w, a, b, c


@njit(inline="always")
def _adagrad(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """adagrad"""
    a = a + g * g
    w = w - lr * g / np.sqrt(a)
    return w, a, b, c


@njit(inline="always")
def _adagrad_momentum(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """adagrad_momentum: momentum, use_nesterov, exponent, beta2, epsilon"""
    mu, beta2 = h[0], h[3]
    if beta2 == _ONE:
        a = a + g * g
    else:
        a = beta2 * a + (_ONE - beta2) * g * g
    s = (a + h[4]) ** (-(_ONE / h[2])) * g
    b = mu * b + s
    if h[1] != _ZERO:
        w = w - lr * (mu * b + s)
    else:
        w = w - lr * b
    return w, a, b, c


@njit(inline="always")
def _bounded_adagrad(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """bounded_adagrad: update_accumulator_first, max_var_update, max_accumulator"""
    fresh = a + g * g
    if h[2] > _ZERO:
        fresh = min(fresh, h[2])
    delta = lr * g / np.sqrt(fresh if h[0] != _ZERO else a)
    if h[1] > _ZERO:
        delta = min(max(delta, -h[1]), h[1])
    w = w - delta
    a = fresh
    return w, a, b, c


@njit(inline="always")
def _frequency_aware_adagrad(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """frequency_aware_adagrad: l1, l2, p_exp, max_mult, decay, init, tag, n"""
    b = b + _ONE
    a = max(h[4] * a + g * g, h[5])
    scale = min((h[7] / b) ** h[2], h[3])
    u = g * scale / np.sqrt(a)
    if h[0] > _ZERO:
        u = u + h[0] * _sign(w)
    if h[1] > _ZERO:
        u = u + h[1] * w
    w = w - lr * u
    return w, a, b, c


@njit(inline="always")
def _ftrl(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """ftrl with lr_power -0.5: the powers are exact square roots (``optimizers.ftrl._pow``)."""
    fresh = a + g * g
    return _ftrl_step(w, a, b, c, g, lr, h, fresh, np.sqrt(a), np.sqrt(fresh))


@njit(inline="always")
def _ftrl_pow(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """ftrl with any other lr_power: ``pow`` (a separate kernel: a ``pow`` call anywhere in a
    loop keeps the compiler from vectorising it, 10x slower for the usual exponent)."""
    fresh = a + g * g
    exponent = -h[2]
    return _ftrl_step(w, a, b, c, g, lr, h, fresh, a**exponent, fresh**exponent)


@njit(inline="always")
def _ftrl_step(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any, fresh: np.float32, p_old: np.float32, p_new: np.float32,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """ftrl: l1, l2, lr_power, beta, multiply_linear_by_lr; ``p_*`` = acc^-lr_power."""
    l1, l2, beta = h[0], h[1], h[3]
    dp = p_new - p_old
    if h[4] != _ZERO:
        b = b + lr * g - dp * w
        big_l1 = lr * l1
        den = p_new + _TWO * lr * l2 + beta
    else:
        b = b + g - dp * w / lr
        big_l1 = l1
        den = (p_new + beta) / lr + _TWO * l2
    num = -b if l1 == _ZERO else _clip(b, -big_l1, big_l1) - b
    quotient = num / den
    w = _ZERO if den == _ZERO else quotient
    a = fresh
    return w, a, b, c


@njit(inline="always")
def _adam(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """adam: beta1, beta2, epsilon, use_sum_inside_sqrt"""
    beta1, beta2, eps = h[0], h[1], h[2]
    a = beta1 * a + (_ONE - beta1) * g
    b = beta2 * b + (_ONE - beta2) * g * g
    den = np.sqrt(b + eps * eps) if h[3] != _ZERO else np.sqrt(b) + eps
    w = w - lr * a / den
    return w, a, b, c


@njit(inline="always")
def _momentum(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """momentum: momentum, use_nesterov"""
    mu = h[0]
    a = mu * a + g
    if h[1] != _ZERO:
        w = w - (lr * g + lr * mu * a)
    else:
        w = w - lr * a
    return w, a, b, c


@njit(inline="always")
def _lion(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """lion: beta1, beta2"""
    direction = h[0] * a + (_ONE - h[0]) * g
    w = w - lr * _sign(direction)
    a = h[1] * a + (_ONE - h[1]) * g
    return w, a, b, c


@njit(inline="always")
def _rms_prop(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """rms_prop: rho, momentum, epsilon"""
    a = h[0] * a + (_ONE - h[0]) * g * g
    b = h[1] * b + lr * g / np.sqrt(a + h[2])
    w = w - b
    return w, a, b, c


@njit(inline="always")
def _centered_rms_prop(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """centered_rms_prop: rho, momentum, epsilon; slots ms, mom, mg"""
    c = h[0] * c + (_ONE - h[0]) * g
    a = h[0] * a + (_ONE - h[0]) * g * g
    b = h[1] * b + lr * g / np.sqrt(a - c * c + h[2])
    w = w - b
    return w, a, b, c


@njit(inline="always")
def _adadelta(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """adadelta: rho, epsilon"""
    a = h[0] * a + (_ONE - h[0]) * g * g
    u = np.sqrt(b + h[1]) / np.sqrt(a + h[1]) * g
    w = w - lr * u
    b = h[0] * b + (_ONE - h[0]) * u * u
    return w, a, b, c


@njit(inline="always")
def _proximal_adagrad(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """proximal_adagrad: l1, l2"""
    a = a + g * g
    eta = lr / np.sqrt(a)
    p = w - eta * g
    if h[0] > _ZERO:
        w = _soft(p, eta * h[0]) / (_ONE + eta * h[1])
    else:
        w = p / (_ONE + eta * h[1])
    return w, a, b, c


@njit(inline="always")
def _proximal_yogi(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """proximal_yogi: l1, l2, beta1, beta2, epsilon; slots v, m"""
    b = h[2] * b + (_ONE - h[2]) * g
    a = a + (_ONE - h[3]) * _sign(g * g - a) * g * g
    eta = lr / (np.sqrt(a) + h[4])
    p = w - eta * b
    if h[0] > _ZERO:
        w = _soft(p, eta * h[0]) / (_ONE + eta * h[1])
    elif h[1] > _ZERO:
        w = p / (_ONE + eta * h[1])
    else:
        w = p
    return w, a, b, c


@njit(inline="always")
def _frequency_estimator(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """frequency_estimator: tau, max_delta, outlier_threshold; lr is the step n"""
    delta = lr - a
    capped = min(delta, h[1])
    if delta >= h[2] * w:
        w = capped
    else:
        w = w * (_ONE - h[0]) + capped * h[0]
    a = lr
    return w, a, b, c


@njit(inline="always")
def _assign(
    w: np.float32, a: np.float32, b: np.float32, c: np.float32, g: np.float32, lr: np.float32,
    h: Any,
) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """assign"""
    w = g
    return w, a, b, c


@njit(inline="always")
def _row(
    op: Any, params: np.ndarray, s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, r: int,
    grad: np.ndarray, gi: int, lr: np.float32, clips: Any, decay: np.float32, has_decay: bool,
    h: Any, slots: int, before: np.ndarray,
) -> float:
    """Spec 6.1-6.4 on row ``r`` with gradient row ``grad[gi]``; returns the squared norm of the
    row's change (``before``: scratch for the old row). ``clips``: (g_lo, g_hi, w_lo, w_hi)."""
    g_lo, g_hi, w_lo, w_hi = clips
    dim = params.shape[1]
    for d in range(dim):
        before[d] = params[r, d]
    for d in range(dim):
        g = _clip(grad[gi, d], g_lo, g_hi)
        w = params[r, d]
        if has_decay:
            w = w - decay * w
        a = s0[r, d] if slots > 0 else _ZERO
        b = s1[r, d] if slots > 1 else _ZERO
        c = s2[r, d] if slots > 2 else _ZERO
        w, a, b, c = op(w, a, b, c, g, lr, h)
        params[r, d] = _clip(w, w_lo, w_hi)
        if slots > 0:
            s0[r, d] = a
        if slots > 1:
            s1[r, d] = b
        if slots > 2:
            s2[r, d] = c
    return _change(params, r, before)


@njit(fastmath={"reassoc"}, error_model="numpy")
def _change(params: np.ndarray, r: int, before: np.ndarray) -> float:
    # A report figure, not part of the step's numbers: reordering this float64 sum (and only
    # this one) lets it vectorise instead of waiting on one addition after another. The
    # difference is taken in float32, as the NumPy engine's ``change_norm`` takes it.
    total = 0.0
    for d in range(before.shape[0]):
        delta = np.float64(params[r, d] - before[d])
        total += delta * delta
    return total


@njit(inline="always")
def _drive(
    op: Any, slots: int, params: np.ndarray, s0: np.ndarray, s1: np.ndarray, s2: np.ndarray,
    rows: np.ndarray, grad: np.ndarray, lr: np.float32, clips: Any, decay: np.float32,
    has_decay: bool, h: Any, dense: bool, start: int, stop: int,
) -> float:
    """Rows ``start:stop`` (of ``rows``, or of the table when ``dense``): the squared norm of
    their change."""
    dim = params.shape[1]
    before = np.empty(dim, dtype=np.float32)
    total = 0.0
    if dense:
        zero = np.zeros((1, dim), dtype=np.float32)
        k = int(np.searchsorted(rows, start))  # rows[k]: the next touched row at or after r
        for r in range(start, stop):
            if k < rows.shape[0] and rows[k] == r:
                total += _row(op, params, s0, s1, s2, r, grad, k, lr, clips, decay, has_decay,
                              h, slots, before)
                k += 1
            else:
                total += _row(op, params, s0, s1, s2, r, zero, 0, lr, clips, decay, has_decay,
                              h, slots, before)
    else:
        for i in range(start, stop):
            if i + _AHEAD < stop:  # the rows are scattered: start loading one a few rows on
                ahead = rows[i + _AHEAD]
                prefetch(params, ahead)
                if slots > 0:
                    prefetch(s0, ahead)
                if slots > 1:
                    prefetch(s1, ahead)
                if slots > 2:
                    prefetch(s2, ahead)
            total += _row(op, params, s0, s1, s2, rows[i], grad, i, lr, clips, decay, has_decay,
                          h, slots, before)
    return total


# One compiled kernel per optimizer: ``_drive`` with the optimizer and its slot count as
# constants, so each holds only that optimizer's arithmetic, as straight-line code (and only
# the optimizers a run uses are ever compiled). Each is ``nogil`` and works on a range of rows:
# ``update`` runs ranges on several threads. NumPy's error model: a division by zero gives
# inf/NaN as in the NumPy engine, and the loops vectorise (Python's model tests every divisor).


@njit(nogil=True, cache=True, error_model="numpy")
def _update_sgd(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_sgd, 0, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_adagrad(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_adagrad, 1, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_adagrad_momentum(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_adagrad_momentum, 2, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_bounded_adagrad(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_bounded_adagrad, 1, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_frequency_aware_adagrad(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_frequency_aware_adagrad, 2, p, s0, s1, s2, rows, grad, lr, clips, decay,
                  has_decay, h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_ftrl(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_ftrl, 2, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_adam(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_adam, 2, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_momentum(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_momentum, 1, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_lion(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_lion, 1, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_rms_prop(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_rms_prop, 2, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_centered_rms_prop(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_centered_rms_prop, 3, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_adadelta(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_adadelta, 2, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_proximal_adagrad(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_proximal_adagrad, 1, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_proximal_yogi(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_proximal_yogi, 2, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_frequency_estimator(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_frequency_estimator, 1, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_assign(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_assign, 0, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


@njit(nogil=True, cache=True, error_model="numpy")
def _update_ftrl_pow(  # type: ignore[no-untyped-def]
    p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, h, dense, start, stop
):
    return _drive(_ftrl_pow, 2, p, s0, s1, s2, rows, grad, lr, clips, decay, has_decay,
                  h, dense, start, stop)


_KERNELS = (
    _update_sgd,
    _update_adagrad,
    _update_adagrad_momentum,
    _update_bounded_adagrad,
    _update_frequency_aware_adagrad,
    _update_ftrl,
    _update_adam,
    _update_momentum,
    _update_lion,
    _update_rms_prop,
    _update_centered_rms_prop,
    _update_adadelta,
    _update_proximal_adagrad,
    _update_proximal_yogi,
    _update_frequency_estimator,
    _update_assign,
    _update_ftrl_pow,
)

# Below this many row-columns a step runs on the calling thread: a hand-off costs tens of
# microseconds, more than such a step.
_SERIAL_ELEMENTS = 1 << 16
_HYPER = 8  # hyper-parameter values every kernel takes (a tuple: no aliasing with the rows)
_pool: ThreadPoolExecutor | None = None
_local = threading.local()  # ``inside``: this thread runs a task of ``parallel``


def _pool_of(count: int) -> ThreadPoolExecutor:
    global _pool
    if _pool is None or _pool._max_workers < count:
        _pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="tpuemb")
    return _pool


def _inside(task: Callable[[], Any]) -> Any:
    _local.inside = True
    try:
        return task()
    finally:
        _local.inside = False


def parallel(tasks: Sequence[Callable[[], Any]]) -> list[Any]:
    """The results of ``tasks`` (functions calling kernels that release the GIL), run on
    ``threads()`` threads, the calling thread among them. Within a task, ``parallel`` and
    ``run_ranges`` run their work on the task's own thread: a pool worker waiting for work
    queued behind other tasks would wait forever."""
    count = min(threads(), len(tasks))
    if count <= 1 or getattr(_local, "inside", False):
        return [task() for task in tasks]
    pool = _pool_of(count)
    futures = [pool.submit(_inside, task) for task in tasks[1:]]
    first = _inside(tasks[0])
    return [first, *(future.result() for future in futures)]


def run_ranges(kernel: Callable[..., float], total: int, work: int, *args: Any) -> float:
    """``sum of kernel(*args, start, stop)`` over ranges splitting ``0..total``, in parallel on
    ``threads()`` threads when ``work`` (elements) is worth it; the kernels release the GIL."""
    count = min(threads(), max(1, total))
    if count == 1 or work < _SERIAL_ELEMENTS or getattr(_local, "inside", False):
        return float(kernel(*args, 0, total))
    bounds = [total * k // count for k in range(count + 1)]
    parts = parallel([
        functools.partial(kernel, *args, bounds[k], bounds[k + 1]) for k in range(count)
    ])
    return float(sum(float(part) for part in parts))


def update(
    kind: int, params: np.ndarray, slots: tuple[np.ndarray, ...], rows: np.ndarray,
    grad: np.ndarray, lr: np.float32, clips: tuple[np.float32, np.float32, np.float32, np.float32],
    decay: np.float32, has_decay: bool, h: tuple[Any, ...], dense: bool,
) -> float:
    """The fused pipeline of optimizer ``kind`` (module docstring) on ``rows`` (every row when
    ``dense``), in place; returns the squared norm of the parameters' change.

    Arrays: float32 C-contiguous ``params``, ``slots`` and ``grad``, sorted int64 ``rows``;
    ``clips``: (g_lo, g_hi, w_lo, w_hi), -inf/+inf when absent; ``h``: the hyper-parameters.
    """
    placeholder = np.zeros((1, 1), dtype=np.float32)
    s0, s1, s2 = (*slots, placeholder, placeholder, placeholder)[:3]
    hyper = tuple(np.float32(v) for v in h[:_HYPER]) + (np.float32(0.0),) * (_HYPER - len(h))
    total = params.shape[0] if dense else rows.shape[0]
    return run_ranges(
        _KERNELS[kind], total, total * params.shape[1],
        params, s0, s1, s2, rows, grad, lr, clips, decay, has_decay, hyper, dense,
    )
