"""What a TPU embedding checkpoint holds, and what TensorFlow 2.21 does restoring it under another
configuration (``tpuemb diff --breaking``; docs/diff/checkpoints.md gives every rule its source).

**The variables** (children of the embedding object, named as TensorFlow names them):

- TensorFlow's mid-level API (``TPUEmbedding``, ``TPUEmbeddingForServing``, a legacy
  ``TPUEmbeddingConfiguration``; ``tpu_embedding_base._create_variables``): per table one
  variable named as the table, of its ``(vocabulary_size, dim)``, and per optimizer slot one named
  ``table/slot`` (SGD none, Adagrad ``accumulators``, Adam ``momenta`` and ``velocities``, FTRL
  ``accumulators`` and ``linears``: :func:`tpuemb_cfg.algorithms.slot_names`);
- ``TPUEmbeddingV2`` on SparseCores (``tpu_embedding_v3._create_variables``): per **stacked**
  table one variable named as the stack, of ``(padded rows of the stack, padded width)``, and per
  slot of the stack's optimizer (its first table's by name) ``stack/slot``; plus the trackable
  ``_sparse_core_table_layouts`` holding the serialized ``SparseCoreTableLayouts`` of every table,
  in table-name order (``_track_restore_info_for_cpu``).

A checkpoint key is the object path, the escaped local name (``/`` -> ``.S``, ``.`` -> ``..``) and
``/.ATTRIBUTES/VARIABLE_VALUE``: ``embedding/item_user.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE``.

**The restore** (:func:`checkpoint_verdicts`), as ``tf.train.Checkpoint.restore`` runs it before
``build()`` (restore-on-create, the only path where ``TPUEmbeddingV2._checkpoint_adapter``
applies; ``checkpoint/restore.py`` ``_queue_children_for_restoration`` gives a reshard callback
only to a checkpoint child with no variable yet):

1. NEW is not a SparseCore embedding, or both have layouts and every table's layout is the same
   proto (``TpuEmbeddingV3CheckpointAdapter.is_layouts_same``): no adapter; each variable restores
   from the checkpoint variable of its name, a shape change raises, a variable missing from the
   checkpoint keeps its initial values, one missing from NEW is dropped;
2. both have layouts but the table names differ: ``is_layouts_same`` raises "Layouts in checkpoint
   and embedding must have the same keys" and the whole restore fails;
3. otherwise the adapter reshards: a callback per NEW stack, found by the checkpoint child's name
   or its part before ``/`` (``get_reshard_callback``), so a slot child is filed under its stack's
   name and **no slot is restored**; a NEW stack restores only from a checkpoint variable of its
   own name (sharded checkpoint) or of its first table's (unsharded checkpoint: the keys of the
   other tables are made by ``str.replace`` of that name in the key); each table's rows are padded
   with NEW's padding (``_shard_from_cpu_to_sc``), so any shape change gives a tensor of the wrong
   size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tpuemb_cfg.algorithms import slot_names
from tpuemb_cfg.sparsecore.feed import stack
from tpuemb_cfg.sparsecore.stacking import Stacking

if TYPE_CHECKING:
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig

__all__ = [
    "CAUSES", "DEFAULT_OBJECT_PATH", "LAYOUTS_KEY", "PARAMETERS", "CheckpointReport",
    "CheckpointVariable",
    "CheckpointView", "LayoutRecord", "VariableVerdict", "checkpoint_key", "checkpoint_verdicts",
    "layout_of", "layouts_from_proto", "saved_layouts", "view_of_legacy", "view_of_sparsecore",
    "view_of_stacking", "view_of_tables",
]

#: The name TensorFlow gives a table's own values among its variables (not a slot).
PARAMETERS = "parameters"
#: ``tpu_embedding_v3_utils.SPARSECORE_LAYOUTS_CHECKPOINT_KEY``: the layouts' local name.
LAYOUTS_KEY = "_sparse_core_table_layouts"
#: What a variable's checkpoint key ends with (``trackable.base.VARIABLE_VALUE_KEY``).
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
#: The object path of the embedding in the checkpoint when nothing else is known: TensorFlow's
#: examples save it as ``tf.train.Checkpoint(embedding=...)``.
DEFAULT_OBJECT_PATH = "embedding"

Kind = Literal["sparsecore", "unsharded", "jax"]
#: A variable's fate: restored as it is, resharded by the adapter, the restore raises, its state
#: does not arrive (silently), or NEW's variable has nothing in the checkpoint (its initializer).
Outcome = Literal["restores", "reshards", "fails", "lost", "initialized"]


@dataclass(frozen=True)
class LayoutRecord:
    """One table's ``SparseCoreTableLayout`` message as a record (TensorFlow's field names)."""

    table_name: str
    stacked_table_name: str
    num_sparse_cores: int
    num_partitions: int
    total_rows_per_sparse_core_shard: int
    unsharded_shape: tuple[int, int]
    unsharded_padded_shape: tuple[int, int]
    sparse_core_shard_row_offset: int
    sparse_core_shard_rotation: int
    per_sparse_core_batch_size: int = 0
    num_features: int = 0


@dataclass(frozen=True)
class CheckpointVariable:
    """A variable of the embedding object: its local ``name`` (``item_user``,
    ``item_user/accumulators``, ``user``), the tables whose rows it holds, ``slot``
    (:data:`PARAMETERS` or the slot's name) and its full shape."""

    name: str
    tables: tuple[str, ...]
    slot: str
    shape: tuple[int, int]


@dataclass(frozen=True)
class CheckpointView:
    """What a configuration's checkpoint holds: ``kind`` ``"sparsecore"`` (``TPUEmbeddingV2``:
    stacked variables and the layouts, in table-name order), ``"unsharded"`` (the mid-level
    API, per table, no layouts) or ``"jax"`` (jax-tpu-embedding's Orbax checkpoint: stacked like
    ``sparsecore``, keys by ``model.jax_checkpoint.jax_key``); ``object_path``: where the
    embedding object sits in the checkpoint (the start of every key)."""

    kind: Kind
    variables: tuple[CheckpointVariable, ...]
    layouts: tuple[LayoutRecord, ...] = ()
    object_path: str = DEFAULT_OBJECT_PATH

    def variable(self, name: str) -> CheckpointVariable | None:
        return next((v for v in self.variables if v.name == name), None)

    @property
    def stacked(self) -> bool:
        """Whether the variables are stacked tables laid out by ``layouts`` (a
        jax-tpu-embedding checkpoint of per-table arrays has none)."""
        return self.kind == "sparsecore" or (self.kind == "jax" and bool(self.layouts))

    def keys(self) -> tuple[str, ...]:
        """Every checkpoint key, sorted (as a checkpoint reader lists them); TensorFlow's kinds."""
        names = [v.name for v in self.variables]
        if self.kind == "sparsecore":
            names.append(LAYOUTS_KEY)
        return tuple(sorted(checkpoint_key(self.object_path, n) for n in names))

    def stacks(self) -> dict[str, tuple[LayoutRecord, ...]]:
        """Stack -> its tables' layouts by row offset (``_reorg_layouts``), in first-seen order."""
        out: dict[str, list[LayoutRecord]] = {}
        for layout in self.layouts:
            out.setdefault(layout.stacked_table_name, []).append(layout)
        return {name: tuple(sorted(ls, key=lambda x: x.sparse_core_shard_row_offset))
                for name, ls in out.items()}

    def table_shapes(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(table, slot) -> the table's own (unpadded) shape, for every state the view holds."""
        layout = {t.table_name: t for t in self.layouts}
        out = {}
        for v in self.variables:
            for table in v.tables:
                out[(table, v.slot)] = (layout[table].unsharded_shape if table in layout
                                        else v.shape)
        return out


@dataclass(frozen=True)
class VariableVerdict:
    """What restoring OLD's checkpoint does to one variable (NEW's name; OLD's when NEW has no
    such variable). ``how`` (reshards): ``topology``, ``row_offset``, ``rotation``, ``padding``,
    ``layout_fields`` (only ``per_sparse_core_batch_size`` / ``num_features`` differ),
    ``same_layout`` (resharded because another table's layout changed), ``from_unsharded``,
    joined by ``+``. ``cause`` names the rule behind the outcome (:data:`CAUSES`)."""

    variable: str
    tables: tuple[str, ...]
    outcome: str
    how: str
    reason: str
    cause: str = ""


#: Why a verdict is what it is; each is one CKPT finding (``tpuemb_cfg.rules.checkpoint``).
CAUSES = ("same", "table_set", "shape", "not_in_checkpoint", "slot_deferred", "key_rewrite",
          "slot_dropped", "dropped", "new_variable", "reshard", "after_build")


@dataclass(frozen=True)
class CheckpointReport:
    """``outcome``: what TensorFlow 2.21's restore does as a whole: ``restores``, ``reshards``
    (the adapter is applied and every state arrives), ``fails`` (it raises: ``error``), or
    ``wrong`` (no error, but state OLD had for a NEW variable does not arrive). ``adapter``:
    ``not_applicable``, ``applied``, ``error`` (it raised) or ``bypassed`` (applicable, but
    restored after ``build()``: no variable went through it)."""

    outcome: str
    adapter: str
    verdicts: tuple[VariableVerdict, ...]
    error: str = ""
    #: the tables added (NEW only) then removed (OLD only) when the table sets differ
    changed_tables: tuple[str, ...] = ()

    @property
    def breaking(self) -> bool:
        """Whether anything of OLD's state does not restore as it is under NEW."""
        return self.outcome in ("fails", "wrong") or any(
            v.outcome in ("fails", "lost") for v in self.verdicts)


# --- keys and layouts ---------------------------------------------------------------------------

def _escape(local_name: str) -> str:
    """``trackable_utils.escape_local_name``: ``.`` -> ``..``, ``/`` -> ``.S``."""
    return local_name.replace(".", "..").replace("/", ".S")


def checkpoint_key(object_path: str, local_name: str) -> str:
    """The key of the variable ``local_name`` of the object at ``object_path``."""
    prefix = f"{object_path}/" if object_path else ""
    return f"{prefix}{_escape(local_name)}{VALUE_SUFFIX}"


def layout_of(stacking: Stacking, stack_name: str, table: Any) -> LayoutRecord:
    cores = stacking.num_sparse_cores
    stack = stacking.stack(stack_name)
    return LayoutRecord(
        table_name=table.name, stacked_table_name=stack_name, num_sparse_cores=cores,
        num_partitions=stacking.num_partitions,
        total_rows_per_sparse_core_shard=stack.padded_vocabulary_size // cores,
        unsharded_shape=(table.vocabulary_size, table.dim),
        unsharded_padded_shape=(table.padded_vocabulary_size, table.padded_dim),
        sparse_core_shard_row_offset=table.row_offset_in_shard,
        sparse_core_shard_rotation=table.shard_rotation,
        per_sparse_core_batch_size=table.output_samples // stacking.sparse_cores_per_partition,
        num_features=table.num_features)


def layouts_from_proto(layouts: SparseCoreTableLayouts) -> tuple[LayoutRecord, ...]:
    """The records of a ``SparseCoreTableLayouts`` message, in table-name order (as saved)."""
    records = [LayoutRecord(
        table_name=t.table_name, stacked_table_name=t.stacked_table_name,
        num_sparse_cores=t.num_sparse_cores, num_partitions=t.num_partitions,
        total_rows_per_sparse_core_shard=t.total_rows_per_sparse_core_shard,
        unsharded_shape=(t.unsharded_shape[0], t.unsharded_shape[1]),
        unsharded_padded_shape=(t.unsharded_padded_shape[0], t.unsharded_padded_shape[1]),
        sparse_core_shard_row_offset=t.sparse_core_shard_row_offset,
        sparse_core_shard_rotation=t.sparse_core_shard_rotation,
        per_sparse_core_batch_size=t.per_sparse_core_batch_size,
        num_features=t.num_features) for t in layouts.tables]
    return tuple(sorted(records, key=lambda r: r.table_name))


def saved_layouts(layouts: SparseCoreTableLayouts) -> SparseCoreTableLayouts:
    """What ``TPUEmbeddingV2`` saves under :data:`LAYOUTS_KEY` for the stacker's ``layouts``:
    the same table layouts in table-name order (its ``embedding_layouts`` dict is filled from the
    tables sorted by name); ``.SerializeToString()`` gives the checkpoint's bytes."""
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts as Layouts

    out = Layouts()
    out.tables.extend(sorted(layouts.tables, key=lambda t: t.table_name))
    return out


# --- views --------------------------------------------------------------------------------------

def view_of_stacking(stacking: Stacking, slots: Mapping[str, Sequence[str]], *,
                     object_path: str = DEFAULT_OBJECT_PATH) -> CheckpointView:
    """``TPUEmbeddingV2``'s checkpoint for ``stacking`` (TensorFlow's: ``mode="tensorflow"``):
    per stack a variable of its padded shape and one per slot of the optimizer of its first
    table by name (``slots``: table -> slot names)."""
    variables = []
    layouts = []
    for stacked in stacking.stacks:
        tables = tuple(t.name for t in stacked.tables)
        first = min(tables)
        shape = (stacked.padded_vocabulary_size, stacked.padded_dim)
        variables.append(CheckpointVariable(stacked.name, tables, PARAMETERS, shape))
        variables += [CheckpointVariable(f"{stacked.name}/{slot}", tables, slot, shape)
                      for slot in slots.get(first, ())]
        layouts += [layout_of(stacking, stacked.name, t) for t in stacked.tables]
    return CheckpointView("sparsecore", tuple(variables),
                          tuple(sorted(layouts, key=lambda r: r.table_name)), object_path)


def view_of_sparsecore(config: SparseCoreConfig, stacking: Stacking | None = None, *,
                       object_path: str = DEFAULT_OBJECT_PATH) -> CheckpointView:
    """:func:`view_of_stacking` of a SparseCore configuration (its stacking by default), each
    table's slots those of its optimizer's algorithm."""
    if stacking is None:
        stacking = stack(config)
    slots = {t.name: slot_names(t.optimizer.algorithm) for t in config.tables}
    return view_of_stacking(stacking, slots, object_path=object_path)


def view_of_tables(tables: Iterable[tuple[str, int, int, Sequence[str]]], *,
                   object_path: str = DEFAULT_OBJECT_PATH) -> CheckpointView:
    """The mid-level API's checkpoint (``TPUEmbedding``, ``TPUEmbeddingForServing``): per
    (name, vocabulary_size, dim, slot names) a variable named as the table and one per slot."""
    variables = []
    for name, rows, dim, slots in tables:
        variables.append(CheckpointVariable(name, (name,), PARAMETERS, (rows, dim)))
        variables += [CheckpointVariable(f"{name}/{slot}", (name,), slot, (rows, dim))
                      for slot in slots]
    return CheckpointView("unsharded", tuple(variables), (), object_path)


def view_of_legacy(config: Any, *, object_path: str = DEFAULT_OBJECT_PATH) -> CheckpointView:
    """:func:`view_of_tables` of a legacy ``TPUEmbeddingConfiguration``: each table's slots those
    of its ``optimization_parameters`` algorithm."""
    rows = []
    for table in config.table_descriptor:
        params = table.optimization_parameters
        algorithm = (params.WhichOneof("parameters")
                     if table.HasField("optimization_parameters") else None)
        rows.append((table.name, table.vocabulary_size, table.dimension,
                     slot_names(algorithm) if algorithm else ()))
    return view_of_tables(rows, object_path=object_path)


# --- the verdicts -------------------------------------------------------------------------------

def checkpoint_verdicts(old: CheckpointView, new: CheckpointView, *,
                        after_build: bool = False) -> CheckpointReport:
    """What TensorFlow 2.21 does restoring a checkpoint of ``old`` into ``new``: one verdict per
    NEW variable, then one per OLD variable that nothing takes. Before ``build()``
    (restore-on-create) by default; ``after_build``: NEW's variables exist when the restore runs,
    so no reshard callback is used (``_queue_children_for_restoration`` binds existing children
    as they are) although the adapter is still asked (and still refuses another table set)."""
    differs = False
    if new.kind == "sparsecore":
        if old.kind == "sparsecore":
            old_tables = {t.table_name for t in old.layouts}
            new_tables = {t.table_name for t in new.layouts}
            if old_tables != new_tables:
                return _table_set(old, new, old_tables, new_tables)
            differs = old.layouts != new.layouts
        else:
            differs = True
    if not differs:
        return _plain(old, new, "not_applicable")
    if after_build:
        return _plain(old, new, "bypassed")
    return _adapter(old, new)


def _report(verdicts: list[VariableVerdict], adapter: str,
            old_state: set[tuple[str, str]]) -> CheckpointReport:
    failed = [v for v in verdicts if v.outcome == "fails"]
    if failed:
        return CheckpointReport("fails", adapter, tuple(verdicts), failed[0].reason)
    wrong = any(v.outcome == "lost" and any((t, _slot(v.variable)) in old_state
                                            for t in v.tables)
                and v.cause not in ("slot_dropped", "dropped") for v in verdicts)
    if wrong:
        return CheckpointReport("wrong", adapter, tuple(verdicts))
    return CheckpointReport("reshards" if adapter == "applied" else "restores", adapter,
                            tuple(verdicts))


def _slot(name: str) -> str:
    return name.split("/", 1)[1] if "/" in name else PARAMETERS


def _dropped(old: CheckpointView, taken: set[str]) -> list[VariableVerdict]:
    """OLD's variables nothing in NEW takes: their state is dropped."""
    out = []
    for v in old.variables:
        if v.name in taken:
            continue
        slot = v.slot != PARAMETERS
        out.append(VariableVerdict(
            v.name, v.tables, "lost", "",
            f"{'slot' if slot else 'variable'} {v.name!r} of the checkpoint has no variable of "
            f"its name under NEW: its state is dropped", "slot_dropped" if slot else "dropped"))
    return out


def _moved_rows(old: CheckpointView, new: CheckpointView, tables: Sequence[str]) -> list[str]:
    """The tables whose rows a byte-for-byte copy of a stacked variable does not put where NEW
    looks for them: another SparseCore count, row offset or rotation, or more rows than OLD had
    (NEW's extra rows are OLD's padding)."""
    before = {t.table_name: t for t in old.layouts}
    after = {t.table_name: t for t in new.layouts}
    moved = []
    for table in tables:
        o, n = before.get(table), after.get(table)
        if o is None or n is None:
            continue
        if (o.num_sparse_cores, o.sparse_core_shard_row_offset, o.sparse_core_shard_rotation,
                o.unsharded_shape[1]) != (n.num_sparse_cores, n.sparse_core_shard_row_offset,
                                          n.sparse_core_shard_rotation, n.unsharded_shape[1]) \
                or n.unsharded_shape[0] > o.unsharded_shape[0]:
            moved.append(table)
    return moved


def _plain(old: CheckpointView, new: CheckpointView, adapter: str) -> CheckpointReport:
    """No reshard: each NEW variable restores from the checkpoint variable of its name."""
    verdicts = []
    old_state = set(old.table_shapes())
    for v in new.variables:
        was = old.variable(v.name)
        had = any((t, v.slot) in old_state for t in v.tables)
        if was is None:
            bypassed = adapter == "bypassed"
            why = (": the variables existed before the restore, so the adapter did not reshard"
                   if bypassed else ": it is stored under other names")
            verdicts.append(VariableVerdict(
                v.name, v.tables, "lost" if had else "initialized", "",
                f"the checkpoint has no {v.name!r}: it keeps its initial values (its tables' "
                f"state is not restored{why})" if had
                else f"the checkpoint has no {v.name!r}: it starts from its initializer",
                ("after_build" if bypassed else "not_in_checkpoint") if had
                else "new_variable"))
        elif was.shape != v.shape:
            verdicts.append(VariableVerdict(
                v.name, v.tables, "fails", "",
                f"{v.name!r} is {list(was.shape)} in the checkpoint and {list(v.shape)} under "
                "NEW: the restore raises (the shapes are not compatible)", "shape"))
        elif moved := _moved_rows(old, new, v.tables):
            # one verdict for the tables whose rows move, one for those that stay in place
            verdicts.append(VariableVerdict(
                v.name, tuple(moved), "lost", "",
                f"{v.name!r} is copied as it is, but the rows of "
                f"{', '.join(map(repr, moved))} sit elsewhere under NEW's layout: the variables "
                "existed before the restore, so the adapter did not reshard", "after_build"))
            kept = tuple(t for t in v.tables if t not in moved)
            if kept:
                verdicts.append(VariableVerdict(
                    v.name, kept, "restores", "",
                    f"the rows of {', '.join(map(repr, kept))} in {v.name!r} stay in place",
                    "same"))
        else:
            verdicts.append(VariableVerdict(v.name, v.tables, "restores", "",
                                            f"{v.name!r} restores as it is", "same"))
    taken = {v.name for v in new.variables}
    verdicts += _dropped(old, taken)
    return _report(verdicts, adapter, old_state)


def _table_set(old: CheckpointView, new: CheckpointView, old_tables: set[str],
               new_tables: set[str]) -> CheckpointReport:
    added = sorted(new_tables - old_tables)
    removed = sorted(old_tables - new_tables)
    what = "; ".join(part for part in (
        f"added {', '.join(map(repr, added))}" if added else "",
        f"removed {', '.join(map(repr, removed))}" if removed else "") if part)
    reason = (f"the tables differ ({what}): TensorFlow 2.21's adapter refuses the whole restore "
              "(ValueError: Layouts in checkpoint and embedding must have the same keys)")
    verdicts = [VariableVerdict(v.name, v.tables, "fails", "", reason, "table_set")
                for v in new.variables]
    return CheckpointReport("fails", "error", tuple(verdicts), reason, (*added, *removed))


def _how(old: CheckpointView, stack: str, layouts: Sequence[LayoutRecord]) -> str:
    if old.kind != "sparsecore":
        return "from_unsharded"
    before = {t.table_name: t for t in old.layouts}
    kinds = []
    checks = (("topology", ("num_sparse_cores", "num_partitions")),
              ("row_offset", ("sparse_core_shard_row_offset",)),
              ("rotation", ("sparse_core_shard_rotation",)),
              ("padding", ("total_rows_per_sparse_core_shard", "unsharded_padded_shape",
                           "unsharded_shape")),
              ("layout_fields", ("per_sparse_core_batch_size", "num_features")))
    for kind, fields in checks:
        if any(getattr(before[t.table_name], f) != getattr(t, f) for t in layouts for f in fields
               if t.table_name in before):
            kinds.append(kind)
    return "+".join(kinds) or "same_layout"


def _shard_rows(layouts: Sequence[LayoutRecord], rows: Mapping[str, int]) -> list[int] | None:
    """Rows ``_shard_from_cpu_to_sc`` gives each partition when table ``t`` arrives with
    ``rows[t]`` rows before NEW's padding is added; None when the tables' widths differ."""
    first = layouts[0]
    cores = first.num_sparse_cores
    per_partition = cores // first.num_partitions
    out = []
    for partition in range(first.num_partitions):
        total = 0
        for sc in range(partition * per_partition, (partition + 1) * per_partition):
            for t in layouts:
                height = rows[t.table_name] + t.unsharded_padded_shape[0] - t.unsharded_shape[0]
                offset = (sc + cores - t.sparse_core_shard_rotation) % cores
                total += max(0, -(-(height - offset) // cores))
        out.append(total)
    return out


def _reshard_stack(stack: str, layouts: Sequence[LayoutRecord], shapes: Mapping[str, Any],
                   how: str) -> tuple[str, str, str]:
    """(outcome, reason, cause) of resharding ``stack`` from tables of ``shapes`` (OLD's)."""
    changed = [t for t in layouts if tuple(shapes[t.table_name]) != t.unsharded_shape]
    if not changed:
        if how == "same_layout":
            return ("reshards", f"the adapter reshards {stack!r} to its unchanged layout "
                    "(is_layouts_same compares every table's layout at once, and another's "
                    "changed)", "reshard")
        return "reshards", f"the adapter reshards {stack!r} ({how.replace('+', ', ')})", "reshard"
    names = ", ".join(f"{t.table_name!r} {list(shapes[t.table_name])} -> "
                      f"{list(t.unsharded_shape)}" for t in changed)
    widths = {shapes[t.table_name][1] + t.unsharded_padded_shape[1] - t.unsharded_shape[1]
              for t in layouts}
    rows = _shard_rows(layouts, {t.table_name: shapes[t.table_name][0] for t in layouts})
    expected = layouts[0].total_rows_per_sparse_core_shard * (
        layouts[0].num_sparse_cores // layouts[0].num_partitions)
    if widths != {layouts[0].unsharded_padded_shape[1]} or rows is None or any(
            r != expected for r in rows):
        return ("fails", f"table shape changed inside {stack!r} ({names}): the adapter pads the "
                "checkpoint's rows with NEW's padding and builds a tensor of the wrong size "
                "(ValueError: the initial value's shape is not compatible)", "shape")
    return ("lost", f"table shape changed inside {stack!r} ({names}): the sizes happen to add "
            "up, so the rows land in the wrong places without an error", "shape")


def _adapter(old: CheckpointView, new: CheckpointView) -> CheckpointReport:
    """The adapter reshards (TensorFlow 2.21 ``TpuEmbeddingV3CheckpointAdapter``)."""
    stacks = new.stacks()
    old_shapes = old.table_shapes()
    sharded = old.kind == "sparsecore"
    # the checkpoint child each NEW stack restores from: its own name (sharded) or its first
    # table's (unsharded: EmbeddingUnshardToShardCallback is keyed by the first table)
    source = {s: (s if sharded else ls[0].table_name) for s, ls in stacks.items()}
    callbacks = set(source.values())
    verdicts: list[VariableVerdict] = []
    taken: set[str] = set()
    for name, layouts in stacks.items():
        tables = tuple(t.table_name for t in layouts)
        how = _how(old, name, layouts)
        src = old.variable(source[name])
        if src is None:
            had = [t for t in tables if (t, PARAMETERS) in old_shapes]
            outcome = "lost" if had else "initialized"
            where = ("a checkpoint variable of the stack's name" if sharded
                     else f"the checkpoint variable of its first table {source[name]!r}")
            verdicts.append(VariableVerdict(
                name, tables, outcome, how,
                f"the adapter restores {name!r} only from {where}, which the checkpoint does "
                f"not have: {name!r} keeps its initial values" + (
                    f" (the state of {', '.join(map(repr, had))} is not restored)" if had
                    else ""), "not_in_checkpoint"))
        else:
            taken.add(src.name)
            if not sharded:  # the other tables' variables are read through the rewritten keys
                taken.update(tables)
            verdicts.append(_restack(old, name, layouts, src, how, old_shapes))
        for v in new.variables:
            if v.name.startswith(f"{name}/"):
                had_slot = any((t, v.slot) in old_shapes for t in tables)
                verdicts.append(VariableVerdict(
                    v.name, tables, "lost" if had_slot else "initialized", how,
                    f"slot {v.name!r} is not restored: TensorFlow 2.21's adapter files every "
                    f"checkpoint child 'X/slot' under the callback of 'X' (get_reshard_callback "
                    f"strips '/slot'), so the slot keeps its initial values"
                    if had_slot else f"the checkpoint has no {v.slot!r} for {name!r}: it starts "
                    "from its initializer", "slot_deferred" if had_slot else "new_variable"))
    # a slot child whose stack has a callback is consumed there (merged into the stack)
    for v in old.variables:
        if v.name.split("/")[0] in callbacks and v.slot != PARAMETERS:
            taken.add(v.name)
    verdicts += [d for d in _dropped(old, taken) if d.variable not in taken]
    return _report(verdicts, "applied", set(old_shapes))


def _restack(old: CheckpointView, name: str, layouts: Sequence[LayoutRecord],
             src: CheckpointVariable, how: str,
             old_shapes: Mapping[tuple[str, str], tuple[int, int]]) -> VariableVerdict:
    tables = tuple(t.table_name for t in layouts)
    missing = [t for t in tables if (t, PARAMETERS) not in old_shapes]
    if old.kind != "sparsecore":
        # EmbeddingUnshardToShardCallback.update_restore_inputs: the other tables' keys are the
        # first table's key with its name replaced by theirs (str.replace, every occurrence)
        key = checkpoint_key(old.object_path, src.name)
        for table in tables[1:]:
            made = key.replace(src.name, table)
            if made != checkpoint_key(old.object_path, table):
                return VariableVerdict(
                    name, tables, "fails", how,
                    f"the adapter makes table {table!r}'s key by replacing {src.name!r} in "
                    f"{key!r}: {made!r} (the name occurs elsewhere in the key), which the "
                    "checkpoint does not have (KeyError)", "key_rewrite")
        if missing:
            return VariableVerdict(
                name, tables, "fails", how,
                f"the checkpoint has no variable for table(s) {', '.join(map(repr, missing))} "
                f"of {name!r} (KeyError)", "not_in_checkpoint")
        shapes = {t: old_shapes[(t, PARAMETERS)] for t in tables}
        changed = [t for t in layouts if tuple(shapes[t.table_name]) != t.unsharded_shape]
        if changed:
            return VariableVerdict(
                name, tables, "fails", how,
                f"table {changed[0].table_name!r} is {list(shapes[changed[0].table_name])} in "
                f"the checkpoint and {list(changed[0].unsharded_shape)} under NEW: the adapter "
                "reads it with NEW's shape (restore_v2 raises)", "shape")
        return VariableVerdict(name, tables, "reshards", how,
                               f"the adapter shards the unsharded tables into {name!r}",
                               "reshard")
    shapes = {t: old_shapes[(t, PARAMETERS)] for t in tables}
    outcome, reason, cause = _reshard_stack(name, layouts, shapes, how)
    return VariableVerdict(name, tables, outcome, how, reason, cause)
