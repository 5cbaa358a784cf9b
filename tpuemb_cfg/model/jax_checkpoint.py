"""What a jax-tpu-embedding checkpoint holds, and what restoring it under a configuration does.

**The variables.** jax-tpu-embedding keeps per stacked table an ``EmbeddingVariables(table,
slot)``; its NNX layer holds them in ``embedding_table`` (a dict by stack name), so an Orbax
checkpoint of the model (``checkpoint_utils.save_checkpoint``: item ``model``) stores, under the
layer's pytree path (the *object path*, ``model/<layer>/embedding_table/value``),
``<stack>/table`` of ``(stack_vocab_size, stack_embedding_dim)`` and per slot of the stack's
optimizer ``<stack>/slot/<name>`` of the same shape. The slot names are jax-tpu-embedding's
(Adagrad ``accumulator``; Adam ``momentum`` and ``velocity``; ...:
``algorithms.table.JAX_SLOTS``). tpuemb names these variables as TensorFlow names a stacked
table's (``<stack>``, ``<stack>/<TensorFlow's slot name>``), so a JAX checkpoint is verified,
resharded and simulated from by the same code as a ``TPUEmbeddingV2`` one; :func:`jax_key` gives
the Orbax key of such a name.

**The layouts.** The stacking is stored beside the arrays as jax-tpu-embedding's
``EmbeddingSpecProto`` in text form (item ``embedding_spec``, ``proto.pbtxt``;
``protos/tpuemb_cfg/proto/embedding_spec.proto``). Its numbers are TensorFlow's layout in other
words (the unstacking of ``table_stacking._unshard_and_unstack_single_table`` is
``tpu_embedding_v3_utils``' arithmetic): per table ``num_sparse_cores`` = the stack's
``num_sparsecores``, ``total_rows_per_sparse_core_shard`` = ``stack_vocab_size /
num_sparsecores``, ``unsharded_shape`` = (``vocab_size``, ``embedding_dim``),
``unsharded_padded_shape`` = (``padded_vocab_size``, ``padded_embedding_dim``), row offset =
``row_offset_in_shard``, rotation = ``shard_rotation``. The proto has no partition count, batch
size or feature count: those three fields are 0 in a JAX layout (:func:`jax_layout`), on both
sides of a comparison.

**The restore** (``checkpoint_utils.restore_checkpoint``: Orbax's ``StandardRestore`` with the
model's state as the target; seen with orbax-checkpoint 0.12.8 on a CPU): a stack or slot one
side has and the other not raises ("tree structures do not match"), a shape change raises
("Requested shape ... is not compatible with the stored shape"), and equal shapes restore as they
are - even when a table's layout differs, whose rows then land on other ids without an error
(the stored spec is read back but not compared). jax-tpu-embedding's cross-topology restore
(``restore_cross_topology_checkpoint``) reshards tables; ``tpuemb checkpoint reshard`` does it
offline, slots included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.algorithms.table import JAX_PROTO_TYPES, JAX_SLOTS, slot_names
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.sparsecore.stacking import Stacking

from .checkpoint import (
    PARAMETERS,
    CheckpointReport,
    CheckpointVariable,
    CheckpointView,
    LayoutRecord,
    VariableVerdict,
    layout_of,
)

if TYPE_CHECKING:
    from tpuemb_cfg.proto.embedding_spec_pb2 import EmbeddingSpecProto

__all__ = ["JAX_SPEC_FILE", "jax_key", "jax_layout", "jax_restore", "jax_slot_name",
           "layouts_from_embedding_spec", "parse_embedding_spec", "restacked_spec",
           "spec_algorithms", "tensorflow_slot_name", "view_of_jax"]

#: Where jax-tpu-embedding's NNX ``save_checkpoint`` puts the stacking in a checkpoint step.
JAX_SPEC_FILE = "embedding_spec/proto.pbtxt"
#: The largest spec text read (a model of thousands of tables is a few MB).
SPEC_LIMIT = 64 << 20


def parse_embedding_spec(text: bytes | str, *, path: str) -> EmbeddingSpecProto:
    """jax-tpu-embedding's ``EmbeddingSpecProto`` from its text form; ``InputError`` naming the
    file, line and column when it does not parse."""
    from google.protobuf import text_format

    from tpuemb_cfg.proto.embedding_spec_pb2 import EmbeddingSpecProto

    if not isinstance(text, bytes | str):
        raise TypeError(f"the spec is bytes or str (its text form), not {type(text).__name__}")
    if len(text) > SPEC_LIMIT:
        raise InputError(f"is larger than {SPEC_LIMIT} bytes: not an embedding spec", path=path)
    try:
        source = text.decode("utf-8") if isinstance(text, bytes) else text
        return text_format.Parse(source, EmbeddingSpecProto())
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start}): expected jax-tpu-embedding's "
                         "EmbeddingSpecProto in text form", path=path) from None
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        message = str(exc).split(" : ", 1)[-1] if line else str(exc)
        raise InputError(f"not an EmbeddingSpecProto: {message}", path=path,
                         line=line or None, column=column or None) from None


def layouts_from_embedding_spec(spec: EmbeddingSpecProto, *, path: str = "<spec>"
                                ) -> tuple[LayoutRecord, ...]:
    """Every table's layout in ``spec`` as TensorFlow's record (see the module), in table-name
    order; ``InputError`` for numbers no layout can have (a stack's rows not a multiple of its
    SparseCores, a table wider than its stack, a name twice)."""
    records = []
    seen: set[str] = set()
    for stack in spec.stacked_table_specs:
        cores = int(stack.num_sparsecores)
        if cores <= 0 or stack.stack_vocab_size % cores:
            raise InputError(f"stack {stack.stack_name!r}: stack_vocab_size "
                             f"{stack.stack_vocab_size} is not a positive multiple of "
                             f"num_sparsecores {cores}", path=path)
        for table in stack.table_specs:
            if table.table_name in seen:
                raise InputError(f"table {table.table_name!r} is in the spec twice", path=path)
            seen.add(table.table_name)
            if table.padded_embedding_dim != stack.stack_embedding_dim:
                raise InputError(f"table {table.table_name!r}: padded_embedding_dim "
                                 f"{table.padded_embedding_dim}, its stack "
                                 f"{stack.stack_name!r} is {stack.stack_embedding_dim} wide",
                                 path=path)
            records.append(LayoutRecord(
                table_name=table.table_name, stacked_table_name=stack.stack_name,
                num_sparse_cores=cores, num_partitions=0,
                total_rows_per_sparse_core_shard=int(stack.stack_vocab_size) // cores,
                unsharded_shape=(int(table.vocab_size), int(table.embedding_dim)),
                unsharded_padded_shape=(int(table.padded_vocab_size),
                                        int(table.padded_embedding_dim)),
                sparse_core_shard_row_offset=int(table.row_offset_in_shard),
                sparse_core_shard_rotation=int(table.shard_rotation)))
    return tuple(sorted(records, key=lambda r: r.table_name))


def spec_algorithms(spec: EmbeddingSpecProto) -> dict[str, str]:
    """Table -> the algorithm of its optimizer in ``spec`` (tables of an optimizer tpuemb does
    not know - F2A, a custom one - are left out)."""
    from tpuemb_cfg.proto.embedding_spec_pb2 import OptimizerSpecProto

    out = {}
    for stack in spec.stacked_table_specs:
        for table in stack.table_specs:
            name = OptimizerSpecProto.OptimizerType.Name(table.optimizer.type)
            if name in JAX_PROTO_TYPES:
                out[table.table_name] = JAX_PROTO_TYPES[name]
    return out


def jax_layout(layout: LayoutRecord) -> LayoutRecord:
    """``layout`` with only the fields jax-tpu-embedding's spec stores (the others 0)."""
    return replace(layout, num_partitions=0, per_sparse_core_batch_size=0, num_features=0)


