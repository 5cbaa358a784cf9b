"""The pieces of the Ray backend that need no Ray: the host layout of spec section 8, one host's
shard (its rows, the per-row pipeline where they live, the undo log), the per-host memory
estimate, the given-state checks and the block-streamed ``.npz`` writer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tpuemb_cfg
from tpuemb_cfg.backends.ray.host import PipelineRef, Shard, fitting_hosts, shard_bytes
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.executor.optimizers import UpdateContext
from tpuemb_cfg.executor.pipeline import RowPipeline
from tpuemb_cfg.executor.state import check_given
from tpuemb_cfg.formats.npzio import npz_bytes
from tpuemb_cfg.model.layout import TableLayout, host_of
from tpuemb_cfg.simulate import Executor

# ------------------------------------------------------------------------------------------------
# The layout


def test_the_worked_example_of_the_spec() -> None:
    """Spec section 8: V = 10, N = 4 (q = 2, r = 2)."""
    div = TableLayout(10, 4, mod=False)
    mod = TableLayout(10, 4, mod=True)
    assert [div.global_ids(h).tolist() for h in range(4)] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert [mod.global_ids(h).tolist() for h in range(4)] == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    assert [div.rows_of(h) for h in range(4)] == [3, 3, 2, 2]
    assert div.host_of(np.array([7]))[0] == 2
    assert div.local_of(np.array([7]), 2)[0] == 1


@pytest.mark.parametrize("vocabulary", [1, 7, 10, 37, 100])
@pytest.mark.parametrize("hosts", [1, 2, 3, 4, 16])
@pytest.mark.parametrize("mod", [True, False])
def test_every_id_has_one_host_and_one_local_row(vocabulary: int, hosts: int, mod: bool) -> None:
    layout = TableLayout(vocabulary, hosts, mod)
    ids = np.arange(vocabulary, dtype=np.int64)
    owner = layout.host_of(ids)
    if vocabulary >= hosts:  # the engine's reporting agrees (it treats V < N specially)
        np.testing.assert_array_equal(owner, host_of(ids, vocabulary, hosts, mod))
    seen = np.concatenate([layout.global_ids(h) for h in range(hosts)])
    assert sorted(seen.tolist()) == ids.tolist()
    for h in range(hosts):
        held = layout.global_ids(h)
        assert (owner[held] == h).all()
        np.testing.assert_array_equal(layout.local_of(held, h), np.arange(held.shape[0]))


@pytest.mark.parametrize("mod", [True, False])
def test_split_and_split_range_put_every_row_back(mod: bool) -> None:
    layout = TableLayout(53, 4, mod)
    table = np.arange(53 * 2, dtype=np.float32).reshape(53, 2)
    shards = [table[layout.global_ids(h)] for h in range(4)]
    rows = np.array([0, 3, 4, 17, 18, 30, 51, 52])
    out = np.empty((rows.shape[0], 2), np.float32)
    for part in layout.split(rows):
        out[part.positions] = shards[part.host][part.local]
    np.testing.assert_array_equal(out, table[rows])
    for start, stop in [(0, 53), (5, 6), (7, 40), (50, 53)]:
        block = np.full((stop - start, 2), -1, np.float32)
        for host, local, positions in layout.split_range(start, stop):
            block[positions] = shards[host][local]
        np.testing.assert_array_equal(block, table[start:stop])


# ------------------------------------------------------------------------------------------------
# One host's shard


def _config(optimizer: str = "adagrad { }", vocabulary: int = 11, hosts: int = 3) -> Any:
    text = f"""table_descriptor {{ name: "t" vocabulary_size: {vocabulary} dimension: 3
      optimization_parameters {{ {optimizer} learning_rate {{ constant: 0.1 }} }} }}
      feature_descriptor {{ name: "f" table_id: 0 input_shape: 4 }}
      mode: TRAINING num_hosts: {hosts} sharding_strategy: MOD num_tensor_cores: 1"""
    return tpuemb_cfg.load(text.encode(), "text")


@pytest.mark.parametrize("optimizer", [
    "adagrad { }", "adam { beta1: 0.9 beta2: 0.99 epsilon: 0.1 use_non_lazy_adam: true }",
])
def test_shards_hold_their_rows_and_update_them_as_one_table(optimizer: str) -> None:
    executor = Executor(_config(optimizer), seed=3)
    plan = executor.plan
    shards = []
    for host in range(3):
        shard = Shard()
        shard.setup(plan, host, 3, "numpy", None)
        shard.allocate(3)
        shards.append(shard)
    layout = TableLayout(11, 3, True)
    whole = executor.state_arrays()
    for h, shard in enumerate(shards):
        np.testing.assert_array_equal(shard.read("table/t", slice(None)),
                                      whole["table/t"][layout.global_ids(h)])
    rows = np.array([1, 2, 7])
    grad = np.arange(9, dtype=np.float32).reshape(3, 3) / 10
    executor.apply_row_gradients("t", rows, grad)
    ctx = UpdateContext(0, ())
    for part in layout.split(rows):
        shards[part.host].update("t", part.local, grad[part.positions],
                                 PipelineRef(np.float32(0.1), ctx))
    for key, array in executor.state_arrays().items():
        for h, shard in enumerate(shards):
            np.testing.assert_array_equal(shard.read(key, slice(None)),
                                          array[layout.global_ids(h)], err_msg=key)


def test_abort_puts_back_every_row_of_the_open_step() -> None:
    executor = Executor(_config(), seed=1)
    shard = Shard()
    shard.setup(executor.plan, 0, 1, "numpy", None)
    shard.allocate(1)
    before = {key: shard.read(key, slice(None)) for key in ("table/t", "slot/t/accumulators")}
    fn = RowPipeline(executor.plan.tables[0], np.float32(0.5), UpdateContext(0, ()),
                     executor.engine)
    shard.update("t", np.array([2, 5]), np.ones((2, 3), np.float32), fn)
    shard.update("t", np.array([5, 9]), np.ones((2, 3), np.float32), fn)
    assert not np.array_equal(shard.read("table/t", slice(None)), before["table/t"])
    shard.abort()
    for key, array in before.items():
        np.testing.assert_array_equal(shard.read(key, slice(None)), array)
    shard.update("t", np.array([5]), np.ones((1, 3), np.float32), fn)
    shard.commit()
    shard.abort()  # nothing open: the committed update stays
    assert not np.array_equal(shard.read("table/t", slice(None)), before["table/t"])


def test_a_snapshot_is_valid_until_the_next_one() -> None:
    executor = Executor(_config(), seed=1)
    shard = Shard()
    shard.setup(executor.plan, 0, 1, "numpy", None)
    shard.allocate(1)
    shard.snapshot("t", 1)
    np.testing.assert_array_equal(shard.read("before/t/1", slice(None)),
                                  shard.read("table/t", slice(None)))
    changes = shard.change_sumsq("t", 1)  # per local row, in order
    assert changes.shape == (shard.read("table/t", slice(None)).shape[0],) and not changes.any()
    shard.snapshot("t", 2)
    with pytest.raises(ValueError, match="replaced by a newer one"):
        shard.read("before/t/1", slice(None))


# ------------------------------------------------------------------------------------------------
# Memory, checks, merging and streaming


def test_the_per_host_estimate_and_the_fewest_hosts_that_fit() -> None:
    plan = Executor(_config(vocabulary=1000, hosts=1)).plan
    one = shard_bytes(plan, 0, 1)
    assert one == 1000 * 3 * 4 * 2  # Adagrad: the table and its accumulator
    assert shard_bytes(plan, 0, 4) == 250 * 3 * 4 * 2
    assert sum(shard_bytes(plan, h, 3) for h in range(3)) == one
    assert fitting_hosts(plan, one // 2) == 2
    assert fitting_hosts(plan, one // 3) == 4  # 334 rows on host 0 of 3 do not fit
    assert fitting_hosts(plan, 10) is None  # one row is 24 bytes
    adam = Executor(_config("adam { epsilon: 0.1 use_non_lazy_adam: true }", 1000, 1)).plan
    assert shard_bytes(adam, 0, 1) == 1000 * 3 * 4 * (3 + 3 + 2 * 2)


def test_given_arrays_are_checked_like_the_initial_state() -> None:
    plan = Executor(_config()).plan
    good = np.zeros((11, 3), np.float32)
    check_given(plan, {"table/t": good}, "I.npz", True)
    with pytest.raises(InputError, match="shape \\(10, 3\\) found, expected \\(11, 3\\)"):
        check_given(plan, {"table/t": good[:10]}, "I.npz", True)
    with pytest.raises(InputError, match="dtype float64 found, expected float32"):
        check_given(plan, {"table/t": good.astype(np.float64)}, "I.npz", True)
    check_given(plan, {"table/t": good.astype(np.float64)}, None, False)
    with pytest.raises(InputError, match="its slots are: accumulators"):
        check_given(plan, {"slot/t/m": good}, None, False)


class _Blocks:
    """An array-like that yields its rows in blocks, as a table held by Ray hosts does."""

    def __init__(self, array: np.ndarray, rows: int) -> None:
        self.array, self.rows = array, rows
        self.shape, self.dtype = array.shape, array.dtype

    def npy_chunks(self) -> Any:
        for start in range(0, self.shape[0], self.rows):
            yield self.array[start:start + self.rows]


def test_npz_members_stream_block_by_block_to_the_same_bytes() -> None:
    table = np.random.default_rng(0).standard_normal((1001, 5)).astype(np.float32)
    plain = npz_bytes({"table/t": table, "executor/step": np.array(3)})
    assert npz_bytes({"table/t": _Blocks(table, 64), "executor/step": np.array(3)}) == plain
    empty = np.zeros((0, 5), np.float32)
    assert npz_bytes({"x": _Blocks(empty, 64)}) == npz_bytes({"x": empty})
