"""What a change does on the TPU: stacks, limits, memory, findings and load, OLD vs NEW.

Each function compares one aspect of two :class:`~tpuemb_cfg.review.sides.Side` s and returns
``rules.diff.Change`` records (subjects ``stack``, ``limit``, ``memory``, ``finding``,
``load``), placed at NEW's line of the table or setting concerned (``Locate``: a table's
location on one side, from the semantic facts). Nothing here formats a report or reads a file
beyond what the sides' validators read.

- **stacks** (both sides SparseCore): every stacked table that appears or goes away, and every
  table whose place changes: its stacked table, row offset within each SparseCore's shard,
  rotation, padded shape (the layout fields of TensorFlow's ``SparseCoreTableLayout``);
- **limits**: each stacked table's ``max_ids_per_partition``, ``max_unique_ids_per_partition``
  and COO buffer as preprocessing applies them (a stack of NEW is compared with the stack of
  OLD that held most of its tables, so a stack renamed by a new member is still matched);
- **memory**: the fullest host (legacy), chip or device, and SparseCore, with the tables that
  dominate (``planner.memory``); an error when NEW no longer fits where OLD did;
- **findings**: ``tpuemb validate``'s findings that appear or go away, matched by rule id and
  message (not line: an edit above a finding moves it);
- **load** (with a sample): ids dropped at the limits, failed steps and imbalance per stack or
  host (``planner.planning.Plan`` of each side, read from the same sample).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.planner.memory import legacy_memory, sparsecore_memory
from tpuemb_cfg.rules.diff import Change, Location

if TYPE_CHECKING:
    from tpuemb_cfg.model import Diagnostic
    from tpuemb_cfg.planner.memory import MemoryReport  # noqa: F401
    from tpuemb_cfg.sparsecore.stacking import Stack, Stacking

    from .sides import Side

__all__ = ["Locate", "finding_changes", "limit_changes", "load_changes", "memory_changes",
           "memory_report", "stack_changes"]

#: A table's location on one side (None when unknown).
Locate = Callable[[str], "Location | None"]


def _nowhere(_name: str) -> Location | None:
    return None


# ------------------------------------------------------------------------------------- stacks


#: The layout fields of a table, in the order messages list them: (key, words).
LAYOUT_FIELDS = (
    ("stacked_table_name", "stacked table"),
    ("sparse_core_shard_row_offset", "row offset"),
    ("sparse_core_shard_rotation", "rotation"),
    ("padded_rows", "padded rows"),
    ("padded_width", "padded width"),
    ("total_rows_per_sparse_core_shard", "rows per SparseCore"),
    ("num_sparse_cores", "SparseCores"),
    ("num_partitions", "partitions"),
    ("per_sparse_core_batch_size", "per_sparse_core_batch_size"),
    ("num_features", "num_features"),
)
#: The fields that say where a table's rows are (a change of another field alone leaves the
#: rows in place: TensorFlow still compares it at a restore).
_PLACE = ("stacked_table_name", "sparse_core_shard_row_offset", "sparse_core_shard_rotation",
          "num_sparse_cores")


def _places(side: Side) -> dict[str, dict[str, Any]]:
    """table -> its layout (:data:`LAYOUT_FIELDS`), from the side's TensorFlow layouts (0 for a
    field a TensorFlow release does not write)."""
    out: dict[str, dict[str, Any]] = {}
    if side.layouts is None:
        return out
    for layout in side.layouts.tables:
        padded = list(layout.unsharded_padded_shape) or [0, 0]
        out[layout.table_name] = {
            "stacked_table_name": layout.stacked_table_name,
            "sparse_core_shard_row_offset": int(layout.sparse_core_shard_row_offset),
            "sparse_core_shard_rotation": int(layout.sparse_core_shard_rotation),
            "padded_rows": int(padded[0]), "padded_width": int(padded[1]),
            "total_rows_per_sparse_core_shard": int(layout.total_rows_per_sparse_core_shard),
            "num_sparse_cores": int(layout.num_sparse_cores),
            "num_partitions": int(layout.num_partitions),
            "per_sparse_core_batch_size": int(layout.per_sparse_core_batch_size),
            "num_features": int(layout.num_features),
        }
    return out


def _matched(old: Stacking, stack: Stack) -> Stack | None:
    """The stack of ``old`` holding most of ``stack``'s tables (the first of equals)."""
    best, count = None, 0
    names = {t.name for t in stack.tables}
    for candidate in old.stacks:
        shared = len(names & {t.name for t in candidate.tables})
        if shared > count:
            best, count = candidate, shared
    return best


