"""jax-tpu-embedding 0.2.0's stacking rules on a plain :class:`SparseCoreConfig`.

With N = global devices x SparseCores per device (``topology.chips`` x
``topology.sparse_cores_per_chip``):

- a table's width is padded to a multiple of 8 and its vocabulary to a multiple of 8N;
- tables are taken in the order their features first use them (``config.features`` is the
  features' flattened order; a table no feature uses is not stacked: jax-tpu-embedding only
  sees tables through features) and grouped by (padded width, ``optimizer.group``, combiner,
  quantization), groups in order of their first table;
- a table's activation bytes are ``4 x padded width x sum over its features of (samples // N)``
  (samples = product of ``output_shape[:-1]``): divided by the *global* SparseCore count, floored
  per feature;
- within a group, a table joins the first stack whose bytes plus its own stay ``<=``
  ``config.activation_mem_bytes_limit`` (default 2 MiB), else it opens a stack; there is no shard
  or row limit;
- a stack is named by its tables joined with ``_``; with ``use_short_stack_names`` a name longer
  than 50 characters is cut to 50, then ``...`` and the first 12 hex digits of its sha256;
- table k of a stack starts at row ``sum of earlier padded vocabularies / N`` of every shard,
  rotated by ``k x sparse_cores_per_chip mod N``; each feature of the stack starts at sample
  ``sum of samples of the stack's earlier features`` (flattened order), with ``col_offset`` =
  its table's row offset x N and ``col_shift`` = its table's rotation;
- a one-table stack keeps its table's limits; a stack of several takes
  ``config.stack_to_max_*(stack_name, total_sample_count)`` (default 256); the table's
  ``suggested_coo_buffer_size_per_device`` is never carried over. With
  ``config.stack_limits_from_tables`` (keras-rs on JAX, which then calls
  ``update_preprocessing_parameters``) every stack takes the largest of its tables' own limits.

With ``config.disable_table_stacking`` the rules are ``prepare_feature_specs_for_training``'s
instead: every table is its own stack, rotation 0, its features offset in *feature-name* order,
and the table's suggested buffer size kept.

Stacks come out in the order the features first reach them (jax-tpu-embedding's
``get_stacked_table_specs``), features in ``config.features`` order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tpuemb_cfg.base.platform import jax_sparse_core_counts
from tpuemb_cfg.sparsecore._args import check_config_type, found
from tpuemb_cfg.sparsecore.checks import call_limit, check_config
from tpuemb_cfg.sparsecore.config import SparseCoreConfig, SparseCoreFeature, SparseCoreTable
from tpuemb_cfg.sparsecore.jte.specs import DEFAULT_ACTIVATION_MEM_BYTES_LIMIT, DEFAULT_LIMIT
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking
from tpuemb_cfg.sparsecore.topology import sparse_cores_per_device_text

__all__ = ["check_devices", "round_up", "stack_config", "stack_name"]

#: SparseCores per device jax-tpu-embedding accepts (its ``NUM_SC_PER_DEVICE_MAP`` values: the
#: platform table's chips with SparseCores).
SPARSE_CORE_COUNTS = jax_sparse_core_counts()
_NAME_KEEP = 50
_HASH_DIGITS = 12


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` not below ``value``."""
    return -(-value // multiple) * multiple


def _iterable(value: Any) -> list[Any]:
    try:
        return list(value)
    except TypeError:
        return [None]


def stack_name(tables: Sequence[str], *, short: bool = True) -> str:
    """Tables joined with ``_``; if ``short`` and longer than 50 characters, the first 50, then
    ``...`` and 12 hex digits of the full name's sha256 (the name stays unique and readable)."""
    if isinstance(tables, str) or not all(isinstance(t, str) for t in _iterable(tables)):
        raise TypeError(f"stack_name(): tables must be a sequence of table names (str), got "
                        f"{found(tables)}")
    name = "_".join(tables)
    if not short or len(name) <= _NAME_KEEP:
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:_HASH_DIGITS]
    return f"{name[:_NAME_KEEP]}...{digest}"


