"""What every optimizer shares: the step context, the registry record and ``register`` (defined
in ``tpuemb_cfg.algorithms.update``, re-exported here)."""

from __future__ import annotations

from ...algorithms.update import (
    REGISTRY,
    NoHyper,
    NoState,
    Optimizer,
    UpdateContext,
    UpdateFn,
    binder,
    f32,
    register,
)

__all__ = [
    "REGISTRY",
    "NoHyper",
    "NoState",
    "Optimizer",
    "UpdateContext",
    "UpdateFn",
    "binder",
    "f32",
    "register",
]
