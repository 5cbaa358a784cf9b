"""The reference executor: the TPU embedding layer's training step on the CPU, in float32.

``Executor(prepared, options, placement)`` holds the tables and slots of a
``TPUEmbeddingConfiguration`` and runs the steps of ``../shared/spec/optimizers.md``; ``replay``
runs a whole replay-contract input (the arrays of ``tpuemb simulate CONFIG --batches B.npz``).
Both take a configuration prepared once by ``tpuemb_cfg.session.prepare`` (parse, validate,
``plan``) and the option records ``RunOptions`` and ``Placement`` (``options``); the public
``tpuemb_cfg.simulate.Executor``/``replay`` take any configuration. The tables live in a
storage backend chosen by name (``storage.BACKENDS``). The hot loops live in
``engines`` (``numpy``, ``numba``), the per-row optimizers in ``optimizers``, the wrapping
pipeline of spec section 6 in ``pipeline``, and the tables and slots behind ``storage``.
"""

from __future__ import annotations

from .batch import FeatureInput
from .core import DeduplicationData, Executor, Partial, TableDeduplication, TableReport
from .options import Placement, RunOptions
from .plan import COMBINERS, parse_combiners
from .replay import replay
from .storage import LocalStorage, Storage

__all__ = [
    "COMBINERS",
    "DeduplicationData",
    "Executor",
    "FeatureInput",
    "LocalStorage",
    "Partial",
    "Placement",
    "RunOptions",
    "TableDeduplication",
    "Storage",
    "TableReport",
    "parse_combiners",
    "replay",
]
