"""Every optimizer's step against hand-derived expectations (spec section 12).

Each test states the expected numbers either as arithmetic written out from the spec's equations
(evaluated by Python in float64) or as float64 references written independently of the package,
one element at a time with ``math``. float32 results must agree within 1e-6 relative.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tpuemb_cfg.executor.optimizers import UpdateContext, get

CTX = UpdateContext(step=0, dynamic_inputs=())
RTOL = 1e-6


def f32(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).reshape(1, -1)


def step(
    name: str,
    w: Sequence[float],
    slots: Sequence[Sequence[float]],
    g: Sequence[float],
    lr: float,
    *,
    ctx: UpdateContext = CTX,
    **hyper: Any,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """One step of ``name`` on a single row; returns float32 row vectors."""
    spec = get(name)
    params, new_slots = spec.update(
        f32(w),
        spec.state(*(f32(s) for s in slots)),
        f32(g),
        np.float32(lr),
        spec.bind(SimpleNamespace(**hyper)),
        ctx,
    )
    assert params.dtype == np.float32
    return params[0], tuple(s[0] for s in new_slots)


def close(actual: Any, expected: Sequence[float], atol: float = 0.0) -> None:
    np.testing.assert_allclose(actual, np.asarray(expected, dtype=np.float64), rtol=RTOL, atol=atol)


def r(x: float) -> float:
    """``x`` as the float32 the implementation sees (proto floats are float32), back in float64."""
    return float(np.float32(x))


def elementwise(
    fn: Callable[..., tuple[float, ...]], *columns: Sequence[float]
) -> list[tuple[float, ...]]:
    """Apply a scalar float64 reference element by element to the float32-rounded inputs; returns
    one tuple per output."""
    rounded = [[r(x) for x in column] for column in columns]
    return list(zip(*(fn(*args) for args in zip(*rounded, strict=True)), strict=True))


def sign(x: float) -> float:
    return (x > 0) - (x < 0)


# ------------------------------------------------------------------------------------------------
# 12.1 stochastic_gradient_descent, 12.19 assign


def test_sgd_by_hand() -> None:
    w, slots = step("stochastic_gradient_descent", [1.0, -2.0, 0.25], [], [0.5, 0.0, -1.0], lr=0.1)
    close(w, [0.95, -2.0, 0.35])
    assert slots == ()


def test_assign_replaces_the_row_by_the_gradient() -> None:
    w, slots = step("assign", [1.0, -2.0, 3.0], [], [0.5, 0.0, -7.25], lr=123.0)
    assert w.tolist() == [0.5, 0.0, -7.25]
    assert slots == ()


# ------------------------------------------------------------------------------------------------
# 12.2 adagrad


def test_adagrad_by_hand() -> None:
    # acc = 0.1 + 0.3^2 = 0.19; w = 1 - 0.5 * 0.3 / sqrt(0.19)
    w, (acc,) = step("adagrad", [1.0, 2.0], [[0.1, 0.1]], [0.3, 0.0], lr=0.5)
    close(acc, [0.19, 0.1])
    close(w, [1.0 - 0.15 / math.sqrt(0.19), 2.0])


def test_adagrad_two_steps_use_the_new_accumulator() -> None:
    w, (acc,) = step("adagrad", [0.5], [[0.1]], [-0.4], lr=0.2)
    w, (acc,) = step("adagrad", w.tolist(), [acc.tolist()], [0.2], lr=0.2)
    a1 = 0.1 + 0.16
    w1 = 0.5 + 0.2 * 0.4 / math.sqrt(a1)
    a2 = a1 + 0.04
    close(acc, [a2])
    close(w, [w1 - 0.2 * 0.2 / math.sqrt(a2)])


# ------------------------------------------------------------------------------------------------
# 12.3 adagrad_momentum


def _adagrad_momentum_ref(
    w: float,
    acc: float,
    m: float,
    g: float,
    lr: float,
    mu: float,
    nesterov: bool,
    k: float,
    beta2: float,
    eps: float,
) -> tuple[float, float, float]:
    acc = acc + g * g if beta2 == 1.0 else beta2 * acc + (1 - beta2) * g * g
    s = (acc + eps) ** (-1.0 / k) * g
    m = mu * m + s
    w = w - lr * (mu * m + s) if nesterov else w - lr * m
    return w, acc, m


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize(("k", "beta2"), [(2.0, 1.0), (4.0, 0.99), (3.0, 0.0)])
def test_adagrad_momentum_two_steps(nesterov: bool, k: float, beta2: float) -> None:
    hyper: dict[str, Any] = dict(
        momentum=0.8, use_nesterov=nesterov, exponent=k, beta2=beta2, epsilon=1e-3
    )
    w0, acc0, m0 = [1.3, -0.6, 1.1], [0.0, 0.2, 0.05], [0.0, 0.1, -0.2]
    g1, g2 = [0.5, -0.25, 0.0], [-0.125, 0.75, 0.4]
    h = (r(0.1), r(0.8), nesterov, r(k), r(beta2), r(1e-3))
    w, (acc, m) = step("adagrad_momentum", w0, [acc0, m0], g1, lr=0.1, **hyper)
    w, (acc, m) = step(
        "adagrad_momentum", w.tolist(), [acc.tolist(), m.tolist()], g2, lr=0.1, **hyper
    )

    def two_steps(w_: float, a_: float, m_: float, x: float, y: float) -> tuple[float, ...]:
        w1, a1, m1 = _adagrad_momentum_ref(w_, a_, m_, x, *h)
        return _adagrad_momentum_ref(w1, a1, m1, y, *h)

    ref = elementwise(two_steps, w0, acc0, m0, g1, g2)
    close(w, ref[0])
    close(acc, ref[1])
    close(m, ref[2])


def test_adagrad_momentum_reduces_to_adagrad() -> None:
    """Spec 12.3: mu = 0, k = 2, beta2 = 1, eps = 0 is Adagrad."""
    hyper: dict[str, Any] = dict(
        momentum=0.0, use_nesterov=False, exponent=2.0, beta2=1.0, epsilon=0.0
    )
    w, (acc, m) = step("adagrad_momentum", [1.0], [[0.1], [0.0]], [0.3], lr=0.5, **hyper)
    close(acc, [0.19])
    close(w, [1.0 - 0.15 / math.sqrt(0.19)])
    close(m, [0.3 / math.sqrt(0.19)])


def test_adagrad_momentum_beta2_zero_keeps_only_the_current_square() -> None:
    hyper: dict[str, Any] = dict(
        momentum=0.0, use_nesterov=False, exponent=2.0, beta2=0.0, epsilon=0.0
    )
    _, (acc, _) = step("adagrad_momentum", [1.0], [[5.0], [0.0]], [0.5], lr=0.5, **hyper)
    close(acc, [0.25])


def test_adagrad_momentum_first_step_nesterov_by_hand() -> None:
    # acc = 0 + 0.5^2 = 0.25 (beta2 = 1); s = (0.25 + 0)^(-1/2) * 0.5 = 1; m = 0.9 * 0 + 1 = 1;
    # Nesterov: w = 2 - 0.1 * (0.9 * 1 + 1) = 1.81
    hyper: dict[str, Any] = dict(
        momentum=0.9, use_nesterov=True, exponent=2.0, beta2=1.0, epsilon=0.0
    )
    w, (acc, m) = step("adagrad_momentum", [2.0], [[0.0], [0.0]], [0.5], lr=0.1, **hyper)
    close(acc, [0.25])
    close(m, [1.0])
    close(w, [1.81])


# ------------------------------------------------------------------------------------------------
# 12.4 bounded_adagrad


def test_bounded_adagrad_without_bounds_is_adagrad() -> None:
    hyper: dict[str, Any] = dict(
        update_accumulator_first=True, max_var_update=0.0, max_accumulator=0.0
    )
    w, (acc,) = step("bounded_adagrad", [1.0], [[0.1]], [0.3], lr=0.5, **hyper)
    close(acc, [0.19])
    close(w, [1.0 - 0.15 / math.sqrt(0.19)])


def test_bounded_adagrad_old_accumulator_when_not_first() -> None:
    # delta = 0.5 * 0.3 / sqrt(0.1) with the OLD accumulator; the slot still takes the new value
    hyper: dict[str, Any] = dict(
        update_accumulator_first=False, max_var_update=0.0, max_accumulator=0.0
    )
    w, (acc,) = step("bounded_adagrad", [1.0], [[0.1]], [0.3], lr=0.5, **hyper)
    close(acc, [0.19])
    close(w, [1.0 - 0.15 / math.sqrt(0.1)])


def test_bounded_adagrad_caps_accumulator_and_step() -> None:
    hyper: dict[str, Any] = dict(
        update_accumulator_first=True, max_var_update=0.2, max_accumulator=0.5
    )
    # element 0: acc 0.1 + 4 -> capped 0.5; delta = 1 * 2 / sqrt(0.5) = 2.83 -> clipped to 0.2
    # element 1: acc 0.1 + 0.01 = 0.11; delta = -0.1 / sqrt(0.11) = -0.3015 -> clipped to -0.2
    # element 2: acc 0.3 + 0.0025 = 0.3025; delta = 0.05 / 0.55 = 0.0909 (inside the bound)
    w, (acc,) = step(
        "bounded_adagrad", [1.0, 1.0, 1.0], [[0.1, 0.1, 0.3]], [2.0, -0.1, 0.05], lr=1.0, **hyper
    )
    close(acc, [0.5, 0.11, 0.3025])
    close(w, [0.8, 1.2, 1.0 - 0.05 / 0.55])


def test_bounded_adagrad_negative_bounds_act_as_zero() -> None:
    hyper: dict[str, Any] = dict(
        update_accumulator_first=True, max_var_update=-1.0, max_accumulator=-1.0
    )
    w, (acc,) = step("bounded_adagrad", [3.0], [[0.1]], [2.0], lr=1.0, **hyper)
    close(acc, [4.1])
    close(w, [3.0 - 2.0 / math.sqrt(4.1)])


# ------------------------------------------------------------------------------------------------
# 12.5 frequency_aware_adagrad

FAA: dict[str, Any] = dict(
    l1_regularization_strength=0.0,
    l2_regularization_strength=0.0,
    probability_exponent=0.5,
    max_lr_multiplier=3.0,
    accumulator_decay=0.5,
    initial_accumulator_value=0.2,
)


def test_frequency_aware_adagrad_by_hand() -> None:
    ctx = UpdateContext(step=9, dynamic_inputs=(0.01, 16.0))
    hyper: dict[str, Any] = dict(FAA, step_counter=SimpleNamespace(tag=1))
    # counter 3 -> 4; scale = min((16 / 4)^0.5, 3) = 2
    # element 0: acc = max(0.5 * 1.0 + 0.25, 0.2) = 0.75; u = 0.5 * 2 / sqrt(0.75)
    # element 1: acc = max(0.5 * 0.1 + 0, 0.2) = 0.2 (the floor); u = 0
    w, (acc, counter) = step(
        "frequency_aware_adagrad",
        [1.0, -1.0],
        [[1.0, 0.1], [3.0, 3.0]],
        [0.5, 0.0],
        lr=0.1,
        ctx=ctx,
        **hyper,
    )
    close(counter, [4.0, 4.0])
    close(acc, [0.75, 0.2])
    close(w, [1.0 - 0.1 * (1.0 / math.sqrt(0.75)), -1.0])


def test_frequency_aware_adagrad_scale_is_capped_and_unset_counter_reads_tag_0() -> None:
    ctx = UpdateContext(step=0, dynamic_inputs=(100.0,))
    hyper: dict[str, Any] = dict(FAA)  # no step_counter attribute at all: tag 0
    # counter 0 -> 1; scale = min(sqrt(100 / 1), 3) = 3; acc = max(0 + 1, 0.2) = 1; u = 1 * 3 / 1
    w, (acc, counter) = step(
        "frequency_aware_adagrad", [0.0], [[0.0], [0.0]], [1.0], lr=0.1, ctx=ctx, **hyper
    )
    close(counter, [1.0])
    close(acc, [1.0])
    close(w, [-0.3])
    hyper_proto_like: dict[str, Any] = dict(FAA, step_counter=SimpleNamespace(tag=0))
    w2, _ = step(
        "frequency_aware_adagrad", [0.0], [[0.0], [0.0]], [1.0], lr=0.1, ctx=ctx, **hyper_proto_like
    )
    assert w2.tobytes() == w.tobytes()


def test_frequency_aware_adagrad_l1_l2_terms() -> None:
    ctx = UpdateContext(step=0, dynamic_inputs=(4.0,))
    hyper: dict[str, Any] = dict(
        FAA, l1_regularization_strength=0.05, l2_regularization_strength=0.1
    )
    # counter 0 -> 1; scale = min(2, 3) = 2; element 0: acc = max(0.5*0.3 + 0.04, 0.2) = 0.2 (floor)
    # u = 0.2 * 2 / sqrt(0.2) + 0.05 * sign(-2) + 0.1 * (-2); element 1: G = 0, w = 0: u = 0
    w, (acc, _) = step(
        "frequency_aware_adagrad",
        [-2.0, 0.0],
        [[0.3, 0.3], [0.0, 0.0]],
        [0.2, 0.0],
        lr=0.5,
        ctx=ctx,
        **hyper,
    )
    close(acc, [0.2, 0.2])
    u = 0.4 / math.sqrt(0.2) - 0.05 - 0.2
    close(w, [-2.0 - 0.5 * u, 0.0])


def test_frequency_aware_adagrad_needs_its_step_counter_input() -> None:
    hyper: dict[str, Any] = dict(FAA, step_counter=SimpleNamespace(tag=2))
    with pytest.raises(ValueError, match=r"dynamic input 2 \(step_counter.tag\).*has 1 dynamic"):
        step(
            "frequency_aware_adagrad",
            [0.0],
            [[0.0], [0.0]],
            [1.0],
            lr=0.1,
            ctx=UpdateContext(step=0, dynamic_inputs=(1.0,)),
            **hyper,
        )


# ------------------------------------------------------------------------------------------------
# 12.6 ftrl

FTRL: dict[str, Any] = dict(l1=0.0, l2=0.0, lr_power=-0.5, beta=0.0, multiply_linear_by_lr=False)


def _ftrl_ref(
    w: float,
    acc: float,
    lin: float,
    g: float,
    lr: float,
    l1: float,
    l2: float,
    lr_power: float,
    beta: float,
    mlbl: bool,
) -> tuple[float, float, float]:
    """FTRL-Proximal in float64, from the paper's closed form (sigma = dp / lr)."""
    acc_new = acc + g * g
    dp = acc_new ** (-lr_power) - acc ** (-lr_power)
    z = lin / lr if mlbl else lin  # the un-scaled linear term
    z = z + g - dp / lr * w
    if abs(z) <= l1:
        w_new = 0.0
    else:
        w_new = -(z - sign(z) * l1) / ((acc_new ** (-lr_power) + beta) / lr + 2 * l2)
    return w_new, acc_new, (z * lr if mlbl else z)


