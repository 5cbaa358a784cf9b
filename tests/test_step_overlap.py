"""``Executor.step`` overlaps the forward pass with de-duplication and back-propagation (issue 14).

With the numba engine, tables in this process and two threads or more, ``step`` forms the
activations on the calling thread (rows read by id) while another thread de-duplicates and
back-propagates, then updates (``fused.forward_backprop``; with one thread the two halves run
one after the other). These tests check that this path runs (``Executor.overlapped_steps``),
gives the same bits as the sequential path (the same executor with the overlap switched off)
and with one thread, and the NumPy engine's numbers within 1e-6, and that a refused step
leaves every table, slot, the step number and the report untouched with the sequential path's
message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tpuemb_cfg
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.simulate import Executor

numba = pytest.importorskip("numba")

from tpuemb_cfg.executor.engines import numba_update  # noqa: E402 - after the numba check

ROOT = Path(__file__).resolve().parents[1]
F32 = np.float32

OPTIMIZERS = {
    "sgd": "stochastic_gradient_descent { }",
    "adagrad": "adagrad { }",
    "momentum": "momentum { momentum: 0.9 use_nesterov: true }",
    "adam": "adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-08 }",
    "adam_non_lazy": "adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-08 use_non_lazy_adam: true }",
    "ftrl": "ftrl { l1: 0.001 l2: 0.001 lr_power: -0.5 beta: 0.0 }",
    "rms_prop": "rms_prop { rho: 0.9 momentum: 0.9 epsilon: 1e-07 }",
    "proximal_adagrad": "proximal_adagrad { l1: 0.001 l2: 0.001 }",
}
# (table, bags) per feature: two features on table 0, one on table 1, two on table 2.
FEATURES = [(0, 6), (1, 5), (0, 4), (2, 7), (2, 3)]
VOCABULARY = (40, 25, 300)
DIMENSION = (8, 4, 16)


@pytest.fixture(autouse=True)
def two_threads() -> Iterator[None]:
    """Two threads for the compiled step (one when the machine has one: then nothing overlaps
    and the tests that need the overlap skip)."""
    before = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    yield
    numba.set_num_threads(before)


def _needs_two_threads() -> None:
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread: the step has nothing to overlap")


def _config(optimizer: str, accumulation: str = "ENABLED", cores: int = 1, top: str = ""
            ) -> tpuemb_cfg.TPUEmbeddingConfiguration:
    body = OPTIMIZERS[optimizer]
    text = "".join(
        f'table_descriptor {{ name: "t{t}" vocabulary_size: {VOCABULARY[t]} '
        f"dimension: {DIMENSION[t]} optimization_parameters {{ {body} "
        f"learning_rate {{ constant: 0.05 }} gradient_accumulation_status: {accumulation} }} }} "
        for t in range(3)
    )
    text += "".join(
        f'feature_descriptor {{ name: "f{f}" table_id: {table} input_shape: {bags} }} '
        for f, (table, bags) in enumerate(FEATURES)
    )
    text += f"mode: TRAINING num_hosts: 2 num_tensor_cores: {cores} {top}"
    return tpuemb_cfg.load(text.encode(), "text")


def _batch(rng: np.random.Generator, bags: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """One step: feature 0 with one id per bag, the others ragged (empty bags too), weighted."""
    batch: list[dict[str, Any]] = []
    for f, (table, batch_size) in enumerate(FEATURES):
        size = bags[f] if bags else batch_size
        vocab = VOCABULARY[table]
        grad = rng.standard_normal((size, DIMENSION[table]), dtype=F32)
        if f == 0:
            ids = rng.integers(0, vocab, size)
            batch.append({"ids": ids, "grad": grad})
            continue
        lengths = rng.integers(0, 4, size)
        lengths[0] = 0  # an empty bag
        ids = rng.integers(0, vocab, int(lengths.sum()))
        ids[: ids.shape[0] // 3] = ids[0] if ids.size else 0  # repeated ids
        splits = np.concatenate([[0], np.cumsum(lengths)])
        weights = np.asarray(rng.uniform(0.5, 2.0, ids.shape[0]), dtype=F32)
        batch.append({"ids": ids, "row_splits": splits, "weights": weights, "grad": grad})
    return batch


COMBINERS = ["sum", "mean", "sqrtn", "mean", "sum"]


def _run(executor: Executor, steps: int = 3, seed: int = 7
         ) -> tuple[list[list[np.ndarray]], list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    outputs, reports = [], []
    for _ in range(steps):
        outputs.append(executor.step(_batch(rng)))
        reports.append({name: r.as_dict() for name, r in executor.last_report.items()})
    return outputs, reports


def _state(executor: Executor) -> dict[str, np.ndarray]:
    return {key: np.array(value) for key, value in executor.state_arrays().items()}


def _identical(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """The NumPy engine's bits (docs/numerics.md)."""
    assert got.shape == want.shape and got.dtype == want.dtype, what
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=what)


