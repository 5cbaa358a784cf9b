"""The semantic differences of two configurations: what a reviewer needs said, not a text diff.

:func:`semantic_changes` reads both sides into :class:`~tpuemb_cfg.review.facts.Facts` and
compares them by name, in this order: the tables (NEW's order, then the removed ones in OLD's),
the features (the same), the settings (first, when the kind of configuration changed, that
change), the topology. Each difference is one :class:`~tpuemb_cfg.review.record.Change` at
NEW's place (and OLD's).

- **Renames.** A table only in OLD and a table only in NEW with the same vocabulary, width,
  optimizer, hyper-parameters and learning rate are one table renamed (the first such OLD table
  in OLD's order, when several fit); the features follow it. A feature only in OLD and one only
  in NEW that look up the same table (through a rename) are one feature renamed (one of equal
  shapes first).
- **Different kinds.** A legacy message and a SparseCore spec, or specs of two APIs, are
  compared where both say something: a field only one side has is not a difference (a pbtxt
  has no combiner, a jax-tpu-embedding optimizer no gradient clipping), and feature shapes,
  which mean per-replica or global batches depending on the API and its stacking
  (:attr:`Facts.frame`), are compared only within one frame. The change of kind is said once.
- **Optimizers.** When a table's optimizer changes, its slots are compared (a slot dropped
  loses its state; a slot added starts from its initial value) and the old algorithm's own
  hyper-parameters are not listed one by one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tpuemb_cfg.algorithms.table import ALGORITHMS
from tpuemb_cfg.review.facts import Entry, Facts, load_facts
from tpuemb_cfg.review.record import Change

__all__ = ["semantic_changes"]

#: Fields whose meaning depends on the API (per-replica vs global batches): compared only
#: between configurations of one frame.
_FRAME_FIELDS = frozenset({"input_shape", "output_shape"})
#: Table fields a renamed table keeps (its shape, optimizer and learning rate).
_IDENTITY = ("vocabulary_size", "dim", "optimizer", "learning_rate")
_LIMIT_FIELDS = frozenset({"max_ids_per_partition", "max_unique_ids_per_partition",
                           "suggested_coo_buffer_size_per_device", "max_ids_per_chip_per_sample",
                           "activation_mem_bytes_limit", "stack_to_max_ids_per_partition",
                           "stack_to_max_unique_ids_per_partition"})


def semantic_changes(old: Any, new: Any) -> list[Change]:
    """The differences from ``old`` to ``new`` (each :class:`Facts`, or anything
    :func:`~tpuemb_cfg.review.facts.load_facts` takes), in a deterministic order (module
    docstring). Raises ``InputError`` for a side that cannot be read."""
    a = load_facts(old)
    b = load_facts(new)
    renames = _table_renames(a, b)
    changes = list(_tables(a, b, renames))
    changes.extend(_features(a, b, renames))
    changes.extend(_settings(a, b))
    changes.extend(_topology(a, b))
    return changes


# -- helpers --------------------------------------------------------------------------------------


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _common(a: Entry, b: Entry, same_frame: bool) -> list[str]:
    """The fields both entries have, in ``b``'s order (frame-relative ones only within one
    frame)."""
    return [k for k in b.values if k in a.values and (same_frame or k not in _FRAME_FIELDS)]


def _subject(field: str) -> str:
    if field == "optimizer":
        return "optimizer"
    if field.startswith("optimizer."):
        return "hyper_parameter"
    if field.startswith("learning_rate"):
        return "learning_rate"
    if field in _LIMIT_FIELDS or field.startswith(("max_ids_per_table[",
                                                   "max_unique_ids_per_table[")):
        return "limit"
    return "table"


def _changed(subject: str, what: str, a: Entry, b: Entry, name: str, key: str) -> Change:
    old, new = a.values[key], b.values[key]
    return Change(subject, "changed", name, key, old, new,
                  f"{what}: {key} {_show(old)} -> {_show(new)}",
                  new_location=b.where(key), old_location=a.where(key))


def _identity(a: Entry, b: Entry) -> bool:
    """Whether two tables have the same shape, optimizer, hyper-parameters and learning rate
    (where both say)."""
    for key in _IDENTITY:
        if a.values.get(key) != b.values.get(key):
            return False
    return all(a.values[k] == b.values[k] for k in b.values
               if k in a.values and k.startswith(("optimizer.", "learning_rate.")))


def _outline(entry: Entry) -> str:
    """``1000 x 16, adagrad``: a table's shape and optimizer."""
    v = entry.values
    return f"{v.get('vocabulary_size')} x {v.get('dim')}, optimizer {_show(v.get('optimizer'))}"


