"""The plan of a run before it runs (``tpuemb simulate --dry-run``): its tables, the data it
draws or replays, and its memory estimate with the limit it is held against.

Each function returns the plan as a dict (the JSON of ``--dry-run --json``); nothing runs,
nothing is allocated and a replay's batches are read from their ``.npy`` headers only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tpuemb_cfg.executor.engines import get_engine
from tpuemb_cfg.executor.memory import RunShape, replay_estimate, step_ids
from tpuemb_cfg.executor.replay_keys import parse_steps
from tpuemb_cfg.formats.limits import default_memory_limit
from tpuemb_cfg.run.files import Anchored, npz_headers, state_file_bytes
from tpuemb_cfg.run.request import RunRequest
from tpuemb_cfg.sim import multiworker
from tpuemb_cfg.sim.options import WorkerOptions
from tpuemb_cfg.sim.synthetic import SyntheticData, run_estimate

__all__ = ["memory_plan", "replay_plan", "synthetic_plan", "table_info"]


def table_info(table: Any) -> dict[str, Any]:
    """A table's line of a plan: name, rows, dimension, optimizer, bytes."""
    slots = len(table.optimizer.slots)
    return {"name": table.name, "vocabulary": table.vocabulary,
            "dimension": table.dimension, "optimizer": table.optimizer.name,
            "bytes": (1 + slots) * table.vocabulary * table.dimension * 4}


def memory_plan(estimate: Any, limit: int | None) -> dict[str, Any]:
    """A plan's ``memory``: the estimate's parts and the limit it is held against (given, or
    80% of the memory available plus the process)."""
    default = limit is None
    if default:
        available = default_memory_limit()
        limit = None if available is None else available + estimate.process
    return {"estimate": estimate.as_dict(), "limit_bytes": limit,
            "limit": "default" if default else "--max-memory",
            "fits": limit is None or estimate.total <= limit}


def synthetic_plan(prepared: Any, request: RunRequest, label: str,
                   in_process: bool) -> tuple[Any, dict[str, Any]]:
    """A synthetic run's plan (one worker, or the chief of several), and the plan of its
    tables; ``in_process``: whether the backend keeps the tables in this process."""
    plan = prepared.plan
    steps, options = request.steps, request.options
    engine = get_engine(options.engine).name
    run_info: dict[str, Any] = {}
    several = request.several
    if several is None:
        estimate = run_estimate(plan, steps, engine=engine, data=request.data,
                                tables=request.tables,
                                checkpoints=request.checkpoint_every is not None,
                                plot=request.plot is not None, local=in_process)
    else:
        plan, estimate, run_info = _workers_plan(prepared, request, several, in_process)
    data = SyntheticData(plan, seed=options.seed, ids=request.data.ids,
                         sequence_lengths=request.data.sequence_lengths)
    shape = RunShape(ids=data.ids, sequence_lengths=data.sequence_lengths)
    rows = []
    for table in plan.tables:
        per_step, distinct = step_ids(plan, table, shape)
        rows.append({**table_info(table), "ids_per_step": round(per_step, 1),
                     "unique_ids_per_step": round(distinct, 1)})
    save_batches = request.save_batches
    info: dict[str, Any] = {
        "config": label,
        "steps": steps, "seed": data.seed, "engine": engine,
        "backend": request.placement.backend,
        **run_info,
        "ids": str(data.ids), "sequence_lengths": str(data.sequence_lengths),
        "tables_written": request.tables,
        "tables": rows,
        "save_batches": save_batches,
        "save_batches_bytes": steps * data.batch_bytes() if save_batches is not None else None,
        "memory": memory_plan(estimate, options.memory_limit),
    }
    return plan, info


def _workers_plan(prepared: Any, request: RunRequest, workers: dict[str, Any],
                  in_process: bool) -> tuple[Any, Any, dict[str, Any]]:
    """A multi-worker plan (the chief's), memory estimate and run lines."""
    plan = multiworker.for_chief(prepared).plan
    count = workers["workers"]
    stale = workers.get("max_staleness")
    several = WorkerOptions(count, None if stale is not None
                            else workers.get("replicas_to_aggregate"), stale)
    estimate = multiworker.run_estimate(
        plan, request.steps, several, engine=get_engine(request.options.engine).name,
        data=request.data, tables=request.tables, plot=request.plot is not None,
        local=in_process)
    run_info: dict[str, Any] = {"workers": count, "mode": several.mode}
    if stale is not None:
        run_info["max_staleness"] = stale
    else:
        run_info["replicas_to_aggregate"] = several.replicas
        run_info["init_tokens"] = workers.get("init_tokens", -1)
    run_info["delay"] = workers.get("delay") or "fixed:0"
    return plan, estimate, run_info


def replay_plan(prepared: Any, request: RunRequest, label: str, real: Anchored,
                in_process: bool) -> dict[str, Any]:
    """A replay's plan and memory estimate from the batches' ``.npy`` headers (no array is
    decompressed)."""
    batches_path, init_path = request.batches, request.init
    assert batches_path is not None
    plan = prepared.plan
    with real.named_as_typed():
        headers = npz_headers(real[batches_path],
                              lambda h: parse_steps(h, len(plan.features), batches_path))
        init_bytes = state_file_bytes(real[init_path]) if init_path is not None else None
    engine = get_engine(request.options.engine).name
    estimate = replay_estimate(plan, headers, engine=engine, init_bytes=init_bytes)
    if not in_process:  # the tables and their steps live in the backend's processes
        estimate = replace(estimate, state=0, steady=0, peak=0, pipelining=0)
    steps = len({key.partition("/")[0] for key in headers})
    rows = []
    for table in plan.tables:
        ids = [max((h.shape[0] for k, h in headers.items()
                    if k.endswith(f"/f{f}/ids") and h.shape), default=0)
               for f in table.features]
        rows.append({**table_info(table), "ids_per_step": float(sum(ids)),
                     "unique_ids_per_step": float(min(sum(ids), table.vocabulary))})
    return {
        "config": label, "batches": batches_path, "init": init_path, "out": request.out,
        "steps": steps, "seed": request.options.seed, "engine": engine,
        "backend": request.placement.backend,
        "batches_bytes": sum(h.nbytes for h in headers.values()),
        "tables": rows,
        "memory": memory_plan(estimate, request.options.memory_limit),
    }
