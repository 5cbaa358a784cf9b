"""The reference executor: the TPU embedding layer's training step on the CPU, in float32.

``Executor(prepared, options, placement)`` holds the tables and slots of a
``TPUEmbeddingConfiguration`` and runs the steps of ``../shared/spec/optimizers.md``; ``replay``
runs a whole replay-contract input (the arrays of ``tpuemb simulate CONFIG --batches B.npz``).
Both take a configuration prepared once by ``tpuemb_cfg.session.prepare`` (parse, validate,
``plan``) and the option records ``RunOptions`` and ``Placement`` (``options``); the public
``tpuemb_cfg.simulate.Executor``/``replay`` take any configuration. The tables live in a
storage backend chosen by name (``storage.BACKENDS``). The hot loops live in ``engines``
(``numpy``, ``numba``), the per-row optimizers in ``tpuemb_cfg.algorithms`` (by name:
``optimizers``), the wrapping pipeline of spec section 6 in ``pipeline``, and the tables and
slots behind ``storage``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpuemb_cfg.base.lazy import lazy_exports

if TYPE_CHECKING:
    from .core import Executor
    from .options import Placement, RunOptions
    from .plan import COMBINERS, parse_combiners
    from .records import DeduplicationData, Partial, TableDeduplication, TableReport
    from .replay_keys import FeatureInput
    from .storage import LocalStorage, Storage

# Public name -> the module that defines it, loaded on first use (PEP 562): importing a light
# submodule (``executor.prepared``) does not load NumPy and the engines.
_LAZY = {
    "FeatureInput": "replay_keys",
    "DeduplicationData": "records", "Executor": "core", "Partial": "records",
    "TableDeduplication": "records", "TableReport": "records",
    "COMBINERS": "plan", "parse_combiners": "plan",
    "LocalStorage": "storage", "Storage": "storage",
    "Placement": "options", "RunOptions": "options",
}

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
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
