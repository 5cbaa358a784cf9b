"""``tpuemb diff --breaking``'s findings (CKPT): what restoring a checkpoint written under OLD does
under NEW, as TensorFlow 2.21 does it (docs/diff/checkpoints.md).

The facts are :class:`tpuemb_cfg.model.checkpoint.CheckpointReport` records
(``checkpoint_verdicts(old_view, new_view)``); :func:`checkpoint_findings` runs every CKPT rule
on a report. Each verdict carries its ``cause``; each cause is one rule, so every pitfall of
TensorFlow's checkpoint adapter seen on a CPU has its own id. The findings sit at NEW's table
(``tables["name"]``; OLD's when NEW has no such table).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.model.checkpoint import CheckpointReport, VariableVerdict
from tpuemb_cfg.rules._registry import RULES, DiffContext, Rule, rule, run_on_facts
from tpuemb_cfg.rules._sparsecore_common import _table

__all__ = ["checkpoint_findings", "checkpoint_rules"]


def checkpoint_rules() -> list[Rule]:
    """The registered CKPT rules, in id order."""
    return [RULES[rule_id] for rule_id in sorted(RULES)
            if RULES[rule_id].target == "diff" and rule_id.startswith("CKPT")]


def checkpoint_findings(reports: Iterable[CheckpointReport], *,
                        options: dict[str, object] | None = None) -> list[Diagnostic]:
    """Every CKPT rule on each report in turn."""
    return run_on_facts(checkpoint_rules(), reports, DiffContext, options=options)


def _verdicts(ctx: DiffContext, cause: str) -> Iterator[VariableVerdict]:
    report = ctx.fact
    if isinstance(report, CheckpointReport):
        yield from (v for v in report.verdicts if v.cause == cause)


def _at(verdict: VariableVerdict) -> str:
    return _table(verdict.tables[0]) if verdict.tables else "tables"


def _each(ctx: DiffContext, cause: str) -> Iterator[Diagnostic]:
    for verdict in _verdicts(ctx, cause):
        named = repr(verdict.variable) in verdict.reason
        yield ctx.diag(_at(verdict), verdict.reason if named
                       else f"{verdict.variable!r}: {verdict.reason}")


@rule("CKPT001", "error", "the tables differ: TensorFlow 2.21 refuses to restore the SparseCore "
      "checkpoint at all", target="diff")
def table_set_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table added, removed or renamed between two SparseCore configurations of
    TensorFlow's `TPUEmbeddingV2`: the checkpoint's layouts (`_sparse_core_table_layouts`) and
    NEW's name different tables.

    ## Why is this bad?
    `TpuEmbeddingV3CheckpointAdapter.is_layouts_same`
    (tensorflow/python/tpu/tpu_embedding_v3_checkpoint_adapter.py, TensorFlow 2.21) compares the
    table names first and raises `ValueError: Layouts in checkpoint and embedding must have the
    same keys`: no variable of the embedding restores, not even the tables that did not change.
    It raises also when the restore runs after `build()`.

    ## Example
    ```
    query = TableConfig(vocabulary_size=64, dim=8, name="query")  # added to the model
    ```

    ## Use instead
    Restore the old checkpoint under the old configuration and re-save it table by table (on the
    CPU, with `TPUEmbeddingForServing`), then load the tables into the new model; or keep the
    table set and change it in a separate, fresh training run.

    Spec: diff/checkpoints.md section findings
    """
    verdicts = list(_verdicts(ctx, "table_set"))
    if verdicts:
        changed = ctx.fact.changed_tables if isinstance(ctx.fact, CheckpointReport) else ()
        yield ctx.diag(_table(changed[0]) if changed else _at(verdicts[0]), verdicts[0].reason)


@rule("CKPT002", "error", "a table's shape changes: the restore raises (or, when the sizes add "
      "up, puts rows in the wrong places)", target="diff")
