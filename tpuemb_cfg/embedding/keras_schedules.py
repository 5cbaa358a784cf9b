"""Keras' learning-rate schedules, and Model Garden's ``WarmUpAndPolyDecay``, as TensorFlow
computes them: in float32, operation by operation.

The functions are written once, in :mod:`tpuemb_cfg.algorithms.schedules` (with the kinds of
tpuemb's own schedules and of a simulation spec, so one schedule gives the same rate whichever
spec declares it); this module keeps their names where the embedding API has always had them.
Each takes the schedule's ``get_config()`` and the global step.
"""

from __future__ import annotations

from tpuemb_cfg.algorithms.schedules import (
    SCHEDULE_FUNCTIONS,
    cosine,
    cosine_restarts,
    exponential,
    inverse_time,
    piecewise,
    polynomial,
    warmup_poly_decay,
)

__all__ = ["SCHEDULE_FUNCTIONS", "cosine", "cosine_restarts", "exponential", "inverse_time",
           "piecewise", "polynomial", "warmup_poly_decay"]
