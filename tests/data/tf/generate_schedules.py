"""Regenerate ``schedules.json`` and ``initializers.json`` next to this file. RUN ONLY IN A
TENSORFLOW VENV.

    /path/to/tf-venv/bin/python tests/data/tf/generate_schedules.py

Needs tensorflow-cpu 2.21 (with its Keras 3) and tf-keras 2.21. Not a test and never imported by
the suite; tpuemb depends on none of them (issue 22: what the simulator sends and starts from).

``schedules.json``: learning-rate schedules evaluated by TensorFlow for global steps 0..N (and a
few far steps), each called as TFRS and keras-rs call them, with the optimizer's ``iterations``
(an int64 variable) holding the step: Keras 3's built-in schedules (warm-up variants included),
a few of tf-keras' (Keras 2, what TFRS's legacy optimizers carry), and Model Garden's DLRM
embedding schedule ``WarmUpAndPolyDecay``. Model Garden (tf-models-official) is not installed:
``WarmUpAndPolyDecay`` below is written from its public formula (``official/recommendation/
ranking/common.py``) with the same TensorFlow operations on the same dtypes. Values are
TensorFlow's float32 results, stored as the Python floats they convert to exactly.

Where a schedule calls ``cos``, the arguments at which TensorFlow's float32 ``cos`` is not the
correctly rounded cosine (60-digit decimals, rounded once) are stored with both values
(``cos_not_correctly_rounded``): its kernel is off by one unit in the last place for a few
arguments, so the schedule's value can be too (tpuemb's ``cos32`` is correctly rounded).

``initializers.json``: Keras 3 initializers called on a table shape ``[vocabulary_size,
embedding_dim]`` (what ``TPUEmbedding`` creates), with Keras' random draws recorded: which draw
(``uniform``, ``normal``, ``truncated_normal``) and its arguments (``minval``/``maxval``,
``mean``/``stddev``, computed by Keras from the shape's fan-in and fan-out), plus statistics of
the drawn table (mean, standard deviation, min, max); the whole table for the deterministic
initializers (zeros, ones, constant, identity). Also TensorFlow's ``TableConfig`` default.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, getcontext
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
import tf_keras
from keras.src.initializers import random_initializers

HERE = Path(__file__).resolve().parent
RANGE = list(range(601))  # steps 0..600
FAR = [0, 1, 2, 999, 1000, 1001, 7999, 8000, 8001, 9999, 10000, 10001, 15000, 21999, 22000,
       22001, 30000, 123456, 1000000]


class WarmUpAndPolyDecay(tf.keras.optimizers.schedules.LearningRateSchedule):
    """Model Garden's DLRM embedding schedule, from its published formula: a linear warm-up to
    ``learning_rate * batch_size / 2048``, that rate until ``decay_start_steps``, a polynomial
    decay of power ``decay_exp`` over ``decay_steps`` (at least 0.0001), and 0.01 at least."""

    def __init__(self, batch_size: int, decay_exp: float = 2.0, learning_rate: float = 40.0,
                 warmup_steps: int = 8000, decay_steps: int = 12000,
                 decay_start_steps: int = 10000) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.decay_exp = decay_exp
        self.learning_rate = learning_rate
        self.warmup_steps = warmup_steps
        self.decay_steps = decay_steps
        self.decay_start_steps = decay_start_steps

    def __call__(self, step: Any) -> Any:
        rate = self.learning_rate * (self.batch_size / 2048)  # Python floats
        if self.warmup_steps == 0:
            return rate
        warm = tf.cast(step / self.warmup_steps * rate, tf.float32)  # int64 / int: float64
        now = tf.cast(step, tf.float32)
        steps = tf.cast(self.decay_steps, tf.float32)
        start = tf.cast(self.decay_start_steps, tf.float32)
        decayed_for = tf.minimum(now - start, steps)
        decayed = rate * ((steps - decayed_for) / steps) ** self.decay_exp
        decayed = tf.maximum(0.0001, decayed)
        value = tf.where(now < self.warmup_steps, warm,
                         tf.where(tf.logical_and(steps > 0, now > start), decayed, rate))
        return tf.maximum(0.01, value)

    def get_config(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "decay_exp": self.decay_exp,
                "learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
                "decay_steps": self.decay_steps, "decay_start_steps": self.decay_start_steps}


def _json(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def correctly_rounded_cos(x: float) -> float:
    """cos(x) rounded once to float32: the Taylor series in 60-digit decimals."""
    getcontext().prec = 60
    value, term, k = Decimal(1), Decimal(1), 0
    while abs(term) > Decimal(10) ** -58:
        k += 2
        term = -term * Decimal(x) * Decimal(x) / (k * (k - 1))
        value += term
    below = np.float32(float(value))  # the float32 nearest to the decimal, then checked
    candidates = [np.nextafter(below, np.float32(-2)), below, np.nextafter(below, np.float32(2))]
    return float(min(candidates, key=lambda c: abs(Decimal(float(c)) - value)))


class _CosRecorder:
    """Wraps ``tf.cos`` / ``tf.math.cos`` while a schedule runs: each float32 argument and
    TensorFlow's result."""

    def __init__(self) -> None:
        self.real = tf.math.cos
        self.seen: dict[float, float] = {}

    def __call__(self, x: Any, name: Any = None) -> Any:
        result = self.real(x)
        for arg, out in zip(np.ravel(x.numpy()), np.ravel(result.numpy()), strict=True):
            self.seen[float(arg)] = float(out)
        return result