def _sequential(executor: Executor) -> Executor:
    executor._overlap = False  # today's path: forward, then back-propagation
    return executor


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_overlapped_step_is_bit_identical_and_matches_numpy(optimizer: str) -> None:
    _needs_two_threads()
    config = _config(optimizer)
    overlapped = Executor(config, combiners=COMBINERS, seed=3)
    sequential = _sequential(Executor(config, combiners=COMBINERS, seed=3))
    reference = Executor(config, combiners=COMBINERS, seed=3, engine="numpy")
    got, got_reports = _run(overlapped)
    want, want_reports = _run(sequential)
    numpy_out, numpy_reports = _run(reference)
    assert overlapped.overlapped_steps == 3 and sequential.overlapped_steps == 0
    assert overlapped.step_index == sequential.step_index == 3
    for step, (a, b, c) in enumerate(zip(got, want, numpy_out, strict=True)):
        for f, (x, y, z) in enumerate(zip(a, b, c, strict=True)):
            assert x.dtype == y.dtype and np.array_equal(x, y), (step, f)
            _close(x, z, f"step {step} feature {f}")
    assert got_reports == want_reports  # update norms included, bit for bit
    assert got_reports == numpy_reports  # the NumPy engine's too (docs/numerics.md)
    _identical(_state(overlapped), _state(sequential))
    numpy_state = _state(reference)
    for key, value in _state(overlapped).items():
        _close(value, numpy_state[key], key)


def test_one_thread_runs_the_two_halves_in_turn_with_the_same_bits() -> None:
    _needs_two_threads()
    config = _config("adagrad")
    overlapped = Executor(config, combiners=COMBINERS, seed=5)
    got, got_reports = _run(overlapped)
    numba.set_num_threads(1)
    serial = Executor(config, combiners=COMBINERS, seed=5)
    want, want_reports = _run(serial)
    sequential = _sequential(Executor(config, combiners=COMBINERS, seed=5))
    plain, plain_reports = _run(sequential)
    assert overlapped.overlapped_steps == serial.overlapped_steps == 3
    assert sequential.overlapped_steps == 0
    for a, b, c in zip(got, want, plain, strict=True):
        assert all(np.array_equal(x, y) and np.array_equal(x, z)
                   for x, y, z in zip(a, b, c, strict=True))
    assert got_reports == want_reports == plain_reports
    _identical(_state(overlapped), _state(serial))
    _identical(_state(overlapped), _state(sequential))


