"""The Ray backend when things go wrong: a host dies mid-step, a table does not fit one actor, the
cluster address answers nobody, Ray is not installed.

A step is applied on every host or on none; a lost host stops the run with one line naming it
and the last checkpoint, and ``--resume`` on fresh actors ends with the uninterrupted run's bytes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, run_simulate
from raycluster import (  # noqa: F401  (the fixture)
    TWO_TABLES,
    ray,
    ray_cluster,
    same_reports,
    same_state,
)

import tpuemb_cfg
from tpuemb_cfg.backends.ray.deadlines import DEADLINE_SCALE_ENV, Work, deadline_scale, seconds
from tpuemb_cfg.backends.ray.host import STALL_ENV
from tpuemb_cfg.backends.ray.placement import PROCESS_BYTES
from tpuemb_cfg.backends.ray.storage import (
    SHARED_MEMORY_ENV,
    ActorOptions,
    RayStorage,
    ShardLost,
)
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.executor.engines import get_engine
from tpuemb_cfg.executor.plan import build_plan
from tpuemb_cfg.formats.npzio import npz_bytes
from tpuemb_cfg.simulate import Executor, SyntheticRun

pytestmark = pytest.mark.usefixtures("ray_cluster")

original_update = RayStorage.update



def _kill_host_during_update(monkeypatch: pytest.MonkeyPatch, host: int, call: int) -> None:
    """Kill ``host``'s actor right after the ``call``-th table update (1-based) has been applied
    on every host, so that the next update of the same step meets a dead host."""
    original = RayStorage.update
    count = [0]

    def update(self: RayStorage, *args: Any) -> None:
        original(self, *args)
        count[0] += 1
        if count[0] == call:
            actor = self._actors[host]
            pid = ray.get(actor.__ray_call__.remote(lambda _: os.getpid()))
            ray.kill(actor, no_restart=True)
            _wait_until_dead(actor, pid)

    monkeypatch.setattr(RayStorage, "update", update)


def _wait_until_dead(actor: Any, pid: int, seconds: float = 30.0) -> None:
    """``ray.kill`` returns before the actor is gone; wait until a call to it fails and its
    process ``pid`` is gone (a host on the driver's node answers over its direct link until
    then), so that the next storage call (not a later one) is the one that meets the dead
    host."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:  # a zombie is as dead as gone
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.01)
    while time.monotonic() < deadline:
        try:
            ray.get(actor.where.remote(), timeout=seconds)
        except Exception:  # noqa: BLE001 - any failure means the actor is gone
            return
        time.sleep(0.01)
    raise AssertionError("the killed actor still answers")


@pytest.mark.parametrize("shared_memory", ["1", "0"], ids=["shared-memory", "object-store"])
def test_a_dead_host_rolls_the_step_back_and_the_checkpoint_resumes(
        monkeypatch: pytest.MonkeyPatch, shared_memory: str) -> None:
    monkeypatch.setenv(SHARED_MEMORY_ENV, shared_memory)  # both ways rows travel
    config = tpuemb_cfg.load(TWO_TABLES.encode(), "text")
    uninterrupted = SyntheticRun(config, seed=5)
    uninterrupted.run(6)
    run = SyntheticRun(config, seed=5, backend="ray")
    run.run(3)
    saved = {key: np.asarray(value) for key, value in run.checkpoint_arrays().items()}
    _kill_host_during_update(monkeypatch, host=1, call=1)  # table a updated, then b fails
    with pytest.raises(ShardLost, match=r"host 1 of 2 \(its Ray actor, node [^)]+\) died "
                                        r"during a step's update, while updating table 'b' "
                                        r"\(.*\); the open step was rolled back on every other "
                                        r"host \(applied on none\)") as error:
        run.run_step()
    assert (error.value.host, error.value.phase) == (1, "update")
    assert run.step == 3
    storage = run.executor.storage
    assert isinstance(storage, RayStorage)
    survivor = storage._actors[0]
    for key, array in saved.items():
        if key.startswith(("table/", "slot/")):
            layout = storage.layouts[key.split("/")[1]]
            held = ray.get(survivor.read.remote(key, slice(None)))
            np.testing.assert_array_equal(held, array[layout.global_ids(0)], err_msg=key)
    with pytest.raises(ShardLost, match="host 1 of 2"):
        run.run_step()  # the storage stays broken
    monkeypatch.setattr(RayStorage, "update", original_update)
    again = SyntheticRun(config, seed=5, backend="ray")
    again.restore(saved, "checkpoint")
    again.run(6)
    assert npz_bytes(again.executor.state_arrays()) == npz_bytes(
        uninterrupted.executor.state_arrays())
    same_reports(again.summary(), uninterrupted.summary())
    again.executor.close()


