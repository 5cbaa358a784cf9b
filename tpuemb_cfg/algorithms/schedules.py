"""Learning-rate schedules, each written once: the value of a schedule at a global step.

Every schedule kind tpuemb evaluates is here, whoever declares it: the embedding API's named
kinds (``tpuemb_cfg.embedding.schedules.Schedule``, TOML specs), Keras' built-in schedules and
Model Garden's ``WarmUpAndPolyDecay`` (``tpuemb_cfg.embedding.keras``, a model spec) and a
simulation spec's ``learning_rate_schedule`` (``tpuemb_cfg.sim.schedules``). So one schedule
gives the same rate at every step whichever of them declared it. (Adam's bias correction is
Adam's: ``tpuemb_cfg.algorithms.adam.bias_correction``.)

Float32, as TensorFlow computes them. A Keras schedule converts its parameters to float32 tensors
and computes its value with one TensorFlow op after another, each rounded to float32. The
functions here do the same operations in the same order on NumPy float32 scalars (``+ - * /``,
``floor``, ``ceil``, ``min`` and comparisons, exact in IEEE 754) and use the executor's own
``pow32``, ``cos32`` and ``log32`` (``tpuemb_cfg.base.numerics``: correctly rounded but for values
within 1e-15 of a rounding boundary, and the same bits on every machine) where TensorFlow calls
its ``pow``, ``cos`` and ``log`` kernels. So the value at a step is TensorFlow's float32
(``tests/data/tf/schedules.json`` holds TensorFlow 2.21's values for steps 0..N; the tests compare
them bit for bit), and a simulation sends the same bits on every machine.

``exponential_decay`` is TensorFlow's ``ExponentialDecay.__call__``::

    p = float32(step) / float32(decay_steps)        (floor(p) when staircase)
    value = float32(initial) * pow32(float32(decay_rate), p)

``step`` is the global step: 0 at the first training step (Keras' optimizer ``iterations``, an
int64). The Keras functions take the schedule's ``get_config()`` and the step.

Where TensorFlow mixes in float64 or Python arithmetic, so do these: Keras' ``1 - alpha`` and
``+ alpha`` in ``CosineDecay`` are Python floats rounded to float32 when they meet a tensor, and
``WarmUpAndPolyDecay`` computes ``batch_size / 2048 * learning_rate`` and its warm-up
``step / warmup_steps * rate`` in float64 (an int64 step divided by a Python int is float64 in
TensorFlow) before casting to float32. ``warmup_cosine`` (tpuemb's own kind, no TensorFlow
counterpart) is float64 from exact operations and ``numerics.cos64``; ``piecewise_constant``
returns one of its values unchanged (the caller rounds it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tpuemb_cfg.base import numerics

__all__ = ["SCHEDULE_FUNCTIONS", "cosine", "cosine_restarts", "exponential", "exponential_decay",
           "inverse_time", "piecewise", "piecewise_constant", "polynomial", "warmup_cosine",
           "warmup_poly_decay"]

F32 = np.float32
_PI = F32(math.pi)  # ops.array(math.pi, dtype=float32)
_ONE = F32(1.0)
_HALF = F32(0.5)


def _step(step: int) -> np.float32:
    return F32(step)  # ops.cast(step, float32)


# -- the kinds every spec can declare ----------------------------------------------------------


def exponential_decay(initial: float, decay_rate: float, decay_steps: int, staircase: bool,
                      step: int) -> np.float32:
    """``initial * decay_rate ^ p``, ``p = step / decay_steps`` (floored with ``staircase``), in
    float32 in TensorFlow's order (module docstring)."""
    with np.errstate(all="ignore"):
        p = _step(step) / F32(decay_steps)
        if staircase:
            p = np.floor(p)
        return F32(F32(initial) * numerics.pow32(F32(decay_rate), p))


def piecewise_constant(boundaries: Sequence[int], values: Sequence[Any], step: int) -> Any:
    """``values[i]`` for ``boundaries[i-1] <= step < boundaries[i]`` (``values[0]`` before the
    first boundary, ``values[-1]`` from the last one), as given: the caller rounds it. (Keras'
    ``PiecewiseConstantDecay`` puts each boundary step in the earlier piece: ``piecewise``.)"""
    position = sum(1 for boundary in boundaries if step >= boundary)
    return values[position]