def shape_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table whose vocabulary size or width changed while its variable is restored: a
    stacked variable resharded by the adapter, a stacked or mid-level variable restored as it
    is, or an unsharded table sharded onto SparseCores.

    ## Why is this bad?
    Without the adapter a variable restores only at its saved shape (the restore raises). With
    it, `_shard_from_cpu_to_sc` (tensorflow/python/tpu/tpu_embedding_v3_checkpoint_adapter.py,
    TensorFlow 2.21) pads the checkpoint's rows with NEW's padding
    (`unsharded_padded_shape - unsharded_shape` of NEW), so a table of another size yields a
    tensor of the wrong size: `ValueError: ... the initial value's shape ... is not compatible`.
    A vocabulary change inside the padding (the padded rows unchanged) fails the same way. From
    an unsharded checkpoint, `EmbeddingUnshardToShardCallback` reads each table at NEW's shape
    and `restore_v2` raises.

    ## Example
    ```
    item = TableConfig(vocabulary_size=256, dim=8, name="item")  # was 128
    ```

    ## Use instead
    Keep the shape, or convert the checkpoint yourself: unshard the old stacked variable with
    the old layouts, grow or cut the table, and save it unsharded for the new model.

    Spec: diff/checkpoints.md section findings
    """
    return _each(ctx, "shape")


@rule("CKPT003", "error", "a stacked variable is not in the checkpoint: the adapter restores "
      "nothing into it (silently)", target="diff")
def stack_not_in_checkpoint(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a stacked table of NEW that the checkpoint has no variable for while its tables
    were saved elsewhere: stacking turned on or off, a table moved to another stack (a new
    width or optimizer), or, from an unsharded checkpoint, a stack whose first table is missing.

    ## Why is this bad?
    `TpuEmbeddingV3CheckpointAdapter.initialize_reshard_callbacks`
    (tensorflow/python/tpu/tpu_embedding_v3_checkpoint_adapter.py, TensorFlow 2.21) keys a
    callback by NEW's stacked name, and `get_reshard_callback` is asked with the checkpoint's
    names: a checkpoint variable of another name gets no callback, is filed under its own name,
    and nothing reads it. NEW's variable keeps its initial values and the restore says nothing
    (only `assert_consumed()` would).

    ## Example
    ```
    sparse_core_config = SparseCoreEmbeddingConfig(disable_table_stacking=True)  # was False
    ```

    ## Use instead
    Keep the stacking, or convert the checkpoint: unshard each old stacked variable with the
    old layouts (`_unshard_from_sc_to_cpu`) and save the tables unsharded, which NEW then
    shards.

    Spec: diff/checkpoints.md section findings
    """
    return _each(ctx, "not_in_checkpoint")


@rule("CKPT004", "error", "the adapter reshards, and TensorFlow 2.21 then restores no optimizer "
      "slot (silently)", target="diff")