def test_pending_default_rows_are_computed_before_the_forward_pass_reads_them() -> None:
    """Default tables compute their rows when first touched: the overlapped forward pass reads
    rows by id, so it computes the pending ones among them first (repeated ids included)."""
    _needs_two_threads()
    config = _config("adam")
    lazy = Executor(config, combiners=COMBINERS, seed=11)
    eager = _sequential(Executor(config, combiners=COMBINERS, seed=11))
    eager.state_arrays()  # every row computed up front
    got, _ = _run(lazy, steps=4, seed=2)
    want, _ = _run(eager, steps=4, seed=2)
    assert lazy.overlapped_steps == 4
    for a, b in zip(got, want, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    _identical(_state(lazy), _state(eager))


@pytest.mark.parametrize(
    ("accumulation", "cores", "top"),
    [("DISABLED", 2, ""), ("ENABLED", 1, "pipeline_execution_with_tensor_core: true")],
)
def test_where_the_overlap_does_not_apply_the_step_is_todays(
    accumulation: str, cores: int, top: str
) -> None:
    config = _config("adagrad", accumulation, cores, top)
    bags = (6, 4, 4, 8, 4)  # every feature's bags divisible by the two cores
    executors = [Executor(config, combiners=COMBINERS, seed=1, engine=engine)
                 for engine in ("numba", "numpy")]
    outputs = []
    for executor in executors:
        rng = np.random.default_rng(4)
        outputs.append([executor.step(_batch(rng, bags)) for _ in range(3)])
    assert executors[0].engine.name == "numba" and executors[0].overlapped_steps == 0
    for a, b in zip(*outputs, strict=True):
        for x, y in zip(a, b, strict=True):
            _close(x, y, "activations")
    numpy_state = _state(executors[1])
    for key, value in _state(executors[0]).items():
        _close(value, numpy_state[key], key)


def _refusal(executor: Executor, batch: list[dict[str, Any]]) -> str:
    before = _state(executor)
    step, report = executor.step_index, executor.last_report
    report_values = {name: r.as_dict() for name, r in report.items()}
    counted = executor.overlapped_steps
    with pytest.raises(InputError) as caught:
        executor.step(batch)
    _identical(_state(executor), before)
    assert executor.step_index == step
    assert executor.last_report is report
    assert {name: r.as_dict() for name, r in report.items()} == report_values
    assert executor.overlapped_steps in (counted, counted + 1)
    return str(caught.value)


@pytest.mark.parametrize(
    ("feature", "where"), [(0, (2, 1)), (3, (0, 0)), (4, (1, 2)), ("ids", None)]
)
def test_a_refused_step_leaves_everything_untouched(feature: Any, where: Any) -> None:
    """NaN or infinity in a gradient (feature 3's row 0 is an empty bag: no pass reads it) or an
    id outside its table: the same error as the sequential path, nothing changed."""
    _needs_two_threads()
    config = _config("momentum")
    messages = []
    for executor in (Executor(config, combiners=COMBINERS, seed=2),
                     _sequential(Executor(config, combiners=COMBINERS, seed=2))):
        _run(executor, steps=2)
        assert executor.overlapped_steps == (2 if not messages else 0)  # first: overlapped
        batch = _batch(np.random.default_rng(9))
        if feature == "ids":
            batch[2]["ids"] = batch[2]["ids"].copy()
            batch[2]["ids"][1] = VOCABULARY[0]
        else:
            batch[feature]["grad"][where] = np.nan if feature != 4 else np.inf
        messages.append(_refusal(executor, batch))
        executor.step(_batch(np.random.default_rng(10)))  # the executor goes on
        assert executor.step_index == 3
    assert messages[0] == messages[1]


def test_alongside_waits_for_the_background_and_gives_the_foreground_one_thread_fewer() -> None:
    _needs_two_threads()
    seen: dict[str, Any] = {}

    def background() -> str:
        time.sleep(0.05)
        seen["inside"] = numba_update._local.inside
        seen["done"] = True
        return "back"

    def foreground() -> str:
        seen["free"] = numba_update._free()
        seen["thread"] = threading.get_ident()
        return "front"

    assert numba_update.alongside(background, foreground) == ("back", "front")
    assert seen == {"inside": True, "done": True, "free": numba.get_num_threads() - 1,
                    "thread": threading.get_ident()}
    assert numba_update._free() == numba.get_num_threads()

    def failing() -> None:
        raise ValueError("foreground")

    seen.clear()
    with pytest.raises(ValueError, match="foreground"):
        numba_update.alongside(background, failing)
    assert seen["done"]  # the background had finished when the error came out
    assert numba_update._free() == numba.get_num_threads()


def test_more_threads_than_two_give_the_same_bits() -> None:
    """Four threads (on any machine): the foreground's forward pass splits over three."""
    script = """
import numpy as np, sys
sys.path.insert(0, sys.argv[1])
import test_step_overlap as t
from tpuemb_cfg.simulate import Executor
config = t._config("rms_prop")
a = Executor(config, combiners=t.COMBINERS, seed=3)
b = t._sequential(Executor(config, combiners=t.COMBINERS, seed=3))
ga, ra = t._run(a)
gb, rb = t._run(b)
assert a.overlapped_steps == 3 and b.overlapped_steps == 0
assert ra == rb
for x, y in zip(ga, gb):
    assert all(np.array_equal(u, v) for u, v in zip(x, y))
t._identical(t._state(a), t._state(b))
print("ok")
"""
    env = {**os.environ, "NUMBA_NUM_THREADS": "4"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(ROOT / "tests")], env=env, capture_output=True,
        text=True, timeout=300, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