def tensorflow_slot_name(algorithm: str | None, name: str) -> str:
    """TensorFlow's name of jax-tpu-embedding's slot ``name`` of ``algorithm`` (``name`` itself
    when the algorithm or the slot is not known)."""
    jax_names = JAX_SLOTS.get(algorithm or "", ())
    if name in jax_names:
        return slot_names(algorithm or "")[jax_names.index(name)]
    return name


def jax_slot_name(algorithm: str | None, name: str) -> str:
    """jax-tpu-embedding's name of TensorFlow's slot ``name`` of ``algorithm`` (the inverse of
    :func:`tensorflow_slot_name`)."""
    tf_names = slot_names(algorithm or "")
    if name in tf_names and algorithm in JAX_SLOTS:
        return JAX_SLOTS[algorithm][tf_names.index(name)]
    return name


def jax_key(object_path: str, name: str, algorithm: str | None) -> str:
    """The Orbax key of variable ``name`` (``<stack>`` or ``<stack>/<TensorFlow slot>``) of a
    stack whose optimizer is ``algorithm``."""
    stack, _, slot = name.partition("/")
    prefix = f"{object_path}/" if object_path else ""
    if not slot:
        return f"{prefix}{stack}/table"
    return f"{prefix}{stack}/slot/{jax_slot_name(algorithm, slot)}"


