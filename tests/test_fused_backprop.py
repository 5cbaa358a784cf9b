"""Back-propagation fused into the update (issue 14): the same numbers, bit for bit.

``FusedStep.backprop`` either sums each touched row's gradient in one pass over the occurrences
(a [rows, D] array the update then reads) or, above ``fuse_above_bytes``, hands the update the
occurrences grouped by row (``numba_update.Occurrences``) and the update sums each row itself,
in occurrence order. These tests force the grouped path (``fuse_above_bytes = 0``), count that
it ran, and compare it bit for bit with the summed path and within the engine tolerances with
the NumPy engine: tables, slots, activations, the report and the refusal of non-finite
gradients.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from conftest import OPTIMIZER_CASES, optimizer_case_names

import tpuemb_cfg
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.executor import parse_combiners
from tpuemb_cfg.executor.engines import Engine, get_engine
from tpuemb_cfg.formats.npzio import read_npz
from tpuemb_cfg.simulate import Executor, replay

pytest.importorskip("numba")

from tpuemb_cfg.executor.engines import numba_step, numba_update  # noqa: E402

_OPTIMIZERS = {
    "sgd": "stochastic_gradient_descent { }",
    "adagrad": "adagrad { }",
    "adam_dense": "adam { beta1: 0.9 beta2: 0.99 epsilon: 1e-3 use_non_lazy_adam: true }",
    "ftrl": "ftrl { l1: 0.01 l2: 0.02 lr_power: -0.5 beta: 0.1 }",
    "ftrl_pow": "ftrl { l1: 0.01 lr_power: -0.7 beta: 0.1 multiply_linear_by_lr: true }",
    "centered_rms_prop": "centered_rms_prop { rho: 0.9 momentum: 0.5 epsilon: 0.1 }",
}
_WRAPPER = (
    "clipping_limits { lower { value: -0.05 } upper { value: 0.05 } } "
    "gradient_clipping_limits { lower { value: -0.2 } upper { value: 0.3 } } "
    "weight_decay_factor: 0.01 multiply_weight_decay_factor_by_learning_rate: true "
)


class _Counter:
    def __init__(self) -> None:
        self.grouped = 0
        self.summed = 0


def _engine(fuse_above_bytes: int, counter: _Counter) -> Engine:
    """The numba engine with the grouped path chosen above ``fuse_above_bytes``, counting the
    fused updates run from grouped occurrences and from summed gradients."""
    engine = get_engine("numba")
    assert engine.name == "numba", f"the numba engine is not in use: {engine.fallback}"
    base = type(engine.fused)

    class Counted(base):  # type: ignore[misc, valid-type]
        @staticmethod
        def update(*args: Any) -> np.ndarray:
            grad = args[4]
            if isinstance(grad, numba_update.Occurrences):
                counter.grouped += 1
            else:
                counter.summed += 1
            return np.asarray(base.update(*args))

    fused = Counted()
    fused.fuse_above_bytes = fuse_above_bytes
    return replace(engine, fused=fused)


def _config(optimizer: str) -> tpuemb_cfg.TPUEmbeddingConfiguration:
    body = _OPTIMIZERS[optimizer]
    text = "".join(
        f'table_descriptor {{ name: "t{t}" vocabulary_size: {vocab} dimension: {dim} '
        f"optimization_parameters {{ {body} {_WRAPPER} learning_rate {{ constant: 0.05 }} "
        "gradient_accumulation_status: ENABLED } } "
        for t, (vocab, dim) in enumerate([(40, 8), (25, 3)])
    )
    text += (
        'feature_descriptor { name: "a" table_id: 0 input_shape: 12 } '
        'feature_descriptor { name: "b" table_id: 0 input_shape: 9 } '
        'feature_descriptor { name: "c" table_id: 1 input_shape: 10 } '
        "mode: TRAINING num_hosts: 1 num_tensor_cores: 1"
    )
    return tpuemb_cfg.load(text.encode(), "text")


def _batches(seed: int, steps: int) -> list[list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    out: list[list[dict[str, np.ndarray]]] = []
    for _ in range(steps):
        features: list[dict[str, np.ndarray]] = []
        for bags, vocab, dim in [(12, 40, 8), (9, 40, 8), (10, 25, 3)]:
            sizes = rng.integers(0, 5, bags)  # empty bags too
            ids = np.asarray(rng.zipf(1.3, int(sizes.sum())) % vocab, dtype=np.int64)
            features.append({
                "ids": ids,
                "row_splits": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                "weights": np.asarray(rng.uniform(-0.5, 2.0, ids.shape[0]), dtype=np.float32),
                "grad": np.asarray(rng.normal(0, 0.3, (bags, dim)), dtype=np.float32),
            })
        out.append(features)
    return out


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """The NumPy engine's bits (docs/numerics.md)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=what)


