"""A spec's learning-rate schedules run every step (issue 22, part C: ``executor.rates``).

TensorFlow sends ``[float32(fn()) for fn in dynamic_learning_rates]`` every step; the simulator
now does the same with the spec's callables instead of ``--learning-rate``. The reference values
are TensorFlow 2.21's (``tests/data/tf/schedules.json``, written by ``generate_schedules.py``):
Keras 3 and tf-keras schedules and Model Garden's ``WarmUpAndPolyDecay`` evaluated by TensorFlow
for steps 0..600 with an int64 step, as the optimizers call them.

Exactly or why not: every value equals TensorFlow's float32 bit for bit, except where a schedule
calls ``cos`` and TensorFlow's float32 ``cos`` kernel is not correctly rounded (it is one unit in
the last place off for a few arguments; tpuemb's ``cos32`` is correctly rounded, the same on
every machine). The generator stored those arguments with both values; with TensorFlow's ``cos``
put back at exactly those arguments, every value of every step is TensorFlow's.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal, getcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DATA, require_data, run_simulate

from tpuemb_cfg.base import numerics
from tpuemb_cfg.base.errors import InputError, NumericalError
from tpuemb_cfg.embedding import (
    SGD,
    Adagrad,
    FeatureConfig,
    KerasSchedule,
    Schedule,
    TableConfig,
    build_config,
    from_keras,
)
from tpuemb_cfg.executor import FeatureInput
from tpuemb_cfg.session import prepare
from tpuemb_cfg.simulate import Executor, MultiWorkerRun, SyntheticRun

F32 = np.float32


def _cases() -> list[dict[str, Any]]:
    path = DATA / "tf" / "schedules.json"
    return json.loads(path.read_text())["cases"] if path.exists() else []


def _steps(case: dict[str, Any]) -> list[int]:
    steps = case["steps"]
    return list(range(*steps["range"])) if isinstance(steps, dict) else list(steps)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(F32).view(np.int32).astype(np.int64)
                  - b.astype(F32).view(np.int32).astype(np.int64))


def _one_table_per_schedule(cases: list[dict[str, Any]]) -> Any:
    """A compiled spec with one SGD table per case, each on its own tag (tag k: case k)."""
    features = {}
    for index, case in enumerate(cases):
        schedule = KerasSchedule(case["class_name"], case["config"])
        table = TableConfig(vocabulary_size=4, dim=1, name=f"t{index:02d}",
                            optimizer=SGD(learning_rate=schedule))
        features[f"f{index:02d}"] = FeatureConfig(table)
    return build_config(features, per_replica_batch_size=1)


def _empty_batch(count: int) -> list[FeatureInput]:
    return [FeatureInput(np.zeros(0, np.int64), np.zeros(2, np.int64), None,
                         np.zeros((1, 1), F32)) for _ in range(count)]


def _run_rates(compiled: Any, steps: int) -> np.ndarray:
    """The learning rates ``Executor(compiled)`` sends at steps 0..steps-1 (no rates given)."""
    executor = Executor(compiled, engine="numpy")
    batch = _empty_batch(len(compiled.features))
    out = []
    for _ in range(steps):
        executor.step(batch)  # no learning rates: the spec's callables give them
        out.append(executor.last_learning_rates.copy())
    return np.array(out)


def test_every_schedule_gives_tensorflows_float32_at_every_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    require_data(DATA / "tf" / "schedules.json")
    cases = [c for c in _cases() if isinstance(c["steps"], dict)]
    assert {c["class_name"] for c in cases} == {
        "ExponentialDecay", "InverseTimeDecay", "PiecewiseConstantDecay", "PolynomialDecay",
        "CosineDecay", "CosineDecayRestarts", "WarmUpAndPolyDecay"}
    steps = max(len(_steps(c)) for c in cases)
    sent = _run_rates(_one_table_per_schedule(cases), steps)
    off = {x: (tf_value, exact) for case in cases
           for x, tf_value, exact in case.get("cos_not_correctly_rounded", [])}
    differ = 0
    for tag, case in enumerate(cases):
        expected = np.array(case["values"], dtype=F32)
        ulps = _ulps(sent[:, tag], expected)
        uses_cos = case["class_name"] in ("CosineDecay", "CosineDecayRestarts")
        # Exactly, or (a cosine schedule, where TensorFlow's cos is off) within two units.
        assert ulps.max() <= (2 if uses_cos else 0), (case["name"], int(ulps.argmax()))
        differ += int((ulps > 0).sum())
    assert 0 < differ < 0.01 * sum(len(c["values"]) for c in cases)
    # Where TensorFlow's cos is not correctly rounded, tpuemb's is: and with TensorFlow's cos put
    # back at those arguments, every value of every step is TensorFlow's, bit for bit.
    for x, (tf_value, exact) in off.items():
        assert numerics.cos32(F32(x)) == F32(exact) != F32(tf_value)
    real = numerics.cos32
    monkeypatch.setattr(numerics, "cos32", lambda v: F32(off[float(v)][0]) if float(v) in off
                        else real(v))
    sent = _run_rates(_one_table_per_schedule(cases), steps)
    for tag, case in enumerate(cases):
        assert (sent[:, tag] == np.array(case["values"], dtype=F32)).all(), case["name"]


def test_model_gardens_warmup_at_its_own_steps() -> None:
    """Model Garden's default WarmUpAndPolyDecay (8000 warm-up steps, decay from 10000 over
    12000) at far steps, and without warm-up, through from_keras as TFRS translates it."""
    require_data(DATA / "tf" / "schedules.json")
    for case in (c for c in _cases() if not isinstance(c["steps"], dict)):
        # The serialized form Model Garden writes: RANKING>WarmUpAndPolyDecay.
        optimizer = from_keras({"class_name": "SGD", "config": {"learning_rate": {
            "class_name": "RANKING>" + case["class_name"], "config": case["config"]}}})
        schedule = optimizer.learning_rate
        values = [F32(schedule.value(step)) for step in _steps(case)]
        assert values == [F32(v) for v in case["values"]], case["name"]


def test_a_warmup_schedule_through_the_command(tmp_path: Path) -> None:
    """``tpuemb simulate spec.py`` sends the spec's schedule (not --learning-rate) and reports
    the value of every step: TensorFlow's values of Keras' CosineDecay with warm-up."""
    require_data(DATA / "tf" / "schedules.json")
    case = next(c for c in _cases() if c["name"] == "cosine_warmup_alpha")
    spec = tmp_path / "spec.py"
    spec.write_text(
        "from tpuemb_cfg.embedding import Adagrad, FeatureConfig, KerasSchedule, TableConfig\n"
        f"warmup = KerasSchedule('CosineDecay', {case['config']!r})\n"
        "table = TableConfig(vocabulary_size=50, dim=4, name='t',\n"
        "                    optimizer=Adagrad(learning_rate=warmup))\n"
        "feature_config = {'f': FeatureConfig(table)}\n"
        "per_replica_batch_size = 8\n")
    code, output = run_simulate(str(spec), "--steps", "60", "--out-dir", str(tmp_path / "o"),
                                "--json", "-q")
    assert code == 0, output
    rates = json.loads(output)["learning_rates"]
    assert [r["tag"] for r in rates] == [0] and rates[0]["used_by"] == ["table 't'"]
    assert rates[0]["source"].startswith("the spec: CosineDecay = CosineDecay(")
    assert [F32(v) for v in rates[0]["per_step"]] == [F32(v) for v in case["values"][:60]]
    code, text = run_simulate(str(spec), "--steps", "60", "--out-dir", str(tmp_path / "p"))
    assert code == 0, text
    first, last = case["values"][0], case["values"][59]
    assert (f"learning rate tag 0 (table 't'): {first:.6g} (step 0) -> {last:.6g} (step 59), "
            f"min {first:.6g}, max ") in text


def _zero_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "zero.py"
    spec.write_text(
        "from tpuemb_cfg.embedding import (SGD, Adagrad, Adam, FeatureConfig, KerasSchedule,\n"
        "                                  Schedule, TableConfig)\n"
        "off = KerasSchedule('PiecewiseConstantDecay',\n"
        "                    {'boundaries': [2], 'values': [0.0, 0.0]})\n"
        "tables = [\n"
        "    TableConfig(vocabulary_size=40, dim=4, name='sgd',\n"
        "                optimizer=SGD(learning_rate=off)),\n"
        "    TableConfig(vocabulary_size=40, dim=4, name='adagrad',\n"
        "                optimizer=Adagrad(learning_rate=lambda: 0.0)),\n"
        "    TableConfig(vocabulary_size=40, dim=4, name='adam', optimizer=Adam(\n"
        "        learning_rate=Schedule('zero', 'constant', value=0.0))),\n"
        "]\n"
        "feature_config = {t.name: FeatureConfig(t) for t in tables}\n"
        "per_replica_batch_size = 16\n")
    return spec


def test_a_zero_learning_rate_schedule_leaves_the_tables_unchanged(tmp_path: Path) -> None:
    spec = _zero_spec(tmp_path)
    prepared = prepare(str(spec))
    before = {k: np.array(v) for k, v in Executor(prepared).state_arrays().items()
              if k.startswith("table/")}
    run = SyntheticRun(prepared)
    run.run(5)
    after = run.executor.state_arrays()
    for key, values in before.items():
        assert np.array_equal(np.asarray(after[key]), values), key
    summary = run.summary()
    assert [r["per_step"] for r in summary["learning_rates"]] == [[0.0] * 5] * 3
    assert all(norm == 0.0 for t in summary["tables"].values() for norm in t["update_norm"])
    # The accumulators still move (Adagrad's and Adam's slots see the gradients): the steps ran.
    slots = {k: np.asarray(v) for k, v in after.items() if k.startswith("slot/adagrad/")}
    assert not np.all(slots["slot/adagrad/accumulators"] == F32(0.1))
    # What the issue saw: --learning-rate (0.1) on every tag moved every table.
    moved = SyntheticRun(prepared, learning_rate=0.1)
    moved.run(5)
    for key, values in before.items():
        assert not np.array_equal(np.asarray(moved.executor.state_arrays()[key]), values), key


def test_the_command_leaves_a_zero_schedules_tables_unchanged(tmp_path: Path) -> None:
    spec = _zero_spec(tmp_path)
    code, output = run_simulate(str(spec), "--steps", "4", "--out-dir", str(tmp_path / "o"),
                                "-q", "--json")
    assert code == 0, output
    summary = json.loads(output)
    assert all(norm == 0.0 for t in summary["tables"].values() for norm in t["update_norm"])
    # --learning-rate given: it replaces the spec's rates on every tag (Adam bias-corrected).
    code, output = run_simulate(str(spec), "--steps", "2", "--out-dir", str(tmp_path / "p"),
                                "-q", "--json", "--learning-rate", "0.05")
    assert code == 0, output
    rates = {r["used_by"][0]: r for r in json.loads(output)["learning_rates"]}
    assert rates["table 'sgd'"]["per_step"] == [float(F32(0.05))] * 2
    assert rates["table 'sgd'"]["source"] == "learning_rate=0.05"
    beta1, beta2 = float(F32(0.9)), float(F32(0.999))  # the proto's float32 betas
    correction = [math.sqrt(1 - beta2 ** n) / (1 - beta1 ** n) for n in (1, 2)]
    assert rates["table 'adam'"]["per_step"] == [float(F32(0.05 * c)) for c in correction]


def test_several_workers_send_the_specs_rates_per_update() -> None:
    """The chief's n-th update gets the spec's value at step n, as a single-worker step n."""
    schedule = KerasSchedule("ExponentialDecay", {"initial_learning_rate": 0.2,
                                                  "decay_steps": 3, "decay_rate": 0.5})
    table = TableConfig(vocabulary_size=30, dim=2, name="t", optimizer=SGD(learning_rate=schedule))
    compiled = build_config({"f": FeatureConfig(table)}, per_replica_batch_size=4)
    run = MultiWorkerRun(prepare(compiled), workers=2)
    run.run(3)
    summary = run.summary()
    (rates,) = summary["learning_rates"]
    updates = summary["global_step"]
    assert updates == run.executor.step_index >= 2
    assert rates["per_step"] == [float(F32(schedule.value(n))) for n in range(updates)]
    assert summary["learning_rate_schedules"] == [
        "tag 0: ExponentialDecay = ExponentialDecay(initial_learning_rate=0.2, decay_steps=3, "
        "decay_rate=0.5)"]


def test_callables_of_the_step_and_of_nothing() -> None:
    """A callable with one parameter gets the global step; a zero-argument one is called once
    per step, in order; NumPy scalars and objects with .numpy() are numbers."""
    calls: list[int] = []

    def counted() -> np.float64:
        calls.append(len(calls))
        return np.float64(0.5) / (len(calls))

    class Tensor:  # what a TensorFlow callable returns
        def __init__(self, value: float) -> None:
            self.value = value

        def numpy(self) -> np.ndarray:
            return np.array(self.value, dtype=np.float32)

    class OwnSchedule:  # a Keras LearningRateSchedule object given as the rate itself
        def __call__(self, step: int) -> Tensor:
            return Tensor(0.25 * (step + 1))

    tables = [
        TableConfig(vocabulary_size=4, dim=1, name="a",
                    optimizer=SGD(learning_rate=lambda step: 0.1 * step)),
        TableConfig(vocabulary_size=4, dim=1, name="b", optimizer=SGD(learning_rate=counted)),
        TableConfig(vocabulary_size=4, dim=1, name="c",
                    optimizer=SGD(learning_rate=OwnSchedule())),
    ]
    compiled = build_config({t.name: FeatureConfig(t) for t in tables}, per_replica_batch_size=1)
    rates = _run_rates(compiled, 4)
    assert rates[:, 0].tolist() == [float(F32(0.1 * s)) for s in range(4)]
    assert rates[:, 1].tolist() == [float(F32(0.5 / n)) for n in range(1, 5)]
    assert calls == [0, 1, 2, 3]
    assert rates[:, 2].tolist() == [0.25, 0.5, 0.75, 1.0]


def test_an_object_of_the_schedule_protocol_gets_the_step() -> None:
    """A ``value(step)`` method and the ``step`` its zero-argument call reads (Schedule's
    protocol): examples/models/dlrm_criteo.py's WarmUpAndPolyDecay warms up over 8,000 steps to
    1.25 * 16384 / 2048 = 10, never below 0.01."""
    plan = prepare(str(Path(__file__).parents[1] / "examples" / "models" / "dlrm_criteo.py")).plan
    (rate,) = plan.tag_rates
    assert [float(rate.value(s)) for s in (0, 400, 4000, 8000)] == [
        float(F32(0.01)), 0.5, 5.0, 10.0]


def test_rates_given_to_the_executor_still_win() -> None:
    table = TableConfig(vocabulary_size=4, dim=1, name="t",
                        optimizer=SGD(learning_rate=lambda: 0.3))
    compiled = build_config({"f": FeatureConfig(table)}, per_replica_batch_size=1)
    executor = Executor(compiled, engine="numpy")
    executor.step(_empty_batch(1), [0.7])
    assert executor.last_learning_rates.tolist() == [float(F32(0.7))]
    executor.step(_empty_batch(1))
    assert executor.last_learning_rates.tolist() == [float(F32(0.3))]


@pytest.mark.parametrize(("rate", "message"), [
    ("lambda: 1 / 0", "the callable raised ZeroDivisionError: division by zero"),
    ("lambda: 'fast'", "the callable returned 'fast' (str); expected a number"),
    ("lambda step: float('nan') if step == 2 else 0.1",
     "the callable returned nan, which is not finite"),
    ("lambda: 1e39", "the callable returned 1e+39, which is beyond float32"),
])
def test_a_failing_rate_callable_is_one_line(tmp_path: Path, rate: str, message: str) -> None:
    spec = tmp_path / "bad.py"
    spec.write_text(
        "from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig\n"
        f"table = TableConfig(vocabulary_size=20, dim=2, name='t', optimizer=SGD({rate}))\n"
        "feature_config = {'f': FeatureConfig(table)}\n"
        "per_replica_batch_size = 4\n")
    code, output = run_simulate(str(spec), "--steps", "3", "--out-dir", str(tmp_path / "o"),
                                "-q")
    assert code == 2
    step = 2 if "nan" in rate else 0
    assert output == (f"{spec}: error: the learning rate of tag 0 (table 't'), <lambda> "
                      f"(bad.py:2), at step {step}: {message}"
                      + (" (a learning rate)" if "str" in message else
                         "; a learning rate must be a finite float32" if "finite" in message
                         or "beyond" in message else "") + "\n")
    assert not (tmp_path / "o").exists()


def test_a_failing_callable_changes_no_table() -> None:
    def rate(step: int) -> float:
        if step == 1:
            raise RuntimeError("no schedule for step 1")
        return 0.5

    table = TableConfig(vocabulary_size=4, dim=2, name="t", optimizer=SGD(learning_rate=rate))
    executor = Executor(build_config({"f": FeatureConfig(table)}, per_replica_batch_size=1),
                        engine="numpy")
    batch = [FeatureInput(np.array([1]), np.array([0, 1]), None, np.ones((1, 2), F32))]
    executor.step(batch)
    before = np.array(executor.state_arrays()["table/t"])
    with pytest.raises(InputError, match="at step 1: the callable raised RuntimeError: no "
                                         "schedule for step 1"):
        executor.step(batch)
    assert np.array_equal(executor.state_arrays()["table/t"], before)
    assert executor.step_index == 1


def test_an_overflow_names_the_specs_rate() -> None:
    def huge() -> float:
        return 3e38

    table = TableConfig(vocabulary_size=4, dim=2, name="t", optimizer=SGD(learning_rate=huge))
    compiled = build_config({"f": FeatureConfig(table)}, per_replica_batch_size=1)
    executor = Executor(compiled, engine="numpy", strict_finite=True)
    with pytest.raises(NumericalError) as info:
        executor.step([FeatureInput(np.array([1]), np.array([0, 1]), None,
                                    np.full((1, 2), 2, F32))])
    assert "with learning rate 3e+38 (dynamic tag 0 of this step, from the spec's " \
           "test_an_overflow_names_the_specs_rate.<locals>.huge (test_spec_rates.py:" \
           in str(info.value)
    assert info.value.parameter == "spec"
    with pytest.raises(NumericalError, match="; the spec's learning rate of tag 0 gives 3e\\+38 "
                                             "at step 0 \\(test_an_overflow"):
        SyntheticRun(compiled, strict_finite=True).run(2)


def test_a_resumed_run_sends_the_same_rates(tmp_path: Path) -> None:
    schedule = Schedule("warm", "warmup_cosine", peak=0.2, warmup_steps=3, decay_steps=5)
    table = TableConfig(vocabulary_size=30, dim=2, name="t",
                        optimizer=Adagrad(learning_rate=schedule))
    compiled = build_config({"f": FeatureConfig(table)}, per_replica_batch_size=4)
    whole = SyntheticRun(compiled)
    whole.run(8)
    first = SyntheticRun(compiled)
    first.run(4)
    saved = first.checkpoint_arrays()
    second = SyntheticRun(compiled)
    second.restore(saved, "checkpoint.npz")
    second.run(8)
    assert second.summary()["learning_rates"] == whole.summary()["learning_rates"]
    assert np.array_equal(second.executor.state_arrays()["table/t"],
                          whole.executor.state_arrays()["table/t"])
    expected = [schedule.value(s) for s in range(8)]
    assert whole.summary()["learning_rates"][0]["per_step"] == [float(F32(v)) for v in expected]
    # Another schedule is another run: its checkpoint is refused.
    other = build_config({"f": FeatureConfig(TableConfig(
        vocabulary_size=30, dim=2, name="t", optimizer=Adagrad(learning_rate=Schedule(
            "warm", "warmup_cosine", peak=0.3, warmup_steps=3, decay_steps=5))))},
        per_replica_batch_size=4)
    with pytest.raises(Exception, match="another configuration, seed, combiners"):
        SyntheticRun(other).restore(saved, "checkpoint.npz")


# -- the float32 functions the schedules use --------------------------------------------------


def _decimal_cos(x: float) -> Decimal:
    getcontext().prec = 50
    value, term, k = Decimal(1), Decimal(1), 0
    while abs(term) > Decimal(10) ** -48:
        k += 2
        term = -term * Decimal(x) * Decimal(x) / (k * (k - 1))
        value += term
    return value


def _nearest(exact: Decimal) -> np.float32:
    """The float32 nearest to ``exact``."""
    guess = F32(float(exact))
    candidates = [np.nextafter(guess, F32(-np.inf)), guess, np.nextafter(guess, F32(np.inf))]
    return min(candidates, key=lambda c: abs(Decimal(float(c)) - exact))


def test_cos32_and_log32_are_correctly_rounded() -> None:
    rng = np.random.default_rng(22)
    xs = np.concatenate([rng.uniform(-4.0, 4.0, 400), [0.0, 1e-30, F32(math.pi),
                         F32(math.pi / 2), -F32(math.pi / 2), 3.0 * F32(math.pi)]]).astype(F32)
    got = numerics.cos32(xs)
    assert got.dtype == F32
    for x, value in zip(xs.tolist(), got.tolist(), strict=True):
        assert F32(value) == _nearest(_decimal_cos(x)), x
    ys = np.concatenate([rng.uniform(1e-6, 1e6, 400), [1.0, 2.0, 1e-45, 3.4e38]]).astype(F32)
    for y, value in zip(ys.tolist(), numerics.log32(ys).tolist(), strict=True):
        getcontext().prec = 50
        assert F32(value) == _nearest(Decimal(y).ln()), y
    # C99's special cases, and NaN for what has no cosine
    assert numerics.log32(F32(0.0)) == -np.inf and numerics.log32(F32(np.inf)) == np.inf
    assert np.isnan(numerics.log32(F32(-1.0))) and np.isnan(numerics.log32(F32(np.nan)))
    assert np.isnan(numerics.cos64(np.inf)) and np.isnan(numerics.cos64(np.nan))
    assert numerics.cos64(0.0) == 1.0 and isinstance(numerics.log64(2.0), float)
