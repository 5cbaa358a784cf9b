"""Non-finite results as TensorFlow computes them (issue 34 item 5, issue 33's resume leftover).

By default a step that makes a parameter NaN or infinite keeps TensorFlow's result and says
once what made it (the operation, table, row and step), under ``-q`` too, and in ``--json`` /
summary.json; ``--strict-finite`` (``strict_finite``) makes it exit 2. A state loaded to start
from (``--init``, a ``--resume`` checkpoint) that holds NaN or infinities is named by its file,
key and row, not blamed on a later step.

The TensorFlow case (``data/tf/nonfinite``, ``generate.py``: TensorFlow 2.21's
``ResourceSparseApplyAdagrad``) is Adagrad on a zero accumulator. Its NaN positions follow from
the equation by hand: ``acc = acc + G * G``, ``w = w - lr * G / sqrt(acc)``; a row whose summed
gradient G is 0 in a column keeps ``acc = 0`` there and gets ``0 / sqrt(0) = 0 / 0 = NaN``. At
step 0 (sum combiner, one id per bag) row 3 comes with weight 0 (G = 0 * grad = 0 in both
columns) and row 5's gradient is (0.5, 0) (G = 0 in column 1); row 1 has G = (1, 2), so
``acc = G * G`` and ``w - 0.5 * G / |G| = w - 0.5`` in both columns, exactly.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from test_robustness import one_line, run

from tpuemb_cfg.base.errors import NumericalError
from tpuemb_cfg.executor.nonfinite import NonFiniteWarning
from tpuemb_cfg.formats import limits
from tpuemb_cfg.formats.io import load
from tpuemb_cfg.simulate import Executor

CASE = DATA / "tf" / "nonfinite"
TINY = (DATA / "multiworker" / "tiny.pbtxt").read_text()
ZERO_OVER_ZERO = ("0 / 0 in (lr * G) / sqrt(accumulators + (G * G)): lr * G is 0 and "
                  "sqrt(accumulators + (G * G)) is 0, giving nan")


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(limits, "available_memory", lambda meminfo="": 8 * 2**30)
    (tmp_path / "c.pbtxt").write_text(TINY)
    return tmp_path


def replay_args(out: str) -> list[str]:
    return ["simulate", str(CASE / "config.pbtxt"), "--batches", str(CASE / "batches.npz"),
            "--init", str(CASE / "init.npz"), "--out", out, "--combiner", "sum"]


def same_as_tensorflow(out: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """NaN where TensorFlow has NaN, bit for bit everywhere else."""
    for key, want in expected.items():
        got = out[key]
        assert got.dtype == want.dtype and got.shape == want.shape, key
        assert np.array_equal(np.isnan(got), np.isnan(want)), key
        assert np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)]), key


def test_the_tensorflow_case_holds_the_nan_of_the_hand_derivation() -> None:
    """The stored values are TensorFlow's, and agree with the equation worked by hand."""
    case = json.loads((CASE / "case.json").read_text())
    assert case["tensorflow"].startswith("2.21.")
    expected = np.load(CASE / "expected.npz")
    init = np.load(CASE / "init.npz")
    # Hand derivation (module docstring): NaN exactly where G = 0 on the zero accumulator.
    assert np.argwhere(np.isnan(expected["table/t"])).tolist() == [[3, 0], [3, 1], [5, 1]]
    assert not np.isnan(expected["slot/t/accumulators"]).any()
    assert np.array_equal(expected["s0/f0/activations"][0],
                          init["table/t"][1])  # bag 0: row 1 with weight 1, before the step
    # Step 1 reads row 3 (NaN) in bag 0: its activation is NaN in both columns.
    assert np.isnan(expected["s1/f0/activations"][0]).all()


