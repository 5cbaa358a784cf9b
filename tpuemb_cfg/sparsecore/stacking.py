"""What stacking produced, in one shape for both references.

TensorFlow's ``SparseCoreLayoutStacker`` (``stacker.py``) and jax-tpu-embedding's
``auto_stack_tables`` / ``prepare_feature_specs_for_training`` (``jte.py``) decide differently
(docs/sparsecore.md lists each difference) but describe the same thing: stacks of tables, each
table at a row offset and a rotation within its stack, and each feature at a sample offset and
column offset/shift. :class:`Stacking` is that description; preprocessing, the rules, ``inspect``,
``simulate`` and ``plan`` read it and nothing else.

Numbers follow jax-tpu-embedding's names where both have one (``row_offset_in_shard``,
``shard_rotation``, ``col_offset``, ``col_shift``); TensorFlow's proto names are given beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FeatureSlot", "Mode", "Stack", "StackedTable", "Stacking"]

#: Which reference's rules made (or will make) the stacks.
Mode = Literal["tensorflow", "jax"]


@dataclass(frozen=True)
class StackedTable:
    """One table inside a stack."""

    name: str
    vocabulary_size: int  # TF unsharded_shape[0]
    dim: int  # TF unsharded_shape[1]
    padded_vocabulary_size: int  # multiple of 8 x N; TF unsharded_padded_shape[0]
    padded_dim: int  # multiple of 8; TF unsharded_padded_shape[1]
    row_offset_in_shard: int  # TF sparse_core_shard_row_offset
    shard_rotation: int  # TF sparse_core_shard_rotation
    output_samples: int = 0  # what the stacker was told (TF AddTable output_samples)
    num_features: int = 0  # what the stacker was told (TF AddTable num_features)


@dataclass(frozen=True)
class Stack:
    """A stacked table: what the SparseCores hold and the limits preprocessing applies to it."""

    name: str
    tables: tuple[StackedTable, ...]
    group: str  # TF: the group string; jax: a readable key of (dim, optimizer, combiner, quant.)
    combiner: str  # "sum" | "mean" | "sqrtn"
    total_sample_count: int  # samples of all features of the stack per step (per device)
    max_ids_per_partition: int
    max_unique_ids_per_partition: int
    suggested_coo_buffer_size_per_device: int | None = None

    @property
    def padded_dim(self) -> int:
        return self.tables[0].padded_dim

    @property
    def padded_vocabulary_size(self) -> int:
        """Rows of the stacked table (TF: total_rows_per_sparse_core_shard x N)."""
        return sum(t.padded_vocabulary_size for t in self.tables)

    @property
    def unpadded_elements(self) -> int:
        return sum(t.vocabulary_size * t.dim for t in self.tables)


@dataclass(frozen=True)
class FeatureSlot:
    """A feature's place in its stack (jax-tpu-embedding's ``FeatureIdTransformation``)."""

    name: str
    table: str
    stack: str
    row_offset: int  # sample offset of the feature within the stack's batch
    col_offset: int  # row_offset_in_shard x N of its table
    col_shift: int  # its table's shard_rotation
    #: product of output_shape[:-1]: rows per step, per replica (tensorflow) or global (jax: its
    #: FeatureSpec.output_shape is the global batch); preprocessing reads the batch itself
    samples: int


@dataclass(frozen=True)
class Stacking:
    """Stacks in output order, and every feature's slot."""

    mode: Mode
    num_partitions: int  # chips (TF) / global devices (jax)
    sparse_cores_per_partition: int
    stacks: tuple[Stack, ...]
    features: tuple[FeatureSlot, ...]

    @property
    def num_sparse_cores(self) -> int:
        """N, the SparseCores every stacked table is spread over."""
        return self.num_partitions * self.sparse_cores_per_partition

    def stack(self, name: str) -> Stack:
        for s in self.stacks:
            if s.name == name:
                return s
        raise KeyError(name)

    def stack_of_table(self, table: str) -> Stack:
        for s in self.stacks:
            if any(t.name == table for t in s.tables):
                return s
        raise KeyError(table)

    def features_of(self, stack: str) -> tuple[FeatureSlot, ...]:
        """The stack's features in ``row_offset`` order (the order preprocessing takes them)."""
        return tuple(sorted((f for f in self.features if f.stack == stack),
                            key=lambda f: f.row_offset))