def warmup_cosine(peak: float, warmup_steps: int, decay_steps: int, final: float,
                  step: int) -> float:
    """``peak * (step + 1) / warmup_steps`` during the warm-up (reaching ``peak`` at its last
    step), then a cosine from ``peak`` to ``final`` over ``decay_steps``, then ``final``: float64
    from exact operations and ``numerics.cos64``."""
    if step < warmup_steps:
        return float(peak * (step + 1) / warmup_steps)
    t = min((step - warmup_steps) / decay_steps, 1.0)
    return float(final + (peak - final) * 0.5 * (1 + numerics.cos64(math.pi * t)))


# -- Keras' built-in schedules and Model Garden's ----------------------------------------------


def exponential(c: Mapping[str, Any], step: int) -> np.float32:
    """Keras' ``ExponentialDecay``: ``exponential_decay`` of its config."""
    return exponential_decay(c["initial_learning_rate"], c["decay_rate"], c["decay_steps"],
                             c.get("staircase", False), step)


def inverse_time(c: Mapping[str, Any], step: int) -> np.float32:
    """``initial / (1 + decay_rate * p)``, ``p = step / decay_steps`` (floored with
    ``staircase``)."""
    with np.errstate(all="ignore"):
        p = _step(step) / F32(c["decay_steps"])
        if c.get("staircase", False):
            p = np.floor(p)
        return F32(F32(c["initial_learning_rate"]) / (_ONE + F32(c["decay_rate"]) * p))


def piecewise(c: Mapping[str, Any], step: int) -> np.float32:
    """Keras' sum of indicator times value: ``values[0]`` while ``step <= boundaries[0]``,
    ``values[i]`` while ``boundaries[i-1] < step <= boundaries[i]``, ``values[-1]`` after the
    last boundary. The boundaries are compared with the int64 step (a float boundary is
    truncated to an integer, as TensorFlow's cast does)."""
    boundaries = [int(b) for b in c["boundaries"]]
    values = [F32(v) for v in c["values"]]
    with np.errstate(all="ignore"):
        result = F32(0.0)
        result = result + F32(step <= boundaries[0]) * values[0]
        result = result + F32(step > boundaries[-1]) * values[-1]
        for low, high, value in zip(boundaries[:-1], boundaries[1:], values[1:-1], strict=False):
            result = result + F32(low < step <= high) * value
        return F32(result)


def polynomial(c: Mapping[str, Any], step: int) -> np.float32:
    """``(initial - end) * (1 - p) ^ power + end``, ``p = min(step, decay_steps) /
    decay_steps``; with ``cycle``, ``decay_steps`` times ``ceil(step / decay_steps)`` (1 at step
    0) and no minimum."""
    initial = F32(c["initial_learning_rate"])
    end = F32(c.get("end_learning_rate", 0.0001))
    g = _step(step)
    decay_steps = F32(c["decay_steps"])
    with np.errstate(all="ignore"):
        if c.get("cycle", False):
            multiplier = _ONE if g == 0 else np.ceil(g / F32(c["decay_steps"]))
            decay_steps = decay_steps * multiplier
        else:
            g = min(g, decay_steps)
        p = g / decay_steps
        return F32((initial - end) * numerics.pow32(_ONE - p, F32(c.get("power", 1.0))) + end)


def cosine(c: Mapping[str, Any], step: int) -> np.float32:
    """Keras' ``CosineDecay``: ``rate * ((1 - alpha) * 0.5 (1 + cos(pi t / decay_steps)) +
    alpha)`` with ``t = min(step, decay_steps)`` and ``rate = initial_learning_rate``; with a
    ``warmup_target``, first ``initial + (target - initial) * step / warmup_steps`` while
    ``step < warmup_steps``, then the cosine from ``warmup_target`` over ``t = min(step,
    warmup_steps + decay_steps) - warmup_steps``."""
    initial = F32(c["initial_learning_rate"])
    decay_steps = F32(c["decay_steps"])
    alpha = float(c.get("alpha", 0.0))
    g = _step(step)

    def decayed(at: np.float32, rate: np.float32) -> np.float32:
        fraction = at / decay_steps
        cosine_decayed = _HALF * (_ONE + numerics.cos32(_PI * fraction))
        return F32(rate * (F32(1 - alpha) * cosine_decayed + F32(alpha)))

    with np.errstate(all="ignore"):
        target = c.get("warmup_target")
        if target is None:
            return decayed(min(g, decay_steps), initial)
        target = F32(target)
        warmup = F32(c.get("warmup_steps", 0))
        g = min(g, decay_steps + warmup)
        if g < warmup:
            return F32((target - initial) * (g / warmup) + initial)
        return decayed(g - warmup, target)