@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_tensorflow_nan_case_replays_to_tensorflow_values_with_its_cause(
        work: Path, engine: str) -> None:
    result = run(*replay_args("o.npz"), "--engine", engine, "-q")
    assert result.exit_code == 0, result.output
    # Under -q, the one line on stderr is the warning, naming step, table, row and cause.
    assert result.stderr == (
        "warning: step 0: the update of table 't' left 3 parameter(s) non-finite (first: nan "
        f"at row 3, column 0): {ZERO_OVER_ZERO}\n")
    assert "learning rate" not in result.stderr  # not the cause here
    same_as_tensorflow(dict(np.load("o.npz")), dict(np.load(CASE / "expected.npz")))


def test_the_json_report_records_the_first_nonfinite_value(work: Path) -> None:
    result = run(*replay_args("o.npz"), "--json", "-q")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # valid JSON: a NaN update norm is null
    assert report["tables"]["t"]["update_norm"] == [None, None]
    event = report["nonfinite"]
    assert (event["step"], event["table"], event["row"], event["column"], event["value"]) == (
        0, "t", 3, 0, "nan")
    assert event["operation"] == "(lr * G) / sqrt(accumulators + (G * G))"
    assert event["count"] == 3 and event["learning_rate"] is False


def test_strict_finite_exits_2_naming_the_cause(work: Path) -> None:
    line = one_line(run(*replay_args("o.npz"), "--strict-finite"))
    assert line == ("step 0: the update of table 't' left 3 parameter(s) non-finite (first: "
                    f"nan at row 3, column 0): {ZERO_OVER_ZERO}")
    assert not (work / "o.npz").exists()
    # The same setting from a simulation spec.
    (work / "sim.pbtxt").write_text(
        f'strict_finite: true\ncombiner: "sum"\nworkload {{ replay {{ batches: '
        f'"{CASE / "batches.npz"}" init: "{CASE / "init.npz"}" out: "{work / "o.npz"}" }} }}\n')
    assert one_line(run("simulate", str(CASE / "config.pbtxt"), "--spec", "sim.pbtxt")) == line


def test_the_library_keeps_tensorflows_result_or_raises_when_strict() -> None:
    config = load((CASE / "config.pbtxt").read_bytes(), "text")
    init = dict(np.load(CASE / "init.npz"))
    batches = np.load(CASE / "batches.npz")
    step = [{"ids": batches["s0/f0/ids"], "weights": batches["s0/f0/weights"],
             "grad": batches["s0/f0/grad"]}]
    executor = Executor(config, initial_state=init, combiners="sum")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        executor.step(step)
    assert [type(w.message) for w in caught] == [NonFiniteWarning]
    assert executor.nonfinite is not None and executor.nonfinite.row == 3
    assert np.isnan(executor.state_arrays()["table/t"][3]).all()
    strict = Executor(config, initial_state=init, combiners="sum", strict_finite=True)
    with pytest.raises(NumericalError, match=r"row 3, column 0\): 0 / 0 in"):
        strict.step(step)


def test_an_overflowing_sum_of_gradients_is_named_not_the_learning_rate() -> None:
    """Two finite contributions to one row sum to infinity: the gradient is the cause."""
    executor = Executor(load(TINY.encode(), "text"), engine="numpy")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        executor.step([{"ids": np.array([4, 4]),
                        "grad": np.full((2, 2), 3e38, dtype=np.float32)}])
    event = executor.nonfinite
    assert event is not None and (event.row, event.column) == (4, 0)
    assert event.cause == ("the row's gradient G (the sum of its contributions) is inf: the "
                           "summed gradient overflowed float32")
    assert not event.learning_rate


# --------------------------------------------------------------------------------------------
# States loaded to start from: the file, the key and the row


def test_a_nan_init_is_named_by_file_key_and_row(work: Path) -> None:
    init = dict(np.load(CASE / "init.npz"))
    init["table/t"][6, 1] = np.inf
    np.savez(work / "bad.npz", **init)
    args = ["simulate", str(CASE / "config.pbtxt"), "--batches", str(CASE / "batches.npz"),
            "--init", "bad.npz", "--out", "o.npz", "--combiner", "sum"]
    line = one_line(run(*args, "--strict-finite"))
    assert line == ("bad.npz: key table/t: error: inf at row 6, column 1 (1 non-finite "
                    "value(s)); --strict-finite refuses a state that is not finite: start from "
                    "another checkpoint or initial state")
    result = run(*args, "-q")  # by default: said, and the run goes on (TensorFlow would)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: bad.npz: key table/t: inf at row 6, column 1")


