"""The TensorFlow versions whose SparseCore stacking tpuemb models: one record per version.

This is the only home of what differs between them; the stacker
(``sparsecore.stacker.SparseCoreLayoutStacker(..., tf_version=...)``), the way
``TPUEmbeddingV2`` feeds it (``sparsecore.feed``) and the docs read these records. A new
version is one more record (and its stored stacker bytes, ``tests/data/diff/tf_versions/``).

What differs between 2.20 and 2.21, seen by running both versions' binding and feeding code on a
CPU (``tools/tf_reference/gen_tf_versions.py``; docs/sparsecore.md "TensorFlow 2.20 and 2.21"):

- **The binding.** 2.20's ``SparseCoreLayoutStacker.AddTable`` takes ``table_name,
  table_height, table_width, group, output_samples``; 2.21's adds ``num_features``
  (``_pywrap_sparse_core_layout.pyi``), and ``TPUEmbeddingV2`` 2.21 counts features per table
  and passes it (``tpu_embedding_v3._stack_tables_with_same_table_dim_and_optimizer``).
- **The layouts.** 2.20's ``GetLayouts`` never writes ``per_sparse_core_batch_size`` (field 10)
  nor ``num_features`` (field 11), though its proto declares both; 2.21 writes the table's
  ``output_samples / sparse_cores_per_partition`` and ``num_features``. Which tables share a
  stack, their padded shapes, row offsets, rotations and the limits are the same in both (the
  300 recorded stacker cases and 33 ``TPUEmbeddingV2`` feeds: equal once fields 10 and 11 are
  cleared). With the first-feature bug both versions share, only the table of the first
  feature (flattened order) is told its samples, so 2.21's layouts differ from 2.20's in that
  one table's fields 10 and 11 - enough for 2.21's checkpoint adapter
  (``TpuEmbeddingV3CheckpointAdapter.is_layouts_same``, a ``ProtoEq`` of every layout) to take a
  2.20 checkpoint's layouts as different and reshard it.
- 2.21's proto also declares ``fdo_key`` (field 12); neither version's stacker writes it.

Pure standard library; imports nothing from the package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_TF_VERSION",
    "TENSORFLOW_VERSIONS",
    "TensorFlowVersion",
    "tensorflow_version",
    "tf_version_names",
]


@dataclass(frozen=True)
class TensorFlowVersion:
    """One TensorFlow release (``major.minor``), as far as SparseCore stacking goes.

    ``add_table_num_features``: ``SparseCoreLayoutStacker.AddTable`` takes ``num_features``
    (and ``TPUEmbeddingV2`` passes its count of the table's features).
    ``layout_batch_fields``: ``GetLayouts`` writes ``per_sparse_core_batch_size`` and
    ``num_features`` (fields 10 and 11 of ``SparseCoreTableLayout``).
    """

    name: str
    add_table_num_features: bool
    layout_batch_fields: bool
    note: str = ""


#: Every TensorFlow version tpuemb models, oldest first.
TENSORFLOW_VERSIONS: tuple[TensorFlowVersion, ...] = (
    TensorFlowVersion("2.20", add_table_num_features=False, layout_batch_fields=False,
                      note="AddTable(table_name, table_height, table_width, group, "
                           "output_samples); the layouts carry no batch size nor feature count"),
    TensorFlowVersion("2.21", add_table_num_features=True, layout_batch_fields=True,
                      note="AddTable(..., output_samples, num_features); the layouts carry "
                           "per_sparse_core_batch_size and num_features"),
)

#: The version tpuemb models unless told otherwise.
DEFAULT_TF_VERSION = "2.21"

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.\d+)?\s*$")


def tf_version_names() -> tuple[str, ...]:
    """``("2.20", "2.21")``: what ``tf_version`` arguments and ``--tf-version`` accept."""
    return tuple(v.name for v in TENSORFLOW_VERSIONS)


def tensorflow_version(name: str) -> TensorFlowVersion:
    """The record of ``name`` (``"2.21"``; a patch release such as ``"2.21.0"`` is its minor
    version's); ValueError naming the known versions otherwise."""
    match = _VERSION.match(name) if isinstance(name, str) else None
    if match is not None:
        key = f"{match.group(1)}.{match.group(2)}"
        for version in TENSORFLOW_VERSIONS:
            if version.name == key:
                return version
    raise ValueError(f"TensorFlow version {name!r} is not modelled: tpuemb knows "
                     f"{', '.join(tf_version_names())} (major.minor, e.g. "
                     f"tf_version={DEFAULT_TF_VERSION!r})")
