"""The executor runs ``CustomOptimizer`` and ``CustomCombiner`` callables (``executor.custom``):
built-in optimizers and combiners rewritten as custom ones give the built-in results, a small
case matches hand-computed values, and broken callables give ``InputError`` naming the table or
feature, never a traceback."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, adagrad, run_cli, sgd, total

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.embedding import (
    SGD,
    Adagrad,
    ConstantInitializer,
    CustomCombiner,
    CustomOptimizer,
    FeatureConfig,
    TableConfig,
    build_config,
)
from tpuemb_cfg.executor.custom import CustomError
from tpuemb_cfg.session import prepare, with_combiner_arguments
from tpuemb_cfg.simulate import Executor

F32 = np.float32





def mean(valency, vectors):  # type: ignore[no-untyped-def]
    return vectors[:valency].sum(axis=0) / F32(valency)


def compiled(optimizer: Any, combiner: Any = "sum", *, vocabulary: int = 12, dim: int = 4,
             batch: int = 4, replicas: int = 1) -> Any:
    table = TableConfig(vocabulary, dim, optimizer=optimizer, combiner=combiner, name="t")
    return build_config({"f": FeatureConfig(table, name="f")}, per_replica_batch_size=batch,
                        num_replicas=replicas, validate=False)


def batches(steps: int, batch: int = 4, dim: int = 4, seed: int = 0) -> list[list[dict[str, Any]]]:
    """Bags with repeated ids (within a bag and across bags), a gradient per bag."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        sizes = rng.integers(1, 4, size=batch)
        ids = rng.integers(0, 6, size=int(sizes.sum())).astype(np.int64)
        splits = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        grad = rng.standard_normal((batch, dim)).astype(F32)
        out.append([{"ids": ids, "row_splits": splits, "grad": grad}])
    return out