def view_of_jax(stacking: Stacking, algorithms: Mapping[str, str], *, object_path: str
                ) -> CheckpointView:
    """The checkpoint jax-tpu-embedding saves for ``stacking`` (jax-tpu-embedding's own,
    ``mode="jax"``): per stack ``<stack>`` and one variable per slot of its first table's
    optimizer (``algorithms``: table -> algorithm), named as TensorFlow names them; layouts as
    :func:`jax_layout` keeps them."""
    variables = []
    layouts = []
    for stacked in stacking.stacks:
        tables = tuple(t.name for t in stacked.tables)
        shape = (stacked.padded_vocabulary_size, stacked.padded_dim)
        variables.append(CheckpointVariable(stacked.name, tables, PARAMETERS, shape))
        variables += [CheckpointVariable(f"{stacked.name}/{slot}", tables, slot, shape)
                      for slot in slot_names(algorithms.get(tables[0], ""))]
        layouts += [jax_layout(layout_of(stacking, stacked.name, t)) for t in stacked.tables]
    return CheckpointView("jax", tuple(variables),
                          tuple(sorted(layouts, key=lambda r: r.table_name)), object_path)


def jax_restore(old: CheckpointView, new: CheckpointView) -> CheckpointReport:
    """What jax-tpu-embedding's ``restore_checkpoint`` does restoring ``old`` (a checkpoint's
    view) into a model laid out as ``new`` (see the module): ``fails`` when the variables or a
    shape differ (Orbax raises), ``wrong`` when a table's layout differs under equal shapes (no
    error, rows on other ids), else ``restores``."""
    verdicts: list[VariableVerdict] = []
    old_names = {v.name for v in old.variables}
    new_names = {v.name for v in new.variables}
    old_layouts = {t.table_name: t for t in old.layouts}
    new_layouts = {t.table_name: t for t in new.layouts}
    for variable in new.variables:
        have = old.variable(variable.name)
        if have is None:
            verdicts.append(VariableVerdict(
                variable.name, variable.tables, "fails", "",
                "not in the checkpoint: Orbax's restore raises (the tree structures differ)",
                "table_set"))
        elif tuple(have.shape) != tuple(variable.shape):
            verdicts.append(VariableVerdict(
                variable.name, variable.tables, "fails", "",
                f"shape {list(have.shape)} in the checkpoint, {list(variable.shape)} in the "
                "model: Orbax's restore raises", "shape"))
        else:
            moved = [t for t in variable.tables
                     if old_layouts.get(t) is not None and old_layouts.get(t) != new_layouts.get(t)]
            moved += [t for t in variable.tables if t not in old_layouts and old.layouts]
            if moved:
                verdicts.append(VariableVerdict(
                    variable.name, variable.tables, "lost", "",
                    "same shape, other layout of " + ", ".join(moved) + ": restored without an "
                    "error, its rows land on other ids (reshard the checkpoint first)",
                    "reshard"))
            else:
                verdicts.append(VariableVerdict(variable.name, variable.tables, "restores", "",
                                                "the same shape and layouts", "same"))
    verdicts += [VariableVerdict(v.name, v.tables, "fails", "",
                                 "in the checkpoint, not in the model: Orbax's restore raises "
                                 "(the tree structures differ)", "table_set")
                 for v in old.variables if v.name not in new_names]
    error = ""
    if any(v.outcome == "fails" for v in verdicts):
        outcome = "fails"
        first = next(v for v in verdicts if v.outcome == "fails")
        error = f"{first.variable}: {first.reason}"
    elif any(v.outcome == "lost" for v in verdicts):
        outcome = "wrong"
    else:
        outcome = "restores"
    changed = tuple(sorted(new_names - old_names)) + tuple(sorted(old_names - new_names))
    return CheckpointReport(outcome, "not_applicable", tuple(verdicts), error, changed)



