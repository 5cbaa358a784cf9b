"""The frequency estimator (spec 12.17): not a learning rule, a per-row estimate of hit spacing."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .update import ONE, F, Quad, UpdateContext, f32, hyper_tuple, register


class FrequencyEstimatorState(NamedTuple):
    last_hit_step: np.ndarray


#: tau, max_delta, outlier_threshold (the update does not read weight_exponent).
FrequencyEstimatorHyper = hyper_tuple("FrequencyEstimatorHyper", "frequency_estimator", __name__)


def frequency_estimator_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
    """``lr`` is the global step count n."""
    delta = lr - a
    capped = min(delta, h.max_delta)
    if delta >= h.outlier_threshold * w:
        w = capped
    else:
        w = w * (ONE - h.tau) + capped * h.tau
    a = lr
    return w, a, b, c


@register(
    "frequency_estimator",
    state=FrequencyEstimatorState,
    hyper=FrequencyEstimatorHyper,
    element=frequency_estimator_element,
)
def frequency_estimator_update(
    params: np.ndarray,
    state: FrequencyEstimatorState,
    grad: np.ndarray,
    lr: np.float32,
    hyper: Any,
    ctx: UpdateContext,
) -> tuple[np.ndarray, FrequencyEstimatorState]:
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

    ``weight_exponent`` is not used (the forward pass returns D itself). Returns new arrays; the
    inputs are not modified.
    """
    n = f32(lr)
    tau, max_delta = hyper.tau, hyper.max_delta
    one = f32(1.0)
    delta = n - state.last_hit_step
    cdelta = np.minimum(delta, max_delta)
    outlier = delta >= hyper.outlier_threshold * params
    d = np.where(outlier, cdelta, params * (one - tau) + cdelta * tau)
    return d, FrequencyEstimatorState(np.full_like(state.last_hit_step, n))