def test_ftrl_by_hand() -> None:
    # acc 0.1 -> 0.14; dp = sqrt(0.14) - sqrt(0.1); lin = 0.2 - dp * 0.5 / 0.1;
    # w = -lin / (sqrt(0.14) / 0.1)
    w, (acc, lin) = step("ftrl", [0.5], [[0.1], [0.0]], [0.2], lr=0.1, **FTRL)
    dp = math.sqrt(0.14) - math.sqrt(0.1)
    lin_expected = 0.2 - dp * 0.5 / 0.1
    close(acc, [0.14])
    close(lin, [lin_expected])
    close(w, [-lin_expected / (math.sqrt(0.14) / 0.1)])


@pytest.mark.parametrize("lr_power", [-0.5, -0.7, 0.0])
@pytest.mark.parametrize("mlbl", [False, True])
def test_ftrl_three_steps_against_float64(lr_power: float, mlbl: bool) -> None:
    hyper: dict[str, Any] = dict(
        l1=0.05, l2=0.1, lr_power=lr_power, beta=0.5, multiply_linear_by_lr=mlbl
    )
    w, acc, lin = [0.5, -0.3, 0.02, 1.5], [0.1, 0.2, 0.1, 0.0], [0.0, 0.3, 0.01, -2.0]
    grads = ([0.2, -0.4, 0.01, 0.6], [0.3, 0.1, -0.02, 0.0], [-0.5, 0.2, 0.03, 0.25])
    lrs = (0.3, 0.25, 0.2)
    ref = [list(w), list(acc), list(lin)]
    wn, accn, linn = f32(w)[0], f32(acc)[0], f32(lin)[0]
    for g, lr in zip(grads, lrs, strict=True):
        wn, (accn, linn) = step("ftrl", wn.tolist(), [accn.tolist(), linn.tolist()], g, lr, **hyper)
        h = (r(lr), r(0.05), r(0.1), r(lr_power), r(0.5), mlbl)
        ref = [list(c) for c in elementwise(lambda *a, h=h: _ftrl_ref(*a, *h), *ref, g)]
    # The linear term is a running sum of terms of both signs: where it comes out small (~1e-2 from
    # O(1) terms) float32 rounding of the terms is ~1e-6 of it, so allow 1e-7 absolute as well.
    close(wn, ref[0], atol=1e-7)
    close(accn, ref[1])
    close(linn, ref[2], atol=1e-7)