def test_the_command_names_the_host_and_the_checkpoint_then_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "two.pbtxt"
    config.write_text(TWO_TABLES)
    common = (str(config), "--steps", "6", "--seed", "2", "--checkpoint-every", "2", "-q")
    code, output = run_simulate(*common, "--out-dir", str(tmp_path / "local"))
    assert code == 0, output
    out = tmp_path / "ray"
    _kill_host_during_update(monkeypatch, host=0, call=7)  # in step 4, after table a
    code, output = run_simulate(*common, "--out-dir", str(out), "--backend", "ray")
    assert code == 2
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert "host 0 of 2 (its Ray actor, node " in lines[0]
    assert "died during a step's update, while updating table 'b'" in lines[0]
    assert f"the last checkpoint is {out / 'checkpoint.npz'} (step 2)" in lines[0]
    assert "--resume" in lines[0]
    assert not (out / "tables.npz").exists()
    monkeypatch.undo()
    code, output = run_simulate(*common, "--out-dir", str(out), "--backend", "ray", "--resume")
    assert code == 0, output
    assert (out / "tables.npz").read_bytes() == (tmp_path / "local" / "tables.npz").read_bytes()
    summary = json.loads((out / "summary.json").read_text())
    want = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert summary.pop("out_dir") == str(out)
    want.pop("out_dir")
    # the memory plan is the backend's own (the actors hold the tables), not a result
    assert summary.pop("memory")["estimate"] and want.pop("memory")["estimate"]
    same_reports(summary, want)


# ------------------------------------------------------------------------------------------------
# Deadlines


def test_a_deadline_grows_with_the_work_and_its_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEADLINE_SCALE_ENV, raising=False)
    # 60 s + 50 MB at 10 MB/s + 100 MB at 20 MB/s + 4 actors at 5 s
    work = Work(moved=50_000_000, touched=100_000_000, actors=4)
    assert seconds(work) == 60 + 5 + 5 + 20
    assert seconds(work, deadline_scale(0.5)) == 45
    # + 120 s per optimizer kernel the hosts may compile (a first update of the optimizer)
    assert seconds(Work(touched=100_000_000, compiles=2)) == 60 + 5 + 240
    assert deadline_scale() == 1
    monkeypatch.setenv(DEADLINE_SCALE_ENV, "4")
    assert deadline_scale() == 4 and deadline_scale(2) == 2  # the option wins
    for bad in ("0", "-1", "nan", "soon"):
        monkeypatch.setenv(DEADLINE_SCALE_ENV, bad)
        with pytest.raises(UsageError, match=rf"^{DEADLINE_SCALE_ENV} '{bad}': expected a "
                                             "positive number"):
            deadline_scale()


def test_the_first_update_of_each_optimizer_is_allowed_its_compilation() -> None:
    """A storage's first update of an optimizer may compile its kernel on every host: that wait
    gets ``COMPILE_SECONDS`` more, once per optimizer (a cold numba cache on a busy machine went
    past the base deadline); later updates, and reads, do not."""
    from types import SimpleNamespace

    from tpuemb_cfg.backends.ray.calls import HostCalls

    config = tpuemb_cfg.load(TWO_TABLES.encode(), "text")
    plan = build_plan(config)
    names = [t.name for t in plan.tables]
    assert [t.optimizer.name for t in plan.tables] == ["adagrad", "momentum"]
    fake = SimpleNamespace(_tables={t.name: t for t in plan.tables}, _updated=set(),
                           estimates=[0, 0])
    rows = np.arange(4, dtype=np.int64)
    grad = np.zeros((4, 4), np.float32)

    def work(*calls: tuple[int, str, tuple[Any, ...]]) -> Work:
        return HostCalls._work(fake, list(calls))  # type: ignore[arg-type]

    update_a = (0, "update", (names[0], rows, grad, None, 1))
    assert work((0, "gather", (names[0], rows))).compiles == 0
    assert work(update_a, (1, "update", (names[0], rows, grad, None, 1))).compiles == 1
    assert work(update_a).compiles == 0  # compiled by now
    assert work((1, "update_kept", (names[1], 0, grad, None, 1))).compiles == 1
    assert work(update_a, (1, "update", (names[1], rows, grad, None, 2))).compiles == 0
    assert seconds(work()) == 60