# -- tables ---------------------------------------------------------------------------------------


def _renames(old: Sequence[Entry], new: Sequence[Entry],
             pick: Callable[[Entry, list[Entry]], Entry | None]) -> dict[str, str]:
    """NEW name -> OLD name of each entry of ``new`` whose name OLD lacks and that ``pick``
    matches to one of OLD's entries NEW lacks (each taken once)."""
    old_names = {e.name for e in old}
    new_names = {e.name for e in new}
    free = [e for e in old if e.name not in new_names]
    renames: dict[str, str] = {}
    for entry in new:
        if entry.name in old_names:
            continue
        match = pick(entry, [e for e in free if e.name not in renames.values()])
        if match is not None:
            renames[entry.name] = match.name
    return renames


def _table_renames(a: Facts, b: Facts) -> dict[str, str]:
    """NEW name -> OLD name of each renamed table (same shape, optimizer and rate)."""
    return _renames(a.tables, b.tables,
                    lambda table, free: next((t for t in free if _identity(t, table)), None))


def _tables(a: Facts, b: Facts, renames: dict[str, str]) -> Iterator[Change]:
    old = {t.name: t for t in a.tables}
    new_names = {t.name for t in b.tables}
    same_frame = a.frame == b.frame
    for table in b.tables:
        before = old.get(renames.get(table.name, table.name))
        if before is None:
            yield Change("table", "added", table.name, "", None, dict(table.values),
                         f"table {table.name!r} added ({_outline(table)})",
                         new_location=table.location)
            continue
        if before.name != table.name:
            following = [f.name for f in b.features if f.values.get("table") == table.name]
            tail = f"; features {', '.join(following)} follow" if following else ""
            yield Change("table", "renamed", table.name, "name", before.name, table.name,
                         f"table {before.name!r} renamed to {table.name!r} (same shape and "
                         f"optimizer: {_outline(table)}{tail})",
                         new_location=table.location, old_location=before.location)
        yield from _table_fields(before, table, same_frame)
    for table in a.tables:
        if table.name not in new_names and table.name not in renames.values():
            yield Change("table", "removed", table.name, "", dict(table.values), None,
                         f"table {table.name!r} removed ({_outline(table)})",
                         old_location=table.location)


def _algorithm_fields(algorithm: Any) -> set[str]:
    entry = ALGORITHMS.get(algorithm) if isinstance(algorithm, str) else None
    return {f"optimizer.{h.field}" for h in entry.hyper} if entry is not None else set()


def _table_fields(a: Entry, b: Entry, same_frame: bool) -> Iterator[Change]:
    what = f"table {b.name!r}"
    keys = _common(a, b, same_frame)
    skipped: set[str] = set()
    if "optimizer" in keys and a.values["optimizer"] != b.values["optimizer"]:
        yield _optimizer_change(a, b)
        skipped = {"optimizer.slots", "optimizer.slot_initial_values"}
        skipped |= _algorithm_fields(a.values["optimizer"])
        skipped |= _algorithm_fields(b.values["optimizer"])
    for key in keys:
        if key == "optimizer" or key in skipped or a.values[key] == b.values[key]:
            continue
        yield _changed(_subject(key), what, a, b, b.name, key)


def _optimizer_change(a: Entry, b: Entry) -> Change:
    """The optimizer of a table changed: which slots are dropped (their state is lost) and
    which are new (they start from their initial values)."""
    old, new = a.values["optimizer"], b.values["optimizer"]
    old_slots = list(a.values.get("optimizer.slots") or ())
    new_slots = list(b.values.get("optimizer.slots") or ())
    notes = []
    dropped = [s for s in old_slots if s not in new_slots]
    added = [s for s in new_slots if s not in old_slots]
    if dropped:
        notes.append(f"{_slots(dropped)} dropped: "
                     f"{'its' if len(dropped) == 1 else 'their'} state is lost")
    if added:
        notes.append(f"{_slots(added)} added: "
                     f"{'starts' if len(added) == 1 else 'start'} from the initial value")
    tail = f" ({'; '.join(notes)})" if notes else ""
    return Change("optimizer", "changed", b.name, "optimizer", old, new,
                  f"table {b.name!r}: optimizer {_show(old)} -> {_show(new)}{tail}",
                  new_location=b.where("optimizer"), old_location=a.where("optimizer"))