def _run(engine: Any, config: Any, combiner: str) -> tuple[list[list[np.ndarray]], Executor]:
    executor = Executor(config, combiners=combiner, seed=5, engine=engine)
    activations = [executor.step(batch) for batch in _batches(11, 3)]
    return activations, executor


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("optimizer", sorted(_OPTIMIZERS))
def test_grouped_path_is_bit_identical_and_used(optimizer: str, combiner: str) -> None:
    config = _config(optimizer)
    grouped, summed = _Counter(), _Counter()
    runs = {
        "grouped": _run(_engine(0, grouped), config, combiner),
        "summed": _run(_engine(1 << 62, summed), config, combiner),
        "numpy": _run("numpy", config, combiner),
    }
    # Two tables, three steps: six fused updates, every one from grouped occurrences (or from
    # summed gradients, with the threshold out of reach).
    assert (grouped.grouped, grouped.summed) == (6, 0)
    assert (summed.grouped, summed.summed) == (0, 6)
    acts = {name: run[0] for name, run in runs.items()}
    states = {name: run[1].state_arrays() for name, run in runs.items()}
    for step, features in enumerate(acts["grouped"]):
        for f, got in enumerate(features):
            np.testing.assert_array_equal(got, acts["summed"][step][f])
            _close(got, acts["numpy"][step][f], f"step {step} feature {f} activations")
    for key, got in states["grouped"].items():
        np.testing.assert_array_equal(got, states["summed"][key], err_msg=key)
        _close(got, states["numpy"][key], key)
    reports = {name: run[1].last_report for name, run in runs.items()}
    for name, report in reports["numpy"].items():
        other = reports["grouped"][name]
        assert other.rows_updated == report.rows_updated
        assert other.update_norm == reports["summed"][name].update_norm
        assert other.update_norm == report.update_norm  # the same bits (docs/numerics.md)


@pytest.mark.parametrize("bag", [0, 1])  # bag 1 of feature b is empty: no occurrence reads it
def test_grouped_path_refuses_non_finite_gradients_before_any_change(bag: int) -> None:
    counter = _Counter()
    config = _config("adagrad")
    executor = Executor(config, seed=1, engine=_engine(0, counter))
    batch = _batches(2, 1)[0]
    batch[1]["row_splits"] = np.array([0, 2, 2] + [4] * 7, dtype=np.int64)
    batch[1]["ids"] = np.array([1, 3, 3, 7], dtype=np.int64)
    batch[1]["weights"] = np.ones(4, np.float32)
    executor.step(batch)
    assert counter.grouped == 2
    before = {k: v.copy() for k, v in executor.state_arrays().items()}
    report = executor.last_report
    bad = [dict(feature) for feature in batch]
    bad[1]["grad"] = bad[1]["grad"].copy()
    bad[1]["grad"][bag, 2] = np.inf
    with pytest.raises(InputError) as raised:
        executor.step(bad)
    assert raised.value.key == "s1/f1/grad"
    assert f"found inf at index ({bag}, 2)" in str(raised.value)
    for key, value in executor.state_arrays().items():
        np.testing.assert_array_equal(value, before[key])
    assert executor.step_index == 1 and executor.last_report is report
    assert counter.grouped == 2  # the refused step ran no update


