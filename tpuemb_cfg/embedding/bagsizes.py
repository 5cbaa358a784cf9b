"""How many ids one bag of each feature holds, from the shapes given to ``build_config``.

TensorFlow drops the last axis of a feature's input shape to get its output shape: that axis is
the bag, reduced by the combiner (``[batch, 100]`` multi-hot ids give ``[batch]`` activations of
up to 100 ids each; a ``[batch]`` input holds one id per sample). A sequence feature
(``max_sequence_length`` > 0) keeps one id per position. The proto does not record this, so the
compiler's result carries it (``Feature.ids_per_bag``) for the simulator's synthetic batches and
its memory estimate (``tpuemb_cfg.executor.bags``).
"""

from __future__ import annotations

from typing import Any

from tpuemb_cfg.embedding.shapes import to_shape
from tpuemb_cfg.embedding.tables import FeatureConfig

__all__ = ["ids_per_bag"]


def _one(feature: FeatureConfig, raw: Any) -> int | None:
    if feature.max_sequence_length > 0 and feature.output_shape is None:
        return 1
    try:
        shape = to_shape(raw, "input shape", "shape")
    except (TypeError, ValueError):
        return None
    if not shape:
        return None
    if len(shape) == 1:
        return 1
    last = shape[-1]
    return int(last) if last else None


def ids_per_bag(
    flat: list[tuple[str, FeatureConfig]], input_shapes: list[tuple[str, Any]] | None
) -> list[int | None]:
    """Per flattened feature, the most ids one bag holds (``None``: the arguments do not say,
    as with ``per_replica_batch_size`` alone). ``input_shapes``: the input shapes aligned with
    ``flat`` (``build_config``'s, after the shapes resolved), or None when none were given."""
    if input_shapes is None:
        return [1 if f.max_sequence_length > 0 and f.output_shape is None else None
                for _, f in flat]
    return [_one(f, raw) for (_, f), (_, raw) in zip(flat, input_shapes, strict=True)]
