"""The simulator's public API in one place: the run layer (``open_run``, ``RunRequest``,
``Run``, ``RunResult``: every mode of ``tpuemb simulate`` as a library call, ``tpuemb_cfg.run``),
the executor, replay and the synthetic and multi-worker runs of any configuration
(``tpuemb_cfg.facade``: a path, bytes, a message, a compiled spec), their option records and
the multi-worker aggregation objects (``tpuemb_cfg.sim``).

Names are loaded lazily so that importing this module costs nothing until one is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "open_run": "tpuemb_cfg.run",
    "RunRequest": "tpuemb_cfg.run",
    "Run": "tpuemb_cfg.run",
    "RunResult": "tpuemb_cfg.run",
    "Executor": "tpuemb_cfg.facade",
    "replay": "tpuemb_cfg.facade",
    "SyntheticRun": "tpuemb_cfg.facade",
    "MultiWorkerRun": "tpuemb_cfg.facade",
    "SyntheticOptions": "tpuemb_cfg.sim.options",
    "WorkerOptions": "tpuemb_cfg.sim.options",
    "DelayModel": "tpuemb_cfg.sim.options",
    "Placement": "tpuemb_cfg.executor.options",
    "RunOptions": "tpuemb_cfg.executor.options",
    "ConditionalAccumulator": "tpuemb_cfg.sim.accumulators",
    "SparseConditionalAccumulator": "tpuemb_cfg.sim.accumulators",
    "DropStaleGradient": "tpuemb_cfg.sim.staleness",
    "WouldBlock": "tpuemb_cfg.sim.accumulators",
    "SyncReplicas": "tpuemb_cfg.sim.staleness",
    "IndexedSlices": "tpuemb_cfg.sim.accumulators",
    "GlobalStepWarning": "tpuemb_cfg.sim.accumulators",
    "AccumulatorEvent": "tpuemb_cfg.sim.accumulators",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tpuemb_cfg.simulate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
