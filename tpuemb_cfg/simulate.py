"""The simulator's public API in one place: the executor and the multi-worker aggregation objects.

Names are loaded lazily so that importing this module costs nothing until one is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Executor": "tpuemb_cfg.executor",
    "ConditionalAccumulator": "tpuemb_cfg.workers",
    "SparseConditionalAccumulator": "tpuemb_cfg.workers",
    "DropStaleGradient": "tpuemb_cfg.workers",
    "WouldBlock": "tpuemb_cfg.workers",
    "SyncReplicas": "tpuemb_cfg.workers",
    "IndexedSlices": "tpuemb_cfg.workers",
    "GlobalStepWarning": "tpuemb_cfg.workers",
    "AccumulatorEvent": "tpuemb_cfg.workers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tpuemb_cfg.simulate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