def stack_changes(old: Side, new: Side, *, renamed: dict[str, str] | None = None,
                  locate_new: Locate = _nowhere, locate_old: Locate = _nowhere
                  ) -> list[Change]:
    """The stacks and table places that differ (both sides stacked), in NEW's stack order,
    then the stacks OLD had and NEW has not. ``renamed``: NEW's table name -> OLD's."""
    if old.stacking is None or new.stacking is None:
        return []
    renamed = renamed or {}
    before, after = _places(old), _places(new)
    if "jax" in (old.stacking.mode, new.stacking.mode):
        # jax-tpu-embedding stores no TensorFlow layouts: these two fields are TensorFlow's
        for place in (*before.values(), *after.values()):
            place["per_sparse_core_batch_size"] = place["num_features"] = 0
    old_stacks = {s.name: s for s in old.stacking.stacks}
    new_stacks = {s.name: s for s in new.stacking.stacks}
    out: list[Change] = []
    for stack in new.stacking.stacks:
        first = stack.tables[0].name
        if stack.name not in old_stacks:
            members = ", ".join(repr(t.name) for t in stack.tables)
            out.append(Change("stack", "added", stack.name, "", None,
                              [t.name for t in stack.tables],
                              f"stacked table {stack.name!r} is new ({members}; "
                              f"{stack.padded_vocabulary_size:,} rows x {stack.padded_dim})",
                              locate_new(first)))
        for table in stack.tables:
            was = before.get(renamed.get(table.name, table.name))
            now = after[table.name]
            if was is None or was == now:
                continue
            out.append(_moved(table.name, was, now, locate_new(table.name),
                              locate_old(renamed.get(table.name, table.name))))
    for stack in old.stacking.stacks:
        if stack.name not in new_stacks:
            members = ", ".join(repr(t.name) for t in stack.tables)
            out.append(Change("stack", "removed", stack.name, "", [t.name for t in stack.tables],
                              None, f"stacked table {stack.name!r} is gone ({members})",
                              None, locate_old(stack.tables[0].name)))
    return out


def _moved(name: str, was: dict[str, Any], now: dict[str, Any], where: Location | None,
           where_old: Location | None) -> Change:
    changed = [key for key, _ in LAYOUT_FIELDS if was[key] != now[key]]
    words = dict(LAYOUT_FIELDS)
    parts = [f"{words[k]} {was[k]!r} -> {now[k]!r}" if k == "stacked_table_name"
             else f"{words[k]} {was[k]:,} -> {now[k]:,}" for k in changed]
    if any(was[k] != now[k] for k in _PLACE):
        verb = "moves on the SparseCores"
    elif any(k in ("padded_rows", "padded_width", "total_rows_per_sparse_core_shard")
             for k in changed):
        verb = "on the SparseCores"
    else:
        verb = "keeps its rows; its layout differs"
    return Change("stack", "changed", name, ",".join(changed), was, now,
                  f"table {name!r} {verb}: {', '.join(parts)}", where, where_old)


# ------------------------------------------------------------------------------------- limits


def _limits(stack: Stack) -> dict[str, Any]:
    return {"max_ids_per_partition": stack.max_ids_per_partition,
            "max_unique_ids_per_partition": stack.max_unique_ids_per_partition,
            "coo_buffer_size_per_device": stack.suggested_coo_buffer_size_per_device}