def _slots(names: list[str]) -> str:
    return f"slot{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))}"


# -- features -------------------------------------------------------------------------------------


def _feature_renames(a: Facts, b: Facts, tables: dict[str, str]) -> dict[str, str]:
    """NEW name -> OLD name of each renamed feature (``tables``: NEW -> OLD table names): one of
    the same table, the same in every other value if there is one."""
    def pick(feature: Entry, free: list[Entry]) -> Entry | None:
        table = feature.values.get("table")
        table = tables.get(table, table) if isinstance(table, str) else table
        candidates = [f for f in free if f.values.get("table") == table]
        same = [f for f in candidates
                if all(f.values.get(k) == v for k, v in feature.values.items() if k != "table")]
        return next(iter(same or candidates), None)

    return _renames(a.features, b.features, pick)


def _features(a: Facts, b: Facts, tables: dict[str, str]) -> Iterator[Change]:
    renames = _feature_renames(a, b, tables)
    old = {f.name: f for f in a.features}
    new_names = {f.name for f in b.features}
    same_frame = a.frame == b.frame
    for feature in b.features:
        before = old.get(renames.get(feature.name, feature.name))
        if before is None:
            yield Change("feature", "added", feature.name, "", None, dict(feature.values),
                         f"feature {feature.name!r} added (table "
                         f"{_show(feature.values.get('table'))})",
                         new_location=feature.location)
            continue
        if before.name != feature.name:
            yield Change("feature", "renamed", feature.name, "name", before.name, feature.name,
                         f"feature {before.name!r} renamed to {feature.name!r} (table "
                         f"{_show(feature.values.get('table'))})",
                         new_location=feature.location, old_location=before.location)
        for key in _common(before, feature, same_frame):
            old_value = before.values[key]
            if key == "table":  # through a rename of its table
                old_value = next((n for n, o in tables.items() if o == old_value), old_value)
            if old_value != feature.values[key]:
                yield _changed("feature", f"feature {feature.name!r}", before, feature,
                               feature.name, key)
    for feature in a.features:
        if feature.name not in new_names and feature.name not in renames.values():
            yield Change("feature", "removed", feature.name, "", dict(feature.values), None,
                         f"feature {feature.name!r} removed (table "
                         f"{_show(feature.values.get('table'))})",
                         old_location=feature.location)


# -- settings and topology ------------------------------------------------------------------------


def _settings(a: Facts, b: Facts) -> Iterator[Change]:
    if (a.kind, a.api) != (b.kind, b.api):
        yield Change("setting", "changed", "configuration", "kind", a.describe(), b.describe(),
                     f"the kind of configuration changed: {a.describe()} -> {b.describe()} "
                     "(compared where both say something)",
                     new_location=_first_place(b), old_location=_first_place(a))
    old, new = a.settings, b.settings
    for key in _common(old, new, a.frame == b.frame):
        if old.values[key] != new.values[key]:
            yield _changed(_setting_subject(key), "setting", old, new, key, key)
    if a.frame != b.frame:
        return
    for key in new.values:  # a stack's limit added
        if key not in old.values and "[" in key:
            yield Change("limit", "added", key, key, None, new.values[key],
                         f"setting {key} = {_show(new.values[key])} added",
                         new_location=new.where(key))
    for key in old.values:
        if key not in new.values and "[" in key:
            yield Change("limit", "removed", key, key, old.values[key], None,
                         f"setting {key} = {_show(old.values[key])} removed",
                         old_location=old.where(key))


def _setting_subject(key: str) -> str:
    return "limit" if _subject(key) == "limit" else "setting"


def _first_place(facts: Facts) -> Any:
    """Where a change of the whole configuration is shown: its settings, else its first table."""
    if facts.settings.location is not None:
        return facts.settings.location
    places: Sequence[Entry] = facts.tables
    return places[0].location if places else None


def _topology(a: Facts, b: Facts) -> Iterator[Change]:
    old, new = a.topology, b.topology
    for key in _common(old, new, True):
        if old.values[key] != new.values[key]:
            yield _changed("topology", "topology", old, new, "topology", key)