def test_ftrl_l1_zeroes_weights_whose_linear_is_inside_the_band() -> None:
    hyper: dict[str, Any] = dict(FTRL, l1=0.5)
    # lr_power 0: dp = 0, lin = lin + G; |lin| <= l1 gives w = 0 exactly; outside it shrinks by l1
    w, (_, lin) = step(
        "ftrl",
        [3.0, 3.0, 3.0],
        [[1.0] * 3, [0.1, 0.0, 1.0]],
        [0.3, -0.5, 0.5],
        lr=0.5,
        **dict(hyper, lr_power=0.0),
    )
    close(lin, [0.4, -0.5, 1.5])
    assert w[0] == 0.0 and w[1] == 0.0
    # den = (1 + 0) / 0.5 + 0 = 2; num = 0.5 - 1.5 = -1
    close(w[2:], [-0.5])


def test_ftrl_constant_rate_mlbl_gives_the_same_weights() -> None:
    """Spec 12.6: with mlbl the linear slot holds lr * linear; same weights for a constant rate."""
    base: dict[str, Any] = dict(l1=0.05, l2=0.1, lr_power=-0.5, beta=0.5)
    state = {
        False: ([0.4, -0.2], [0.1, 0.1], [0.0, 0.0]),
        True: ([0.4, -0.2], [0.1, 0.1], [0.0, 0.0]),
    }
    for g in ([0.3, -0.1], [0.2, 0.2], [-0.6, 0.05]):
        for mlbl in (False, True):
            w, acc, lin = state[mlbl]
            nw, (nacc, nlin) = step(
                "ftrl", w, [acc, lin], g, lr=0.25, multiply_linear_by_lr=mlbl, **base
            )
            state[mlbl] = (nw.tolist(), nacc.tolist(), nlin.tolist())
    close(state[True][0], state[False][0])
    close(state[True][2], [0.25 * x for x in state[False][2]])


