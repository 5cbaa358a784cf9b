"""``tpuemb diff``'s findings (DIFF): rules of the one registry, run on the differences found.

``tpuemb_cfg.review`` (a higher layer) compares two configurations and hands each difference
here as a :class:`Change` record; :func:`diff_findings` runs every ``target="diff"`` rule on each
in turn, so the findings come out in the order of the changes, each at NEW's line (a removed
entry at OLD's, named in the message). A rule decides whether the change is its kind and words
the finding; the checkpoint verdicts have their own family (CKPT, :mod:`.checkpoint`). This
module never imports the review layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tpuemb_cfg.model import Diagnostic, Severity
from tpuemb_cfg.rules._registry import RULES, DiffContext, Rule, rule, run_on_facts

__all__ = ["Change", "Location", "diff_findings", "diff_rules"]

#: ``(path, line, column)``, 1-based (column 1 when only the line is known).
Location = tuple[str, int, int]


@dataclass(frozen=True)
class Change:
    """One difference between OLD and NEW.

    ``subject``: what it is about - ``table``, ``feature``, ``optimizer``, ``hyper_parameter``,
    ``learning_rate``, ``setting``, ``limit`` (a limit as written), ``topology`` (what the
    configurations say), or ``stack``, ``stack_limit`` (a stacked table's limits as
    preprocessing applies them), ``memory``, ``finding``, ``load`` (what it does on the TPU).
    ``kind``: ``added``, ``removed``, ``renamed`` or ``changed``. ``name``: the table, feature,
    stack, setting or memory level (NEW's name; OLD's when removed). ``field``: what changed in it
    (``vocabulary_size``, ``learning_rate.tag``; ``""`` for the whole entry). ``old`` / ``new``:
    JSON values (``None`` when absent). ``message``: one line. ``severity``: the finding's,
    when the change decides it (memory that no longer fits: ``error``); ``None`` for the rule's.
    """

    subject: str
    kind: str
    name: str
    field: str
    old: Any
    new: Any
    message: str
    new_location: Location | None = None
    old_location: Location | None = None
    severity: Severity | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject, "kind": self.kind, "name": self.name, "field": self.field,
            "old": self.old, "new": self.new, "message": self.message,
            "new_location": list(self.new_location) if self.new_location else None,
            "old_location": list(self.old_location) if self.old_location else None,
        }


def diff_rules() -> list[Rule]:
    """The registered ``target="diff"`` rules (DIFF and CKPT), in id order."""
    return [RULES[rule_id] for rule_id in sorted(RULES) if RULES[rule_id].target == "diff"]


def diff_findings(facts: Iterable[object], *, select: Iterable[str] | None = None,
                  options: Mapping[str, Any] | None = None) -> list[Diagnostic]:
    """Every diff rule (only those of ``select``'s ids or families, when given) on each fact in
    turn: the findings in the order of the facts, placed where the fact says
    (:func:`place`)."""
    chosen = tuple(select) if select is not None else None
    rules = [r for r in diff_rules()
             if chosen is None or r.id in chosen or r.family in chosen]
    out: list[Diagnostic] = []
    for fact in facts:
        out.extend(place(d, fact) for d in run_on_facts(rules, [fact], DiffContext,
                                                         options=options))
    return out


def place(found: Diagnostic, fact: object) -> Diagnostic:
    """``found`` at the fact's location: NEW's (``new_location``), else OLD's."""
    where = getattr(fact, "new_location", None) or getattr(fact, "old_location", None)
    if not where or found.line is not None:
        return found
    path, line, column = where
    return Diagnostic(rule=found.rule, severity=found.severity, message=found.message,
                      field_path=found.field_path, line=line, column=column, hint=found.hint,
                      path=path)


# --- the rules ----------------------------------------------------------------------------------


def _changes(ctx: DiffContext, subjects: tuple[str, ...],
             kinds: tuple[str, ...] | None = None) -> Iterator[Diagnostic]:
    fact = ctx.fact
    if not isinstance(fact, Change) or fact.subject not in subjects:
        return
    if kinds is not None and fact.kind not in kinds:
        return
    yield ctx.diag(fact.field, fact.message, severity=fact.severity)


#: The fields of a table or feature whose change is a change of shape (DIFF002); any other
#: field of theirs (combiner, initializer, ...) is DIFF004's.
SHAPE_FIELDS = frozenset({"vocabulary_size", "dimension", "dim", "table", "table_id",
                          "input_shape", "output_shape", "shape"})


def _is_shape(field: str) -> bool:
    return field.rsplit(".", 1)[-1] in SHAPE_FIELDS


@rule("DIFF001", "info", "a table or feature was added, removed or renamed", target="diff")
def entry_added_or_removed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports each table and feature present on one side only, and each pair that `tpuemb diff`
    takes for a rename: a table removed and one added with the same vocabulary, width,
    optimizer and hyper-parameters (its features follow it).

    ## Why is this bad?
    Nothing is wrong in itself, but every table added, removed or renamed changes the
    embedding variables a checkpoint holds, and on SparseCores the stacks around it (see the
    DIFF006 and CKPT findings of the same diff).

    ## Example
    ```
    new.py:31:1: info[DIFF001] table 'brand' added (vocabulary 1000000, dim 32, adagrad)
    ```

    ## Use instead
    Keep a table's name when only its place in the code changes; when adding or removing a
    table on purpose, plan the restore with `tpuemb diff --breaking`.

    Spec: diff.md section compares
    """
    return _changes(ctx, ("table", "feature"), ("added", "removed", "renamed"))


@rule("DIFF002", "warning", "a table's vocabulary or width changed", target="diff")
def table_shape_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table whose `vocabulary_size` or `dimension` (`dim`) differs between OLD and NEW,
    and a feature that now reads another table or another shape.

    ## Why is this bad?
    The table's variable and every optimizer slot change shape: a checkpoint of OLD does not
    restore into NEW as it is (CKPT findings), and on SparseCores the padding, the stack's
    rows and often the stacks themselves change.

    ## Example
    ```
    new.pbtxt:3:3: warning[DIFF002] table 'video': vocabulary_size 1000000 -> 2000000
    ```

    ## Use instead
    Grow a vocabulary in a new table, or reshard the checkpoint with the padding the new shape
    needs; check the restore with `tpuemb diff --breaking`.

    Spec: diff.md section compares
    """
    fact = ctx.fact
    if (isinstance(fact, Change) and fact.kind == "changed"
            and fact.subject in ("table", "feature") and _is_shape(fact.field)):
        yield ctx.diag(fact.field, fact.message, severity=fact.severity)


@rule("DIFF003", "warning", "a table's optimizer changed", target="diff")
def optimizer_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table trained by another optimizer in NEW, with the slots it gains or loses
    (Adagrad's accumulators, Adam's momenta and velocities).

    ## Why is this bad?
    A slot the new optimizer does not have is dropped from the state, and a new one starts from
    its initial value: the training state is not carried over.

    ## Example
    ```
    new.py:12:1: warning[DIFF003] table 'user': optimizer adagrad -> sgd
      (slot 'accumulators' dropped)
    ```

    ## Use instead
    Start the new optimizer's slots on purpose (from their initial values), or keep the
    optimizer and change its hyper-parameters instead.

    Spec: diff.md section compares
    """
    return _changes(ctx, ("optimizer",))


@rule("DIFF004", "info", "a hyper-parameter or learning rate changed", target="diff")
def hyper_parameter_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports each optimizer hyper-parameter (clipping, weight decay, beta values, ...), each
    learning rate (constant, dynamic tag, schedule) and each other property of a table or
    feature (combiner, initializer, ...) that differs between OLD and NEW.

    ## Why is this bad?
    It changes the updates, not the state's shape. A dynamic learning-rate tag that changes
    moves the table to another position of the learning-rate list each step feeds.

    ## Example
    ```
    new.pbtxt:9:7: info[DIFF004] table 'ads': learning_rate.tag 0 -> 1
    ```

    ## Use instead
    Nothing, when the change is meant; check the learning-rate tags with `tpuemb validate`.

    Spec: diff.md section compares
    """
    fact = ctx.fact
    if (isinstance(fact, Change) and fact.kind == "changed"
            and fact.subject in ("table", "feature") and not _is_shape(fact.field)):
        yield ctx.diag(fact.field, fact.message, severity=fact.severity)
        return
    yield from _changes(ctx, ("hyper_parameter", "learning_rate"))


@rule("DIFF005", "info", "a setting or the topology changed", target="diff")
def setting_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports the configuration-wide settings that differ (mode, hosts, TensorCores, sharding,
    pipelining, SparseCore settings such as stacking and id dropping) and the slice: chip kind,
    chips, devices and SparseCores.

    ## Why is this bad?
    A new host count or sharding strategy moves rows between hosts; a new slice changes the
    SparseCores every stacked table is spread over, so every stacked layout changes.

    ## Example
    ```
    new.py:20:1: info[DIFF005] topology: v5p-64 (32 chips, 128 SparseCores)
      -> v6e-32 (32 chips, 64 SparseCores)
    ```

    ## Use instead
    Check the stacks, memory and checkpoint findings of the same diff; with a sample, the load
    (`--ids`).

    Spec: diff.md section compares
    """
    return _changes(ctx, ("setting", "topology"))


@rule("DIFF006", "warning", "tables move on the SparseCores (stacks, row offsets, rotations)",
      target="diff")
def stack_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports, from both configurations' stacking (TensorFlow's or jax-tpu-embedding's rules, as
    each side runs), every stack that appears or goes away and every table whose place changes:
    another stacked table, another row offset within each SparseCore's shard, another rotation,
    another padded shape. Every moved table is named.

    ## Why is this bad?
    A moved table's rows are somewhere else in the stacked variable: a checkpoint of OLD
    restores into NEW only through a reshard (CKPT findings), and the stack's limits, buffers
    and load change with its tables.

    ## Example
    ```
    new.py:31:1: warning[DIFF006] table 'brand' moves on the SparseCores: stacked table
      'brand_category' -> 'brand_category_shop'
    ```

    ## Use instead
    Add new tables at the end of their group, keep stacking settings, or plan the reshard of
    the checkpoint (`tpuemb diff --breaking` says which variables need one).

    Spec: diff.md section compares
    """
    return _changes(ctx, ("stack",))


@rule("DIFF007", "info", "a SparseCore limit or buffer changed", target="diff")
def limit_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports each limit written differently (a key of `max_ids_per_table`, a table's own
    `max_ids_per_partition`, ...), and each stacked table whose `max_ids_per_partition`,
    `max_unique_ids_per_partition` or COO buffer size differs between OLD and NEW as the
    SparseCores apply them (after stacking: a stack's limits are read by its stacked name).

    ## Why is this bad?
    Lower limits drop ids (or fail the step without `allow_id_dropping`); a limit keyed by a
    stacked name that changed is no longer read at all and falls back to the default.

    ## Example
    ```
    new.py:48:1: info[DIFF007] stack 'item_id_user_id': max_ids_per_partition 512 -> 256
    ```

    ## Use instead
    Key limits by the new stacked names (`tpuemb inspect` shows them), and check the drops on
    a sample (`tpuemb plan --ids`).

    Spec: diff.md section compares
    """
    return _changes(ctx, ("limit", "stack_limit"))


@rule("DIFF008", "info", "memory per host, chip or SparseCore changed", target="diff")
def memory_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports the fullest host (legacy), chip or device and SparseCore of each side, their bytes
    and capacity, and the tables that dominate them. It is an error when NEW no longer fits
    where OLD did.

    ## Why is this bad?
    A configuration over its HBM or host memory fails when the tables are built, before the
    first step.

    ## Example
    ```
    new.py:1:1: info[DIFF008] chip memory: 9.5G -> 12.1G of 95G (fullest chip); largest: 'user_id'
    ```

    ## Use instead
    Use the hint of `tpuemb plan` (more chips or hosts, fewer slots, a smaller table).

    Spec: diff.md section compares
    """
    return _changes(ctx, ("memory",))


@rule("DIFF009", "info", "a validation finding appears or goes away", target="diff")
def finding_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    Runs `tpuemb validate`'s rules on both sides and reports each finding NEW has and OLD did
    not (at NEW's line, with its rule id and severity), and each OLD had that NEW no longer has.

    ## Why is this bad?
    A finding that appears is a problem the change introduced; one that goes away is fixed.

    ## Example
    ```
    new.py:45:1: warning[DIFF009] new finding SC002: max_ids_per_table has no entry for the
      stacked table 'brand_category_shop': TensorFlow uses 256 for it
    ```

    ## Use instead
    Fix the new finding (`tpuemb explain ID`), or silence it on its line when it is meant.

    Spec: diff.md section compares
    """
    return _changes(ctx, ("finding",))


@rule("DIFF010", "info", "load, imbalance or drops on the sample changed", target="diff")
def load_changed(ctx: DiffContext) -> Iterator[Diagnostic]:
    """## What it does
    With `--ids`, runs `tpuemb plan`'s load and limits on both sides with the same sample and
    reports, per stacked table (SparseCore) or per host (legacy), the ids dropped at the
    configured limits, the steps that would fail and the imbalance (max over mean), OLD vs NEW.
    It is a warning when NEW drops ids OLD did not.

    ## Why is this bad?
    A change that drops ids trains on less data (or fails steps); a more imbalanced layout is
    slower, bounded by its hottest SparseCore or host.

    ## Example
    ```
    new.py:48:1: warning[DIFF010] stack 'item_id_user_id': 0 -> 1,204 ids dropped at the limits
    ```

    ## Use instead
    Set the limits `tpuemb plan --ids` suggests for NEW.

    Spec: diff.md section compares
    """
    return _changes(ctx, ("load",))
