"""The compiled whole step is the default and behaves as the reference (issue 14, items 1-5).

The default engine is numba; its step checks the gradients it reads (NaN and infinities refused
before any table changes, with the reference's message); the frequency estimator has a fused
kernel too; the synthetic workload's kernels give the NumPy definition's numbers; compiled
kernels are cached in the user's cache directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tpuemb_cfg
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.executor.counter import stream_key
from tpuemb_cfg.executor.optimizers import UpdateContext
from tpuemb_cfg.sim import kernels
from tpuemb_cfg.simulate import Executor

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[1]


def _config(optimizer: str = "adagrad { }", dim: int = 4, accumulation: str = "ENABLED"
            ) -> tpuemb_cfg.TPUEmbeddingConfiguration:
    text = (
        f'table_descriptor {{ name: "t" vocabulary_size: 30 dimension: {dim} '
        f"optimization_parameters {{ {optimizer} learning_rate {{ constant: 0.1 }} "
        f"gradient_accumulation_status: {accumulation} }} }} "
        "mode: TRAINING num_hosts: 1 num_tensor_cores: 1 "
        'feature_descriptor { name: "a" table_id: 0 input_shape: 3 } '
        'feature_descriptor { name: "b" table_id: 0 input_shape: 3 }'
    )
    return tpuemb_cfg.load(text.encode(), "text")


def _batch(grad_b: np.ndarray) -> list[dict[str, np.ndarray]]:
    return [
        {"ids": np.array([1, 2, 2]), "grad": np.ones((3, 4), np.float32)},
        {"ids": np.array([5, 1]), "row_splits": np.array([0, 1, 1, 2]), "grad": grad_b},
    ]


def test_the_default_engine_is_numba() -> None:
    executor = Executor(_config())
    assert executor.engine.name == "numba" and executor._fused is not None


@pytest.mark.parametrize("bag", [0, 1])  # bag 1 is empty: no bag reads its gradient row
@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_non_finite_gradients_are_refused_before_any_change(engine: str, bag: int) -> None:
    executor = Executor(_config(), seed=1, engine=engine)
    assert executor.engine.name == engine
    good = np.ones((3, 4), np.float32)
    executor.step(_batch(good))
    before = {k: v.copy() for k, v in executor.state_arrays().items()}
    report = executor.last_report
    grad = good.copy()
    grad[bag, 2] = np.nan
    with pytest.raises(InputError) as raised:
        executor.step(_batch(grad))
    assert raised.value.key == "s1/f1/grad"
    assert f"found nan at index ({bag}, 2)" in str(raised.value)
    for key, value in executor.state_arrays().items():
        np.testing.assert_array_equal(value, before[key])
    assert executor.step_index == 1 and executor.last_report is report


def test_report_can_be_skipped() -> None:
    executor = Executor(_config(), report=False)
    executor.step(_batch(np.ones((3, 4), np.float32)))
    assert executor.last_report == {}


def test_the_fused_update_keeps_the_rows_whose_change_is_not_finite_only() -> None:
    """What a non-finite result is diagnosed from: the compiled update writes a touched row's
    parameters and slots before the update into the kept arrays only when the row's change is
    not finite (no copy of every touched row in a step that stays finite)."""
    executor = Executor(_config(dim=8), seed=1)
    table = executor.plan.tables[0]
    rows = np.array([0, 2, 3])
    params, slots = executor.storage.live().local("t", rows)
    before = [params[rows].copy(), *(slot[rows].copy() for slot in slots)]
    grad = np.full((3, 8), 0.5, np.float32)
    grad[1, 3] = np.inf  # row 2: accumulator inf, parameter -inf / inf = NaN
    kept = tuple(np.full((3, 8), 7.0, np.float32) for _ in range(1 + len(slots)))
    norms = executor._fused.update(table, params, slots, rows, grad, np.float32(0.1),
                                   UpdateContext(0, ()), kept)
    assert np.isfinite(norms[[0, 2]]).all() and not np.isfinite(norms[1])
    assert np.isnan(params[2, 3]) and len(kept) == 2
    for array, was in zip(kept, before, strict=True):
        np.testing.assert_array_equal(array[1], was[1])  # the non-finite row, as it was
        assert (array[[0, 2]] == 7.0).all()  # the finite rows: not written


def test_frequency_estimator_is_fused() -> None:
    config = _config("frequency_estimator { tau: 0.25 max_delta: 6 outlier_threshold: 2 }", 1)
    text = str(config).replace("constant: 0.1", "dynamic { }")
    config = tpuemb_cfg.load(text.encode(), "text")
    batch = [
        {"ids": np.array([1, 2, 2]), "grad": np.ones((3, 1), np.float32)},
        {"ids": np.array([5, 1]), "row_splits": np.array([0, 1, 1, 2]),
         "grad": np.ones((3, 1), np.float32)},
    ]
    runs = {engine: Executor(config, engine=engine) for engine in ("numba", "numpy")}
    assert runs["numba"].engine.name == "numba"  # not NumPy against NumPy
    for step in range(4):
        for executor in runs.values():
            executor.step(batch, [float(step * 3 + 1)])
    got, want = (runs[e].state_arrays() for e in ("numba", "numpy"))
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value)


def test_synthetic_kernels_match_their_numpy_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    u = rng.random(5000)
    key = stream_key(9, 2)
    activations = rng.standard_normal((40, 8)).astype(np.float32)
    lengths = rng.integers(0, 4, 40)
    row_splits = np.concatenate([[0], np.cumsum(lengths)])
    inverse = rng.integers(0, 30, int(row_splits[-1]))
    gains = rng.uniform(-1, 2, inverse.shape[0]).astype(np.float32)

    basis = kernels.teacher_basis(key, 8)

    def compute() -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
        ids = kernels.zipf_ids(u, 1000, 377, 5)
        teacher = kernels.teacher_rows(key, basis, np.arange(30))
        squares, grad = kernels.loss_gradients(activations, key, basis, inverse, gains,
                                               row_splits)
        return ids, teacher, squares, grad

    assert kernels.compiled() is not None  # else this would compare NumPy with NumPy
    compiled = compute()
    monkeypatch.setattr(kernels, "compiled", lambda: None)
    reference = compute()
    np.testing.assert_array_equal(compiled[0], reference[0])
    np.testing.assert_array_equal(compiled[1].view(np.uint32), reference[1].view(np.uint32))
    assert compiled[2] == reference[2]  # the loss: bags in order, lanes in a bag (numerics)
    np.testing.assert_array_equal(compiled[3], reference[3])
    ids = compiled[0]
    assert ids.min() >= 0 and ids.max() < 1000
    assert np.abs(compiled[1]).max() < 2 / np.sqrt(8)  # 4 terms of at most 1/(2 sqrt(D))


def test_kernels_are_cached_in_the_user_cache(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    code = (
        "import numpy as np\n"
        "from tpuemb_cfg.executor.engines import jit\n"
        "from tpuemb_cfg.executor.engines.numba_init import fill_rows\n"
        "fill_rows(np.empty((2, 3), np.float32), 1.0)\n"  # a one-kernel compilation
        "print(jit.cache_dir())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    cache = tmp_path / "tpuemb" / "numba"
    assert done.stdout.strip() == str(cache)
    assert any(cache.rglob("*.nbi")), "no kernel was cached in the user's cache directory"


def test_every_optimizer_has_a_compiled_kernel() -> None:
    from tpuemb_cfg.executor.engines.numba_update import _KERNELS, KINDS
    from tpuemb_cfg.executor.optimizers import REGISTRY

    assert set(KINDS) == set(REGISTRY)
    # Each optimizer's kernels (one per element of its family) follow one another, in order.
    counts = [len(REGISTRY[name].elements) for name in KINDS]
    assert list(KINDS.values()) == [sum(counts[:i]) for i in range(len(counts))]
    assert sum(counts) == len(_KERNELS)