def test_ftrl_zero_denominator_gives_zero_not_nan() -> None:
    # acc = 0 and G = 0 with beta = l2 = 0: den = p_new / lr = 0 -> the executor returns 0
    w, (acc, lin) = step("ftrl", [0.7, 0.7], [[0.0, 0.0], [0.0, 0.0]], [0.0, 0.5], lr=0.1, **FTRL)
    assert w[0] == 0.0
    close(acc, [0.0, 0.25])
    close(w[1:], [-(0.5 - 0.5 * 0.7 / 0.1) / (0.5 / 0.1)])
    w, _ = step(
        "ftrl", [0.7], [[0.0], [0.0]], [0.0], lr=0.1, **dict(FTRL, multiply_linear_by_lr=True)
    )
    assert w[0] == 0.0


# ------------------------------------------------------------------------------------------------
# 12.7 adam

ADAM: dict[str, Any] = dict(beta1=0.9, beta2=0.999, epsilon=1e-3, use_non_lazy_adam=False)


@pytest.mark.parametrize("inside", [False, True])
def test_adam_first_step_by_hand(inside: bool) -> None:
    # m = (1 - beta1) * G, v = (1 - beta2) * G^2; den = sqrt(v + eps^2) or sqrt(v) + eps.
    # 1 - beta2 is 1 - float32(0.999) = 0.00099998713 (not 0.001: 1.3e-5 relative), as in float32.
    c2 = 1.0 - r(0.999)
    w, (m, v) = step(
        "adam",
        [1.0, 1.0],
        [[0.0, 0.0], [0.0, 0.0]],
        [0.5, -2.0],
        lr=0.01,
        use_sum_inside_sqrt=inside,
        **ADAM,
    )
    close(m, [0.05, -0.2])
    close(v, [c2 * 0.25, c2 * 4.0])
    if inside:
        den = [math.sqrt(c2 * 0.25 + 1e-6), math.sqrt(c2 * 4.0 + 1e-6)]
    else:
        den = [math.sqrt(c2 * 0.25) + 1e-3, math.sqrt(c2 * 4.0) + 1e-3]
    close(w, [1.0 - 0.01 * 0.05 / den[0], 1.0 + 0.01 * 0.2 / den[1]])


