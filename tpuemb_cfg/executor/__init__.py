"""The reference executor: the TPU embedding layer's training step on the CPU, in float32.

``Executor(config)`` holds the tables and slots of a ``TPUEmbeddingConfiguration`` and runs the
steps of ``../shared/spec/optimizers.md``; ``replay`` runs a whole replay-contract input (the
arrays of ``tpuemb simulate CONFIG --batches B.npz``). The hot loops live in ``kernels``, the
per-row optimizers in ``optimizers``.
"""

from __future__ import annotations

from .batch import FeatureInput
from .core import DeduplicationData, Executor, Partial, TableDeduplication, TableReport
from .plan import COMBINERS, parse_combiners
from .replay import replay

__all__ = [
    "COMBINERS",
    "DeduplicationData",
    "Executor",
    "FeatureInput",
    "Partial",
    "TableDeduplication",
    "TableReport",
    "parse_combiners",
    "replay",
]
