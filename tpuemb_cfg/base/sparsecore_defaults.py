"""The SparseCore defaults TensorFlow 2.21 and jax-tpu-embedding apply when a model says nothing.

Each number is written here once; stacking (``sparsecore/stacker.py``, ``sparsecore/jte/``),
the feed (``sparsecore/feed.py``), the SC rules and their texts, the planner and the embedding
compile code read it from here.

- :data:`DEFAULT_MAX_IDS_PER_PARTITION` / :data:`DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION`: the
  limit of a stack missing from ``max_ids_per_table`` / ``max_unique_ids_per_table``
  (``TPUEmbeddingV2.DEFAULT_MAX_IDS_PER_TABLE`` and ``DEFAULT_MAX_UNIQUE_IDS_PER_TABLE``), and
  what jax-tpu-embedding's ``get_default_limits`` and ``TableSpec`` give (equal in both).
- :data:`ACTIVATION_MEMORY_BYTES_LIMIT`: the activation memory a stack may reach per
  SparseCore (TensorFlow's ``SparseCoreLayoutStacker`` and jax-tpu-embedding's
  ``DEFAULT_ACTIVATION_MEM_BYTES_LIMIT``): 2 MiB.
- :data:`VARIABLE_SHARD_BYTES_LIMIT`: the largest shard of a stacked variable TensorFlow's stacker
  builds (jax-tpu-embedding has no such limit): 2 GiB.
- :data:`STACKED_ROW_LIMIT`: the rows of a stacked table (``int32``): 2^31 - 1.
- :data:`ASSUMED_SPARSE_CORES_PER_CHIP`: what ``TPUEmbeddingV2`` assumes when the chip reports
  no SparseCore count (``num_embedding_devices_per_chip`` 0: a warning, then 4).
- :data:`DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE`: ``SparseCoreEmbeddingConfig.
  max_ids_per_chip_per_sample``, TensorFlow's COO buffer per sample (64).
- The COO buffer of jax-tpu-embedding (:func:`theoretical_coo_buffer`): each SparseCore's run
  to a partition starts at a multiple of :data:`COO_ALIGNMENT` (8), and with minibatching the
  buffer has room for :data:`MAX_MINIBATCHES` (64) minibatches.
"""

from __future__ import annotations

__all__ = [
    "ACTIVATION_MEMORY_BYTES_LIMIT",
    "ASSUMED_SPARSE_CORES_PER_CHIP",
    "COO_ALIGNMENT",
    "DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE",
    "DEFAULT_MAX_IDS_PER_PARTITION",
    "DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION",
    "MAX_MINIBATCHES",
    "STACKED_ROW_LIMIT",
    "VARIABLE_SHARD_BYTES_LIMIT",
    "theoretical_coo_buffer",
]

#: ``max_ids_per_partition`` of a stack nothing names (TensorFlow and jax-tpu-embedding).
DEFAULT_MAX_IDS_PER_PARTITION = 256
#: ``max_unique_ids_per_partition`` of a stack nothing names (TensorFlow and jax-tpu-embedding).
DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION = 256
#: Bytes of activations one stack may take per SparseCore: 2 MiB.
ACTIVATION_MEMORY_BYTES_LIMIT = 2 * 1024 * 1024
#: Bytes of one shard of a stacked variable (TensorFlow's stacker): 2 GiB.
VARIABLE_SHARD_BYTES_LIMIT = 2 * 1024 * 1024 * 1024
#: Rows of one stacked table (``int32``).
STACKED_ROW_LIMIT = (1 << 31) - 1
#: SparseCores per chip ``TPUEmbeddingV2`` assumes when the chip does not say.
ASSUMED_SPARSE_CORES_PER_CHIP = 4
#: ``SparseCoreEmbeddingConfig.max_ids_per_chip_per_sample`` (TensorFlow 2.21's default).
DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE = 64
#: A SparseCore's run of ids to one partition starts at a multiple of this many entries.
COO_ALIGNMENT = 8
#: With minibatching, jax-tpu-embedding's buffers and row pointers have room for this many.
MAX_MINIBATCHES = 64


def theoretical_coo_buffer(max_ids_per_partition: int, sparse_cores_per_device: int,
                           num_sparse_cores: int, *, minibatching: bool = False) -> int:
    """jax-tpu-embedding's theoretical COO buffer of a device, in entries:
    roundup8(``max_ids_per_partition``) x S x N (every SparseCore of the device sending a full,
    aligned run to each of the N partitions), x 64 with minibatching."""
    aligned = -(-max_ids_per_partition // COO_ALIGNMENT) * COO_ALIGNMENT
    return aligned * sparse_cores_per_device * num_sparse_cores * \
        (MAX_MINIBATCHES if minibatching else 1)