def test_adam_zero_gradient_row_still_moves() -> None:
    w, (m, v) = step(
        "adam", [1.0], [[0.2], [0.04]], [0.0], lr=0.1, use_sum_inside_sqrt=False, **ADAM
    )
    close(m, [0.18])
    close(v, [0.04 * r(0.999)])
    close(w, [1.0 - 0.1 * 0.18 / (math.sqrt(0.04 * r(0.999)) + 1e-3)])


# ------------------------------------------------------------------------------------------------
# 12.8 momentum


def test_momentum_plain_and_nesterov_by_hand() -> None:
    # m = 0.9 * 0.5 + 1 = 1.45; plain w = 1 - 0.1 * 1.45; Nesterov w = 1 - (0.1 + 0.1 * 0.9 * 1.45)
    w, (m,) = step("momentum", [1.0], [[0.5]], [1.0], lr=0.1, momentum=0.9, use_nesterov=False)
    close(m, [1.45])
    close(w, [0.855])
    w, (m,) = step("momentum", [1.0], [[0.5]], [1.0], lr=0.1, momentum=0.9, use_nesterov=True)
    close(m, [1.45])
    close(w, [0.7695])


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_zero_gradient_row_still_moves(nesterov: bool) -> None:
    w, (m,) = step("momentum", [1.0], [[0.5]], [0.0], lr=0.2, momentum=0.5, use_nesterov=nesterov)
    close(m, [0.25])
    close(w, [1.0 - 0.2 * 0.5 * 0.25] if nesterov else [0.95])


