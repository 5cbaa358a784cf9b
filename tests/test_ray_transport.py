"""How a step's rows travel to and from the Ray host actors: bit-identical either way.

Hosts on the driver's machine exchange rows through a shared-memory arena (``shard.Arena``);
the others, and every host when ``TPUEMB_RAY_SHARED_MEMORY=0``, through Ray's object store. A
host keeps the row numbers and values the step read, so the update sends only gradient rows
and the undo log reuses the values. Every case here runs through both transports against the
local backend; the host's bookkeeping is also checked on a ``Shard`` in this process.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import ADAM_AND_MOMENTUM_TABLES
from raycluster import ray_cluster, same_reports, same_state  # noqa: F401  (the fixture)

import tpuemb_cfg
from tpuemb_cfg.backends.ray.host import Arena, PipelineRef, Shard
from tpuemb_cfg.backends.ray.storage import LINK_ENV, SHARED_MEMORY_ENV, RayStorage
from tpuemb_cfg.base import numerics
from tpuemb_cfg.executor.optimizers import UpdateContext
from tpuemb_cfg.session import prepare
from tpuemb_cfg.simulate import Executor, SyntheticRun

CONFIG = ADAM_AND_MOMENTUM_TABLES + """\
table_descriptor { name: "c" vocabulary_size: 1001 dimension: 5 optimization_parameters {
  adagrad { } learning_rate { constant: 0.1 } gradient_accumulation_status: ENABLED } }
mode: TRAINING num_hosts: 3 num_tensor_cores: 2 sharding_strategy: MOD
feature_descriptor { name: "x" input_shape: 8 }
feature_descriptor { name: "y" table_id: 1 input_shape: 4 input_shape: 2 }
feature_descriptor { name: "z" table_id: 2 input_shape: 64 }
feature_descriptor { name: "w" table_id: 2 input_shape: 16 }
"""

#: How the step's rows and calls travel: shared memory and the hosts' direct links (the default
#: on the driver's node), shared memory with Ray calls, Ray's object store and calls.
TRANSPORTS = ["shared memory + link", "shared memory", "object store"]


def _config(strategy: str = "MOD", pipelined: bool = False) -> Any:
    text = CONFIG.replace("sharding_strategy: MOD", f"sharding_strategy: {strategy}")
    if pipelined:
        text += "pipeline_execution_with_tensor_core: true\n"
    return tpuemb_cfg.load(text.encode(), "text")


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
              ray_cluster: None) -> str:  # noqa: F811
    monkeypatch.setenv(SHARED_MEMORY_ENV, "0" if request.param == "object store" else "1")
    monkeypatch.setenv(LINK_ENV, "1" if request.param.endswith("link") else "0")
    return str(request.param)


def _check_transport(storage: Any, transport: str) -> None:
    assert isinstance(storage, RayStorage)
    hosts = set(range(storage.hosts))
    assert storage.shared == (hosts if transport.startswith("shared memory") else set())
    assert set(storage.links) == (hosts if transport.endswith("link") else set())


@pytest.mark.parametrize(("strategy", "pipelined"), [("MOD", False), ("DIV_DEFAULT", True)])
def test_a_synthetic_run_is_bit_identical_through_either_transport(
        transport: str, strategy: str, pipelined: bool) -> None:
    config = _config(strategy, pipelined)
    local = SyntheticRun(config, seed=3)
    sharded = SyntheticRun(config, seed=3, backend="ray")
    local.run(4)
    sharded.run(4)
    _check_transport(sharded.executor.storage, transport)
    same_reports(sharded.history, local.history)
    same_state(sharded.executor, local.executor)
    sharded.executor.close()


def test_reads_and_updates_of_other_rows_stay_identical(transport: str) -> None:
    """The op pair, updates of rows the step did not read (``apply_row_gradients``), a step
    refused for a NaN gradient, and a checkpoint restored between steps."""
    config = _config()
    local = Executor(config, seed=2, combiners="mean")
    sharded = Executor(config, seed=2, combiners="mean", backend="ray")
    data = SyntheticRun(config, seed=8).data
    rng = np.random.default_rng(4)
    for step in range(4):
        batch = data.next_batch()
        for executor in (local, sharded):
            activations, dedup = executor.recv_activations(batch)
            grads = [np.full_like(a, 0.01 * (step + 1)) for a in activations]
            if step == 2:
                bad = [g.copy() for g in grads]
                bad[2][0, 0] = np.nan
                with pytest.raises(tpuemb_cfg.base.errors.InputError):
                    executor.send_gradients(bad, [0.01], dedup)
                activations, dedup = executor.recv_activations(batch)
            executor.send_gradients(grads, [0.01], dedup)
        for got, want in zip(sharded.last_report.values(), local.last_report.values(),
                             strict=True):
            same_reports(got.as_dict(), want.as_dict())
        rows = np.sort(rng.choice(1001, size=7, replace=False))
        grad = rng.normal(0, 0.1, (7, 5)).astype(np.float32)
        for executor in (local, sharded):
            executor.apply_row_gradients("c", rows, grad, [0.01])
        if step == 1:
            saved = {k: np.asarray(v) for k, v in local.checkpoint_arrays().items()}
            sharded.restore_checkpoint(saved)
    _check_transport(sharded.storage, transport)
    same_state(sharded, local)
    sharded.close()


@pytest.mark.usefixtures("ray_cluster")
def test_the_arena_leaves_no_file_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    monkeypatch.delenv(SHARED_MEMORY_ENV, raising=False)  # the default: shared memory
    prefix = f"tpuemb-{os.getpid()}-"
    config = _config()
    with Executor(config, backend="ray", shards=2) as executor:
        activations, dedup = executor.recv_activations(SyntheticRun(config, seed=1).data
                                                       .next_batch())
        executor.send_gradients([np.ones_like(a) for a in activations], [0.01], dedup)
        assert executor.storage.shared == {0, 1}  # type: ignore[attr-defined]
        assert not [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]


def _big_step(seed: int, ids: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"ids": rng.integers(0, 50_000, ids), "grad": rng.normal(
        0, 0.1, (ids, 16)).astype(np.float32)}]


BIG = """
table_descriptor { name: "t" vocabulary_size: 50000 dimension: 16 optimization_parameters {
  adagrad { } learning_rate { constant: 0.1 } } }
