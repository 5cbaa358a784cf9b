"""How TensorFlow's ``TPUEmbeddingV2`` feeds its stacker, and :func:`stack`: the one entry
point from a :class:`SparseCoreConfig` to its :class:`Stacking`, in either mode.

TensorFlow (``tpu_embedding_v3._stack_tables_with_same_table_dim_and_optimizer``, 2.21, and 2.20
where ``tf_version="2.20"``: the same but for ``num_features``, see
``tpuemb_cfg.base.tf_versions``):

1. the tables are those some feature uses, **sorted by name** (Python string order);
2. each is added with ``table_height = vocabulary_size``, ``table_width = dim`` and the group
   string of its optimizer and quantization (``table.optimizer.group``, which the API conversion
   computes as TensorFlow does: ``"_xxtpuv3internal_" + sha1(...)``);
3. **the first-feature bug** (2.20 and 2.21): the loop that counts samples per table encloses
   the whole function and returns in its first iteration, so only the first feature in flattened
   order is counted. Its table gets ``output_samples`` = the feature's samples (the product of
   its output shape) and (2.21) ``num_features = 1``; every other table gets 0 and 0 (no
   activation bytes, so the activation limit never keeps them apart). 2.20's ``AddTable`` has
   no ``num_features``;
4. after ``GetLayouts`` the sample counts are computed correctly over **all** features:
   per stack, each feature (in flattened order) starts at the running sum of the samples of the
   features before it in that stack (``feature_to_sample_offset``), and the total is the stack's
   ``table_to_sample_count``;
5. a stack's limits come from ``max_ids_per_table`` / ``max_unique_ids_per_table`` looked up by the
   **stacked** name, 256 when absent (``TPUEmbeddingV2.DEFAULT_MAX_IDS_PER_TABLE``).

``config.features`` must be in TensorFlow's flattened order (``nest.flatten`` of the feature
structure: dict keys sorted), as the API conversion gives them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuemb_cfg.base.sparsecore_defaults import (
    DEFAULT_MAX_IDS_PER_PARTITION,
    DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION,
)
from tpuemb_cfg.base.tf_versions import DEFAULT_TF_VERSION, tensorflow_version
from tpuemb_cfg.sparsecore import jte
from tpuemb_cfg.sparsecore._args import check_config_type, found
from tpuemb_cfg.sparsecore.checks import check_config
from tpuemb_cfg.sparsecore.config import SparseCoreConfig, SparseCoreTable
from tpuemb_cfg.sparsecore.stacker import SparseCoreLayoutStacker
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking

if TYPE_CHECKING:
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

__all__ = [
    "DEFAULT_MAX_IDS_PER_TABLE",
    "DEFAULT_MAX_UNIQUE_IDS_PER_TABLE",
    "AddTableCall",
    "layouts_to_stacks",
    "stack",
    "tensorflow_layouts",
    "tensorflow_stacker",
    "tensorflow_stacker_calls",
]

#: ``TPUEmbeddingV2.DEFAULT_MAX_IDS_PER_TABLE``: a stack missing from ``max_ids_per_table``.
DEFAULT_MAX_IDS_PER_TABLE = DEFAULT_MAX_IDS_PER_PARTITION
#: ``TPUEmbeddingV2.DEFAULT_MAX_UNIQUE_IDS_PER_TABLE``.
DEFAULT_MAX_UNIQUE_IDS_PER_TABLE = DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION


@dataclass(frozen=True)
class AddTableCall:
    """The arguments of one ``SparseCoreLayoutStacker.AddTable`` call, by TensorFlow's names
    (``num_features`` None: not passed, TensorFlow 2.20)."""

    table_name: str
    table_height: int
    table_width: int
    group: str
    output_samples: int
    num_features: int | None


def _used_tables(config: SparseCoreConfig) -> dict[str, SparseCoreTable]:
    """The tables some feature uses, by name (``TPUEmbeddingBase`` drops the others); a feature
    naming no table, or two tables of one name, is a ValueError (TensorFlow refuses both)."""
    by_name: dict[str, SparseCoreTable] = {}
    for table in config.tables:
        if table.name in by_name:
            raise ValueError(f"two tables are named {table.name!r}: TensorFlow refuses duplicate "
                             f"table names; rename one")
        by_name[table.name] = table
    used: dict[str, SparseCoreTable] = {}
    for feature in config.features:
        if feature.table not in by_name:
            raise ValueError(f"feature {feature.name!r} uses table {feature.table!r}, which the "
                             f"configuration does not define; known tables: "
                             f"{sorted(by_name)}")
        used.setdefault(feature.table, by_name[feature.table])
    return used


def tensorflow_stacker_calls(config: SparseCoreConfig, *,
                             tf_version: str = DEFAULT_TF_VERSION) -> list[AddTableCall]:
    """The ``AddTable`` calls ``TPUEmbeddingV2`` makes for ``config``, in order (tables sorted by
    name; only the first feature counted: the first-feature bug; ``num_features`` from 2.21 on).
    No features: no calls (TensorFlow's loop does not run)."""
    check_config_type("tensorflow_stacker_calls", config)
    passes_features = tensorflow_version(tf_version).add_table_num_features
    tables = _used_tables(config)
    if not config.features:
        return []
    first = config.features[0]
    calls = []
    for name in sorted(tables):
        table = tables[name]
        counted = name == first.table
        calls.append(AddTableCall(
            table_name=name, table_height=table.vocabulary_size, table_width=table.dim,
            group=table.optimizer.group, output_samples=first.samples if counted else 0,
            num_features=(1 if counted else 0) if passes_features else None))
    return calls


def tensorflow_stacker(config: SparseCoreConfig, *,
                       tf_version: str = DEFAULT_TF_VERSION) -> SparseCoreLayoutStacker:
    """TensorFlow's stacker for ``config`` (of ``tf_version``): one partition per chip, the
    chip's SparseCores, ``disable_table_stacking`` from the configuration, TensorFlow's default
    limits (``TPUEmbeddingV2`` never calls a ``Set*`` method), and every
    :func:`tensorflow_stacker_calls` call made."""
    check_config_type("tensorflow_stacker", config)
    stacker = SparseCoreLayoutStacker(
        num_partitions=config.topology.num_partitions,
        disable_table_stacking=config.disable_table_stacking,
        sparse_cores_per_partition=config.topology.sparse_cores_per_device,
        tf_version=tf_version)
    for call in tensorflow_stacker_calls(config, tf_version=tf_version):
        stacker.AddTable(call.table_name, call.table_height, call.table_width, call.group,
                         call.output_samples, call.num_features)
    return stacker


def tensorflow_layouts(config: SparseCoreConfig, *,
                       tf_version: str = DEFAULT_TF_VERSION) -> SparseCoreTableLayouts:
    """What ``GetLayouts()`` returns inside ``TPUEmbeddingV2`` of ``tf_version`` (default 2.21;
    ``tpuemb_cfg.base.tf_versions``) for ``config``."""
    check_config_type("tensorflow_layouts", config)
    return tensorflow_stacker(config, tf_version=tf_version).GetLayouts()


def _limit(limits: Mapping[str, int] | None, stack_name: str, default: int) -> int:
    """TensorFlow's lookup by stacked name (``_update_sparse_core_buffer_size_after_table_
    stacking``): a missing mapping or key gives the default."""
    if limits is None or stack_name not in limits:
        return default
    return limits[stack_name]


def _sample_offsets(config: SparseCoreConfig,
                    stack_of: Mapping[str, str]) -> tuple[dict[str, int], list[int]]:
    """(stack -> samples per step, each feature's offset in its stack): every feature in
    flattened order, after ``GetLayouts`` (this part of TensorFlow counts all features)."""
    totals: dict[str, int] = {}
    offsets = []
    for feature in config.features:
        name = stack_of[feature.table]
        offsets.append(totals.get(name, 0))
        totals[name] = totals.get(name, 0) + feature.samples
    return totals, offsets


def layouts_to_stacks(layouts: SparseCoreTableLayouts, config: SparseCoreConfig, *,
                      tf_version: str = DEFAULT_TF_VERSION) -> tuple[Stack, ...]:
    """The stacks of ``layouts`` (TensorFlow's stacker output for ``config``) in output order:
    tables with their offsets and rotations, the group string and ``AddTable`` counts of the
    calls ``tf_version`` makes (``num_features`` 0 where 2.20 passes none), the combiner of the
    stack's first table, the samples of all its features, and the limits looked up by stacked
    name (default 256)."""
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts as Layouts

    if not isinstance(layouts, Layouts):
        raise TypeError(f"layouts_to_stacks(): layouts must be a SparseCoreTableLayouts "
                        f"(tensorflow_layouts(config)), got {found(layouts)}")
    check_config_type("layouts_to_stacks", config)
    tables = _used_tables(config)
    calls = {c.table_name: c for c in tensorflow_stacker_calls(config, tf_version=tf_version)}
    members: dict[str, list[StackedTable]] = {}
    stack_of: dict[str, str] = {}
    for layout in layouts.tables:
        if layout.table_name not in tables:
            raise ValueError(f"the layouts place table {layout.table_name!r}, which no feature "
                             f"of the configuration uses; known tables: {sorted(tables)}")
        call = calls.get(layout.table_name)
        members.setdefault(layout.stacked_table_name, []).append(StackedTable(
            name=layout.table_name,
            vocabulary_size=layout.unsharded_shape[0], dim=layout.unsharded_shape[1],
            padded_vocabulary_size=layout.unsharded_padded_shape[0],
            padded_dim=layout.unsharded_padded_shape[1],
            row_offset_in_shard=layout.sparse_core_shard_row_offset,
            shard_rotation=layout.sparse_core_shard_rotation,
            output_samples=call.output_samples if call else 0,
            num_features=(call.num_features or 0) if call else layout.num_features))
        stack_of[layout.table_name] = layout.stacked_table_name
    totals, _ = _sample_offsets(config, stack_of)
    stacks = []
    for name, stacked in members.items():
        first = stacked[0].name
        stacks.append(Stack(
            name=name, tables=tuple(stacked),
            group=calls[first].group if first in calls else tables[first].optimizer.group,
            combiner=tables[first].combiner,
            total_sample_count=totals.get(name, 0),
            max_ids_per_partition=_limit(config.max_ids_per_table, name,
                                         DEFAULT_MAX_IDS_PER_TABLE),
            max_unique_ids_per_partition=_limit(config.max_unique_ids_per_table, name,
                                                DEFAULT_MAX_UNIQUE_IDS_PER_TABLE)))
    return tuple(stacks)


def _tensorflow_stacking(config: SparseCoreConfig, tf_version: str) -> Stacking:
    stacks = layouts_to_stacks(tensorflow_layouts(config, tf_version=tf_version), config,
                               tf_version=tf_version)
    placed = {t.name: (s.name, t) for s in stacks for t in s.tables}
    _, offsets = _sample_offsets(config, {name: s for name, (s, _) in placed.items()})
    cores = config.topology.num_sparse_cores
    features = []
    for i, feature in enumerate(config.features):
        stack_name, table = placed[feature.table]
        features.append(FeatureSlot(
            name=feature.name, table=feature.table, stack=stack_name, row_offset=offsets[i],
            col_offset=table.row_offset_in_shard * cores, col_shift=table.shard_rotation,
            samples=feature.samples))
    return Stacking(mode="tensorflow", num_partitions=config.topology.num_partitions,
                    sparse_cores_per_partition=config.topology.sparse_cores_per_device,
                    stacks=stacks, features=tuple(features))


def stack(config: SparseCoreConfig, *, tf_version: str = DEFAULT_TF_VERSION) -> Stacking:
    """``config``'s stacks: TensorFlow's (``mode="tensorflow"``: the stacker of ``tf_version``,
    ``"2.21"`` by default or ``"2.20"``, fed as that version's ``TPUEmbeddingV2`` feeds it) or
    jax-tpu-embedding 0.2.0's (``mode="jax"``: ``tpuemb_cfg.sparsecore.jte.stack_config``;
    ``tf_version`` is checked but changes nothing). ``config`` is checked first: its type
    (``_args.check_config_type``), then its values (``checks.check_config``: a ValueError or
    TypeError naming the object and the argument). An unknown ``tf_version``: ValueError."""
    check_config_type("stack", config)
    tensorflow_version(tf_version)
    if config.mode == "tensorflow":
        return _tensorflow_stacking(check_config(config), tf_version)
    if config.mode == "jax":
        result: Stacking = jte.stack_config(config)
        return result
    raise ValueError(f"unknown stacking mode {config.mode!r}: expected 'tensorflow' or 'jax'")