@pytest.mark.parametrize("name", optimizer_case_names())
def test_golden_cases_on_the_grouped_path(name: str) -> None:
    case = OPTIMIZER_CASES / name
    config = tpuemb_cfg.load(str(case / "config.pbtxt"))
    flags = shlex.split((case / "combiner.txt").read_text())
    inputs = (config, *(read_npz(case / file) for file in ("batches.npz", "init.npz")))
    combiners = parse_combiners(flags[1::2], len(config.feature_descriptor))
    counter = _Counter()
    engine: Any = _engine(0, counter)
    out = replay(*inputs, combiners=combiners, engine=engine)
    assert counter.summed == 0
    # Every case runs the compiled step, but those it does not apply to (several partials,
    # pipelining and quantization read other values than the live rows).
    assert counter.grouped > 0 or any(
        word in name for word in ("disabled", "pipelined", "quantization")
    )
    reference = replay(*inputs, combiners=combiners, engine="numpy")
    for key, want in reference.items():
        _close(out[key], want, key)
    tolerance = json.loads((case / "case.json").read_text())["tolerance"]["max_abs"]
    for key, want in read_npz(case / "expected.npz").items():
        worst = float(np.max(np.abs(out[key] - want))) if want.size else 0.0
        assert worst <= tolerance, f"{key}: off the golden value by {worst}"


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_update_from_occurrences_equals_update_from_sums(dense: bool, threads: int) -> None:
    import numba

    rng = np.random.default_rng(4)
    vocab, dim, count = 3000, 40, 20000  # enough work for several threads
    ids = (rng.zipf(1.2, count) * 7919) % vocab
    unique, inverse = numba_step.deduplicate(ids.astype(np.int64))
    d_activations = rng.normal(0, 1, (count // 2, dim)).astype(np.float32)
    sample = rng.integers(0, count // 2, count).astype(np.int64)
    gains = rng.uniform(-1, 2, count).astype(np.float32)
    summed, finite = numba_step.backprop(d_activations, sample, gains, inverse, unique.shape[0])
    grouped, grouped_finite = numba_step.occurrences(d_activations, sample, gains, inverse,
                                                     unique.shape[0])
    assert finite and grouped_finite
    clips = (np.float32(-0.5), np.float32(0.5), np.float32(-np.inf), np.float32(np.inf))
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        results = []
        for grad in (summed, grouped):
            params = np.full((vocab, dim), 0.5, np.float32)
            slots = (np.full((vocab, dim), 0.1, np.float32), np.zeros((vocab, dim), np.float32))
            norm = numba_update.update(
                numba_update.KINDS["adam"], params, slots, unique, grad, np.float32(0.01), clips,
                np.float32(0.001), True, (0.9, 0.99, 1e-5, 0.0), dense,
            )
            results.append((norm, params, *slots))
    finally:
        numba.set_num_threads(previous)
    # Each row's squared change, whatever the ranges (the grouped path balances them by
    # occurrences): the same bits (docs/numerics.md).
    for want, got in zip(results[0], results[1], strict=True):
        np.testing.assert_array_equal(got, want)


def test_finite_check_reads_every_row() -> None:
    values = np.zeros((300, 5), np.float32)
    assert numba_step.finite(values)
    for bad in (np.nan, np.inf, -np.inf):
        values[217, 3] = bad
        assert not numba_step.finite(values)
    grouped, finite = numba_step.occurrences(values, np.zeros(1, np.int64),
                                             np.ones(1, np.float32), np.zeros(1, np.int64), 1)
    assert not finite  # row 217 is read by no occurrence, and still checked
    np.testing.assert_array_equal(grouped.starts, [0, 1])
