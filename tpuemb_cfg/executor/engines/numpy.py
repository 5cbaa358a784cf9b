"""The NumPy engine: the executor's hot loops, one small pure-NumPy function each.

The readable reference (the default engine). Everything that touches every occurrence or every
looked-up row goes through these functions; the numba engine (``engines.numba``) replaces them
one by one behind the same signatures (``engines.base``). No function loops over ids in Python
and none copies a whole table.

Conventions: ids are int64, values float32; a *bag* is one row of ``row_splits`` (the occurrences
``row_splits[b] : row_splits[b + 1]``); *segments* are groups of occurrences sharing an index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tpuemb_cfg.base import numerics
from tpuemb_cfg.model.layout import host_of  # spec section 8, stated once

from .base import Engine

__all__ = [
    "ENGINE",
    "backprop_sum",
    "bag_of_occurrence",
    "bag_scales",
    "change_norm",
    "change_rows",
    "clip",
    "combine",
    "deduplicate",
    "gather",
    "gather_combine",
    "host_of",
    "quantize",
    "scatter",
    "segment_sum",
]

F32 = np.float32


def deduplicate(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(unique, inverse)``: the sorted distinct ids and, per occurrence, its position in them.

    ``unique[inverse] == ids``. One call per table and partial per step (spec section 4).
    """
    unique, inverse = np.unique(ids, return_inverse=True)
    return unique.astype(np.int64, copy=False), inverse.reshape(-1).astype(np.int64, copy=False)


def _ordered_sums(values: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """Per group, the float32 sum of the ``values`` (rows of [n, ...]) whose ``groups`` equals
    it, in the order of the values: the first as is, each next one added (docs/numerics.md;
    ``np.add.at`` applies the additions one after another in index order, and -0.0 is the one
    start that leaves every first value as it is). Groups with no value are 0."""
    out = np.full((count, *values.shape[1:]), -0.0, dtype=F32)
    np.add.at(out, groups, values.astype(F32, copy=False))
    out[np.bincount(groups, minlength=count)[:count] == 0] = 0.0
    return out


def segment_sum(values: np.ndarray, segments: np.ndarray, num_segments: int) -> np.ndarray:
    """Per segment, the float32 sum of the rows of ``values`` [n, D] whose ``segments`` equals it,
    in the order of the occurrences (the spec's reference order). Segments with no occurrence
    are 0."""
    return _ordered_sums(values, np.asarray(segments, dtype=np.int64), int(num_segments))


def bag_of_occurrence(row_splits: np.ndarray) -> np.ndarray:
    """For each occurrence, the index of the bag it belongs to (row_splits must be valid)."""
    counts = np.diff(row_splits)
    return np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)


def _bag_sums(values: np.ndarray, row_splits: np.ndarray) -> np.ndarray:
    """Per bag, the float32 sum of the ``values`` of its occurrences, in position order (empty
    bags 0)."""
    return _ordered_sums(values, bag_of_occurrence(row_splits), row_splits.shape[0] - 1)


def bag_scales(
    weights: np.ndarray, row_splits: np.ndarray, combiner: str
) -> tuple[np.ndarray, np.ndarray]:
    """``(scale, zero_denominator)`` per bag for ``combiner`` (spec 3.1-3.2).

    sum: 1; mean: 1 / sum of weights; sqrtn: 1 / sqrt(sum of squared weights). A non-empty bag
    whose denominator is exactly 0 gets scale 0 and is flagged in ``zero_denominator``.
    """
    num_bags = row_splits.shape[0] - 1
    if combiner == "sum":
        return np.ones(num_bags, dtype=F32), np.zeros(num_bags, dtype=bool)
    if combiner == "mean":
        denominator = _bag_sums(weights, row_splits)
    elif combiner == "sqrtn":
        denominator = np.sqrt(_bag_sums(weights * weights, row_splits))
    else:
        raise ValueError(f"unknown combiner {combiner!r}")
    nonempty = row_splits[1:] > row_splits[:-1]
    zero = nonempty & (denominator == 0)
    scale = np.zeros(num_bags, dtype=F32)
    ok = denominator != 0
    scale[ok] = F32(1.0) / denominator[ok]
    return scale, zero