def evaluate(schedule: Any, steps: list[int]) -> tuple[list[float], list[list[float]]]:
    """The schedule at each step, called with an int64 variable as the optimizers do, and the
    arguments where TensorFlow's float32 ``cos`` is not the correctly rounded cosine:
    ``[x, TensorFlow's cos(x), correctly rounded cos(x)]``."""
    iterations = tf.Variable(0, dtype=tf.int64)
    recorder = _CosRecorder()
    modules = (tf, tf.math, tf.compat.v2, tf.compat.v2.math)  # Keras 3's and tf-keras' tf.cos
    for module in modules:
        module.cos = recorder
    try:
        values = []
        for step in steps:
            iterations.assign(step)
            value = schedule(iterations)
            value = value.numpy() if hasattr(value, "numpy") else value
            values.append(float(np.float32(value)))
    finally:
        for module in modules:
            module.cos = recorder.real
    off = [[x, out, correctly_rounded_cos(x)] for x, out in sorted(recorder.seen.items())
           if correctly_rounded_cos(x) != out]
    return values, off


def schedule_case(name: str, library: str, schedule: Any, steps: list[int]) -> dict[str, Any]:
    values, off = evaluate(schedule, steps)
    case = {"name": name, "library": library, "class_name": type(schedule).__name__,
            "config": _json(schedule.get_config()),
            "steps": {"range": [0, len(steps)]} if steps == RANGE else steps,
            "values": values}
    if off:
        case["cos_not_correctly_rounded"] = off
    return case


def schedules() -> list[dict[str, Any]]:
    k3 = keras.optimizers.schedules
    k2 = tf_keras.optimizers.schedules
    cases = [
        ("exponential", "keras", k3.ExponentialDecay(0.1, 100, 0.96), RANGE),
        ("exponential_staircase", "keras", k3.ExponentialDecay(0.5, 37, 0.3, staircase=True),
         RANGE),
        ("inverse_time", "keras", k3.InverseTimeDecay(0.2, 50, 0.5), RANGE),
        ("inverse_time_staircase", "keras", k3.InverseTimeDecay(0.2, 50, 0.5, staircase=True),
         RANGE),
        ("piecewise", "keras", k3.PiecewiseConstantDecay([100, 250, 400],
                                                          [0.1, 0.05, 0.01, 0.001]), RANGE),
        ("polynomial", "keras", k3.PolynomialDecay(0.1, 300, 0.001, power=2.0), RANGE),
        ("polynomial_cycle", "keras", k3.PolynomialDecay(0.1, 150, 0.01, power=0.5, cycle=True),
         RANGE),
        ("cosine", "keras", k3.CosineDecay(0.1, 500, alpha=0.1), RANGE),
        ("cosine_warmup", "keras", k3.CosineDecay(0.0, 400, warmup_target=0.05,
                                                  warmup_steps=100), RANGE),
        ("cosine_warmup_alpha", "keras", k3.CosineDecay(0.001, 300, alpha=0.05,
                                                        warmup_target=0.1, warmup_steps=50),
         RANGE),
        ("cosine_restarts", "keras", k3.CosineDecayRestarts(0.1, 50, t_mul=2.0, m_mul=0.9,
                                                            alpha=0.01), RANGE),
        ("cosine_restarts_t1", "keras", k3.CosineDecayRestarts(0.1, 60, t_mul=1.0, m_mul=0.8),
         RANGE),
        ("cosine_restarts_t1_5", "keras", k3.CosineDecayRestarts(0.05, 40, t_mul=1.5), RANGE),
        ("legacy_polynomial", "tf_keras", k2.PolynomialDecay(0.05, 200, 0.0, power=3.0), RANGE),
        ("legacy_cosine_warmup", "tf_keras", k2.CosineDecay(0.0, 300, warmup_target=0.2,
                                                            warmup_steps=60), RANGE),
        ("legacy_cosine_restarts", "tf_keras", k2.CosineDecayRestarts(0.1, 50, m_mul=0.9),
         RANGE),
        ("warmup_poly_decay", "model_garden",
         WarmUpAndPolyDecay(16384, decay_exp=2.0, learning_rate=0.4, warmup_steps=100,
                            decay_steps=200, decay_start_steps=300), RANGE),
        ("warmup_poly_decay_defaults", "model_garden", WarmUpAndPolyDecay(65536), FAR),
        ("warmup_poly_decay_no_warmup", "model_garden",
         WarmUpAndPolyDecay(4096, learning_rate=0.3, warmup_steps=0), [0, 1, 500]),
    ]
    return [schedule_case(*case) for case in cases]