mode: TRAINING num_hosts: 3 num_tensor_cores: 1 sharding_strategy: MOD
feature_descriptor { name: "f" input_shape: 1 }
"""


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("local_hosts", [[0, 1, 2], [1]], ids=["all-shared", "mixed"])
def test_the_arena_grows_and_mixes_with_the_object_store(
        monkeypatch: pytest.MonkeyPatch, local_hosts: list[int]) -> None:
    """A step larger than the arena gets a larger one (mapped again by every local host); hosts
    off the driver's machine (here: pretended) use the object store in the same step."""
    monkeypatch.delenv(SHARED_MEMORY_ENV, raising=False)
    config = tpuemb_cfg.load(BIG.encode(), "text")
    local = Executor(config, combiners="sum")
    sharded = Executor(config, combiners="sum", backend="ray")
    storage = sharded.storage
    assert isinstance(storage, RayStorage)
    storage._local_hosts = list(local_hosts)
    sizes = []
    for step, ids in enumerate([10, 40_000, 300, 150_000]):
        batch = _big_step(step, ids)
        for got, want in zip(sharded.step(batch), local.step(batch), strict=True):
            np.testing.assert_array_equal(got, want)
        assert storage._arena is not None
        sizes.append(storage._arena.size)
        assert storage.shared == set(local_hosts)
    assert sizes[0] < sizes[1] <= sizes[2] < sizes[3], sizes
    same_state(sharded, local)
    sharded.close()


# ------------------------------------------------------------------------------------------------
# One host, in this process


