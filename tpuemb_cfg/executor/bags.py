"""How many ids a bag holds: what the configuration says, and how synthetic data draws it.

A bag is one entry of a feature's output shape (one sample of a ``[batch]`` feature, one position
of a ``[batch, length]`` sequence feature); the combiner reduces its ids to one activation row.
``TPUEmbeddingConfiguration`` records the bags (``input_shape``) but not how many ids each holds,
so :attr:`FeaturePlan.ids_per_bag <tpuemb_cfg.executor.plan.FeaturePlan.ids_per_bag>` is:

- from a compiled spec, the most ids one bag can hold: the last dimension of the feature's input
  shape (a multi-hot ``[batch, 100]`` input: 100; a one-hot ``[batch]`` input: 1), 1 for a
  sequence feature (one id per position); unknown when only a batch size was given;
- from a plain configuration, 1 for a multi-dimensional ``input_shape`` (sequence-like: one id per
  position) and unknown for a ``[batch]`` feature.

The distribution synthetic batches draw bag sizes from (``tpuemb simulate --bag-sizes``):

- ``fixed``: every bag holds ``ids_per_bag`` ids (dense multi-hot inputs, as MLPerf's Criteo);
- ``uniform``: 1 to ``ids_per_bag`` ids, uniformly (ragged inputs up to a maximum);
- ``auto`` (the default): ``fixed`` where the configuration gives the count, ``uniform`` where it
  does not.

An unknown count is :data:`DEFAULT_IDS_PER_BAG` (so ``auto`` gives 1 to 4 ids there).
"""

from __future__ import annotations

import numpy as np

from .plan import DISTRIBUTIONS, FeaturePlan

__all__ = ["DEFAULT_IDS_PER_BAG", "DISTRIBUTIONS", "bag_lengths", "expected_ids_per_bag"]

DEFAULT_IDS_PER_BAG = 4


def _shape(feature: FeaturePlan) -> tuple[str, int]:
    """(``fixed`` or ``uniform``, the largest bag) of ``feature``."""
    known = feature.ids_per_bag
    most = known if known is not None and known >= 1 else DEFAULT_IDS_PER_BAG
    kind = feature.bag_sizes
    if kind == "auto":
        kind = "fixed" if known is not None else "uniform"
    return kind, most


def bag_lengths(rng: np.random.Generator, feature: FeaturePlan, bags: int) -> np.ndarray:
    """The number of ids of each of ``bags`` bags of ``feature`` (int64), drawn from ``rng``
    (nothing is drawn for a fixed size)."""
    kind, most = _shape(feature)
    if kind == "fixed" or most == 1:
        return np.full(bags, most, dtype=np.int64)
    return rng.integers(1, most + 1, bags)


def expected_ids_per_bag(feature: FeaturePlan) -> float:
    """The mean bag size synthetic data gives ``feature`` (what the memory estimate counts)."""
    kind, most = _shape(feature)
    return float(most) if kind == "fixed" else (1 + most) / 2