def limit_changes(old: Side, new: Side, *, locate_new: Locate = _nowhere,
                  locate_old: Locate = _nowhere) -> list[Change]:
    """Each stack of NEW whose limits differ from its OLD stack's (:func:`_matched`)."""
    if old.stacking is None or new.stacking is None:
        return []
    out: list[Change] = []
    for stack in new.stacking.stacks:
        match = _matched(old.stacking, stack)
        if match is None:
            continue
        was, now = _limits(match), _limits(stack)
        if was == now:
            continue
        parts = [f"{key} {_count(was[key])} -> {_count(now[key])}" for key in was
                 if was[key] != now[key]]
        named = (f"stacked table {stack.name!r}" if match.name == stack.name
                 else f"stacked table {stack.name!r} (was {match.name!r})")
        out.append(Change("stack_limit", "changed", stack.name,
                          ",".join(k for k in was if was[k] != now[k]), was, now,
                          f"{named}: {', '.join(parts)}", locate_new(stack.tables[0].name),
                          locate_old(match.tables[0].name)))
    return out


def _count(value: int | None) -> str:
    return "default" if value is None else f"{value:,}"


# ------------------------------------------------------------------------------------- memory


def memory_report(side: Side) -> MemoryReport | None:
    """The side's memory per unit (``planner.memory``): per host (legacy), per chip or device
    (SparseCore, with its per-SparseCore breakdown); None when it cannot be computed."""
    if side.kind == "sparsecore":
        if side.stacking is None or side.config is None:
            return None
        return sparsecore_memory(side.config, side.stacking)
    if side.message is None:
        return None
    try:
        return legacy_memory(side.message)
    except (ValueError, ArithmeticError, KeyError):
        return None


def _fullest(report: MemoryReport) -> dict[str, Any]:
    unit = report.fullest
    return {"level": report.level, "unit": unit.index if unit else None,
            "bytes": unit.total if unit else 0, "capacity_bytes": report.capacity_bytes,
            "fits": report.fits, "dominant": [name for name, _ in report.dominant[:3]]}


def _levels(report: MemoryReport) -> list[tuple[str, MemoryReport]]:
    return [(report.level, report), *((r.level, r) for r in report.breakdown)]


def memory_changes(old: Side, new: Side, *, where: Location | None = None) -> list[Change]:
    """The fullest unit of each memory level both sides have, when its bytes or the tables
    that dominate differ; ``error`` when NEW's does not fit and OLD's did."""
    was, now = memory_report(old), memory_report(new)
    if was is None or now is None:
        return []
    before = dict(_levels(was))
    out: list[Change] = []
    for level, report in _levels(now):
        if level not in before:
            continue
        a, b = _fullest(before[level]), _fullest(report)
        if (a["bytes"], a["dominant"]) == (b["bytes"], b["dominant"]):
            continue
        capacity = b["capacity_bytes"]
        of = f" of {format_size(capacity)}" if capacity else ""
        top = ", ".join(repr(n) for n in b["dominant"])
        broke = a["fits"] and not b["fits"]
        verdict = "; NEW does not fit" if broke else ""
        change = b["bytes"] - a["bytes"]
        sign = "+" if change >= 0 else "-"
        out.append(Change(
            "memory", "changed", level, "bytes", a, b,
            f"fullest {level}: {format_size(a['bytes'])} -> {format_size(b['bytes'])}{of} "
            f"({sign}{format_size(abs(change))}){'; largest: ' + top if top else ''}{verdict}",
            where, None, "error" if broke else None))
    return out


# ------------------------------------------------------------------------------------ findings


def _key(found: Diagnostic) -> tuple[str, str]:
    return (found.rule, found.message)


