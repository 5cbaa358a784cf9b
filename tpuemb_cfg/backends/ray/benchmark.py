"""``tpuemb bench --backend ray``: one table's step on Ray host actors against one process.

:func:`run` takes a prepared one-table configuration (``tpuemb_cfg.run.bench_ray`` makes the one of
``tpuemb bench``'s workload), laid out over its ``num_hosts`` hosts (MOD or DIV_DEFAULT), and
the step's batch. Measured in the same run, steps alternating between the two executors so
that both see the same machine load:

- ``local_sec_per_step``: ``Executor.step`` with the tables in this process;
- ``ray_sec_per_step``: ``Executor.step`` with each host's rows in its own Ray actor;
- ``bytes_sent_per_step`` / ``bytes_received_per_step``: per host, the payload the driver sent
  to and got from the host's actor in one step (ids, gradient rows, parameter rows), next to
  ``model_bytes_per_step``, what the cost model of ``docs/scale.md`` predicts from the step's
  unique ids per host; ``transport_per_host``: how they travelled (``shared memory``: through
  the arena of the hosts on the driver's machine; ``object store``: through Ray's);
- ``bit_identical``: whether the two executors' activations of every step and the touched rows
  of the table and its slots after the last step are equal bit for bit;
- ``ray_init_sec`` (connecting, or starting a local instance) and ``actor_setup_sec`` (starting
  the actors and initialising their rows).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import UsageError

from ...executor.core import Executor
from ...executor.options import Placement, RunOptions
from .connection import connect, disconnect, import_ray
from .options import RayOptions
from .storage import SHARED_MEMORY_ENV, RayStorage

if TYPE_CHECKING:
    from ...executor.prepared import Prepared

__all__ = ["model_bytes", "run", "run_model"]

F32 = np.float32


def model_bytes(unique: int, dim: int, positions: bool = False) -> tuple[int, int]:
    """(bytes sent to, bytes received from) one host in one step, for ``unique`` of the step's
    distinct ids held by that host, of one table of dimension ``dim`` (docs/scale.md): the row
    numbers to read (8 B each; ``positions``: also where each row goes in the step's block, 8 B
    more, which a host writing into shared memory needs when its ids are not one run, as with
    MOD), then their gradient rows (4 D B: the host keeps the row numbers it read); back the
    rows read (4 D B). Slots never travel; the update's reply is each row's squared change
    (8 B a row: the driver adds them in global row order, docs/numerics.md)."""
    return unique * (8 + (8 if positions else 0) + 4 * dim), unique * (4 * dim + 8)


def run(prepared: Prepared, batch: list[dict[str, np.ndarray]], *, steps: int,
        engine: str = "numba", address: str | None = None,
        shared_memory: bool | None = None, workload: dict[str, Any] | None = None,
        placement: Placement | None = None) -> dict[str, Any]:
    """Measure what the module docstring lists for the one table of ``prepared`` and its
    ``batch`` (one feature: ``ids`` and ``grad``) over ``steps`` steps; return it as a
    JSON-ready dict, ``workload`` (its description) included. ``shared_memory``: as for
    ``RayStorage`` (None: its default); ``placement``: the Ray executor's (its
    ``RayOptions``: ``runtime_env`` and ``ship``; default ``Placement("ray")``)."""
    plan = prepared.plan
    (table,) = plan.tables
    shards, mod = plan.num_hosts, plan.mod_sharding
    if table.vocabulary < shards:
        raise UsageError(f"--shards {shards}: expected 1..{table.vocabulary} (one row per host "
                         "at least)")
    import_ray()
    options = RunOptions(engine=engine)
    local = Executor(prepared, options)
    placement = placement or Placement("ray")
    ray_options = placement.options if isinstance(placement.options, RayOptions) else RayOptions()
    start = time.perf_counter()
    started = connect(address, runtime_env=ray_options.runtime_env, ship=ray_options.ship)
    init_sec = time.perf_counter() - start
    try:
        start = time.perf_counter()
        with _shared_memory(shared_memory):
            sharded = Executor(prepared, options, placement)
        setup_sec = time.perf_counter() - start
        storage = sharded.storage
        assert isinstance(storage, RayStorage)
        result = _measure(local, sharded, storage, batch, steps)
        rows = np.unique(batch[0]["ids"])
        per_host = np.bincount(storage.layouts[table.name].host_of(rows), minlength=shards)
        shared = storage.shared
        result.update({
            "backend": "ray",
            "shards": shards,
            "sharding_strategy": "MOD" if mod else "DIV_DEFAULT",
            "engine": sharded.engine.name,
            "workload": workload,
            "unique_ids": int(rows.shape[0]),
            "unique_ids_per_host": [int(n) for n in per_host],
            "model_bytes_per_step": [
                list(model_bytes(int(n), table.dimension, positions=mod and h in shared))
                for h, n in enumerate(per_host)
            ],
            "transport_per_host": ["shared memory" if h in shared else "object store"
                                   for h in range(shards)],
            "ray_init_sec": init_sec,
            "actor_setup_sec": setup_sec,
            "actor_bytes": storage.nbytes(),
            "state_bytes": plan.state_bytes(),
        })
        result["bit_identical"] = result["bit_identical"] and _same_rows(local, sharded, rows)
        sharded.close()
    finally:
        if started:
            disconnect()
    return result


@contextlib.contextmanager
def _shared_memory(wanted: bool | None) -> Iterator[None]:
    """``RayStorage``'s choice of transport for the block (None: leave it to the environment)."""
    if wanted is None:
        yield
        return
    saved = os.environ.get(SHARED_MEMORY_ENV)
    os.environ[SHARED_MEMORY_ENV] = "1" if wanted else "0"
    try:
        yield
    finally:
        if saved is None:
            del os.environ[SHARED_MEMORY_ENV]
        else:
            os.environ[SHARED_MEMORY_ENV] = saved