# ------------------------------------------------------------------------------------------------
# 12.9 lion


def test_lion_by_hand() -> None:
    # c = 0.9 * m + 0.1 * G decides the sign from the OLD m; m = 0.99 * m + 0.01 * G
    # element 0: c = 0.09 - 0.05 > 0 -> w - lr; element 1: c = -0.9 + 0.1 < 0 -> w + lr;
    # element 2: m = 0, G = 0 -> sign(0) = 0, no move
    w, (m,) = step(
        "lion",
        [1.0, 1.0, 1.0],
        [[0.1, -1.0, 0.0]],
        [-0.5, 1.0, 0.0],
        lr=0.25,
        beta1=0.9,
        beta2=0.99,
        use_non_lazy_lion=False,
    )
    close(w, [0.75, 1.25, 1.0])
    close(m, [0.099 - 0.005, -0.99 + 0.01, 0.0])


# ------------------------------------------------------------------------------------------------
# 12.10 rms_prop, 12.11 centered_rms_prop, 12.13 adadelta


def test_rms_prop_by_hand() -> None:
    # ms = 0.9 * 0.5 + 0.1 * 4 = 0.85; mom = 0.5 * 0.2 + 0.1 * 2 / sqrt(0.85 + 0.01); w = 1 - mom
    w, (ms, mom) = step(
        "rms_prop", [1.0], [[0.5], [0.2]], [2.0], lr=0.1, rho=0.9, momentum=0.5, epsilon=0.01
    )
    close(ms, [0.85])
    expected_mom = 0.1 + 0.2 / math.sqrt(0.86)
    close(mom, [expected_mom])
    close(w, [1.0 - expected_mom])