def check_devices(global_devices: int, sparse_cores_per_device: int) -> None:
    """ValueError unless jax-tpu-embedding could stack for these counts (it needs at least one
    device, where 0 fails with a ZeroDivisionError, and 2 or 4 SparseCores per device)."""
    if isinstance(global_devices, bool) or not isinstance(global_devices, int) \
            or global_devices < 1:
        got = repr(global_devices) if isinstance(global_devices, int | str) \
            else found(global_devices)
        raise ValueError(f"global_device_count must be a positive integer, got "
                         f"{got}: pass the number of chips (mesh.size)")
    cores = sparse_cores_per_device
    if isinstance(cores, bool) or not isinstance(cores, int) or cores not in SPARSE_CORE_COUNTS:
        shown = repr(cores) if isinstance(cores, int | str) else found(cores)
        raise ValueError(f"Invalid num_sc_per_device: {shown}; "
                         "jax-tpu-embedding accepts "
                         f"{' or '.join(str(n) for n in SPARSE_CORE_COUNTS)} "
                         f"({sparse_cores_per_device_text()})")


@dataclass(frozen=True)
class _Plan:
    """The stacks the rules chose (table names), before they become records."""

    groups: list[list[str]]  # table names per stack, in stack order
    group_keys: dict[str, str]  # table -> readable group key


def _tables_in_use(config: SparseCoreConfig) -> dict[str, SparseCoreTable]:
    """Tables by name in order of first use by the features (a later record of the same name
    wins, as the reference's dict by name does); ValueError for a feature's unknown table."""
    by_name: dict[str, SparseCoreTable] = {}
    for t in config.tables:
        by_name[t.name] = t
    used: dict[str, SparseCoreTable] = {}
    for f in config.features:
        if f.table not in by_name:
            raise ValueError(f"feature {f.name!r} uses table {f.table!r}, which the "
                             f"configuration does not define (tables: {sorted(by_name)})")
        used.setdefault(f.table, by_name[f.table])
    return used


def _group_key(t: SparseCoreTable) -> str:
    """(padded width, optimizer, combiner, quantization) as one readable string. The optimizer
    is its ``group`` (equality key); a configuration without one compares algorithm and
    hyper-parameters."""
    opt = t.optimizer
    key = opt.group or (f"{opt.algorithm}(learning_rate={opt.learning_rate!r}"
                        + "".join(f", {k}={v!r}" for k, v in opt.hyper.items()) + ")")
    quant = t.quantization if t.quantization is not None else "no quantization"
    return f"dim {round_up(t.dim, 8)}, {key}, {t.combiner}, {quant}"


def _auto_plan(config: SparseCoreConfig, tables: dict[str, SparseCoreTable], n: int) -> _Plan:
    keys = {name: _group_key(t) for name, t in tables.items()}
    groups: dict[str, list[str]] = {}
    for name in tables:
        groups.setdefault(keys[name], []).append(name)
    samples = dict.fromkeys(tables, 0)
    for f in config.features:
        samples[f.table] += f.samples // n
    act = {name: 4 * round_up(t.dim, 8) * samples[name] for name, t in tables.items()}
    limit = config.activation_mem_bytes_limit
    if limit is None:
        limit = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT
    stacks: list[list[str]] = []
    for members in groups.values():
        split: list[list[str]] = []
        for name in members:
            for stack in split:
                if sum(act[m] for m in stack) + act[name] <= limit:
                    stack.append(name)
                    break
            else:
                split.append([name])
        stacks.extend(split)
    return _Plan(stacks, keys)


def _limits(config: SparseCoreConfig, table: SparseCoreTable | None, name: str,
            samples: int) -> tuple[int, int]:
    """(max ids, max unique ids) of a stack: the callables are called for every stack, as the
    reference does, but only a stack of several tables (``table`` None) takes their values."""
    def call(setting: str) -> int:
        fn: Callable[[str, int], int] | None = getattr(config, setting)
        if fn is None:
            return DEFAULT_LIMIT
        return call_limit(setting, fn, name, samples, config.setting_origins.get(setting))

    ids = call("stack_to_max_ids_per_partition")
    unique = call("stack_to_max_unique_ids_per_partition")
    if table is None:
        return ids, unique
    return (_own(table.max_ids_per_partition), _own(table.max_unique_ids_per_partition))


def _own(limit: int | None) -> int:
    return DEFAULT_LIMIT if limit is None else limit


