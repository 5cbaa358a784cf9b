"""SC: SparseCore configurations (TPU v5p, v6e, TPU7x; ``sparsecore.md`` section 5).

These rules read a :class:`~tpuemb_cfg.sparsecore.config.SparseCoreConfig` (from TensorFlow's
``TPUEmbeddingV2``, keras-rs or jax-tpu-embedding) and the :class:`Stacking` both references
would build from it, through a :class:`~tpuemb_cfg.rules.SparseCoreContext`. Field paths are
named after the API the user wrote: ``sparse_core_config.max_ids_per_table["user"]``,
``tables["user"].optimizer``, ``features["user/id"].output_shape``; the validator places each at
the spec line that built the object (its ``Origin``).

Thresholds a project may change (``options`` of :func:`tpuemb_cfg.validate`):
``sparsecore_padding_waste`` (SC010, a fraction, default 0.25) and ``memory_budget_bytes``
(SC012, the host memory ``initialize_tables_on_host`` may use; ``memory-budget`` in
``[tool.tpuemb]``; default 64 GiB).
"""

from __future__ import annotations

# The rules live in three modules by what they check (importing one registers its rules):
# sparsecore_limits (SC001-SC004), sparsecore_tables (SC005-SC012), sparsecore_devices
# (SC013-SC017); their shared helpers in _sparsecore_common.
from tpuemb_cfg.rules import sparsecore_devices, sparsecore_tables  # noqa: F401
from tpuemb_cfg.rules._sparsecore_common import (
    ACTIVATION_LIMIT,
    DEFAULT_LIMIT,
    HOST_MEMORY,
    INT32_MAX,
    LIMIT_SETTINGS,
    PADDING_MIN_BYTES,
    PADDING_WASTE,
    SHARD_LIMIT,
    limit_key_path,
)
from tpuemb_cfg.rules.sparsecore_limits import KeyRename, limit_key_renames

__all__ = [
    "ACTIVATION_LIMIT", "DEFAULT_LIMIT", "HOST_MEMORY", "INT32_MAX", "LIMIT_SETTINGS",
    "PADDING_MIN_BYTES", "PADDING_WASTE", "SHARD_LIMIT", "KeyRename", "limit_key_path",
    "limit_key_renames",
]