def test_resume_from_a_nan_checkpoint_names_the_checkpoint_and_key(work: Path) -> None:
    result = run("simulate", "c.pbtxt", "--steps", "2", "--checkpoint-every", "2",
                 "--out-dir", "o", "-q")
    assert result.exit_code == 0, result.output
    arrays = dict(np.load(work / "o" / "checkpoint.npz"))
    arrays["table/t"][:] = np.nan  # every row: the next step reads one
    np.savez(work / "o" / "checkpoint.npz", **arrays)
    args = ["simulate", "c.pbtxt", "--steps", "4", "--resume", "--out-dir", "o"]
    line = one_line(run(*args, "--strict-finite"))
    assert line == ("o/checkpoint.npz: key table/t: error: nan at row 0, column 0 (32 "
                    "non-finite value(s)); --strict-finite refuses a state that is not finite: "
                    "start from another checkpoint or initial state")
    result = run(*args, "-q")
    assert result.exit_code == 2
    warning, error = result.stderr.splitlines()
    assert warning.startswith("warning: o/checkpoint.npz: key table/t: nan at row 0, column 0")
    # The step that read the row names the checkpoint and the key, not itself.
    assert error.startswith("step 2: the activations of feature 0 ('x') are not finite: they "
                            "read a non-finite row - o/checkpoint.npz: key table/t: nan at row 0")
    assert "learning rate" not in error


def test_a_synthetic_run_records_it_in_summary_json(work: Path) -> None:
    """The built-in example at --learning-rate 3e38: step 0's rows grow to about 1e38 (finite),
    step 1's weight decay (factor * lr) * w overflows; the run ends there with TensorFlow's
    values, the cause (the learning rate, named) said and recorded."""
    result = run("simulate", "--learning-rate", "3e38", "--steps", "2", "--out-dir", "o", "-q")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: step 1: the update of table 'item' left ")
    summary = json.loads((work / "o" / "summary.json").read_text())
    event = summary["nonfinite"]
    assert (event["step"], event["table"], event["learning_rate"], event["parameter"]) == (
        1, "item", True, "learning_rates")
    assert event["operation"] == "(weight_decay_factor * lr) * w"
    assert summary["tables"]["item"]["update_norm"][1] is None  # JSON has no NaN
    assert "-> not finite" in result.stdout


@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_a_negative_variance_is_named_the_square_root_of_a_negative(engine: str) -> None:
    """Centered RMSProp from ms = 0, mg = 1 (an initial state TensorFlow accepts too), G = 0,
    rho = 0.5, epsilon = 0.125, worked by hand: mg = 0.5 * 1 + 0.5 * 0 = 0.5, ms = 0, and
    ms - mg * mg + epsilon = 0 - 0.25 + 0.125 = -0.125, whose square root is NaN (and so is
    lr * G / NaN)."""
    config = load(TINY.replace("stochastic_gradient_descent {}",
                               "centered_rms_prop { rho: 0.5 momentum: 0 epsilon: 0.125 }")
                  .encode(), "text")
    init = {"slot/t/ms": np.zeros((16, 2), np.float32), "slot/t/mom": np.zeros((16, 2),
            np.float32), "slot/t/mg": np.ones((16, 2), np.float32)}
    executor = Executor(config, engine=engine, initial_state=init)
    with pytest.warns(NonFiniteWarning):
        executor.step([{"ids": np.array([2, 2]), "grad": np.zeros((2, 2), np.float32)}])
    event = executor.nonfinite
    assert event is not None and (event.row, event.column, event.value) == (2, 0, "nan")
    assert event.operation == "sqrt((((rho * ms) + (((1 - rho) * G) * G)) - (((rho * mg) + " \
                              "((1 - rho) * G)) * ((rho * mg) + ((1 - rho) * G)))) + epsilon)"
    assert event.cause.endswith("is NaN: the square root of the negative -0.125")