def _build_stack(config: SparseCoreConfig, tables: dict[str, SparseCoreTable],
                 members: list[str], group: str, *,
                 prepare: bool) -> tuple[Stack, list[tuple[int, int]]]:
    """One stack, and (position in ``config.features``, sample offset) of each of its features."""
    topo = config.topology
    n = topo.num_sparse_cores
    name = members[0] if prepare else stack_name(members, short=config.use_short_stack_names)
    feats = [(i, f) for i, f in enumerate(config.features) if f.table in members]
    if prepare:  # prepare_feature_specs_for_training offsets a table's features by name
        feats.sort(key=lambda item: item[1].name)
    offsets: list[tuple[int, int]] = []
    total = 0
    for i, f in feats:
        offsets.append((i, total))
        total += f.samples
    stacked: list[StackedTable] = []
    row = 0
    for k, tname in enumerate(members):
        t = tables[tname]
        padded = round_up(t.vocabulary_size, 8 * n)
        mine = [f for _, f in feats if f.table == tname]
        stacked.append(StackedTable(
            name=tname, vocabulary_size=t.vocabulary_size, dim=t.dim,
            padded_vocabulary_size=padded, padded_dim=round_up(t.dim, 8), row_offset_in_shard=row,
            shard_rotation=(k * topo.sparse_cores_per_device) % n,
            output_samples=sum(f.samples for f in mine), num_features=len(mine)))
        row += padded // n
    first = tables[members[0]]
    if prepare:
        ids, unique = _own(first.max_ids_per_partition), _own(first.max_unique_ids_per_partition)
    else:
        ids, unique = _limits(config, first if len(members) == 1 else None, name, total)
    if config.stack_limits_from_tables:  # keras-rs on JAX: the largest of its tables' own
        ids = max(_own(tables[m].max_ids_per_partition) for m in members)
        unique = max(_own(tables[m].max_unique_ids_per_partition) for m in members)
    stack = Stack(
        name=name, tables=tuple(stacked), group=group, combiner=first.combiner,
        total_sample_count=total, max_ids_per_partition=ids, max_unique_ids_per_partition=unique,
        suggested_coo_buffer_size_per_device=(
            first.suggested_coo_buffer_size_per_device if prepare else None))
    return stack, offsets


def stack_config(config: SparseCoreConfig) -> Stacking:
    """The stacks jax-tpu-embedding 0.2.0 makes of ``config`` (see the module docstring):
    ``auto_stack_tables`` then ``prepare_feature_specs_for_training``, or the latter alone when
    ``config.disable_table_stacking``. ValueError for device counts the reference refuses;
    ``config`` is checked first: its type (``_args.check_config_type``), then its values
    (``checks.check_config``)."""
    check_config_type("stack_config", config)
    config = check_config(config)
    topo = config.topology
    check_devices(topo.devices, topo.sparse_cores_per_device)
    n = topo.num_sparse_cores
    tables = _tables_in_use(config)
    prepare = config.disable_table_stacking
    if prepare:
        plan = _Plan([[name] for name in tables], {k: _group_key(t) for k, t in tables.items()})
    else:
        plan = _auto_plan(config, tables, n)
    stacks: list[Stack] = []
    stack_of: dict[str, int] = {}
    # Sample offsets are looked up by feature name, as the reference does (a repeated name takes
    # the later offset): per stack when auto-stacking, across all tables when preparing.
    offset_of: dict[tuple[str, str], int] = {}
    for members in plan.groups:
        stack, offsets = _build_stack(config, tables, members, plan.group_keys[members[0]],
                                      prepare=prepare)
        scope = "" if prepare else stack.name
        for i, offset in offsets:
            offset_of[scope, config.features[i].name] = offset
        for t in members:
            stack_of[t] = len(stacks)
        stacks.append(stack)
    slots = []
    first_use: list[int] = []
    for f in config.features:
        stack = stacks[stack_of[f.table]]
        offset = offset_of["" if prepare else stack.name, f.name]
        slots.append(_slot(f, stack, offset, n))
        if stack_of[f.table] not in first_use:
            first_use.append(stack_of[f.table])
    return Stacking(mode="jax", num_partitions=topo.devices,
                    sparse_cores_per_partition=topo.sparse_cores_per_device,
                    stacks=tuple(stacks[k] for k in first_use), features=tuple(slots))


def _slot(f: SparseCoreFeature, stack: Stack, offset: int, n: int) -> FeatureSlot:
    table = next(t for t in stack.tables if t.name == f.table)
    return FeatureSlot(name=f.name, table=f.table, stack=stack.name, row_offset=offset,
                       col_offset=table.row_offset_in_shard * n, col_shift=table.shard_rotation,
                       samples=f.samples)
