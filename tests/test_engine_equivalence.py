"""The numba engine computes what the NumPy engine computes, bit for bit (docs/numerics.md).

Every golden optimizer case is replayed with both engines: the numba run must match the golden
expectations within the case's tolerance and the NumPy run exactly. Random inputs then exercise
the fused optimizers with every wrapper (clipping, decay, DISABLED accumulation, pipelining) and
every combiner, and the kernels on their own. Shapes are small so that the numba compile (cached
on disk after the first run) dominates the time of this file.

Every test here that claims to run the numba engine asserts that it does (``numba_engine()``,
``executor.engine.name``): with the compiled module unimportable the engine falls back to NumPy,
and these tests then fail instead of comparing NumPy with NumPy.

Comparisons are of bits: the same float32 values, the same signs of zero, the same update norms.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import OPTIMIZER_CASES, optimizer_case_names, require_data

import tpuemb_cfg
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.executor import parse_combiners
from tpuemb_cfg.executor.engines import Engine, get_engine
from tpuemb_cfg.executor.engines import numpy as reference
from tpuemb_cfg.formats.npzio import read_npz
from tpuemb_cfg.simulate import Executor, replay

pytest.importorskip("numba")

CASES_ROOT = OPTIMIZER_CASES
CASES = optimizer_case_names()


def numba_engine() -> Engine:
    """The numba engine, asserting it really is (``get_engine`` falls back to NumPy with a
    warning when the compiled module cannot be imported)."""
    engine = get_engine("numba")
    assert engine.name == "numba", f"the numba engine is not in use: {engine.fallback}"
    return engine


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """The same dtype, shape and bits (a float's sign of zero included)."""
    assert got.dtype == want.dtype, what
    assert got.shape == want.shape, what
    if want.size:
        as_bits = f"u{want.dtype.itemsize}" if want.dtype.kind == "f" else want.dtype
        differ = np.flatnonzero(np.ascontiguousarray(got).view(as_bits)
                                != np.ascontiguousarray(want).view(as_bits))
        assert differ.size == 0, (
            f"{what}: {differ.size} values differ, first {got.flat[differ[0]]!r} != "
            f"{want.flat[differ[0]]!r} at flat index {differ[0]}"
        )


@pytest.mark.parametrize("name", CASES)
def test_golden_case_both_engines(name: str) -> None:
    case = CASES_ROOT / name
    config = tpuemb_cfg.load(str(case / "config.pbtxt"))
    arguments = shlex.split((case / "combiner.txt").read_text())
    combiners = parse_combiners(arguments[1::2], len(config.feature_descriptor))
    batches = read_npz(case / "batches.npz")
    init = read_npz(case / "init.npz")
    engines: dict[str, Any] = {"numpy": "numpy", "numba": numba_engine()}
    outs = {
        name: replay(config, batches, init, combiners=combiners, engine=engine)
        for name, engine in engines.items()
    }
    assert outs["numba"].keys() == outs["numpy"].keys()
    for key, want in outs["numpy"].items():
        _close(outs["numba"][key], want, key)
    tolerance = json.loads((case / "case.json").read_text())["tolerance"]["max_abs"]
    for key, want in read_npz(case / "expected.npz").items():
        worst = float(np.max(np.abs(outs["numba"][key] - want))) if want.size else 0.0
        assert worst <= tolerance, f"{key}: numba engine off the golden value by {worst}"


def test_golden_cases_present() -> None:
    require_data(CASES_ROOT)
    assert len(CASES) >= 21


# ------------------------------------------------------------------------------------------------
# Random configurations: every fused optimizer under every wrapper

_OPTIMIZERS = {
    "sgd": "stochastic_gradient_descent { }",
    "adagrad": "adagrad { }",
    "momentum": "momentum { momentum: 0.9 }",
    "nesterov": "momentum { momentum: 0.8 use_nesterov: true }",
    "adam": "adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-3 }",
    "adam_sum_inside": "adam { beta1: 0.8 beta2: 0.99 epsilon: 1e-3 use_sum_inside_sqrt: true }",
    "ftrl": "ftrl { l1: 0.01 l2: 0.02 lr_power: -0.5 beta: 0.1 }",
    "ftrl_mlbl": "ftrl { l1: 0.01 l2: 0.02 lr_power: -0.7 beta: 0.1 multiply_linear_by_lr: true }",
    "rms_prop": "rms_prop { rho: 0.9 momentum: 0.5 epsilon: 0.1 }",
    "centered_rms_prop": "centered_rms_prop { rho: 0.9 momentum: 0.5 epsilon: 0.1 }",
    "adam_non_lazy": "adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-3 use_non_lazy_adam: true }",
    "lion": "lion { beta1: 0.9 beta2: 0.99 }",
    "lion_non_lazy": "lion { beta1: 0.9 beta2: 0.99 use_non_lazy_lion: true }",
    "adagrad_momentum": "adagrad_momentum { momentum: 0.9 exponent: 2 beta2: 0.99 epsilon: 1e-6 }",
    "adagrad_momentum_nesterov": (
        "adagrad_momentum { momentum: 0.8 use_nesterov: true exponent: 3 beta2: 1 epsilon: 0.1 }"
    ),
    "bounded_adagrad": (
        "bounded_adagrad { update_accumulator_first: true max_var_update: 0.01 "
        "max_accumulator: 1.5 }"
    ),
    "adadelta": "adadelta { rho: 0.9 epsilon: 1e-3 }",
    "proximal_adagrad": "proximal_adagrad { l1: 0.01 l2: 0.02 }",
    "proximal_adagrad_l2": "proximal_adagrad { l2: 0.5 }",
    "proximal_yogi": "proximal_yogi { l1: 0.01 l2: 0.02 beta1: 0.9 beta2: 0.99 epsilon: 1e-3 }",
    "proximal_yogi_plain": "proximal_yogi { beta1: 0.9 beta2: 0.99 epsilon: 1e-3 }",
    "frequency_aware_adagrad": (
        "frequency_aware_adagrad { l1_regularization_strength: 0.01 "
        "l2_regularization_strength: 0.02 probability_exponent: 0.5 max_lr_multiplier: 4 "
        "accumulator_decay: 0.9 initial_accumulator_value: 0.1 step_counter { tag: 0 } }"
    ),
    "assign": "assign { }",
}
_WRAPPERS = {
    "plain": "",
    "clipped": (
        "gradient_clipping_limits { lower { value: -0.05 } upper { value: 0.04 } } "
        "clipping_limits { lower { value: -0.3 } upper { value: 0.35 } }"
    ),
    "decay": "weight_decay_factor: 0.01",
    "decay_by_lr": "weight_decay_factor: 0.2 multiply_weight_decay_factor_by_learning_rate: true",
}


def _config(optimizer: str, wrapper: str, *, cores: int = 1, disabled: bool = False,
            pipelined: bool = False) -> tpuemb_cfg.TPUEmbeddingConfiguration:
    accumulation = "DISABLED" if disabled else "ENABLED"
    tables = "".join(
        f"""table_descriptor {{ name: "t{t}" vocabulary_size: {vocab} dimension: {dim}
          optimization_parameters {{ {_OPTIMIZERS[optimizer]} {_WRAPPERS[wrapper]}
            learning_rate {{ {'dynamic { }' if t == 0 else 'constant: 0.05'} }}
            gradient_accumulation_status: {accumulation} }} }}"""
        for t, (vocab, dim) in enumerate([(40, 8), (7, 3)])
    )
    features = "".join(
        f'feature_descriptor {{ name: "f{f}" table_id: {table} input_shape: 6 }}'
        for f, table in enumerate([0, 0, 1])
    )
    text = (
        f"{tables} {features} mode: TRAINING num_hosts: 1 num_tensor_cores: {cores} "
        f"pipeline_execution_with_tensor_core: {'true' if pipelined else 'false'}"
    )
    return tpuemb_cfg.load(text.encode(), "text")


def _batches(seed: int, steps: int, cores: int) -> list[tuple[list[dict[str, np.ndarray]], list]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        features = []
        for vocab, dim in [(40, 8), (40, 8), (7, 3)]:
            bags = 6 * cores
            sizes = rng.integers(0, 5, bags)
            ids = rng.integers(0, vocab, int(sizes.sum())).astype(np.int64)
            features.append({
                "ids": ids,
                "row_splits": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                "weights": rng.uniform(-0.5, 2.0, ids.shape[0]).astype(np.float32),
                "grad": rng.normal(0, 0.1, (bags, dim)).astype(np.float32),
            })
        out.append((features, [float(rng.uniform(0.01, 0.2))]))
    return out


def _run_both(config: tpuemb_cfg.TPUEmbeddingConfiguration, combiner: str, cores: int) -> int:
    """Step both engines on the same batches and compare; return how many row updates the numba
    engine ran through a fused kernel."""
    compiled = numba_engine()
    fused: list[bool] = []

    def update_rows(*args: Any) -> bool:
        fused.append(compiled.update_rows(*args))
        return fused[-1]

    class Counted(type(compiled.fused)):  # type: ignore[misc]
        @staticmethod
        def update(*args: Any) -> np.ndarray:
            fused.append(True)
            return np.asarray(compiled.fused.update(*args))

    engines: dict[str, Any] = {
        "numpy": "numpy",
        "numba": replace(compiled, update_rows=update_rows, fused=Counted()),
    }
    executors = {
        name: Executor(config, combiners=combiner, seed=3, engine=engine)
        for name, engine in engines.items()
    }
    assert executors["numba"].engine.name == "numba"
    for step, (batch, rates) in enumerate(_batches(7, 3, cores)):
        activations = {name: ex.step(batch, rates) for name, ex in executors.items()}
        for f, want in enumerate(activations["numpy"]):
            _close(activations["numba"][f], want, f"step {step} feature {f} activations")
        for name, report in executors["numpy"].last_report.items():
            other = executors["numba"].last_report[name]
            assert other.rows_touched == report.rows_touched
            assert other.rows_updated == report.rows_updated
            assert other.update_norm == report.update_norm, name
    want_state = executors["numpy"].state_arrays()
    for key, got in executors["numba"].state_arrays().items():
        _close(got, want_state[key], key)
    return sum(fused)


@pytest.mark.parametrize("optimizer", sorted(_OPTIMIZERS))
@pytest.mark.parametrize("wrapper", sorted(_WRAPPERS))
def test_random_steps_match(optimizer: str, wrapper: str) -> None:
    fused = _run_both(_config(optimizer, wrapper), "mean", 1)
    # Two tables, three steps, one partial each: six row updates, every one fused.
    assert fused == 6


@pytest.mark.parametrize("combiner", ["sum", "sqrtn"])
@pytest.mark.parametrize("optimizer", ["adagrad_momentum", "ftrl_mlbl", "frequency_aware_adagrad",
                                       "proximal_yogi", "adam_non_lazy"])
def test_every_combiner_matches(optimizer: str, combiner: str) -> None:
    """The powers (numerics.pow32), Yogi's sign term and a non-lazy table under the other two
    combiners (``mean`` runs above): the bag sums and gains feed every optimizer."""
    assert _run_both(_config(optimizer, "clipped"), combiner, 1) == 6


@pytest.mark.parametrize("optimizer", ["adagrad", "ftrl_mlbl", "adam"])
def test_accumulation_disabled_and_pipelined_match(optimizer: str) -> None:
    assert _run_both(_config(optimizer, "decay_by_lr", cores=2, disabled=True), "sqrtn", 2) == 12
    assert _run_both(_config(optimizer, "clipped", pipelined=True), "sum", 1) == 6


# ------------------------------------------------------------------------------------------------
# Kernels


def test_deduplicate_equals_np_unique() -> None:
    fast = numba_engine()
    rng = np.random.default_rng(0)
    cases = [
        np.zeros(0, np.int64),
        np.array([5], np.int64),
        np.array([3, 3, 3], np.int64),
        np.array([9, 0, 9, 1, 0], np.int64),
        rng.integers(0, 2**40, 2000),  # sparse keys: several radix passes
        rng.integers(0, 30, 5000),  # many duplicates: long probe chains are impossible
        np.arange(4096, dtype=np.int64)[::-1].copy(),
    ]
    for ids in cases:
        unique, inverse = fast.deduplicate(ids)
        want_unique, want_inverse = np.unique(ids, return_inverse=True)
        assert unique.dtype == np.int64 and inverse.dtype == np.int64
        np.testing.assert_array_equal(unique, want_unique)
        np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))