def test_centered_rms_prop_by_hand() -> None:
    # mg = 0.9 * 0.1 + 0.1 * 2 = 0.29; ms = 0.85;
    # mom = 0.5 * 0.2 + 0.1 * 2 / sqrt(0.85 - 0.0841 + 0.01)
    w, (ms, mom, mg) = step(
        "centered_rms_prop",
        [1.0],
        [[0.5], [0.2], [0.1]],
        [2.0],
        lr=0.1,
        rho=0.9,
        momentum=0.5,
        epsilon=0.01,
    )
    close(mg, [0.29])
    close(ms, [0.85])
    expected_mom = 0.1 + 0.2 / math.sqrt(0.85 - 0.29**2 + 0.01)
    close(mom, [expected_mom])
    close(w, [1.0 - expected_mom])


def test_adadelta_by_hand() -> None:
    # acc = 0.9 * 0.2 + 0.1 * 0.25 = 0.205; u = sqrt(0.3 + 0.01) / sqrt(0.205 + 0.01) * 0.5
    # w = 1 - 0.8 * u; upd = 0.9 * 0.3 + 0.1 * u^2 (the OLD upd decays)
    w, (acc, upd) = step("adadelta", [1.0], [[0.2], [0.3]], [0.5], lr=0.8, rho=0.9, epsilon=0.01)
    u = math.sqrt(0.31) / math.sqrt(0.215) * 0.5
    close(acc, [0.205])
    close(w, [1.0 - 0.8 * u])
    close(upd, [0.27 + 0.1 * u * u])


def test_adadelta_first_step_from_zero_slots_is_tiny() -> None:
    # upd = 0: u = sqrt(eps) / sqrt(0.1 * G^2 + eps) * G
    w, (acc, upd) = step("adadelta", [0.0], [[0.0], [0.0]], [1.0], lr=1.0, rho=0.9, epsilon=1e-6)
    u = math.sqrt(1e-6) / math.sqrt(0.1 + 1e-6)
    close(acc, [0.1])
    close(w, [-u])
    close(upd, [0.1 * u * u])


# ------------------------------------------------------------------------------------------------
# 12.14 proximal_adagrad, 12.16 proximal_yogi


def test_proximal_adagrad_without_l1_by_hand() -> None:
    # acc = 0.1 + 0.09 = 0.19; eta = 0.5 / sqrt(0.19); p = 1 - eta * 0.3; w = p / (1 + eta * 0.2)
    w, (acc,) = step("proximal_adagrad", [1.0], [[0.1]], [0.3], lr=0.5, l1=0.0, l2=0.2)
    eta = 0.5 / math.sqrt(0.19)
    close(acc, [0.19])
    close(w, [(1.0 - eta * 0.3) / (1.0 + eta * 0.2)])


def test_proximal_adagrad_l1_shrinks_and_zeroes() -> None:
    # G = 0, acc = 0.25 -> eta = 0.2 / 0.5 = 0.4; threshold eta * l1 = 0.2
    w, (acc,) = step(
        "proximal_adagrad",
        [1.0, -0.15, -0.5, 0.2],
        [[0.25] * 4],
        [0.0] * 4,
        lr=0.2,
        l1=0.5,
        l2=0.25,
    )
    close(acc, [0.25] * 4)
    close(w, [0.8 / 1.1, 0.0, -0.3 / 1.1, 0.0])


