"""The frequency estimator (spec 12.17): not a learning rule, a per-row estimate of hit spacing.

Written once, as its scalar element; ``register_element`` makes its NumPy update from it."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .update import ONE, F, Quad, hyper_tuple, register_element, where


class FrequencyEstimatorState(NamedTuple):
    last_hit_step: np.ndarray


#: tau, max_delta, outlier_threshold (the update does not read weight_exponent).
FrequencyEstimatorHyper = hyper_tuple("FrequencyEstimatorHyper", "frequency_estimator", __name__)


def frequency_estimator_element(w: F, a: F, b: F, c: F, g: F, lr: F, h: Any) -> Quad:
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

    ``weight_exponent`` is not used (the forward pass returns D itself).
    """
    delta = lr - a
    capped = min(delta, h.max_delta)
    w = where(delta >= h.outlier_threshold * w, capped, w * (ONE - h.tau) + capped * h.tau)
    a = lr
    return w, a, b, c


frequency_estimator_update = register_element(
    "frequency_estimator",
    state=FrequencyEstimatorState,
    hyper=FrequencyEstimatorHyper,
    element=frequency_estimator_element,
)
