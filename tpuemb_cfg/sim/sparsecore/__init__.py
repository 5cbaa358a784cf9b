"""``tpuemb simulate`` on a SparseCore configuration: the training step with the SparseCore
preprocessing's limits and id dropping, per-step drop reports, and the drift a limit costs
(``compare``). ``legacy``: the per-table legacy configuration the executor runs; ``gains``: the
combiner gains over whole rows and the batch without its dropped ids; ``run``: the runs.
See docs/sparsecore/simulate.md.
"""

from __future__ import annotations

from .gains import RowGains, kept_inputs, row_gains
from .legacy import SparseCoreMessage, jax_message, sparsecore_message
from .run import Dropper, Drops, SparseCoreRun, SparseCoreSetup, preprocess_dropper

__all__ = ["Dropper", "Drops", "RowGains", "SparseCoreMessage", "SparseCoreRun",
           "SparseCoreSetup", "jax_message", "kept_inputs", "preprocess_dropper", "row_gains",
           "sparsecore_message"]
