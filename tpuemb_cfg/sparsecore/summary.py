"""What ``tpuemb inspect`` shows of a SparseCore configuration, and the layouts message of a
stacking (what ``tpuemb compile --sparsecore`` writes for jax-tpu-embedding's stacks).

Per stack (N = chips x SparseCores per chip; every stacked table is spread row by row over all N):

- its tables with their padded shapes, row offsets and rotations;
- **padding**: real elements ``sum(vocabulary x dim)`` against padded elements
  ``padded rows x padded width`` (rows rounded up to a multiple of 8N, width to a multiple of 8),
  and the waste ``(padded - real) / padded`` in percent;
- **memory**: rows per SparseCore ``padded rows / N``, and bytes per SparseCore
  ``rows x padded width x 4 x (1 + slots)`` (float32; the optimizer's slots are variables of the
  stacked table's shape, counted from :mod:`tpuemb_cfg.algorithms`); per chip that times the
  SparseCores per chip;
- **limits**: ``max_ids_per_partition`` / ``max_unique_ids_per_partition`` and where each came
  from (the spec line of the setting or table that gave it, or the default that applied).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpuemb_cfg.algorithms import slot_names
from tpuemb_cfg.base.errors import printable, printable_values
from tpuemb_cfg.base.sparsecore_defaults import DEFAULT_MAX_IDS_PER_PARTITION
from tpuemb_cfg.base.tf_versions import DEFAULT_TF_VERSION
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.sparsecore import feed
from tpuemb_cfg.sparsecore.checks import check_layouts
from tpuemb_cfg.sparsecore.config import Origin, SparseCoreConfig
from tpuemb_cfg.sparsecore.feed import tensorflow_layouts
from tpuemb_cfg.sparsecore.stacking import Stack, Stacking

if TYPE_CHECKING:
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

__all__ = ["format_sparsecore_summary", "layouts_from_stacking", "layouts_of",
           "stack_bytes_per_sparse_core", "stack_optimizer", "summarize_layouts",
           "summarize_sparsecore"]

#: float32 parameters and slots.
BYTES_PER_ELEMENT = 4
#: What TensorFlow and jax-tpu-embedding use for a stack without a limit of its own.
DEFAULT_LIMIT = DEFAULT_MAX_IDS_PER_PARTITION


def layouts_from_stacking(stacking: Stacking) -> SparseCoreTableLayouts:
    """``stacking`` as TensorFlow's ``SparseCoreTableLayouts``: one ``SparseCoreTableLayout`` per
    table, stacks in ``stacking`` order, tables in stack order. ``num_partitions`` is the chips
    (jax-tpu-embedding: global devices), ``total_rows_per_sparse_core_shard`` the stack's padded
    rows / N, ``per_sparse_core_batch_size`` the table's ``output_samples`` / SparseCores per
    partition (integer division), ``num_features`` the table's; zeros are not written (proto3)."""
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

    layouts = SparseCoreTableLayouts()
    cores = stacking.num_sparse_cores
    for stack in stacking.stacks:
        rows = stack.padded_vocabulary_size // cores
        for table in stack.tables:
            layout = layouts.tables.add()
            layout.table_name = table.name
            layout.stacked_table_name = stack.name
            layout.num_sparse_cores = cores
            layout.num_partitions = stacking.num_partitions
            layout.total_rows_per_sparse_core_shard = rows
            layout.unsharded_shape.extend([table.vocabulary_size, table.dim])
            layout.unsharded_padded_shape.extend([table.padded_vocabulary_size, table.padded_dim])
            layout.sparse_core_shard_row_offset = table.row_offset_in_shard
            layout.sparse_core_shard_rotation = table.shard_rotation
            layout.per_sparse_core_batch_size = (table.output_samples
                                                 // stacking.sparse_cores_per_partition)
            layout.num_features = table.num_features
    return layouts


def layouts_of(config: SparseCoreConfig, *, tf_version: str = DEFAULT_TF_VERSION
               ) -> tuple[SparseCoreTableLayouts, Stacking]:
    """``config``'s layouts and stacking: TensorFlow's stacker output as ``TPUEmbeddingV2`` of
    ``tf_version`` (``"2.21"`` by default, or ``"2.20"``: ``tpuemb_cfg.base.tf_versions``) feeds
    it (``mode="tensorflow"``), or jax-tpu-embedding's stacks written as layouts
    (:func:`layouts_from_stacking`; ``tf_version`` changes nothing there)."""
    stacking = feed.stack(config, tf_version=tf_version)
    if config.mode == "tensorflow":
        return tensorflow_layouts(config, tf_version=tf_version), stacking
    return layouts_from_stacking(stacking), stacking


def _where(origin: Origin | None) -> int | None:
    return origin.line if origin is not None else None


def _tensorflow_limit(config: SparseCoreConfig, stack: Stack, setting: str
                      ) -> dict[str, Any]:
    """Where a TensorFlow stack's limit came from: its stacked name in ``max_ids_per_table`` /
    ``max_unique_ids_per_table``, else the default (keras-rs: its tables' own limits dropped)."""
    limits = getattr(config, setting)
    origin = config.setting_origins.get(setting)
    value = (stack.max_ids_per_partition if setting == "max_ids_per_table"
             else stack.max_unique_ids_per_partition)
    if limits is not None and stack.name in limits:
        return {"value": value, "source": f"{setting}[{stack.name!r}]", "line": _where(origin)}
    own = "max_ids_per_partition" if setting == "max_ids_per_table" else (
        "max_unique_ids_per_partition")
    dropped = [f"{t.name}={getattr(t, own)}" for t in config.tables
               if any(s.name == t.name for s in stack.tables) and getattr(t, own) is not None]
    if config.limits_dropped_by_conversion and dropped:
        return {"value": value, "source": f"default {DEFAULT_LIMIT}: keras-rs' conversion drops "
                f"the tables' {own}: {', '.join(dropped)}", "line": None}
    reason = f"no key {stack.name!r} in {setting}" if limits is not None else f"no {setting}"
    return {"value": value, "source": f"default {DEFAULT_LIMIT}: {reason}",
            "line": _where(origin) if limits is not None else None}


def _jax_limit(config: SparseCoreConfig, stack: Stack, own: str, callback: str
               ) -> dict[str, Any]:
    """jax-tpu-embedding: a one-table stack keeps its table's limit; a stack of several takes
    the ``stack_to_max_*`` callable's value (default 256)."""
    value = getattr(stack, own)
    if len(stack.tables) == 1:
        table = next((t for t in config.tables if t.name == stack.tables[0].name), None)
        return {"value": value, "source": f"TableSpec {stack.tables[0].name!r} {own}",
                "line": _where(table.origin) if table is not None else None}
    if getattr(config, callback) is not None:
        return {"value": value, "source": f"{callback}({stack.name!r}, "
                f"{stack.total_sample_count})",
                "line": _where(config.setting_origins.get(callback))}
    return {"value": value, "source": f"default {DEFAULT_LIMIT}: a stack of several tables "
            f"ignores their own {own}", "line": None}


def _largest_of_tables(config: SparseCoreConfig, stack: Stack, own: str) -> dict[str, Any]:
    """keras-rs on JAX: the largest of the stack's tables' own limit (the first such table)."""
    value = getattr(stack, own)
    tables = {t.name: t for t in config.tables}
    members = [tables[t.name] for t in stack.tables if t.name in tables]
    table = next((t for t in members if getattr(t, own) == value), None)
    several = " (the largest of the stack's tables', as keras-rs on JAX sets it)" \
        if len(stack.tables) > 1 else ""
    name = table.name if table is not None else stack.tables[0].name
    return {"value": value, "source": f"TableConfig {name!r} {own}{several}",
            "line": _where(table.origin) if table is not None else None}


def _limits(config: SparseCoreConfig, stack: Stack) -> dict[str, Any]:
    if config.stack_limits_from_tables:
        return {own: _largest_of_tables(config, stack, own)
                for own in ("max_ids_per_partition", "max_unique_ids_per_partition")}
    if config.mode == "jax":
        return {
            "max_ids_per_partition": _jax_limit(config, stack, "max_ids_per_partition",
                                                "stack_to_max_ids_per_partition"),
            "max_unique_ids_per_partition": _jax_limit(
                config, stack, "max_unique_ids_per_partition",
                "stack_to_max_unique_ids_per_partition"),
        }
    return {
        "max_ids_per_partition": _tensorflow_limit(config, stack, "max_ids_per_table"),
        "max_unique_ids_per_partition": _tensorflow_limit(config, stack,
                                                          "max_unique_ids_per_table"),
    }


def stack_optimizer(config: SparseCoreConfig, stack: Stack) -> tuple[str | None, int]:
    """The stack's optimizer (its first table's; a stack shares one) and its slot count, from
    :mod:`tpuemb_cfg.algorithms` (``(None, 0)`` when the table is not in ``config``)."""
    first = next((t for t in config.tables if t.name == stack.tables[0].name), None)
    algorithm = first.optimizer.algorithm if first is not None else None
    return algorithm, len(slot_names(algorithm)) if algorithm is not None else 0


def stack_bytes_per_sparse_core(stacking: Stacking, stack: Stack, slots: int) -> int:
    """Bytes of the stack on each SparseCore: ``padded rows / N x padded width x 4 x
    (1 + slots)`` (the table and each slot, float32, padding included). ``tpuemb plan``'s
    memory (``planner.memory``) splits the same bytes into tables, slots and padding."""
    rows = stack.padded_vocabulary_size // stacking.num_sparse_cores
    return rows * stack.padded_dim * BYTES_PER_ELEMENT * (1 + slots)


def _stack_summary(config: SparseCoreConfig, stacking: Stacking, stack: Stack
                   ) -> dict[str, Any]:
    cores = stacking.num_sparse_cores
    algorithm, slots = stack_optimizer(config, stack)
    padded = stack.padded_vocabulary_size * stack.padded_dim
    real = stack.unpadded_elements
    rows = stack.padded_vocabulary_size // cores
    per_core = stack_bytes_per_sparse_core(stacking, stack, slots)
    quantization = {t.name: t.quantization for t in config.tables}
    return {
        "name": stack.name,
        "tables": [{
            "name": t.name, "shape": [t.vocabulary_size, t.dim],
            "padded_shape": [t.padded_vocabulary_size, t.padded_dim],
            "row_offset_in_shard": t.row_offset_in_shard, "shard_rotation": t.shard_rotation,
            "stacker_output_samples": t.output_samples, "stacker_num_features": t.num_features,
            "features": sum(1 for f in config.features if f.table == t.name),
            # the table's quantization config as its API wrote it (None: not quantized)
            "quantization": quantization.get(t.name),
        } for t in stack.tables],
        "padded_shape": [stack.padded_vocabulary_size, stack.padded_dim],
        "group": stack.group,
        "combiner": stack.combiner,
        "optimizer": algorithm,
        "slots": slots,
        "samples_per_step": stack.total_sample_count,
        "elements": real,
        "padded_elements": padded,
        "padding_percent": round(100.0 * (padded - real) / padded, 2) if padded else 0.0,
        "rows_per_sparse_core": rows,
        "bytes_per_sparse_core": per_core,
        "bytes_per_device": per_core * stacking.sparse_cores_per_partition,
        "bytes_per_chip": per_core * config.topology.sparse_cores_per_chip,
        "limits": _limits(config, stack),
    }


def summarize_sparsecore(config: SparseCoreConfig, stacking: Stacking) -> dict[str, Any]:
    """The stacks of ``config`` (stacked as ``stacking``) with their padding, memory and limits,
    and the totals, as JSON-ready data."""
    topology = config.topology
    stacks = [_stack_summary(config, stacking, s) for s in stacking.stacks]
    per_core = sum(s["bytes_per_sparse_core"] for s in stacks)
    per_device = per_core * stacking.sparse_cores_per_partition
    per_chip = per_core * topology.sparse_cores_per_chip
    padded = sum(s["padded_elements"] for s in stacks)
    real = sum(s["elements"] for s in stacks)
    hbm = topology.kind.hbm_bytes if topology.kind is not None else None
    return {
        "api": config.api,
        "mode": config.mode,
        "keras_backend": config.keras_backend,
        "keras_backend_chosen_by": config.keras_backend_chosen_by or None,
        "allow_id_dropping": config.allow_id_dropping,
        "topology": topology.as_json(),
        "slice": topology.describe(),
        "tables": len(config.tables),
        "features": len(config.features),
        "stacks": stacks,
        "elements": real,
        "padded_elements": padded,
        "padding_percent": round(100.0 * (padded - real) / padded, 2) if padded else 0.0,
        "rows_per_sparse_core": sum(s["rows_per_sparse_core"] for s in stacks),
        "bytes_per_sparse_core": per_core,
        "bytes_per_device": per_device,
        "bytes_per_chip": per_chip,
        "hbm_bytes_per_chip": hbm,
        "hbm_percent": round(100.0 * per_chip / hbm, 2) if hbm else None,
    }


def summarize_layouts(layouts: SparseCoreTableLayouts) -> dict[str, Any]:
    """What a layouts file alone tells (``tpuemb inspect LAYOUTS.pbtxt``): the stacks, their
    padding, and the rows and bytes of the tables per SparseCore and per chip. The optimizer,
    combiner, limits and topology kind are not in the file: those entries are ``None`` and the
    bytes count the table without its optimizer's slots. ValueError for a layout that cannot be
    one (``checks.check_layouts``)."""
    check_layouts(layouts)
    stacks: dict[str, list[Any]] = {}
    for layout in layouts.tables:
        stacks.setdefault(layout.stacked_table_name, []).append(layout)
    first = layouts.tables[0] if layouts.tables else None
    cores = first.num_sparse_cores if first is not None else 0
    chips = first.num_partitions if first is not None else 0
    per_chip = cores // chips if chips else 0
    summaries = []
    for name, members in stacks.items():
        width = members[0].unsharded_padded_shape[1]
        rows_total = sum(m.unsharded_padded_shape[0] for m in members)
        real = sum(m.unsharded_shape[0] * m.unsharded_shape[1] for m in members)
        padded = rows_total * width
        rows = members[0].total_rows_per_sparse_core_shard
        per_core = rows * width * BYTES_PER_ELEMENT
        summaries.append({
            "name": name,
            "tables": [{
                "name": m.table_name, "shape": list(m.unsharded_shape),
                "padded_shape": list(m.unsharded_padded_shape),
                "row_offset_in_shard": m.sparse_core_shard_row_offset,
                "shard_rotation": m.sparse_core_shard_rotation,
                "per_sparse_core_batch_size": m.per_sparse_core_batch_size,
                "num_features": m.num_features,
            } for m in members],
            "padded_shape": [rows_total, width], "group": None, "combiner": None,
            "optimizer": None, "slots": None, "samples_per_step": None,
            "elements": real, "padded_elements": padded,
            "padding_percent": round(100.0 * (padded - real) / padded, 2) if padded else 0.0,
            "rows_per_sparse_core": rows, "bytes_per_sparse_core": per_core,
            "bytes_per_chip": None, "bytes_per_device": per_core * per_chip, "limits": None,
        })
    padded_all = sum(x["padded_elements"] for x in summaries)
    real_all = sum(x["elements"] for x in summaries)
    per_core_all = sum(x["bytes_per_sparse_core"] for x in summaries)
    return {
        "api": None, "mode": None,
        "topology": {"kind": None, "chips": None, "devices": chips, "hosts": None,
                     "sparse_cores": cores, "sparse_cores_per_chip": None,
                     "sparse_cores_per_device": per_chip, "sparse_cores_defaulted": False},
        "slice": f"{chips} devices x {per_chip} SparseCores = {cores} SparseCores (chip kind "
                 f"not in the file)",
        "tables": len(layouts.tables), "features": None, "stacks": summaries,
        "elements": real_all, "padded_elements": padded_all,
        "padding_percent": (round(100.0 * (padded_all - real_all) / padded_all, 2)
                            if padded_all else 0.0),
        "rows_per_sparse_core": sum(x["rows_per_sparse_core"] for x in summaries),
        "bytes_per_sparse_core": per_core_all,
        "bytes_per_chip": None,
        "bytes_per_device": per_core_all * per_chip,
        "hbm_bytes_per_chip": None, "hbm_percent": None,
    }


def _limit_text(name: str, limit: dict[str, Any]) -> str:
    line = f", line {limit['line']}" if limit.get("line") is not None else ""
    return f"{name} {limit['value']} ({limit['source']}{line})"


def _per_unit(entry: dict[str, Any]) -> str:
    """``per chip: 1 MiB`` (and per device when a chip shows more than one), or per device
    alone when the chips are unknown (a layouts file)."""
    device = f"per device: {format_size(entry['bytes_per_device'])}" if entry.get(
        "bytes_per_device") is not None else ""
    if entry.get("bytes_per_chip") is None:
        return device
    chip = f"per chip: {format_size(entry['bytes_per_chip'])}"
    if device and entry.get("bytes_per_device") != entry["bytes_per_chip"]:
        return f"{chip}, {device}"
    return chip


def format_sparsecore_summary(summary: dict[str, Any], title: str) -> str:
    """The summary as text, one block per stack (names, paths and values with their control
    characters escaped: :func:`~tpuemb_cfg.base.errors.printable`)."""
    summary, title = printable_values(summary), printable(title)
    from_file = summary["api"] is None  # a layouts file: no optimizer, combiner or limits
    backend = (f" on Keras' {summary['keras_backend']} backend (chosen by "
               f"{summary['keras_backend_chosen_by']})" if summary.get("keras_backend") else "")
    what = ("SparseCore layouts" if from_file else
            f"SparseCore configuration ({summary['api']} API{backend}, {summary['mode']} "
            "stacking)")
    features = "" if from_file else f"{summary['features']} features, "
    lines = [
        f"{title}: {what}",
        f"  topology: {summary['slice']}",
        f"  {summary['tables']} tables, {features}"
        f"{len(summary['stacks'])} stack{'' if len(summary['stacks']) == 1 else 's'}",
        "",
    ]
    for s in summary["stacks"]:
        rows, width = s["padded_shape"]
        if from_file:
            lines.append(f"stack {s['name']}: {rows} x {width} padded")
        else:
            slots = f"{s['slots']} slot{'' if s['slots'] == 1 else 's'}"
            lines.append(f"stack {s['name']}: {rows} x {width} padded, {s['optimizer']} "
                         f"({slots}), combiner {s['combiner']}, "
                         f"{s['samples_per_step']} samples per step")
        for t in s["tables"]:
            lines.append(f"  {t['name']}: {t['shape'][0]} x {t['shape'][1]} -> "
                         f"{t['padded_shape'][0]} x {t['padded_shape'][1]}, row offset "
                         f"{t['row_offset_in_shard']}, rotation {t['shard_rotation']}")
            if t.get("quantization"):
                lines.append(f"    quantization: {t['quantization']}")
            if (summary["mode"] == "tensorflow"
                    and t["stacker_num_features"] != t["features"]):
                lines.append(f"    TensorFlow 2.21 told the stacker {t['stacker_num_features']} "
                             f"of its {t['features']} features "
                             f"({t['stacker_output_samples']} samples): it counts only the "
                             f"first feature when stacking")
        lines.append(f"  padding: {s['padded_elements']:,} elements for {s['elements']:,} "
                     f"({s['padding_percent']}% waste)")
        counted = "table only: the optimizer is not in the file" if from_file else (
            "table + slots")
        lines.append(f"  per SparseCore: {s['rows_per_sparse_core']:,} rows, "
                     f"{format_size(s['bytes_per_sparse_core'])}; {_per_unit(s)} "
                     f"({counted}, float32)")
        limits = s["limits"]
        if limits is None:
            continue
        lines.append("  limits: " + _limit_text("max_ids_per_partition",
                                                limits["max_ids_per_partition"]))
        lines.append("          " + _limit_text("max_unique_ids_per_partition",
                                                limits["max_unique_ids_per_partition"]))
    hbm = (f" ({summary['hbm_percent']}% of {format_size(summary['hbm_bytes_per_chip'])} HBM)"
           if summary["hbm_percent"] is not None else "")
    lines += [
        "",
        f"total: {summary['padded_elements']:,} padded elements for {summary['elements']:,} "
        f"({summary['padding_percent']}% waste); per SparseCore "
        f"{format_size(summary['bytes_per_sparse_core'])}, {_per_unit(summary)}{hbm}",
    ]
    return "\n".join(lines) + "\n"