def run_model(prepared: Prepared, batch: list[dict[str, np.ndarray]], rates: np.ndarray | None,
              *, shards: int, steps: int, engine: str = "numba",
              address: str | None = None) -> dict[str, Any]:
    """The step of a whole model (every table of ``prepared``, its ``batch`` of every feature
    with ``grad``, learning ``rates``) on ``shards`` host actors against one process, steps
    alternating as in :func:`run`: the medians, the ratio, the Ray calls made to each host per
    step (``calls_per_step_per_host``: two, a read and an update, whatever the number of
    tables) and whether the activations were equal bit for bit."""
    import_ray()
    options = RunOptions(engine=engine)
    local = Executor(prepared, options)
    started = connect(address)
    try:
        begin = time.perf_counter()
        sharded = Executor(prepared, options, Placement("ray", RayOptions(shards=shards)))
        setup_sec = time.perf_counter() - begin
        storage = sharded.storage
        assert isinstance(storage, RayStorage)
        result = _measure(local, sharded, storage, batch, steps, rates)
        result.update({"backend": "ray", "shards": shards, "tables": len(prepared.plan.tables),
                       "engine": sharded.engine.name, "actor_setup_sec": setup_sec})
        sharded.close()
    finally:
        if started:
            disconnect()
    return result


def _measure(local: Executor, sharded: Executor, storage: RayStorage,
             batch: list[dict[str, np.ndarray]], steps: int,
             rates: np.ndarray | None = None) -> dict[str, Any]:
    """Alternate ``steps`` (+1 warm-up) steps of both executors; medians, bytes, calls,
    equality."""
    same = True
    times: dict[str, list[float]] = {"local": [], "ray": []}
    traffic = None
    calls = storage.calls.copy()
    for step in range(steps + 1):
        outputs = []
        for name, executor in (("local", local), ("ray", sharded)):
            if step == 1 and name == "ray":
                traffic = storage.traffic.copy()
                calls = storage.calls.copy()
            begin = time.perf_counter()
            outputs.append(executor.step(batch, rates))
            if step:
                times[name].append(time.perf_counter() - begin)
        same = same and all(np.array_equal(a, b) for a, b in zip(*outputs, strict=True))
    assert traffic is not None or steps == 0
    moved = (storage.traffic - (traffic if traffic is not None else 0)) / max(steps, 1)
    local_sec = statistics.median(times["local"]) if steps else float("nan")
    ray_sec = statistics.median(times["ray"]) if steps else float("nan")
    return {
        "local_sec_per_step": local_sec,
        "ray_sec_per_step": ray_sec,
        "ray_over_local": ray_sec / local_sec,
        "bytes_sent_per_step": [int(v) for v in moved[:, 0]],
        "bytes_received_per_step": [int(v) for v in moved[:, 1]],
        "calls_per_step_per_host": [float(v) for v in (storage.calls - calls) / max(steps, 1)],
        "bit_identical": bool(same),
    }


def _same_rows(local: Executor, sharded: Executor, rows: np.ndarray) -> bool:
    """Touched rows of the table and every slot, equal bit for bit on both executors."""
    wanted = local.state_arrays()
    held = sharded.state_arrays()
    return all(np.array_equal(np.asarray(wanted[key])[rows], held[key].take(rows))
               for key in wanted)