def test_a_stalled_host_ends_at_its_deadline_or_when_its_node_is_dead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test hook stalls host 1's first ``nbytes``. With its node taken for dead in the
    cluster's node table (a node id nobody has), the wait ends at the next poll of the table,
    long before the deadline (60 s); with ``ActorOptions.deadline_scale`` bringing the deadline
    down to 1.2 s, at the deadline."""
    mark = tmp_path / "stalled"
    monkeypatch.setenv(STALL_ENV, f"1:nbytes:1:{mark}")
    config = tpuemb_cfg.load(TWO_TABLES.encode(), "text")
    storage = RayStorage(build_plan(config), get_engine("numpy"))
    storage._nodes[1] = "f" * 56
    start = time.monotonic()
    with pytest.raises(ShardLost, match=r"^host 1 of 2 \(its Ray actor, node id f{8}\) died during "
                                        r"a read of the state, while counting its bytes \(its "
                                        r"node is dead: the cluster stopped hearing from it\)"):
        storage.nbytes()
    assert time.monotonic() - start < 30  # the poll, not the deadline, ended the wait
    storage.close()
    mark.unlink()
    storage = RayStorage(build_plan(config), get_engine("numpy"),
                         actors=ActorOptions(deadline_scale=0.02))
    start = time.monotonic()
    with pytest.raises(ShardLost, match=r"^host 1 of 2 \(its Ray actor, node [^)]+\) did not "
                                        r"answer within 1 s during a read of the state, while "
                                        r"counting its bytes \(the deadline of this work; "
                                        rf"{DEADLINE_SCALE_ENV}=2 doubles every deadline\); the "
                                        "run cannot go on without its rows$") as error:
        storage.nbytes()
    assert time.monotonic() - start < 30  # generous: the deadline ended the wait
    assert (error.value.host, error.value.phase) == (1, "read")
    assert mark.exists()  # the host was inside the call
    with pytest.raises(ShardLost, match="host 1 of 2"):
        storage.nbytes()  # the storage stays broken
    storage.close()
    with pytest.raises(UsageError, match=r"ActorOptions.deadline_scale -1: expected a positive"):
        RayStorage(build_plan(config), get_engine("numpy"),
                   actors=ActorOptions(deadline_scale=-1))


def test_a_host_error_is_one_line_and_the_storage_goes_on() -> None:
    """A host that raises (here: asked for a pre-step copy it does not hold) lives on: one line
    naming it and the phase, and the storage answers the next call."""
    config = tpuemb_cfg.load(TWO_TABLES.encode(), "text")
    storage = RayStorage(build_plan(config), get_engine("numpy"))
    with pytest.raises(ShardLost, match=r"^host 0 of 2 failed during a read of the state, while "
                                        r"sending rows of before/a/7: ValueError: snapshot 7 of "
                                        r"table 'a' was replaced by a newer one"):
        storage.read_rows("before/a/7", "a", np.arange(4))
    assert storage.nbytes() == [(60 * 4 * 2 + 30 * 2 * 2) * 4] * 2
    storage.close()


# ------------------------------------------------------------------------------------------------
# Memory


def _one_table(vocabulary: int, hosts: int = 1) -> Any:
    text = f"""table_descriptor {{ name: "big" vocabulary_size: {vocabulary} dimension: 8
      optimization_parameters {{ adagrad {{ }} learning_rate {{ constant: 0.1 }} }} }}
      feature_descriptor {{ name: "f" table_id: 0 input_shape: 16 }}
      mode: TRAINING num_hosts: {hosts} num_tensor_cores: 1"""
    return tpuemb_cfg.load(text.encode(), "text")


def test_a_table_too_large_for_one_actor_runs_split_over_enough(
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = _one_table(1000)  # 1000 x 8 float32, table and accumulator: 64,000 bytes
    limit = PROCESS_BYTES + 40_000  # an actor's process and 40,000 bytes of rows

    def no_actor(self: RayStorage, threads: Any) -> None:
        raise AssertionError("an actor was started before the memory check")

    with monkeypatch.context() as patched:
        patched.setattr(RayStorage, "_start", no_actor)
        with pytest.raises(UsageError, match=r"host 0 of 1 would need 300\.1 MiB \(62\.5 KiB "
                                             r".* more than the memory limit of one actor "
                                             r"\(300 MiB\); split the tables over more hosts "
                                             r"\(shards 2 fits\)"):
            Executor(config, backend="ray", max_memory=limit)
        with pytest.raises(UsageError, match="more than the Ray cluster has available"):
            Executor(_one_table(10**12), backend="ray")
    local = Executor(config, seed=1)
    split = Executor(config, seed=1, backend="ray", shards=2, max_memory=limit)
    assert split.storage.nbytes() == [32_000, 32_000]  # type: ignore[attr-defined]
    batch = [{"ids": np.arange(0, 1000, 63), "grad": np.ones((16, 8), np.float32)}]
    for executor in (local, split):
        executor.step(batch)
    same_state(split, local)
    split.close()


def test_the_command_refuses_before_writing(tmp_path: Path) -> None:
    config = tmp_path / "big.pbtxt"
    config.write_text("""table_descriptor { name: "big" vocabulary_size: 1000 dimension: 8
      optimization_parameters { adagrad { } learning_rate { constant: 0.1 } } }
      feature_descriptor { name: "f" table_id: 0 input_shape: 16 }
      mode: TRAINING num_hosts: 1 num_tensor_cores: 1""")
    out = tmp_path / "out"
    common = (str(config), "--steps", "2", "--out-dir", str(out), "--backend", "ray",
              "--max-memory", str(PROCESS_BYTES + 40_000))
    code, output = run_simulate(*common)
    assert code == 2 and "--shards 2 fits" in output, output
    assert not out.exists()
    code, output = run_simulate(*common, "--shards", "2", "-q")
    assert code == 0, output
    code, output = run_simulate(str(config), "--shards", "2")
    assert code == 2 and "--shards applies to --backend ray only" in output


# ------------------------------------------------------------------------------------------------
# No cluster, no Ray


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_address_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """The installed command, in its own process (no Ray running in it)."""
    address = f"127.0.0.1:{_closed_port()}"
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-m", "tpuemb_cfg", "simulate", "--steps", "1", "--out-dir", str(out),
         "--backend", "ray", "--ray-address", address],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"--ray-address {address}: no Ray cluster answers there")
    assert "ray start --head" in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("port", ["70000", "2" * 20, "0", "-1", "6379x", "6379 "])
def test_an_address_whose_port_is_out_of_range_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, port: str) -> None:
    """A port past 65535 was taken modulo 65536 (70000 tried port 4464), a longer one raised
    OverflowError; every port but 1-65535 is refused before any connection is tried."""
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    code, output = run_simulate("--steps", "1", "--out-dir", str(tmp_path / "out"), "--backend",
                                "ray", "--ray-address", f"127.0.0.1:{port}")
    assert (code, output) == (2, f"--ray-address '127.0.0.1:{port}': expected HOST:PORT with a "
                              "port from 1 to 65535 (e.g. 10.0.0.1:6379), the address `ray "
                              "start --head` prints\n")
    assert not (tmp_path / "out").exists()


def test_ray_address_in_the_environment_is_used(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    code, output = run_simulate("--steps", "1", "--out-dir", str(tmp_path / "out"), "--backend",
                                "ray")
    assert code == 2
    assert output.startswith(f"RAY_ADDRESS {address}: no Ray cluster answers there"), output
    assert not (tmp_path / "out").exists()


def test_without_ray_the_command_says_how_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code, output = run_simulate("--steps", "1", "--out-dir", str(tmp_path / "out"), "--backend",
                                "ray")
    assert code == 2
    assert "pip install 'tpuemb[ray]'" in output and "--backend local" in output
    assert not (tmp_path / "out").exists()