def cosine_restarts(c: Mapping[str, Any], step: int) -> np.float32:
    """Keras' ``CosineDecayRestarts`` (SGDR): restart ``i`` and the fraction ``f`` of the
    current period (``floor`` and the remainder of ``step / first_decay_steps`` when ``t_mul``
    is 1, else ``i = floor(log(1 - f0 (1 - t_mul)) / log(t_mul))`` and ``f = (f0 - (1 -
    t_mul^i) / (1 - t_mul)) / t_mul^i``), then ``initial * ((1 - alpha) * 0.5 m_mul^i (1 +
    cos(pi f)) + alpha)``."""
    initial = F32(c["initial_learning_rate"])
    alpha = F32(c.get("alpha", 0.0))
    t_mul = F32(c.get("t_mul", 2.0))
    m_mul = F32(c.get("m_mul", 1.0))
    with np.errstate(all="ignore"):
        fraction = _step(step) / F32(c["first_decay_steps"])
        if t_mul == _ONE:
            restart = np.floor(fraction)
            fraction = fraction - restart
        else:
            restart = np.floor(numerics.log32(_ONE - fraction * (_ONE - t_mul))
                               / numerics.log32(t_mul))
            done = (_ONE - numerics.pow32(t_mul, restart)) / (_ONE - t_mul)
            fraction = (fraction - done) / numerics.pow32(t_mul, restart)
        factor = numerics.pow32(m_mul, restart)
        cosine_decayed = _HALF * factor * (_ONE + numerics.cos32(_PI * fraction))
        return F32(initial * ((_ONE - alpha) * cosine_decayed + alpha))


def warmup_poly_decay(c: Mapping[str, Any], step: int) -> np.float32:
    """Model Garden's DLRM embedding schedule (``official/recommendation/ranking/common.py``,
    ``WarmUpAndPolyDecay``): with ``rate = learning_rate * batch_size / 2048``, a linear warm-up
    ``step / warmup_steps * rate`` while ``step < warmup_steps``, then ``rate`` until
    ``decay_start_steps``, then ``rate * ((decay_steps - d) / decay_steps) ^ decay_exp`` with
    ``d = min(step - decay_start_steps, decay_steps)``, at least 0.0001; the result at least
    0.01. ``warmup_steps`` 0 gives ``rate`` at every step. Defaults as Model Garden's:
    ``decay_exp`` 2, ``learning_rate`` 40, ``warmup_steps`` 8000, ``decay_steps`` 12000,
    ``decay_start_steps`` 10000; ``batch_size`` is required."""
    rate = float(c.get("learning_rate", 40.0)) * (float(c["batch_size"]) / 2048)
    warmup_steps = c.get("warmup_steps", 8000)
    if warmup_steps == 0:
        return F32(rate)
    with np.errstate(all="ignore"):
        warmup = F32(step / warmup_steps * rate)  # float64 in TensorFlow, then cast
        g = _step(step)
        decay_steps = F32(c.get("decay_steps", 12000))
        start = F32(c.get("decay_start_steps", 10000))
        done = min(g - start, decay_steps)
        decay = F32(rate) * numerics.pow32((decay_steps - done) / decay_steps,
                                          F32(c.get("decay_exp", 2.0)))
        decay = max(F32(0.0001), decay)
        if g < F32(warmup_steps):
            value = warmup
        elif decay_steps > 0 and g > start:
            value = decay
        else:
            value = F32(rate)
        return F32(max(F32(0.01), value))


#: Keras class name -> (required config keys, value at a global step).
SCHEDULE_FUNCTIONS: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, Any], int],
                                                              np.float32]]] = {
    "ExponentialDecay": (("initial_learning_rate", "decay_steps", "decay_rate"), exponential),
    "InverseTimeDecay": (("initial_learning_rate", "decay_steps", "decay_rate"), inverse_time),
    "PiecewiseConstantDecay": (("boundaries", "values"), piecewise),
    "PolynomialDecay": (("initial_learning_rate", "decay_steps"), polynomial),
    "CosineDecay": (("initial_learning_rate", "decay_steps"), cosine),
    "CosineDecayRestarts": (("initial_learning_rate", "first_decay_steps"), cosine_restarts),
    "WarmUpAndPolyDecay": (("batch_size",), warmup_poly_decay),
}