def test_sums_follow_the_reference_order() -> None:
    """Occurrence order exactly: the same bytes as a float32 loop over the occurrences."""
    fast = numba_engine()
    rng = np.random.default_rng(1)
    values = rng.standard_normal((500, 5)).astype(np.float32)
    segments = rng.integers(0, 17, 500)
    gains = rng.uniform(-1, 1, 500).astype(np.float32)
    sample = rng.integers(0, 40, 500)
    d_activations = rng.standard_normal((40, 5)).astype(np.float32)
    want = np.zeros((17, 5), np.float32)
    want_scaled = np.zeros((17, 5), np.float32)
    for j in range(500):
        want[segments[j]] += values[j]
        want_scaled[segments[j]] += gains[j] * d_activations[sample[j]]
    np.testing.assert_array_equal(fast.segment_sum(values, segments, 17), want)
    np.testing.assert_array_equal(
        fast.backprop_sum(d_activations, sample, gains, segments, 17), want_scaled
    )
    splits = np.array([0, 0, 3, 250, 500])
    want_bags = np.zeros((4, 5), np.float32)
    for b in range(4):
        for j in range(splits[b], splits[b + 1]):
            want_bags[b] += gains[j] * values[j]
    np.testing.assert_array_equal(fast.combine(values, gains, splits), want_bags)
    _close(reference.combine(values, gains, splits), want_bags, "numpy combine")