def combine(rows: np.ndarray, gains: np.ndarray, row_splits: np.ndarray) -> np.ndarray:
    """Activations [B, D]: per bag, the sum of ``gains[j] * rows[j]`` over its occurrences.

    ``rows`` [nnz, D] are the looked-up (possibly quantized) rows of the occurrences in order.
    Empty bags give 0.
    """
    return _bag_sums(gains[:, None] * rows, row_splits)


def gather(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` of ``table`` as a new [n, D] array."""
    out: np.ndarray = table[rows]
    return out


def scatter(table: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """Write ``values`` [n, D] into the (distinct) rows ``rows`` of ``table`` in place."""
    table[rows] = values


def clip(values: np.ndarray, lower: np.float32 | None, upper: np.float32 | None) -> np.ndarray:
    """``min(max(values, lower), upper)`` elementwise, an absent bound unbounded; NaN stays NaN."""
    if lower is not None:
        values = np.where(values < lower, lower, values)
    if upper is not None:
        values = np.where(values > upper, upper, values)
    return values.astype(F32, copy=False)


def quantize(values: np.ndarray, lower: np.float32, upper: np.float32, buckets: int) -> np.ndarray:
    """Simulated quantization (spec 3.3): clamp to [lower, upper], snap to ``buckets`` levels.

    ``Q(x) = floor((x - lo) / q + 0.5) * q + lo`` with ``q = (hi - lo) / (buckets - 1)``, all in
    float32 (round half up).
    """
    quantum = (upper - lower) / F32(buckets - 1)
    x = np.minimum(np.maximum(values, lower), upper)
    snapped: np.ndarray = np.floor((x - lower) / quantum + F32(0.5)) * quantum + lower
    return snapped.astype(F32, copy=False)


def backprop_sum(
    d_activations: np.ndarray,
    sample: np.ndarray,
    gains: np.ndarray,
    segments: np.ndarray,
    num_segments: int,
) -> np.ndarray:
    """Per segment s, the sum over occurrences j in it of ``gains[j] * d_activations[sample[j]]``
    (spec section 4): the contributions, then ``segment_sum``."""
    contributions = gains[:, None] * gather(d_activations, sample)
    return segment_sum(contributions, segments, num_segments)


def gather_combine(
    rows: np.ndarray, index: np.ndarray, gains: np.ndarray, row_splits: np.ndarray
) -> np.ndarray:
    """``combine(gather(rows, index), gains, row_splits)``: the activations of a feature."""
    return combine(gather(rows, index), gains, row_splits)


def change_rows(params: np.ndarray, rows: np.ndarray | None, before: np.ndarray) -> np.ndarray:
    """float64 [n]: per row, the squared length of ``params[rows] - before`` (every row when
    ``rows`` is None): the difference in float32, squared and added in float64 in the order of
    ``numerics.row_sumsq``."""
    return numerics.row_sumsq(params if rows is None else gather(params, rows), before)


def change_norm(params: np.ndarray, rows: np.ndarray | None, before: np.ndarray) -> float:
    """Euclidean norm of ``params[rows] - before``: ``change_rows`` added in row order."""
    return float(np.sqrt(numerics.total(change_rows(params, rows, before))))


def _no_fused_update(*args: Any) -> bool:
    """The NumPy engine fuses nothing: the executor runs the NumPy pipeline."""
    return False


ENGINE = Engine(
    name="numpy",
    requested="numpy",
    deduplicate=deduplicate,
    segment_sum=segment_sum,
    backprop_sum=backprop_sum,
    gather=gather,
    scatter=scatter,
    combine=combine,
    gather_combine=gather_combine,
    update_rows=_no_fused_update,
    change_rows=change_rows,
    change_norm=change_norm,
    bag_of_occurrence=bag_of_occurrence,
    bag_scales=bag_scales,
    clip=clip,
    quantize=quantize,
    host_of=host_of,
)
