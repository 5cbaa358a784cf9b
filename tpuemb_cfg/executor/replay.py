"""The replay contract: a whole recorded run in, the final state and every activation out.

Input keys (``B.npz``): ``s{step}/f{f}/ids`` int64 [nnz], ``s{step}/f{f}/row_splits`` int64
[batch + 1] (absent: one id per sample), ``s{step}/f{f}/weights`` float32 [nnz] (absent: 1.0),
``s{step}/f{f}/grad`` float32 [batch, dim], ``s{step}/learning_rates`` float32 [K] (exactly when
K > 0). Output keys: ``table/{table}``, ``slot/{table}/{slot}`` and ``s{step}/f{f}/activations``.
Every step is checked before the first one runs, so bad input fails fast and nothing is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .batch import check_learning_rates
from .core import Executor
from .engines import get_engine
from .memory import reduce_hint, replay_estimate, require_memory
from .nonfinite import NonFinite
from .options import Placement, RunOptions
from .plan import Plan
from .records import TableReport
from .replay_keys import parse_steps
from .storage import choose_backend

if TYPE_CHECKING:
    from .prepared import Prepared

__all__ = ["replay", "require_replay_memory"]

def require_replay_memory(plan: Plan, headers: Mapping[str, Any], max_memory: int | None, *,
                          engine: str = "numba", init_bytes: int | None = None) -> None:
    """Refuse (``UsageError``, as ``core.require_memory``) a replay whose whole-process estimate
    (``memory.replay_estimate``: the process, tables and slots, the largest recorded step, the
    activations kept until the output is written, the batches and ``init_bytes`` of initial
    arrays) exceeds ``max_memory`` (None: the default limit). ``headers``: the batches' arrays
    by key, or anything with ``shape`` and ``nbytes`` (the ``.npy`` headers, read before the
    file is decompressed); ``engine``: the engine's name."""
    parts = replay_estimate(plan, headers, engine=engine, init_bytes=init_bytes)
    require_memory(parts.total, max_memory, process=parts.process,
                   counted="the process, tables, slots, a step's working arrays, the batches "
                   "and the activations", reduce=reduce_hint(parts, tables="all"))


def replay(
    prepared: Prepared,
    batches: Mapping[str, Any],
    init: Mapping[str, Any] | None = None,
    *,
    options: RunOptions | None = None,
    placement: Placement | None = None,
    sources: tuple[str | None, str | None] = (None, None),
    on_step: Callable[[int, Mapping[str, TableReport]], None] | None = None,
    on_nonfinite: Callable[[NonFinite], None] | None = None,
) -> dict[str, np.ndarray]:
    """Run every step of ``batches`` from the state ``init``; return the replay output arrays.

    ``prepared``: the configuration (a ``Prepared``, ``tpuemb_cfg.session.prepare``; nothing is
    parsed or planned again; ``tpuemb_cfg.simulate.replay`` takes a path or a message).
    ``options``/``placement``: as for ``Executor`` (``RunOptions``, ``Placement``). With tables
    in this process, ``max_memory`` refuses (``UsageError``) a replay whose whole-process
    estimate (``require_replay_memory``) exceeds it (default: 80% of the memory available;
    ``check_memory=False``: the caller has checked, e.g. from the ``.npy`` headers); with the
    Ray backend it is each host actor's limit, and the returned tables
    and slots are live ``ShardedArray`` views (``npzio.atomic_write_npz`` streams them host by
    host) valid while the Ray session lasts. ``sources``: the files ``batches`` and ``init``
    were read from, named in errors. Arrays must have the contract's dtypes exactly (int64 ids,
    float32 floats); every step is checked once, before the first one runs: ``InputError``
    names the key and the source. ``on_step(step, reports)`` is called after each step with
    the per-table ``TableReport`` of that step. A step that leaves a parameter NaN or infinite
    keeps TensorFlow's result (``Executor``; ``strict_finite``: ``NumericalError``);
    ``on_nonfinite(event)`` is then called once, at the end, with the first such value and its
    cause (``nonfinite.NonFinite``).
    """
    options = options if options is not None else RunOptions()
    placement = placement if placement is not None else Placement()
    batches_source, init_source = sources
    if choose_backend(placement.backend).in_process and options.check_memory:
        require_replay_memory(
            prepared.plan, {name: np.asarray(value) for name, value in batches.items()},
            options.memory_limit, engine=get_engine(options.engine).name,
            init_bytes=(sum(int(np.asarray(v).nbytes) for v in init.values())
                        if init is not None else None))
        # Checked above, with the inputs and outputs counted too.
        options = replace(options, max_memory=None, check_memory=False)
    executor = Executor(prepared, options, placement, initial_state=init,
                        state_source=init_source, strict=True)
    plan = executor.plan
    checked = [
        executor.check_step(
            inputs, check_learning_rates(rates, plan, step, batches_source, strict=True), step,
            source=batches_source, strict=True, finite=True)
        for step, (inputs, rates) in enumerate(
            parse_steps(batches, len(plan.features), batches_source))
    ]
    out: dict[str, np.ndarray] = {}
    for step, inputs in enumerate(checked):
        activations = executor.run_checked_step(inputs, batches_source)
        for f, activation in enumerate(activations):
            out[f"s{step}/f{f}/activations"] = activation
        if on_step is not None:
            on_step(step, executor.last_report)
    out.update(executor.state_arrays())
    if on_nonfinite is not None and executor.nonfinite is not None:
        on_nonfinite(executor.nonfinite)
    return out
