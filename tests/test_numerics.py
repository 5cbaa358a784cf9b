"""docs/numerics.md, rule by rule: ``pow32`` / ``pow64``, the lane and row orders of the update
norm, and the signed-zero start of every sum, each against an independent computation (C99's
table, 50-digit decimal powers, written-out Python loops)."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest

from tpuemb_cfg.base import numerics
from tpuemb_cfg.executor.engines import numpy as reference

F32 = np.float32
INF = math.inf
NAN = math.nan


def _same(a: object, b: object) -> bool:
    """Equal floats with the same sign of zero, or both NaN."""
    a, b = float(a), float(b)  # type: ignore[arg-type]
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# C99 Annex F.9.4.4 (pow), case by case: (x, y, pow(x, y)).
C99 = [
    (NAN, 0.0, 1.0), (NAN, -0.0, 1.0), (INF, 0.0, 1.0), (1.0, NAN, 1.0), (1.0, INF, 1.0),
    (1.0, -INF, 1.0), (-1.0, INF, 1.0), (-1.0, -INF, 1.0), (NAN, 2.0, NAN), (2.0, NAN, NAN),
    (0.0, -3.0, INF), (-0.0, -3.0, -INF), (0.0, -2.0, INF), (-0.0, -2.0, INF),
    (-0.0, -0.5, INF), (0.0, 3.0, 0.0), (-0.0, 3.0, -0.0), (-0.0, 2.0, 0.0), (-0.0, 0.5, 0.0),
    (0.5, -INF, INF), (2.0, -INF, 0.0), (0.5, INF, 0.0), (2.0, INF, INF),
    (-INF, -3.0, -0.0), (-INF, -2.0, 0.0), (-INF, 3.0, -INF), (-INF, 2.0, INF),
    (-INF, 0.5, INF), (INF, -1.0, 0.0), (INF, 0.5, INF), (-2.0, 0.5, NAN), (-2.0, 3.0, -8.0),
    (-2.0, -2.0, 0.25), (2.0, 0.5, F32(math.sqrt(2.0))), (4.0, -0.5, 0.5),
    (3.4e38, 2.0, INF), (1e-30, 2.0, 0.0), (1e-45, -1.0, INF),
]


@pytest.mark.parametrize(("x", "y", "want"), C99, ids=[f"{x}^{y}" for x, y, _ in C99])
def test_pow32_special_cases_follow_c99(x: float, y: float, want: float) -> None:
    assert _same(numerics.pow32(F32(x), F32(y)), F32(want))
    assert numerics.pow32(F32(x), F32(y)).dtype == F32


def _exact_pow(x: float, y: float) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 50
        return Decimal(x) ** Decimal(y)


def test_pow32_is_correctly_rounded_on_random_values() -> None:
    """Against 50-digit decimal powers: every result is the float32 nearest the exact power
    (the design allows a miss within 2e-15 of a rounding boundary; none occurs here)."""
    rng = np.random.default_rng(20)
    x = np.exp(rng.uniform(-20, 20, 1500)).astype(F32)
    y = rng.uniform(-4, 4, 1500).astype(F32)
    y[:300] = (-1.0 / rng.integers(1, 12, 300)).astype(F32)  # Adagrad-momentum's -1/k
    got = numerics.pow32(x, y)
    for xi, yi, gi in zip(x, y, got, strict=True):
        exact = _exact_pow(float(xi), float(yi))
        below, above = np.nextafter(gi, F32(0)), np.nextafter(gi, F32(INF))
        # gi is the nearest float32: the exact value lies within half a step on either side
        assert Decimal(float(below)) + (Decimal(float(gi)) - Decimal(float(below))) / 2 <= exact
        assert exact <= Decimal(float(gi)) + (Decimal(float(above)) - Decimal(float(gi))) / 2


def test_pow64_is_within_its_documented_error() -> None:
    """Relative error below 2.5e-16 (4 + |y ln x|): the logarithm's rounding grows with the
    exponent the result is raised by."""
    rng = np.random.default_rng(21)
    for x, y in zip(np.exp(rng.uniform(-30, 30, 300)), rng.uniform(-6, 6, 300), strict=True):
        exact = _exact_pow(float(x), float(y))
        bound = Decimal(2.5e-16 * (4.0 + abs(float(y) * math.log(float(x)))))
        assert abs(Decimal(numerics.pow64(float(x), float(y))) - exact) <= exact * bound
    assert numerics.pow64(2.0, 10) == 1024.0
    assert numerics.pow64(0.9, 0) == 1.0


def test_compiled_pow32_has_the_same_bits() -> None:
    pytest.importorskip("numba")
    from tpuemb_cfg.executor.engines import numba_numerics
    from tpuemb_cfg.executor.engines.jit import njit

    @njit(error_model="numpy")
    def each(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        for i in range(x.shape[0]):
            out[i] = numba_numerics.pow32(x[i], y[i])

    rng = np.random.default_rng(22)
    x = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(F32)
    y = (rng.standard_normal(200_000) * 3).astype(F32)
    special = np.array([c[0] for c in C99], F32), np.array([c[1] for c in C99], F32)
    x, y = np.concatenate([x, special[0]]), np.concatenate([y, special[1]])
    compiled = np.empty_like(x)
    each(x, y, compiled)
    assert np.array_equal(compiled.view(np.uint32), numerics.pow32(x, y).view(np.uint32))


def _lane_sum(delta: list[float]) -> float:
    """The documented per-row order, written out: float64 squares, 8 lanes, pairs."""
    lanes = [0.0] * 8
    for d, value in enumerate(delta):
        lanes[d % 8] = lanes[d % 8] + value * value
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + (
        (lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))


@pytest.mark.parametrize("dim", [1, 3, 8, 13, 64, 100])
def test_row_sumsq_follows_the_lane_order(dim: int) -> None:
    rng = np.random.default_rng(dim)
    # magnitudes far apart, so another order gives other bits
    after = (rng.standard_normal((6, dim)) * 10.0 ** rng.integers(-6, 6, (6, dim))).astype(F32)
    before = rng.standard_normal((6, dim)).astype(F32)
    got = numerics.row_sumsq(after, before)
    for r in range(6):
        delta = [float(F32(a) - F32(b)) for a, b in zip(after[r], before[r], strict=True)]
        assert got[r] == _lane_sum(delta)


def test_total_adds_in_row_order() -> None:
    values = np.array([1.0, 1e-16, 1e-16, 1e-16, 1e-16, 3.0], np.float64)
    want = 0.0
    for v in values:
        want = want + float(v)
    assert numerics.total(values) == want == 4.0  # pairwise summation would give 4.0000000000000004
    assert numerics.total(np.zeros(0)) == 0.0


def test_change_norm_is_the_ordered_total_on_both_engines() -> None:
    rng = np.random.default_rng(5)
    params = (rng.standard_normal((50, 13)) * 10.0 ** rng.integers(-4, 4, (50, 13))).astype(F32)
    rows = np.array([2, 7, 8, 30, 49])
    before = rng.standard_normal((5, 13)).astype(F32)
    want = 0.0
    for i, r in enumerate(rows):
        want = want + _lane_sum([float(params[r, d] - before[i, d]) for d in range(13)])
    assert reference.change_norm(params, rows, before) == math.sqrt(want)
    pytest.importorskip("numba")
    from tpuemb_cfg.executor.engines import get_engine

    compiled = get_engine("numba")
    assert compiled.name == "numba"
    assert compiled.change_norm(params, rows, before) == math.sqrt(want)


def test_sums_start_from_their_first_term() -> None:
    """-0.0 stays -0.0 (a sum from +0.0 would give +0.0); an empty bag is +0.0."""
    rows = np.array([[-0.0, 1.0], [-0.0, -0.0], [2.0, 3.0]], F32)
    gains = np.array([1.0, 1.0, 1.0], F32)
    splits = np.array([0, 1, 1, 3])
    engines = [reference]
    try:
        from tpuemb_cfg.executor.engines import get_engine

        engines.append(get_engine("numba"))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - numba is a dependency
        pass
    for engine in engines:
        out = engine.combine(rows, gains, splits)
        assert _same(out[0, 0], -0.0) and _same(out[1, 0], 0.0) and _same(out[1, 1], 0.0)
        assert _same(out[2, 1], 3.0)
        summed = engine.segment_sum(rows, np.array([1, 1, 0]), 3)
        assert _same(summed[1, 0], -0.0) and _same(summed[1, 1], 1.0) and _same(summed[2, 0], 0.0)
