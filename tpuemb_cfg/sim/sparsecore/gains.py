"""A SparseCore's combiner gains, and a batch with its dropped ids removed.

A SparseCore does not combine a bag at lookup time the way the legacy TPU embedding does: the
host preprocessing turns every input id into a COO entry ``(sample, id, gain)`` with

    gain = weight * s_b,   s_b = 1 (sum), 1 / sum_b w (mean), 1 / sqrt(sum_b w^2) (sqrtn)

computed over the **whole** row b before merging repeats and before dropping
(jax-tpu-embedding 0.2.0; ``/work/arch/sparsecore-data/facts.md`` section 4). The SparseCore
then sums ``gain * row`` over the entries that survived, forward, and scatters ``gain * grad_b``
to their rows, backward. So a dropped id removes its own contribution and changes no other
id's gain: the activation of a bag with a dropped id is *not* the mean of the ids that remain.

This is exactly the legacy executor's ``sum`` combiner fed the kept ids with their gains as
weights: :func:`kept_inputs` builds that batch, and the executor's optimizers, engines and
backends then run unchanged. The scale is the executor's own ``bag_scales`` (``1/d`` then times
the weight, in float32): with nothing dropped the result is the executor's ``mean``/``sqrtn``
run bit for bit. jax-tpu-embedding divides (``weight / d``), which can differ from it in the
last bit. A bag whose denominator is exactly 0 gets gain 0 (the executor's rule, spec 3.2);
jax-tpu-embedding writes inf or NaN there, which would poison the table. Such bags are counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...executor.batch import CheckedFeature, FeatureInput
from ...executor.engines.numpy import bag_scales

__all__ = ["RowGains", "kept_inputs", "row_gains"]

F32 = np.float32


@dataclass(frozen=True)
class RowGains:
    """One feature's per-id gains (float32 [nnz]) and its bags with a zero denominator."""

    gains: np.ndarray
    zero_denominator_bags: int


def row_gains(feature: CheckedFeature, combiner: str) -> RowGains:
    """The gain of every input id of ``feature`` under ``combiner`` (``sum``, ``mean``,
    ``sqrtn``), over the whole row, before dropping (module docstring)."""
    scale, zero = bag_scales(feature.weights, feature.row_splits, combiner)
    bag = np.repeat(np.arange(feature.batch), np.diff(feature.row_splits))
    gains = (scale[bag] * feature.weights).astype(F32, copy=False)
    return RowGains(gains, int(zero.sum()))


def kept_inputs(
    features: Sequence[CheckedFeature],
    gains: Sequence[RowGains],
    dropped: Sequence[np.ndarray | None],
    grads: Sequence[np.ndarray | None] | None = None,
) -> list[FeatureInput]:
    """The batch the executor runs with the ``sum`` combiner: per feature the ids not
    ``dropped`` (bool [nnz], None: none), the row splits of the same bags (a bag may become
    empty: activation 0, as on the SparseCore) and the gains as weights; ``grads`` (the
    activation gradients, one per feature, or None) are passed through unchanged."""
    out: list[FeatureInput] = []
    for f, (feature, gain) in enumerate(zip(features, gains, strict=True)):
        mask = dropped[f]
        grad = grads[f] if grads is not None else None
        if mask is None or not mask.any():
            out.append(FeatureInput(feature.ids, feature.row_splits, gain.gains, grad))
            continue
        keep = ~mask
        kept_before = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))
        row_splits = kept_before[feature.row_splits]
        out.append(FeatureInput(feature.ids[keep], row_splits, gain.gains[keep], grad))
    return out