def run(source: Any, steps: list[Any], engine: str = "numpy", **kwargs: Any) -> tuple[
        Executor, list[np.ndarray]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the numba engine's NumPy-path note
        executor = Executor(source, engine=engine, seed=3, **kwargs)
    activations = [executor.step(batch)[0] for batch in steps]
    return executor, activations


def test_sgd_as_a_custom_optimizer_equals_the_built_in_bit_for_bit() -> None:
    steps = batches(4)
    assert any(len(np.unique(s[0]["ids"])) < s[0]["ids"].size for s in steps)  # duplicates
    custom, custom_acts = run(compiled(CustomOptimizer(sgd, learning_rate=0.1)), steps)
    builtin, builtin_acts = run(compiled(SGD(learning_rate=0.1)), steps)
    assert custom.plan.tables[0].custom and not builtin.plan.tables[0].custom
    np.testing.assert_array_equal(custom.state_arrays()["table/t"],
                                  builtin.state_arrays()["table/t"])
    for a, b in zip(custom_acts, builtin_acts, strict=True):
        np.testing.assert_array_equal(a, b)
    assert custom.last_report["t"].rows_updated == builtin.last_report["t"].rows_updated


def test_the_numba_engine_runs_custom_tables_on_the_numpy_path() -> None:
    pytest.importorskip("numba")
    steps = batches(3)
    try:
        with pytest.warns(RuntimeWarning, match="NumPy engine"):
            from tpuemb_cfg.executor import warn

            warn._warned.clear()  # said once per process: not yet, here
            Executor(compiled(CustomOptimizer(sgd, 0.1)), engine="numba")
    except ImportError:  # pragma: no cover - the compiled engine is unavailable here
        pytest.skip("the numba engine cannot be loaded")
    custom, _ = run(compiled(CustomOptimizer(sgd, 0.1)), steps, engine="numba")
    builtin, _ = run(compiled(SGD(0.1)), steps, engine="numba")
    np.testing.assert_allclose(custom.state_arrays()["table/t"],
                               builtin.state_arrays()["table/t"], atol=1e-6)


def test_adagrad_as_a_custom_optimizer_with_one_slot_equals_the_built_in() -> None:
    steps = batches(5, seed=1)
    optimizer = CustomOptimizer(adagrad, 0.05, slot_names=["accumulators"],
                                slot_initializers=[ConstantInitializer(0.1)])
    custom, custom_acts = run(compiled(optimizer), steps)
    builtin, builtin_acts = run(
        compiled(Adagrad(0.05, initial_accumulator_value=0.1)), steps)
    for key in ("table/t", "slot/t/accumulators"):
        np.testing.assert_allclose(custom.state_arrays()[key], builtin.state_arrays()[key],
                                   rtol=0, atol=1e-6)
    np.testing.assert_allclose(custom_acts[-1], builtin_acts[-1], atol=1e-6)


@pytest.mark.parametrize(("fn", "name"), [(total, "sum"), (mean, "mean")])
def test_a_custom_combiner_equal_to_a_built_in_one_gives_its_results(fn: Any, name: str) -> None:
    steps = batches(3, seed=2)
    custom, custom_acts = run(compiled(SGD(0.1), CustomCombiner(fn, max_valency=4)), steps)
    builtin, builtin_acts = run(compiled(SGD(0.1), name), steps)
    feature = custom.plan.features[0]
    assert feature.custom is not None and feature.combiner.startswith("custom_combiner_")
    for a, b in zip(custom_acts, builtin_acts, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    # Back-propagation uses the same gains: the tables agree bit for bit.
    np.testing.assert_array_equal(custom.state_arrays()["table/t"],
                                  builtin.state_arrays()["table/t"])


def test_a_combiner_with_weights_back_propagates_through_them() -> None:
    def weighted(valency, vectors, weights):  # type: ignore[no-untyped-def]
        return (vectors * weights[:, None]).sum(axis=0)

    combiner = CustomCombiner(weighted, 3, num_weights=3, initializer=ConstantInitializer(0.5))
    steps = batches(2, seed=4)
    halves = [[{**s[0], "weights": np.full(s[0]["ids"].shape, 0.5, F32)}] for s in steps]
    custom, custom_acts = run(compiled(SGD(0.1), combiner), steps)
    builtin, builtin_acts = run(compiled(SGD(0.1), "sum"), halves)  # sum with weights 0.5
    np.testing.assert_array_equal(custom.state_arrays()["table/t"],
                                  builtin.state_arrays()["table/t"])
    np.testing.assert_allclose(custom_acts[1], builtin_acts[1], rtol=1e-6)


def momentum(gradient, embedding_table, slot_variables, learning_rate, hyperparameters):  # type: ignore[no-untyped-def]
    (m,) = slot_variables
    (beta,) = hyperparameters
    m = beta * m + gradient
    return embedding_table - learning_rate * m, [m]


def test_a_hand_computed_case() -> None:
    """Momentum written by hand, beta 0.5 (a hyper-parameter), lr 0.1, one bag [1, 1, 2]
    (sum), zero tables, gradient [1, 2] twice:

    step 0: G1 = [2, 4], G2 = [1, 2];  m1 = [2, 4], m2 = [1, 2];  w1 = [-.2, -.4], w2 = [-.1, -.2]
    step 1: activation = 2 w1 + w2 = [-.5, -1];  m1 = [3, 6], m2 = [1.5, 3];
            w1 = [-.5, -1], w2 = [-.25, -.5]
    """
    optimizer = CustomOptimizer(momentum, 0.1, ["m"], [ConstantInitializer(0.0)],
                                hyperparameters=[lambda: 0.5])
    source = compiled(optimizer, dim=2, vocabulary=4, batch=1)
    step = [{"ids": np.array([1, 1, 2]), "row_splits": np.array([0, 3]),
             "grad": np.array([[1.0, 2.0]], F32)}]
    executor, acts = run(source, [step, step], initial_state={"table/t": np.zeros((4, 2))})
    np.testing.assert_allclose(acts[0], [[0.0, 0.0]])
    np.testing.assert_allclose(acts[1], [[-0.5, -1.0]], rtol=1e-6)
    state = executor.state_arrays()
    want_rows = [[0.0, 0.0], [-0.5, -1.0], [-0.25, -0.5], [0.0, 0.0]]
    want_momenta = [[0.0, 0.0], [3.0, 6.0], [1.5, 3.0], [0.0, 0.0]]
    np.testing.assert_allclose(state["table/t"], want_rows, rtol=1e-6)
    np.testing.assert_allclose(state["slot/t/m"], want_momenta, rtol=1e-6)


def test_a_row_wise_slot_is_one_value_per_row() -> None:
    def rowwise(gradient, embedding_table, slot_variables, learning_rate, hyperparameters):  # type: ignore[no-untyped-def]
        (acc,) = slot_variables
        assert acc.shape == (gradient.shape[0], 1)
        acc = acc + (gradient * gradient).mean(axis=1, keepdims=True)
        return embedding_table - learning_rate * gradient / np.sqrt(acc), acc

    optimizer = CustomOptimizer(rowwise, 0.1, ["acc"], [ConstantInitializer(1.0)], slot_dims=[1])
    step = [{"ids": np.array([3]), "row_splits": np.array([0, 1]),
             "grad": np.array([[3.0, 1.0]], F32)}]
    executor, _ = run(compiled(optimizer, dim=2, vocabulary=4, batch=1), [step],
                      initial_state={"table/t": np.zeros((4, 2))})
    state = executor.state_arrays()
    np.testing.assert_allclose(state["slot/t/acc"][3], [6.0, 6.0])  # 1 + (9 + 1) / 2
    np.testing.assert_allclose(state["table/t"][3], -0.1 * np.array([3.0, 1.0]) / np.sqrt(6),
                               rtol=1e-6)
    np.testing.assert_array_equal(state["slot/t/acc"][0], [1.0, 1.0])


def test_each_tensorcore_partial_calls_the_optimizer_once_with_a_dynamic_rate() -> None:
    calls: list[tuple[int, float]] = []

    def spy(gradient, embedding_table, slot_variables, learning_rate, hyperparameters):  # type: ignore[no-untyped-def]
        assert learning_rate.dtype == F32 and gradient.dtype == F32
        calls.append((gradient.shape[0], float(learning_rate)))
        return embedding_table - learning_rate * gradient

    # TensorFlow writes gradient accumulation DISABLED: one partial per TensorCore (spec 5.2).
    source = compiled(CustomOptimizer(spy, learning_rate=lambda: 0.2), replicas=2)
    executor = Executor(source, engine="numpy")
    assert executor.num_learning_rates == 1
    executor.step(batches(1)[0], [0.25])
    assert [rate for _, rate in calls] == [0.25, 0.25]


# --------------------------------------------------------------------------------------------
# Errors


def _bad_rows(g, w, s, lr, h):  # type: ignore[no-untyped-def]
    return w[:1]


def _float64(g, w, s, lr, h):  # type: ignore[no-untyped-def]
    return w.astype(np.float64)


def _nan(g, w, s, lr, h):  # type: ignore[no-untyped-def]
    return w * np.float32(np.nan)


def _no_slot(g, w, s, lr, h):  # type: ignore[no-untyped-def]
    return w - lr * g


def _raises(g, w, s, lr, h):  # type: ignore[no-untyped-def]
    raise ZeroDivisionError("boom")


@pytest.mark.parametrize(("fn", "slots", "message"), [
    (_bad_rows, 0, r"table 't'.*new rows has shape \(1, 4\); expected \(\d+, 4\)"),
    (_float64, 0, r"table 't'.*dtype float64; expected float32"),
    (_nan, 0, r"table 't'.*NaN or infinite"),
    (_no_slot, 1, r"table 't'.*returned 1 array\(s\) for 1 slot\(s\); expected 2: the new "
                  r"rows, slot 'acc'"),
    (_raises, 0, r"table 't'.*raised ZeroDivisionError: boom"),
])
def test_a_bad_custom_optimizer_is_an_input_error(fn: Any, slots: int, message: str) -> None:
    optimizer = CustomOptimizer(fn, 0.1, ["acc"] * slots, [ConstantInitializer(0.0)] * slots)
    executor = Executor(compiled(optimizer), engine="numpy")
    before = executor.state_arrays()["table/t"].copy()
    with pytest.raises(InputError, match=message) as info:
        executor.step(batches(1)[0])
    assert isinstance(info.value, CustomError)
    np.testing.assert_array_equal(executor.state_arrays()["table/t"], before)


def test_a_slot_initializer_must_be_a_constant() -> None:
    def rows(shape, dtype):  # type: ignore[no-untyped-def]
        return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)

    optimizer = CustomOptimizer(adagrad, 0.1, ["acc"], [rows])
    with pytest.raises(InputError, match="table 't': slot 'acc'.*expected one finite constant"):
        prepare(compiled(optimizer))


def test_a_nonlinear_combiner_is_refused_naming_the_bag() -> None:
    def biggest(valency, vectors):  # type: ignore[no-untyped-def]
        return vectors[:valency].max(axis=0)

    executor = Executor(compiled(SGD(0.1), CustomCombiner(biggest, 3)), engine="numpy")
    step = [{"ids": np.array([0, 1, 2, 3]), "row_splits": np.array([0, 1, 2, 3, 4]),
             "grad": np.zeros((4, 4), F32)}]
    executor.step(step)  # one id per bag: max is linear there
    step = [{"ids": np.array([0, 1, 2, 3]), "row_splits": np.array([0, 2, 3, 3, 4]),
             "grad": np.zeros((4, 4), F32)}]
    with pytest.raises(InputError, match=r"feature 'f'.*bag 0, valency 2.*linear"):
        executor.step(step)


def test_a_combiner_returning_nothing_is_refused_when_prepared() -> None:
    with pytest.raises(InputError, match="feature 'f': the CustomCombiner.*NoneType"):
        prepare(compiled(SGD(0.1), CustomCombiner(lambda *a: None, max_valency=2)))


def test_combiner_arguments_replace_or_keep_a_custom_combiner() -> None:
    prepared = prepare(compiled(SGD(0.1), CustomCombiner(total, 2)))
    assert prepared.plan.tables[0].custom
    kept = with_combiner_arguments(prepared, [])
    assert kept.plan.features[0].custom is not None
    replaced = with_combiner_arguments(prepared, ["mean"])
    assert replaced.plan.features[0].custom is None
    assert replaced.plan.features[0].combiner == "mean" and not replaced.plan.tables[0].custom


SPEC = """\
import numpy as np
from tpuemb_cfg.embedding import CustomOptimizer, FeatureConfig, TableConfig

def update(gradient, embedding_table, slot_variables, learning_rate, hyperparameters):
    return {result}

table = TableConfig(vocabulary_size=32, dim=4, combiner="sum", name="ads",
                    optimizer=CustomOptimizer(update, learning_rate=0.1))
feature_config = {{"ads": FeatureConfig(table, name="ads")}}
per_replica_batch_size = 8
"""


def simulate_spec(tmp_path: Path, result: str, *options: str) -> Any:
    """``tpuemb simulate`` of a spec whose custom optimizer returns ``result``, 2 steps."""
    spec = tmp_path / "model.py"
    spec.write_text(SPEC.format(result=result))
    return run_cli("simulate", str(spec), "--steps", "2", *options,
                   "--out-dir", str(tmp_path / "o"))


def test_simulate_runs_a_spec_with_a_custom_optimizer(tmp_path: Path) -> None:
    result = simulate_spec(tmp_path, "embedding_table - learning_rate * gradient",
                           "--engine", "numpy")
    assert result.exit_code == 0, result.output


def test_simulate_reports_a_bad_custom_optimizer_without_a_traceback(tmp_path: Path) -> None:
    result = simulate_spec(tmp_path, "embedding_table[:2]", "--engine", "numpy")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "table 'ads'" in result.output and "has shape (2, 4)" in result.output


def test_the_example_prints_a_zero_difference() -> None:
    import runpy

    scope = runpy.run_path(str(ROOT / "examples" / "custom_sgd.py"), run_name="example")
    assert scope["max_difference"]() == 0.0


def test_the_numpy_path_note_is_one_plain_line_in_the_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuemb_cfg.executor import warn

    monkeypatch.setattr(warn, "_warned", set())  # said once per process: not yet, here
    result = simulate_spec(tmp_path, "embedding_table - learning_rate * gradient")
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "CustomOptimizer" in line]
    assert notes == [
        "warning: table(s) 'ads' run a CustomOptimizer or CustomCombiner (a Python callable), "
        "which the numba engine cannot compile: those tables run on the NumPy engine (same "
        "results), the others compiled; choose --engine numpy to silence this"
    ]
    assert "RuntimeWarning" not in result.stderr and ".py:" not in result.stderr
