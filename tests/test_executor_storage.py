"""The storage seam (issue 11, item 4) and the public per-row update.

The executor reaches tables and slots only through a ``Storage``. A second implementation - here
a two-shard one, the shape a Ray-sharded storage will have: each shard holds a contiguous block of
rows and runs the row update on its own arrays with local row numbers - plugs in through
``Executor(..., storage=...)`` and gives the same tables, slots and activations as the local one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

import tpuemb_cfg
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.executor.engines import Engine
from tpuemb_cfg.executor.plan import Plan
from tpuemb_cfg.executor.state import slot_key, table_key
from tpuemb_cfg.executor.storage import RowUpdate
from tpuemb_cfg.simulate import Executor


class TwoShards:
    """Each table's rows [0, h) in shard 0 and [h, V) in shard 1, h = V // 2."""

    def __init__(self, plan: Plan, arrays: Mapping[str, np.ndarray], engine: Engine) -> None:
        self.plan = plan
        self.calls: list[str] = []
        self.split: dict[str, int] = {}
        self.parts: dict[str, list[tuple[np.ndarray, tuple[np.ndarray, ...]]]] = {}
        self.load(arrays)

    def _keys(self, table: str) -> tuple[str, list[str]]:
        names = next(t.slot_names for t in self.plan.tables if t.name == table)
        return table_key(table), [slot_key(table, s) for s in names]

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.calls.append("load")
        for table in self.plan.tables:
            half = table.vocabulary // 2
            key, slots = self._keys(table.name)
            self.split[table.name] = half
            self.parts[table.name] = [
                (arrays[key][lo:hi].copy(), tuple(arrays[s][lo:hi].copy() for s in slots))
                for lo, hi in ((0, half), (half, table.vocabulary))
            ]

    def _local(self, table: str, rows: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        half = self.split[table]
        low = rows < half
        return [(0, np.flatnonzero(low), rows[low]), (1, np.flatnonzero(~low), rows[~low] - half)]

    def gather(self, table: str, rows: np.ndarray | None) -> np.ndarray:
        self.calls.append("gather")
        if rows is None:
            return np.concatenate([params for params, _ in self.parts[table]])
        out = np.empty((rows.shape[0], self.parts[table][0][0].shape[1]), np.float32)
        for shard, where, local in self._local(table, rows):
            out[where] = self.parts[table][shard][0][local]
        return out

    def update(
        self, table: str, rows: np.ndarray | None, grad: np.ndarray, fn: RowUpdate
    ) -> None:
        self.calls.append("update")
        if rows is None:
            half = self.split[table]
            for (params, slots), block in zip(self.parts[table], (grad[:half], grad[half:]),
                                              strict=True):
                fn(params, slots, None, block)
            return
        for shard, where, local in self._local(table, rows):
            params, slots = self.parts[table][shard]
            fn(params, slots, local, grad[where])

    def commit(self) -> None:
        """Updates are made in place."""

    def change_norm(self, table: str, rows: np.ndarray | None, before: np.ndarray) -> float:
        self.calls.append("change_norm")
        after = self.gather(table, rows)
        delta = (after - before).astype(np.float64)
        return float(np.sqrt(np.sum(delta * delta)))

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for table in self.plan.tables:
            key, slots = self._keys(table.name)
            parts = self.parts[table.name]
            out[key] = np.concatenate([params for params, _ in parts])
            for i, name in enumerate(slots):
                out[name] = np.concatenate([state[i] for _, state in parts])
        return out


def _config(*, pipelined: bool = False, disabled: bool = False) -> Any:
    # DISABLED accumulation (one partial per core) allows neither gradient clipping nor
    # non-lazy Adam (TensorFlow rejects both).
    accumulation = "DISABLED" if disabled else "ENABLED"
    clipping = "" if disabled else "gradient_clipping_limits { lower { value: -0.3 } }"
    optimizers = [
        "adagrad { }",
        "adam { beta1: 0.9 beta2: 0.99 epsilon: 0.01 "
        f"use_non_lazy_adam: {'false' if disabled else 'true'} }}",
        "rms_prop { rho: 0.9 momentum: 0.5 epsilon: 0.1 }",
    ]
    tables = "".join(
        f"""table_descriptor {{ name: "t{t}" vocabulary_size: 9 dimension: 3
          optimization_parameters {{ {body} learning_rate {{ constant: 0.1 }}
            gradient_accumulation_status: {accumulation} {clipping}
            weight_decay_factor: 0.01 }} }}"""
        for t, body in enumerate(optimizers)
    )
    features = "".join(
        f'feature_descriptor {{ name: "f{t}" table_id: {t} input_shape: 4 }}' for t in range(3)
    )
    text = (
        f"{tables} {features} mode: TRAINING num_hosts: 1 num_tensor_cores: 2 "
        f"pipeline_execution_with_tensor_core: {'true' if pipelined else 'false'}"
    )
    return tpuemb_cfg.load(text.encode(), "text")


def _batches(steps: int) -> list[list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(5)
    out = []
    for _ in range(steps):
        batch = []
        for _ in range(3):
            sizes = rng.integers(0, 4, 4)
            batch.append({
                "ids": rng.integers(0, 9, int(sizes.sum())),
                "row_splits": np.concatenate([[0], np.cumsum(sizes)]),
                "grad": rng.normal(0, 0.2, (4, 3)).astype(np.float32),
            })
        out.append(batch)
    return out


@pytest.mark.parametrize("engine", ["numpy", "numba"])
@pytest.mark.parametrize("options", [{}, {"pipelined": True}, {"disabled": True}])
def test_a_sharded_storage_gives_the_same_run(engine: str, options: dict[str, bool]) -> None:
    if engine == "numba":
        pytest.importorskip("numba")
    config = _config(**options)
    local = Executor(config, combiners="mean", seed=2, engine=engine)
    sharded = Executor(config, combiners="mean", seed=2, engine=engine, storage=TwoShards)
    assert sharded.engine.name == engine
    for batch in _batches(4):
        for got, want in zip(sharded.step(batch), local.step(batch), strict=True):
            np.testing.assert_array_equal(got, want)
        for name, report in local.last_report.items():
            assert sharded.last_report[name].rows_updated == report.rows_updated
            assert sharded.last_report[name].update_norm == report.update_norm
    want = local.state_arrays()
    got = sharded.state_arrays()
    assert got.keys() == want.keys()
    for key, array in want.items():
        np.testing.assert_array_equal(got[key], array, err_msg=key)
    storage = sharded.storage.inner  # the factory's storage, behind BasicStorage
    assert isinstance(storage, TwoShards)
    assert set(storage.calls) == {"load", "gather", "update", "change_norm"}


def test_checkpoints_go_through_the_storage() -> None:
    sharded = Executor(_config(pipelined=True), combiners="sum", seed=1, storage=TwoShards)
    batches = _batches(3)
    sharded.step(batches[0])
    saved = sharded.checkpoint_arrays()
    sharded.step(batches[1])
    sharded.restore_checkpoint(saved)
    again = Executor(_config(pipelined=True), combiners="sum", seed=1)
    again.step(batches[0])
    for executor in (sharded, again):
        executor.step(batches[1])
    for key, array in again.state_arrays().items():
        np.testing.assert_array_equal(sharded.state_arrays()[key], array, err_msg=key)


# ------------------------------------------------------------------------------------------------
# apply_row_gradients


def _single(optimizer: str) -> Any:
    text = f"""table_descriptor {{ name: "t" vocabulary_size: 6 dimension: 2
      optimization_parameters {{ {optimizer} learning_rate {{ dynamic {{ }} }}
        clipping_limits {{ upper {{ value: 0.9 }} }} }} }}
      feature_descriptor {{ name: "f" table_id: 0 input_shape: 3 }}
      mode: TRAINING num_hosts: 1 num_tensor_cores: 1"""
    return tpuemb_cfg.load(text.encode(), "text")


@pytest.mark.parametrize("optimizer", [
    "momentum { momentum: 0.5 }",
    "adam { use_non_lazy_adam: true beta1: 0.5 beta2: 0.9 epsilon: 0.1 }",
])
def test_apply_row_gradients_is_the_update_of_a_step(optimizer: str) -> None:
    """One id per bag with the sum combiner: the row gradient is the sum of its bags'."""
    grad = np.array([[0.5, -1.0], [0.25, 0.0], [1.0, 2.0]], np.float32)
    stepped = Executor(_single(optimizer), combiners="sum", seed=4)
    stepped.step([{"ids": [4, 1, 4], "grad": grad}], [0.2])
    direct = Executor(_single(optimizer), combiners="sum", seed=4)
    direct.apply_row_gradients("t", np.array([1, 4]), np.stack([grad[1], grad[0] + grad[2]]), [0.2])
    assert direct.step_index == 0
    for key, array in stepped.state_arrays().items():
        np.testing.assert_array_equal(direct.state_arrays()[key], array, err_msg=key)


def test_apply_row_gradients_refuses_bad_input() -> None:
    executor = Executor(_single("adagrad { }"), combiners="sum")
    rows, grad = np.array([0, 2]), np.ones((2, 2), np.float32)
    with pytest.raises(InputError, match="no table 'x'; the configuration's tables are 't'"):
        executor.apply_row_gradients("x", rows, grad, [0.1])
    with pytest.raises(InputError, match="distinct ids in increasing order"):
        executor.apply_row_gradients("t", np.array([2, 0]), grad, [0.1])
    with pytest.raises(InputError, match=r"within \[0, 6\)"):
        executor.apply_row_gradients("t", np.array([0, 6]), grad, [0.1])
    with pytest.raises(InputError, match=r"shape \(2, 3\) found, expected \(2, 2\)"):
        executor.apply_row_gradients("t", rows, np.ones((2, 3)), [0.1])
    with pytest.raises(InputError, match="K = 1 dynamic learning-rate tag"):
        executor.apply_row_gradients("t", rows, grad)


def _declared(protocol: type) -> set[str]:
    """The calls and properties a Protocol declares (its own and its bases')."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or klass.__name__ in ("Protocol", "Generic"):
            continue
        names |= {name for name in vars(klass) if not name.startswith("_")}
    return names


def test_every_storage_offers_every_declared_call() -> None:
    """The executor makes only the calls ``Storage`` declares (tests/test_architecture.py: no
    probing), so each storage has them all: the local one, the adapter of a factory's, the Ray
    one; a factory's own storage needs only ``RowStorage``'s seven."""
    from tpuemb_cfg.backends.ray.storage import RayStorage
    from tpuemb_cfg.executor.storage import BasicStorage, LocalStorage, RowStorage, Storage

    declared = _declared(Storage)
    assert {"gather", "update", "change_norm", "commit", "arrays", "load", "close", "load_given",
            "prefetch", "queues_updates", "flush", "discard", "live"} == declared
    for storage in (LocalStorage, BasicStorage, RayStorage):
        assert declared <= set(dir(storage)), storage
    assert _declared(RowStorage) == declared - {
        "load_given", "prefetch", "queues_updates", "flush", "discard", "live"}


def test_a_factory_storage_is_reached_through_the_declared_calls() -> None:
    """``BasicStorage``: no batching, no queue, no live arrays; a checkpoint's arrays checked
    before its storage loads them."""
    executor = Executor(_config(), combiners="sum", seed=1, storage=TwoShards)
    storage = executor.storage
    assert storage.live() is None and not storage.queues_updates
    arrays = executor.checkpoint_arrays()
    bad = dict(arrays, **{"table/t0": arrays["table/t0"].astype(np.float64)})
    with pytest.raises(InputError, match="table/t0"):
        executor.restore_checkpoint(bad, "ck.npz")
    executor.restore_checkpoint(arrays, "ck.npz")
    assert storage.inner.calls.count("load") == 2  # the first arrays, then the checkpoint's