def _yogi_ref(
    w: float,
    v: float,
    m: float,
    g: float,
    lr: float,
    l1: float,
    l2: float,
    b1: float,
    b2: float,
    eps: float,
) -> tuple[float, float, float]:
    m = b1 * m + (1 - b1) * g
    v = v - (1 - b2) * sign(v - g * g) * g * g
    eta = lr / (math.sqrt(v) + eps)
    p = w - eta * m
    if l1 > 0:
        p = sign(p) * max(abs(p) - eta * l1, 0.0)
    return p / (1 + eta * l2), v, m


@pytest.mark.parametrize(("l1", "l2"), [(0.0, 0.0), (0.0, 0.3), (0.02, 0.3)])
def test_proximal_yogi_against_float64(l1: float, l2: float) -> None:
    hyper: dict[str, Any] = dict(l1=l1, l2=l2, beta1=0.9, beta2=0.99, epsilon=1e-3)
    # v grows where G^2 > v (elements 0, 2), shrinks where G^2 < v (element 1), stays if equal (3)
    w0, v0, m0, g = (
        [0.5, -0.4, -0.1, 2.0],
        [0.01, 1.0, 1e-6, 0.25],
        [0.0, 0.2, 0.0, 0.1],
        [0.5, 0.1, -0.3, 0.5],
    )
    w, (v, m) = step("proximal_yogi", w0, [v0, m0], g, lr=0.05, **hyper)
    h = (r(0.05), r(l1), r(l2), r(0.9), r(0.99), r(1e-3))
    ref = elementwise(lambda w_, v_, m_, g_: _yogi_ref(w_, v_, m_, g_, *h), w0, v0, m0, g)
    close(w, ref[0])
    close(v, ref[1])
    close(m, ref[2])
    close(v[3:], [0.25])


def test_proximal_yogi_l1_zeroes_small_weights() -> None:
    # G = 0, m = 0, v = 0.01: eta = 0.1 / (sqrt(0.01) + 0) = 1; p = w; threshold eta * l1 = 0.5;
    # l2 = 0.25 divides by 1.25
    hyper: dict[str, Any] = dict(l1=0.5, l2=0.25, beta1=0.9, beta2=0.99, epsilon=0.0)
    w, (v, m) = step(
        "proximal_yogi", [0.4, -0.5, 2.0, -1.0], [[0.01] * 4, [0.0] * 4], [0.0] * 4, lr=0.1, **hyper
    )
    assert w[0] == 0.0 and w[1] == 0.0
    close(v, [0.01] * 4)  # G * G = 0: v does not move, whatever the sign
    close(m, [0.0] * 4)
    eta = r(0.1) / math.sqrt(r(0.01))
    close(w[2:], [(2.0 - eta * 0.5) / (1 + eta * 0.25), (-1.0 + eta * 0.5) / (1 + eta * 0.25)])


# ------------------------------------------------------------------------------------------------
# 12.17 frequency_estimator


def test_frequency_estimator_by_hand() -> None:
    hyper: dict[str, Any] = dict(
        tau=0.25, max_delta=50.0, outlier_threshold=2.0, weight_exponent=1.0
    )
    # n = 20 (carried by lr). last hits 16, 0, 15, -100; D = 8, 8, 2, 8
    # delta 4: not >= 16 -> 8 * 0.75 + 4 * 0.25 = 7
    # delta 20: >= 16 -> outlier, D = 20
    # delta 5: >= 4 -> outlier, D = 5
    # delta 120: outlier, capped at max_delta: D = 50
    d, (last,) = step(
        "frequency_estimator",
        [8.0, 8.0, 2.0, 8.0],
        [[16.0, 0.0, 15.0, -100.0]],
        [0.0] * 4,
        lr=20.0,
        **hyper,
    )
    close(d, [7.0, 20.0, 5.0, 50.0])
    close(last, [20.0] * 4)


def test_frequency_estimator_averages_a_capped_gap() -> None:
    hyper: dict[str, Any] = dict(
        tau=0.5, max_delta=10.0, outlier_threshold=100.0, weight_exponent=1.0
    )
    # delta 30 capped to 10, not an outlier (30 < 100 * 1): D = 1 * 0.5 + 10 * 0.5
    d, _ = step("frequency_estimator", [1.0], [[0.0]], [0.0], lr=30.0, **hyper)
    close(d, [5.5])