def finding_changes(old: Sequence[Diagnostic], new: Sequence[Diagnostic], *,
                    shown_new: Callable[[str | None], str | None] = lambda p: p,
                    shown_old: Callable[[str | None], str | None] = lambda p: p,
                    ) -> list[Change]:
    """The findings NEW has and OLD had not (at NEW's line, with the finding's severity), then
    those OLD had and NEW has not (info), each once."""
    before = {_key(d) for d in old}
    after = {_key(d) for d in new}
    out: list[Change] = []
    seen: set[tuple[str, str]] = set()
    for found in new:
        key = _key(found)
        if key in before or key in seen:
            continue
        seen.add(key)
        out.append(Change("finding", "added", found.rule, found.field_path, None,
                          found.to_dict(), f"new finding {found.rule}: {found.message}",
                          _at(shown_new(found.path), found), None,
                          found.severity if found.severity != "info" else None))
    for found in old:
        key = _key(found)
        if key in after or key in seen:
            continue
        seen.add(key)
        out.append(Change("finding", "removed", found.rule, found.field_path, found.to_dict(),
                          None, f"finding {found.rule} is gone: {found.message}", None,
                          _at(shown_old(found.path), found)))
    return out


def _at(path: str | None, found: Diagnostic) -> Location | None:
    if path is None or found.line is None:
        return None
    return (path, found.line, found.column or 1)


# ---------------------------------------------------------------------------------------- load


def _stack_load(plan: Any) -> dict[str, dict[str, Any]]:
    """Per stacked table (SparseCore) or the whole layout (legacy): ids dropped at the
    configured limits, failed steps, ids, imbalance."""
    out: dict[str, dict[str, Any]] = {}
    if plan.limits is not None:
        for s in plan.limits.stacks:
            out[s.stack] = {"tables": list(s.tables),
                            "dropped": sum(d.dropped for d in s.current.drops),
                            "ids": sum(d.ids for d in s.current.drops),
                            "failed_steps": s.current.failed_steps,
                            "max_ids_per_partition": s.current.max_ids_per_partition,
                            "observed_max_ids": s.observed_max_ids}
    load = plan.variants[0].load if plan.variants else None
    if load is not None:
        out["*"] = {"level": load.level, "units": len(load.units),
                    "max_over_mean": round(float(load.imbalance.max_over_mean), 4)}
    return out


def load_changes(old_plan: Any, new_plan: Any, *, locate_new: Locate = _nowhere,
                 where: Location | None = None) -> list[Change]:
    """Each stack of NEW whose drops or failed steps differ from the OLD stack with its first
    table, and the imbalance of the whole layout (``tpuemb plan``'s, on the same sample);
    a warning when NEW drops ids OLD did not."""
    was, now = _stack_load(old_plan), _stack_load(new_plan)
    by_table = {t: name for name, entry in was.items() if name != "*"
                for t in entry["tables"]}
    out: list[Change] = []
    for name, entry in now.items():
        if name == "*":
            continue
        other = was.get(name) or was.get(by_table.get(entry["tables"][0], ""), None)
        before = other or {"dropped": 0, "failed_steps": 0, "ids": 0}
        if (before["dropped"], before["failed_steps"]) == (entry["dropped"],
                                                            entry["failed_steps"]):
            continue
        worse = entry["dropped"] > before["dropped"] or entry["failed_steps"] > before[
            "failed_steps"]
        out.append(Change(
            "load", "changed", name, "dropped", before, entry,
            f"stacked table {name!r}: {before['dropped']:,} -> {entry['dropped']:,} ids dropped "
            f"at the configured limits, failed steps {before['failed_steps']} -> "
            f"{entry['failed_steps']}", locate_new(entry["tables"][0]), None,
            "warning" if worse else None))
    a, b = was.get("*"), now.get("*")
    if a is not None and b is not None and a != b:
        out.append(Change(
            "load", "changed", "imbalance", "max_over_mean", a, b,
            f"load per {b['level']}: the busiest of {b['units']} at {b['max_over_mean']}x the "
            f"mean (was {a['max_over_mean']}x of {a['units']} {a['level']}s)", where, None))
    return out
