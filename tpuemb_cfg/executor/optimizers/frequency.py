"""The frequency estimator (spec 12.17): not a learning rule, a per-row estimate of hit spacing."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import OptimizerSpec, SlotSpec, UpdateContext, always_lazy, constant, f32, hyper_f32


def frequency_estimator_update(
    params: np.ndarray,
    slots: tuple[np.ndarray, ...],
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Frequency estimator (``frequency_estimator``; PROTO).

    The table (width 1) holds D, the estimated number of global steps between two hits of the
    row (sampling rate about 1/D); it starts at ``max_delta`` (the executor's table initialiser,
    spec section 11). Slot: ``last_hit_step`` (default 0). Input: ``n = lr``, the global step
    carried as a float by the (dynamic) learning rate. The gradient is ignored. ::

        delta   = n - last_hit_step
        cdelta  = min(delta, max_delta)
        outlier = delta >= outlier_threshold * D
        D       = cdelta                            where outlier
        D       = D * (1 - tau) + cdelta * tau      elsewhere
        last_hit_step = n

    ``weight_exponent`` is not used (the forward pass returns D itself). Returns new arrays
    ``(D, (last_hit_step,))``; the inputs are not modified.
    """
    (last_hit_step,) = slots
    n = f32(lr)
    tau = hyper_f32(hyper, "tau")
    max_delta = hyper_f32(hyper, "max_delta")
    outlier_threshold = hyper_f32(hyper, "outlier_threshold")
    one = f32(1.0)
    delta = n - last_hit_step
    cdelta = np.minimum(delta, max_delta)
    outlier = delta >= outlier_threshold * params
    d = np.where(outlier, cdelta, params * (one - tau) + cdelta * tau)
    last_hit_step = np.full_like(last_hit_step, n)
    return d, (last_hit_step,)


SPECS = (
    OptimizerSpec(
        name="frequency_estimator",
        slots=(SlotSpec("last_hit_step", constant(0.0)),),
        update=frequency_estimator_update,
        lazy=always_lazy,
        equations="PROTO",
    ),
)