def _shard(tmp_path: Any = None) -> Shard:
    plan = prepare(_config(), combiners="sum").plan
    shard = Shard()
    shard.setup(plan, 1, 3, "numpy", None)
    shard.allocate(seed=5)
    return shard


def test_a_host_updates_the_rows_it_kept_and_rolls_them_back() -> None:
    shard = _shard()
    local = np.array([0, 3, 7, 40], dtype=np.int64)
    before = shard.gather("c", local, key=11)
    slot = shard.read("slot/c/accumulators", local)
    grad = np.full((4, 5), 0.5, dtype=np.float32)
    fn = PipelineRef(np.float32(0.1), UpdateContext(1, (0.01,)))
    with pytest.raises(RuntimeError, match="not the last this host read"):
        shard.update_kept("c", 12, grad, fn, step=1)  # another key: refused, nothing changed
    np.testing.assert_array_equal(shard.gather("c", local), before)
    shard.gather("c", local, key=13)
    changes = shard.update_kept("c", 13, grad, fn, step=1)
    after = shard.gather("c", local)
    assert not np.array_equal(after, before)
    # each row's squared change, for the driver to add in global row order (docs/numerics.md)
    assert changes is not None and (changes > 0).all()
    np.testing.assert_array_equal(changes, numerics.row_sumsq(after, before))
    with pytest.raises(RuntimeError):
        shard.update_kept("c", 13, grad, fn, step=1)  # used once
    shard.abort(1)
    np.testing.assert_array_equal(shard.gather("c", local), before)
    np.testing.assert_array_equal(shard.read("slot/c/accumulators", local), slot)
    shard.gather("c", local, key=14)
    shard.put([("table/c", local, before + 1)])  # any change of the table drops what it kept
    with pytest.raises(RuntimeError):
        shard.update_kept("c", 14, grad, fn, step=2)


def test_a_host_maps_only_the_drivers_arena(tmp_path: Any) -> None:
    path = str(tmp_path / "arena")
    arena = Arena(path, 1 << 16, create=True, token=b"0123456789abcdef")
    shard = _shard()
    assert not shard.attach(path, 1 << 16, b"another token...")
    assert not shard.attach(str(tmp_path / "missing"), 1 << 16, b"0123456789abcdef")
    assert shard.attach(path, 1 << 16, b"0123456789abcdef")
    # The rows 2 and 5 of a block of 6, with DIV_DEFAULT-like positions, and MOD-like ones.
    local = arena.alloc((2,), np.int64)
    out = arena.alloc((6, 5), np.float32)
    positions = arena.alloc((2,), np.int64)
    assert local is not None and out is not None and positions is not None
    arena.view(local)[...] = [4, 9]
    arena.view(positions)[...] = [5, 2]
    arena.view(out)[...] = -1
    shard.gather_shared("c", 1, local, positions, out)
    want = shard.gather("c", np.array([4, 9]))
    np.testing.assert_array_equal(arena.view(out)[[5, 2]], want)
    assert (arena.view(out)[[0, 1, 3, 4]] == -1).all()
    shard.gather_shared("c", 2, local, (1, 3), out)
    np.testing.assert_array_equal(arena.view(out)[1:3], want)
    assert arena.alloc((1 << 20,), np.float32) is None  # too large: the driver makes a new one
    shard.detach()
    arena.close()


@pytest.mark.usefixtures("ray_cluster")
def test_no_room_in_shared_memory_falls_back_to_the_object_store(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate")
    monkeypatch.delenv(SHARED_MEMORY_ENV, raising=False)

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    prefix = f"tpuemb-{os.getpid()}-"
    config = tpuemb_cfg.load(BIG.encode(), "text")
    local = Executor(config, combiners="sum")
    sharded = Executor(config, combiners="sum", backend="ray")
    for step in range(2):
        batch = _big_step(step, 5_000)
        for got, want in zip(sharded.step(batch), local.step(batch), strict=True):
            np.testing.assert_array_equal(got, want)
    assert sharded.storage.shared == set()  # type: ignore[attr-defined]
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]
    same_state(sharded, local)
    sharded.close()