def slots_not_resharded(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports each optimizer slot variable (`stack/accumulators`, `stack/momenta`, ...) that the
    checkpoint has and that NEW needs resharded: any change of the layouts (topology, offsets,
    rotations, a batch size or `num_features`) or an unsharded checkpoint.

    ## Why is this bad?
    `TpuEmbeddingV3CheckpointAdapter.get_reshard_callback`
    (tensorflow/python/tpu/tpu_embedding_v3_checkpoint_adapter.py, TensorFlow 2.21) finds a
    slot's callback by the part of its name before `/`, and `maybe_reshard`
    (tensorflow/python/checkpoint/checkpoint_adapter.py) then files the slot under the callback's
    object name, the stack's: the slot's value is queued for the parameters variable, which is
    restored from its own, and `stack/accumulators` keeps its initial values. Training resumes
    with reset accumulators (Adagrad takes large steps again), without an error.

    ## Example
    ```
    topology = "v6e:4"  # was "v5p:2", with Adagrad
    ```

    ## Use instead
    Keep the layouts, or reshard the checkpoint offline (unshard with the old layouts, shard
    with the new ones) for the slots as well, or accept that the slots restart.

    Spec: diff/checkpoints.md section findings
    """
    return _each(ctx, "slot_deferred")


@rule("CKPT005", "error", "the adapter rewrites checkpoint keys by string replacement, and a "
      "table name inside the key corrupts it", target="diff")
def key_rewrite(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a stack of NEW restored from an unsharded checkpoint (the mid-level API,
    `TPUEmbeddingForServing`) whose first table's name occurs elsewhere in its checkpoint key: in
    the object path (`embedding/`, `embedding_layer/`) or in `/.ATTRIBUTES/VARIABLE_VALUE`. The
    object path is `embedding` unless the caller says otherwise.

    ## Why is this bad?
    `EmbeddingUnshardToShardCallback.update_restore_inputs`
    (tensorflow/python/tpu/tpu_embedding_v3_checkpoint_adapter.py, TensorFlow 2.21) makes each
    other table's key with `checkpoint_key.replace(first_table, table)`, every occurrence: a
    table named `a` under `embedding_layer/` asks for `embedding_labyer/ab/...`, a table `e`
    under `embedding/` for `xmbxdding/x/...`, and the restore raises `KeyError`.

    ## Example
    ```
    a = TableConfig(vocabulary_size=64, dim=8, name="a")
    ab = TableConfig(vocabulary_size=64, dim=8, name="ab")  # stacked with 'a', 'a' first
    ```

    ## Use instead
    Name tables so that no first table of a stack occurs in the object path or the key suffix
    (`user_id` rather than `a`), or save the unsharded checkpoint under an object path without
    it.

    Spec: diff/checkpoints.md section findings
    """
    return _each(ctx, "key_rewrite")


@rule("CKPT006", "warning", "an optimizer slot of the checkpoint has no place under NEW: its "
      "state is dropped", target="diff")
def slot_dropped(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a slot variable of the checkpoint that no variable of NEW takes: the optimizer
    changed (Adagrad to SGD drops `accumulators`, Adagrad to Adam drops it for `momenta` and
    `velocities`), or its stack is gone.

    ## Why is this bad?
    A restore matches variables by name (tensorflow/python/checkpoint/restore.py,
    `_queue_children_for_restoration`); a checkpoint value nothing asks for is ignored
    without an error (`expect_partial()` silences the warning). The optimizer's history is lost.

    ## Example
    ```
    optimizer = SGD(learning_rate=0.1)  # was Adagrad(learning_rate=0.1)
    ```

    ## Use instead
    Keep the optimizer for a resumed run, or accept a fresh optimizer state on purpose.

    Spec: diff/checkpoints.md section findings
    """
    return _each(ctx, "slot_dropped")


@rule("CKPT007", "warning", "a variable of the checkpoint has no variable of its name under NEW: "
      "its table's state is dropped", target="diff")
def variable_dropped(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table variable (or stacked variable) of the checkpoint that no variable of NEW
    takes: a mid-level API table removed or renamed, or an old stack that NEW no longer has.

    ## Why is this bad?
    TensorFlow restores by name (tensorflow/python/checkpoint/restore.py,
    `_queue_children_for_restoration`); the renamed table starts from its initializer and the old
    values are ignored without an error.

    ## Example
    ```
    users = TableConfig(vocabulary_size=64, dim=8, name="users")  # was name="user"
    ```

    ## Use instead
    Keep the table's name, or rename the variable in the checkpoint (read it with
    `tf.train.load_checkpoint` and save it under the new name).

    Spec: diff/checkpoints.md section findings
    """
    return _each(ctx, "dropped")


@rule("CKPT008", "info", "a variable of NEW has nothing in the checkpoint: it starts from its "
      "initializer", target="diff")
def new_variable(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a variable of NEW for which the checkpoint holds no state: a slot of a new optimizer
    (SGD to Adagrad adds `accumulators`) or a new table of the mid-level API.

    ## Why is this bad?
    Nothing is lost, but the variable starts from its initializer
    (`TPUEmbeddingV2._create_variables`, tensorflow/python/tpu/tpu_embedding_v3.py, TensorFlow
    2.21; the optimizer's `_slot_initializers` in tpu_embedding_v2_utils.py): an Adagrad
    accumulator at `initial_accumulator_value`, Adam's moments at 0.

    ## Example
    ```
    optimizer = Adagrad(learning_rate=0.1)  # was SGD(learning_rate=0.1)
    ```

    ## Use instead
    Nothing to change if a fresh state is intended.

    Spec: diff/checkpoints.md section findings
    """
    return _each(ctx, "new_variable")


@rule("CKPT009", "warning", "the checkpoint needs a reshard: restore it before the embedding is "
      "built", target="diff")
def needs_reshard(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports each stacked variable that the adapter reshards: the SparseCore layouts differ
    (another topology, row offsets or rotations, padding, or only `per_sparse_core_batch_size` /
    `num_features`, which TensorFlow 2.21 writes for the first feature's table), or the
    checkpoint is unsharded. The finding says what changed.

    ## Why is this bad?
    `TpuEmbeddingV3CheckpointAdapter.is_layouts_same`
    (tensorflow/python/tpu/tpu_embedding_v3_checkpoint_adapter.py, TensorFlow 2.21) compares whole
    layout protos, so a batch-size change of the first feature reshards every stack. The
    reshard happens only when `tf.train.Checkpoint.restore` runs before `build()`
    (`_queue_children_for_restoration` gives callbacks to variables not created yet); after
    `build()` the stacked variables are copied as they are, and with another layout the rows land
    in the wrong places, or the restore raises on a new shape.

    ## Example
    ```
    topology = "v5p:4"  # was "v5p:2"
    ```

    ## Use instead
    Call `checkpoint.restore(path)` before the first call that builds the embedding, and read
    CKPT004 (the slots are not resharded).

    Spec: diff/checkpoints.md section findings
    """
    return _each(ctx, "reshard")


@rule("CKPT010", "error", "restored after build(): a stacked variable is copied without a "
      "reshard and its rows land in the wrong places", target="diff")
def copied_after_build(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    When the restore runs after `build()` (`checkpoint_verdicts(old, new, after_build=True)`),
    reports each stacked variable whose tables sit elsewhere under NEW's layout (another
    SparseCore count, row offset or rotation, or more rows), or that the checkpoint does not
    have.

    ## Why is this bad?
    Once the variables exist, `_queue_children_for_restoration`
    (tensorflow/python/checkpoint/restore.py, TensorFlow 2.21) binds each checkpoint variable to
    the variable of its name and restores it as it is: no reshard callback runs. Same shape,
    another layout: every row is read from the wrong SparseCore shard, without an error.

    ## Example
    ```
    embedding.build(); checkpoint.restore(path)  # topology "v6e:4", saved on "v5p:2"
    ```

    ## Use instead
    ```
    checkpoint.restore(path); embedding.build()
    ```

    Spec: diff/checkpoints.md section findings
    """
    return _each(ctx, "after_build")