def test_gather_scatter_whole_rows() -> None:
    fast = numba_engine()
    table = np.arange(60, dtype=np.float32).reshape(12, 5)
    rows = np.array([11, 0, 4])
    np.testing.assert_array_equal(fast.gather(table, rows), table[rows])
    fast.scatter(table, rows, -np.ones((3, 5), np.float32))
    assert (table[rows] == -1).all() and table[1, 0] == 5


# ------------------------------------------------------------------------------------------------
# Selection and fallback


def test_fallback_without_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    from tpuemb_cfg.executor import warn

    monkeypatch.setitem(sys.modules, "tpuemb_cfg.executor.engines.numba", None)  # import fails
    monkeypatch.setattr(warn, "_warned", set())
    with pytest.warns(RuntimeWarning, match="pip install numba"):
        chosen = get_engine("numba")
    assert chosen.name == "numpy" and chosen.requested == "numba"
    assert chosen.fallback is not None and "cannot be imported" in chosen.fallback
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: the second request is silent
        again = get_engine()
    assert again.name == "numpy" and again.fallback == chosen.fallback


def test_unknown_engine() -> None:
    with pytest.raises(UsageError, match="numba, numpy"):
        get_engine("cuda")


def test_numpy_engine_never_imports_numba() -> None:
    code = (
        "import sys, tpuemb_cfg\n"
        "from tpuemb_cfg.simulate import Executor\n"
        "from tpuemb_cfg.executor.engines import get_engine\n"
        "get_engine('numpy')\n"
        "from tpuemb_cfg.commands import bench, simulate\n"
        "assert 'numba' not in sys.modules, 'numba imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr


def test_simulate_cli_engine_numba(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from tpuemb_cfg.cli import main
    from tpuemb_cfg.executor import core

    used: list[str] = []

    def spy(name: Any = "numpy") -> Engine:
        engine = get_engine(name)
        used.append(engine.name)
        return engine

    monkeypatch.setattr(core, "get_engine", spy)

    case = CASES_ROOT / "tf" / "13_three_tables_shared_tags"
    require_data(case)
    out = tmp_path / "out.npz"
    result = CliRunner().invoke(main, [
        "simulate", str(case / "config.pbtxt"), "--batches", str(case / "batches.npz"),
        "--init", str(case / "init.npz"), "--out", str(out), "--engine", "numba",
        *shlex.split((case / "combiner.txt").read_text()),
    ])
    assert result.exit_code == 0, result.output
    assert used == ["numba"]
    got = read_npz(out)
    for key, want in read_npz(case / "expected.npz").items():
        assert float(np.max(np.abs(got[key] - want))) <= 1e-5, key


def test_empty_and_unusual_inputs_match() -> None:
    """Empty features, int32 ids and read-only arrays take the same path in both engines."""
    config = _config("adagrad", "clipped")
    executors = {e: Executor(config, combiners="sum", seed=1, engine=e) for e in ("numpy", "numba")}
    assert executors["numba"].engine.name == "numba", executors["numba"].engine.fallback
    empty = {"ids": np.zeros(0, np.int64), "row_splits": np.zeros(7, np.int64),
             "grad": np.ones((6, 8), np.float32)}
    ids = np.array([3, 3, 0, 39, 3, 1], np.int32)
    grad = np.full((6, 8), 0.25, np.float32)
    grad.flags.writeable = False
    small = {"ids": np.array([6, 6, 0, 1, 2, 6]), "grad": np.full((6, 3), -0.5, np.float32)}
    for batch in ([empty, empty, small], [{"ids": ids, "grad": grad}, empty, small]):
        out = {e: ex.step(batch, [0.1]) for e, ex in executors.items()}
        for f, want in enumerate(out["numpy"]):
            _close(out["numba"][f], want, f"feature {f}")
    want_state = executors["numpy"].state_arrays()
    for key, got in executors["numba"].state_arrays().items():
        _close(got, want_state[key], key)
