"""One schedule, one set of rates (issue 35): a model spec and a simulation spec that declare the
same learning-rate schedule send the same float32 rate at every step, and it is TensorFlow's.

The schedules are written once (``tpuemb_cfg.algorithms.schedules``); before, the embedding API
computed ``exponential_decay`` in float64 and a simulation spec in float32, and the issue's
schedule (0.1, times 0.96 every 7 steps) gave different rates at 183 of 200 steps. Reference
values: TensorFlow 2.21's, stored by ``tests/data/tf/generate_schedules.py``
(``schedules.json``: ``exponential``, 0.1 times 0.96 every 100 steps, and
``exponential_staircase``, 0.5 times 0.3 every 37 steps, floored) and, for the issue's own
schedule and its staircase twin, ``tests/data/tf/generate_exponential_decay.py``
(``exponential_decay.json``: ``issue35``, ``issue35_staircase``). Each case is also checked
against TensorFlow's formula evaluated independently here: ``p = float32(step) /
float32(decay_steps)``, the power ``float32(rate) ^ p`` to 50 digits (``decimal``) rounded to
float32 once, times ``float32(initial)`` in float32.
"""

from __future__ import annotations

import json
from decimal import Decimal, localcontext
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, require_data

from tpuemb_cfg.embedding import (
    SGD,
    FeatureConfig,
    KerasSchedule,
    Schedule,
    TableConfig,
    build_config,
)
from tpuemb_cfg.embedding.schedules import schedule_from_mapping
from tpuemb_cfg.executor import FeatureInput
from tpuemb_cfg.sim.spec import load_spec
from tpuemb_cfg.simulate import Executor, SyntheticRun

F32 = np.float32
STEPS = 200
TWO_TABLES = str(DATA / "multiworker" / "two_tables.pbtxt")  # dynamic tags 0 and 1

#: (initial, decay rate, decay steps, staircase, the stored TensorFlow case: file, name).
CASES = [
    (0.1, 0.96, 7, False, ("exponential_decay.json", "issue35")),  # the issue's schedule
    (0.1, 0.96, 7, True, ("exponential_decay.json", "issue35_staircase")),
    (0.1, 0.96, 100, False, ("schedules.json", "exponential")),
    (0.5, 0.3, 37, True, ("schedules.json", "exponential_staircase")),
]


def _tensorflow(stored: tuple[str, str]) -> np.ndarray:
    file, name = stored
    path = DATA / "tf" / file
    require_data(path)
    case = next(c for c in json.loads(path.read_text())["cases"] if c["name"] == name)
    return np.array(case["values"][:STEPS], dtype=F32)


def _formula(initial: float, rate: float, decay_steps: int, staircase: bool) -> np.ndarray:
    """TensorFlow's ``ExponentialDecay`` in float32, the power to 50 digits, rounded once."""
    out = []
    with localcontext() as context:
        context.prec = 50
        for step in range(STEPS):
            p = F32(step) / F32(decay_steps)
            if staircase:
                p = np.floor(p)
            power = F32(float(Decimal(float(F32(rate))) ** Decimal(float(p))))
            out.append(F32(F32(initial) * power))
    return np.array(out, dtype=F32)


def _model_rates(initial: float, rate: float, decay_steps: int, staircase: bool) -> np.ndarray:
    """[STEPS, 3]: the rates a model spec's executor sends for the schedule declared three ways:
    tpuemb's named kind, the same from a TOML table, and Keras' ``ExponentialDecay``."""
    named = Schedule("decay", "exponential_decay", initial=initial, decay_rate=rate,
                     decay_steps=decay_steps, staircase=staircase)
    toml = schedule_from_mapping("decay", {"kind": "exponential_decay", "initial": initial,
                                           "decay_rate": rate, "decay_steps": decay_steps,
                                           "staircase": staircase})
    keras = KerasSchedule("ExponentialDecay", {
        "initial_learning_rate": initial, "decay_steps": decay_steps, "decay_rate": rate,
        "staircase": staircase})
    features = {
        f"f{index}": FeatureConfig(TableConfig(vocabulary_size=4, dim=1, name=f"t{index}",
                                               optimizer=SGD(learning_rate=schedule)))
        for index, schedule in enumerate((named, toml, keras))
    }
    compiled = build_config(features, per_replica_batch_size=1)
    executor = Executor(compiled, engine="numpy")
    batch = [FeatureInput(np.zeros(0, np.int64), np.zeros(2, np.int64), None,
                          np.zeros((1, 1), F32)) for _ in compiled.features]
    out = []
    for _ in range(STEPS):
        executor.step(batch)  # no rates given: the spec's schedules give them
        out.append(executor.last_learning_rates.copy())
    return np.array(out, dtype=F32)


def _simulation_rates(tmp_path: Path, initial: float, rate: float, decay_steps: int,
                      staircase: bool) -> np.ndarray:
    """[STEPS]: the rates a simulation spec's schedule sends on tag 1."""
    spec = tmp_path / "sim.pbtxt"
    spec.write_text(
        "learning_rate_schedule { tag: 1 exponential_decay { "
        f"initial_learning_rate: {initial} decay_rate: {rate} decay_steps: {decay_steps} "
        f"staircase: {str(staircase).lower()} }} }}\n")
    run = SyntheticRun(TWO_TABLES, schedules=load_spec(spec).schedules)
    return np.array([run.data.learning_rates(step)[1] for step in range(STEPS)], dtype=F32)


def _bits(values: np.ndarray) -> list[int]:
    return values.astype(F32).view(np.int32).tolist()  # type: ignore[no-any-return]


@pytest.mark.parametrize(("initial", "rate", "decay_steps", "staircase", "stored"), CASES)
def test_model_and_simulation_specs_send_tensorflows_rates(
        tmp_path: Path, initial: float, rate: float, decay_steps: int, staircase: bool,
        stored: tuple[str, str]) -> None:
    model = _model_rates(initial, rate, decay_steps, staircase)
    simulation = _simulation_rates(tmp_path, initial, rate, decay_steps, staircase)
    expected = _tensorflow(stored)
    # TensorFlow's values are its formula's, rounded once (an independent reading of them)
    assert _bits(_formula(initial, rate, decay_steps, staircase)) == _bits(expected)
    for column in range(model.shape[1]):
        assert _bits(model[:, column]) == _bits(expected), column
    assert _bits(simulation) == _bits(expected)
    # the schedule decays: not a constant that would match anything
    assert expected[0] == F32(initial) and expected[-1] < expected[0]


def test_the_issues_schedule_differed_in_float64() -> None:
    """The float64 formula the embedding API used before rounds differently from TensorFlow's
    float32 at most steps of the issue's schedule: the test above would catch its return."""
    expected = _formula(0.1, 0.96, 7, False)
    float64 = np.array([F32(0.1 * 0.96 ** (step / 7)) for step in range(STEPS)], dtype=F32)
    assert (float64 != expected).sum() > STEPS // 2