def restacked_spec(source: EmbeddingSpecProto, stacking: Stacking,
                   features: Mapping[str, Sequence[int]] | None = None) -> EmbeddingSpecProto:
    """The spec jax-tpu-embedding's cross-topology converter writes beside ``source``'s tables
    restacked as ``stacking`` (jax-tpu-embedding's own, ``mode="jax"``): each table's and
    feature's spec kept (optimizer, combiner, shapes; ``features``: feature name -> new
    (input_shape, output_shape) when the batch changed) with the new layout fields and the
    table's shape (a reshard with ``resize``); stacks in the
    order their first feature comes, tables and features in feature order (as
    ``create_proto_from_feature_specs`` lists a flattened dict of feature specs); each stack's
    ``activation_mem_bytes_limit`` the source's first stack's. ``InputError`` for a table or
    feature ``source`` does not have."""
    from tpuemb_cfg.proto.embedding_spec_pb2 import EmbeddingSpecProto as Spec

    tables = {t.table_name: t for s in source.stacked_table_specs for t in s.table_specs}
    feature_specs = {f.feature_name: f for t in tables.values() for f in t.feature_specs}
    activation = (source.stacked_table_specs[0].activation_mem_bytes_limit
                  if source.stacked_table_specs else 0)
    out = Spec()
    stacks: dict[str, Any] = {}
    placed: dict[str, Any] = {}
    n = stacking.num_sparse_cores
    for slot in stacking.features:
        stack = stacking.stack(slot.stack)
        if slot.table not in tables or slot.name not in feature_specs:
            missing = slot.table if slot.table not in tables else slot.name
            raise InputError(f"{missing!r} is not in the checkpoint's embedding spec: its "
                             "tables and features are restacked, none added")
        if stack.name not in stacks:
            stacks[stack.name] = out.stacked_table_specs.add(
                stack_name=stack.name, stack_vocab_size=stack.padded_vocabulary_size,
                stack_embedding_dim=stack.padded_dim,
                total_sample_count=stack.total_sample_count,
                max_ids_per_partition=stack.max_ids_per_partition,
                max_unique_ids_per_partition=stack.max_unique_ids_per_partition,
                num_sparsecores=n, activation_mem_bytes_limit=activation)
        if slot.table not in placed:
            place = next(t for t in stack.tables if t.name == slot.table)
            table = stacks[stack.name].table_specs.add()
            table.CopyFrom(tables[slot.table])
            del table.feature_specs[:]
            table.vocab_size, table.embedding_dim = place.vocabulary_size, place.dim  # --resize
            table.padded_vocab_size = place.padded_vocabulary_size
            table.padded_embedding_dim = place.padded_dim
            table.row_offset_in_shard = place.row_offset_in_shard
            table.shard_rotation = place.shard_rotation
            placed[slot.table] = table
        feature = placed[slot.table].feature_specs.add()
        feature.CopyFrom(feature_specs[slot.name])
        if features is not None and slot.name in features:
            shapes = features[slot.name]
            del feature.input_shape[:], feature.output_shape[:]
            feature.input_shape.extend(shapes[0])
            feature.output_shape.extend(shapes[1])
        feature.row_offset, feature.col_offset = slot.row_offset, slot.col_offset
        feature.col_shift = slot.col_shift
    return out