# -- initializers --------------------------------------------------------------------------------


class _Recorder:
    """Stands for ``keras.src.backend.random`` inside the initializers: records each draw."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        function = getattr(self.real, name)
        if name not in ("uniform", "normal", "truncated_normal"):
            return function

        def record(shape: Any, **kwargs: Any) -> Any:
            shown = {k: float(v) for k, v in kwargs.items()
                     if k in ("minval", "maxval", "mean", "stddev")}
            self.calls.append({"draw": name, **shown})
            return function(shape, **kwargs)

        return record


def initializer_case(name: str, identifier: Any, shape: list[int],
                     whole: bool = False) -> dict[str, Any]:
    recorder = _Recorder(random_initializers.random)
    random_initializers.random = recorder
    try:
        initializer = keras.initializers.get(identifier)
        values = np.asarray(initializer(shape, dtype="float32"))
    finally:
        random_initializers.random = recorder.real
    entry: dict[str, Any] = {
        "name": name,
        "identifier": identifier if isinstance(identifier, str) else None,
        "serialized": _json(keras.initializers.serialize(initializer)),
        "shape": shape,
        "draws": recorder.calls,
        "statistics": {"mean": float(values.astype(np.float64).mean()),
                       "std": float(values.astype(np.float64).std()),
                       "min": float(values.min()), "max": float(values.max())},
    }
    if whole:
        entry["values"] = values.tolist()
    return entry


def initializers() -> dict[str, Any]:
    ki = keras.initializers
    big = [4000, 32]
    wide = [50, 400]
    cases = [
        initializer_case("uniform", "uniform", big),
        initializer_case("random_uniform", ki.RandomUniform(-0.3, 0.7, seed=1), big),
        initializer_case("normal", "normal", big),
        initializer_case("random_normal", ki.RandomNormal(0.5, 2.0, seed=2), big),
        initializer_case("truncated_normal", "truncated_normal", big),
        initializer_case("truncated_normal_own", ki.TruncatedNormal(0.1, 0.3, seed=3), big),
        initializer_case("glorot_uniform", "glorot_uniform", big),
        initializer_case("glorot_uniform_wide", "glorot_uniform", wide),
        initializer_case("glorot_normal", "glorot_normal", big),
        initializer_case("he_uniform", "he_uniform", big),
        initializer_case("he_normal", "he_normal", wide),
        initializer_case("lecun_uniform", "lecun_uniform", big),
        initializer_case("lecun_normal", "lecun_normal", big),
        initializer_case("variance_scaling", "variance_scaling", big),
        initializer_case("variance_scaling_keras_rs", ki.VarianceScaling(mode="fan_out", seed=4),
                         big),
        initializer_case("variance_scaling_fan_avg_untruncated",
                         ki.VarianceScaling(2.5, "fan_avg", "untruncated_normal", seed=5), wide),
        initializer_case("variance_scaling_uniform_fan_out",
                         ki.VarianceScaling(0.5, "fan_out", "uniform", seed=6), big),
        initializer_case("zeros", "zeros", [6, 4], whole=True),
        initializer_case("ones", "ones", [6, 4], whole=True),
        initializer_case("constant", ki.Constant(0.25), [6, 4], whole=True),
        initializer_case("identity", ki.Identity(gain=2.0), [6, 4], whole=True),
        initializer_case("identity_wide", "identity", [3, 5], whole=True),
    ]
    default = tf.tpu.experimental.embedding.TableConfig(vocabulary_size=1000, dim=64).initializer
    return {"cases": cases,
            "table_config_default": {"dim": 64, "class_name": type(default).__name__,
                                     "config": _json(default.get_config()),
                                     "stddev_expected": 1 / math.sqrt(64)}}


def main() -> None:
    versions = {"tensorflow": tf.__version__, "keras": keras.__version__,
                "tf_keras": tf_keras.__version__}
    cases = ",\n".join(json.dumps(case) for case in schedules())  # one case a line
    (HERE / "schedules.json").write_text(
        f'{{"generator": {json.dumps(versions)},\n"cases": [\n{cases}\n]}}\n')
    (HERE / "initializers.json").write_text(
        json.dumps({"generator": versions, **initializers()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
