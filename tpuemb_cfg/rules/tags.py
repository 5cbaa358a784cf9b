"""TAG: dynamic learning-rate tags (``validation-rules.md`` section 2.1).

Every table with ``learning_rate { dynamic { tag: k } }`` reads element k of the list of scalars
sent with the gradients every step, and so does the step counter of every
``frequency_aware_adagrad`` table (tag 0 when unset). TensorFlow requires the distinct tags to be
exactly 0..K-1 and checks it only when the TPU system initialises.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tpuemb_cfg.algorithms import ALGORITHMS
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.model.derived import TagUse
from tpuemb_cfg.rules._registry import Context, rule

_FIX = "tpuemb validate --fix renumbers the tags and prints the old -> new mapping"


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _tables_of(ctx: Context, uses: Sequence[tuple[int, str]], limit: int = 5) -> str:
    labels = []
    for t in dict.fromkeys(t for t, _ in uses):
        table = ctx.table(t)
        labels.append(
            repr(table.name) if table is not None and table.name else f"table_descriptor[{t}]"
        )
    shown = labels[:limit]
    if len(labels) > limit:
        shown.append(f"{len(labels) - limit} more")
    return _join(shown)


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    """Inclusive runs of consecutive integers in sorted distinct ``values``."""
    runs: list[tuple[int, int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def _ranges(runs: Sequence[tuple[int, int]], limit: int = 8) -> str:
    """``0, 2..5, 7 and 8`` for inclusive runs (at most ``limit`` items, then 'N more')."""
    parts: list[str] = []
    for a, b in runs:
        parts += [str(a)] if a == b else [str(a), str(b)] if b == a + 1 else [f"{a}..{b}"]
    if len(parts) > limit:
        parts = parts[:limit] + [f"{len(parts) - limit} more"]
    return _join(parts)


def _missing_ranges(used: Sequence[int]) -> list[tuple[int, int]]:
    """Inclusive ranges of the integers in 0..max(used) not in ``used`` (sorted, all >= 0)."""
    gaps: list[tuple[int, int]] = []
    expected = 0
    for v in used:
        if v > expected:
            gaps.append((expected, v - 1))
        expected = v + 1
    return gaps


def renumbering(tags: Sequence[int]) -> dict[int, int]:
    """The ``--fix`` mapping: distinct tags in sorted order -> 0..K-1 (identities included)."""
    return {old: new for new, old in enumerate(sorted(set(tags)))}


def _mapping_text(mapping: dict[int, int], limit: int = 10) -> str:
    changed = [f"{old} -> {new}" for old, new in mapping.items() if old != new]
    if len(changed) > limit:
        changed = changed[:limit] + [f"{len(changed) - limit} more"]
    return ", ".join(changed)


def _kind(use: TagUse) -> str:
    return "learning-rate" if use.kind == "learning_rate" else "step-counter"


@rule("TAG001", "error", "negative dynamic tag")
def negative_tag(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports every `learning_rate.dynamic.tag` and every `frequency_aware_adagrad.step_counter.tag`
    below 0.

    ## Why is this bad?
    A tag is an index into the list of dynamic scalars (learning rates, step counters) that the
    training step sends with the gradients. TensorFlow's proto comment requires tags >= 0, and the
    TPU runtime rejects the configuration at initialisation with the confusing "Dynamic learning
    rate tag: 0 not found in the TPU embedding configuration, instead found: -1", which never says
    that a tag is negative.

    ## Example
    ```
    learning_rate { dynamic { tag: -1 } }
    ```

    ## Use instead
    ```
    learning_rate { dynamic { tag: 0 } }
    ```
    Renumber every tag to 0..K-1: `tpuemb validate --fix` does it and prints the mapping your
    training code must apply to its list of learning rates.

    Spec: validation-rules.md section 2.1
    """
    for use in ctx.derived.tag_uses:
        if use.tag < 0:
            yield ctx.diag(
                use.field_path,
                f"{ctx.table_label(use.table)}: {_kind(use)} tag is {use.tag}; dynamic tags must "
                "be >= 0",
                hint=f"renumber the tags to 0..{max(ctx.derived.k - 1, 0)} ({_FIX})",
            )


@rule("TAG002", "error", "tags are not exactly 0..K-1")
def tags_not_dense(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Collects the tags of every dynamic learning rate and of every `frequency_aware_adagrad` step
    counter (an unset step counter counts as tag 0) and reports, once per configuration, every
    missing tag between 0 and the largest tag in use, the tags in use and the tables on both sides
    of the first gap.

    ## Why is this bad?
    Position k of the per-step learning-rate list feeds the tables with tag k, so the list has
    exactly K elements (K = number of distinct tags). The TPU runtime checks, at initialisation and
    one mismatch at a time, that the sorted tags are 0..K-1: "Dynamic learning rate tag: 2 not
    found in the TPU embedding configuration, instead found: 3. tag set size: 3".

    ## Example
    Tables 'ads' and 'video' use tags 0 and 1, table 'news' uses tag 3:
    ```
    learning_rate { dynamic { tag: 3 } }
    ```

    ## Use instead
    ```
    learning_rate { dynamic { tag: 2 } }
    ```
    `tpuemb validate --fix` renumbers every tag (negative ones included) to 0..K-1 in sorted order
    and prints the old -> new mapping: the training code must then send, at new position k, the
    value it used to send for the old tag that maps to k.

    Spec: validation-rules.md section 2.1
    """
    derived = ctx.derived
    used = sorted(t for t in derived.tag_map if t >= 0)
    if not used or used[-1] == len(used) - 1:
        return
    gaps = _missing_ranges(used)
    first_missing = gaps[0][0]
    above = min(t for t in used if t > first_missing)
    below = max((t for t in used if t < first_missing), default=None)
    target = next(u for u in derived.tag_uses if u.tag == above)
    missing_text = _ranges(gaps)
    missing_count = sum(b - a + 1 for a, b in gaps)
    noun = "tag" if missing_count == 1 else "tags"
    verb = "is" if missing_count == 1 else "are"
    around = f"tag {above} is used by {_tables_of(ctx, derived.tag_map[above])}"
    if below is not None:
        around = f"tag {below} is used by {_tables_of(ctx, derived.tag_map[below])} and " + around
    k = derived.k
    mapping = renumbering(list(derived.tag_map))
    yield ctx.diag(
        target.field_path,
        f"dynamic {noun} {missing_text} {verb} missing: the tags in use are "
        f"{_ranges(_runs(sorted(derived.tag_map)))} ({k} distinct), but they must be exactly "
        f"0..{k - 1}; {around}",
        hint=f"renumber {_mapping_text(mapping)} ({_FIX}; reorder the learning-rate list to match)",
    )


@rule("TAG003", "warning", "more distinct tags than tables")
def more_tags_than_tables(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports when step counters of `frequency_aware_adagrad` tables use tags of their own so that
    K, the number of distinct dynamic tags, exceeds the number of tables.

    ## Why is this bad?
    Older TensorFlow releases documented "number of unique tags <= number of tables"; current
    comments dropped the bound because step counters are extra dynamic inputs, and nothing
    enforces it. A long per-step list is usually a sign that step counters were given separate
    tags although they all carry the same global step.

    ## Example
    One `frequency_aware_adagrad` table with learning-rate tag 0 and
    `step_counter { tag: 1 }`, another with learning-rate tag 0 and `step_counter { tag: 2 }`.

    ## Use instead
    Give every step counter the same tag (they all receive the global step):
    ```
    step_counter { tag: 1 }
    ```
    in both tables.

    Spec: validation-rules.md section 2.1
    """
    derived = ctx.derived
    if derived.k <= derived.num_tables:
        return
    lr_tags = {u.tag for u in derived.tag_uses if u.kind == "learning_rate"}
    target = next(
        (u for u in derived.tag_uses if u.kind == "step_counter" and u.tag not in lr_tags),
        derived.tag_uses[0],
    )
    yield ctx.diag(
        target.field_path,
        f"{derived.k} distinct dynamic tags but only {derived.num_tables} table(s): "
        f"{ctx.table_label(target.table)} uses step-counter tag {target.tag}, which no learning "
        "rate uses",
        hint="step counters all carry the global step: give them one shared tag",
    )


@rule("TAG004", "warning", "frequency-aware Adagrad step counter not set (counts as tag 0)")
def step_counter_unset(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a `frequency_aware_adagrad` message without `step_counter`.

    ## Why is this bad?
    TensorFlow's tag collection counts the unset step counter as tag 0, so position 0 of the
    per-step list must then carry the global step count, which is easy to miss when position 0 is
    also a learning rate.

    ## Example
    ```
    frequency_aware_adagrad { initial_accumulator_value: 0.1 }
    ```

    ## Use instead
    ```
    frequency_aware_adagrad { initial_accumulator_value: 0.1 step_counter { tag: 1 } }
    ```
    with an explicit tag, and send the global step at that position.

    Spec: validation-rules.md section 2.1
    """
    for use in ctx.derived.tag_uses:
        if use.kind == "step_counter" and not use.present:
            yield ctx.diag(
                use.field_path.removesuffix(".tag"),
                f"{ctx.table_label(use.table)}: {ctx.derived.algorithms[use.table]} has no "
                f"{use.kind}; "
                "TensorFlow counts it as tag 0, so position 0 of the learning-rate list must "
                "carry the global step",
                hint="write step_counter { tag: N } explicitly",
            )


@rule("TAG005", "warning", "tag used both as a learning rate and a step counter")
def shared_lr_and_step_tag(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports each step-counter use whose tag is also a learning-rate tag.

    ## Why is this bad?
    Both inputs read the same scalar: the learning rate would equal the step count (or the step
    counter the learning rate). Nothing in TensorFlow checks it.

    ## Example
    ```
    learning_rate { dynamic { tag: 0 } }
    frequency_aware_adagrad { step_counter { tag: 0 } }
    ```

    ## Use instead
    ```
    learning_rate { dynamic { tag: 0 } }
    frequency_aware_adagrad { step_counter { tag: 1 } }
    ```
    The step counter gets a tag of its own.

    Spec: validation-rules.md section 2.1
    """
    derived = ctx.derived
    lr_uses: dict[int, list[tuple[int, str]]] = {}
    for u in derived.tag_uses:
        if u.kind == "learning_rate":
            lr_uses.setdefault(u.tag, []).append((u.table, u.field_path))
    for u in derived.tag_uses:
        if u.kind == "step_counter" and u.tag in lr_uses:
            yield ctx.diag(
                u.field_path,
                f"{ctx.table_label(u.table)}: step-counter tag {u.tag} is also the learning-rate "
                f"tag of {_tables_of(ctx, lr_uses[u.tag])}; both would read the same scalar",
                hint="give the step counter a tag of its own",
            )


@rule("TAG006", "info", "tags that could be merged")
def mergeable_tags(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Groups tables with a dynamic learning rate by their `optimization_parameters` ignoring the tag
    value, and reports each group that uses two or more distinct tags.

    ## Why is this bad?
    TensorFlow's proto comment notes that partitioning is better the fewer distinct tags there
    are. Tables with the same optimizer probably follow the same schedule.

    ## Example
    Two tables with identical `adagrad { }` settings, one with
    `learning_rate { dynamic { tag: 0 } }` and the other with
    `learning_rate { dynamic { tag: 1 } }`.

    ## Use instead
    If these schedules are equal, give both tables `learning_rate { dynamic { tag: 0 } }` (then
    renumber with `tpuemb validate --fix`).

    Spec: validation-rules.md section 2.1
    """
    groups: dict[bytes, dict[int, list[TagUse]]] = {}
    for use in ctx.derived.tag_uses:
        if use.kind != "learning_rate":
            continue
        table = ctx.table(use.table)
        if table is None:
            continue
        params = type(table.optimization_parameters)()
        params.CopyFrom(table.optimization_parameters)
        params.learning_rate.dynamic.tag = 0
        key = params.SerializeToString(deterministic=True)
        groups.setdefault(key, {}).setdefault(use.tag, []).append(use)
    for by_tag in groups.values():
        if len(by_tag) < 2:
            continue
        tags = list(by_tag)
        second = by_tag[tags[1]][0]
        described = "; ".join(
            f"tag {tag}: {_tables_of(ctx, [(u.table, u.field_path) for u in uses])}"
            for tag, uses in by_tag.items()
        )
        yield ctx.diag(
            second.field_path,
            f"tags {_join([str(t) for t in tags])} could be merged: their tables have identical "
            f"optimization_parameters apart from the tag ({described})",
            hint="if these schedules are equal, give the tables one tag; fewer distinct tags "
            "partition better",
        )


@rule("TAG007", "info", "tag table (K, list order)", on_request=True)
def tag_table(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    States the tag table: K, the number of distinct dynamic tags, and which tables each position
    of the learning-rate list feeds. On request only (`--select TAG007` or `--show-derived`).

    ## Why is this bad?
    It is not wrong; it is what the training code must send. The training step must send a list of
    exactly K scalars, and position k is the value for tag k: the learning rate of every table with
    `dynamic { tag: k }` and the step count of every `frequency_aware_adagrad` table whose step
    counter uses tag k.

    ## Example
    Table 'ads' with `learning_rate { dynamic { tag: 0 } }` and table 'video' with
    `learning_rate { dynamic { tag: 1 } }`: K = 2, position 0 feeds 'ads' and position 1 'video'.

    ## Use instead
    Nothing to change; build the per-step list in this order.

    Spec: validation-rules.md section 2.1
    """
    derived = ctx.derived
    if derived.k == 0:
        return
    parts = []
    for tag in sorted(derived.tag_map):
        lr = [
            (u.table, u.field_path)
            for u in derived.tag_uses
            if u.tag == tag and u.kind == "learning_rate"
        ]
        sc = [
            (u.table, u.field_path)
            for u in derived.tag_uses
            if u.tag == tag and u.kind == "step_counter"
        ]
        feeds = []
        if lr:
            feeds.append(f"learning rate of {_tables_of(ctx, lr, limit=1000)}")
        if sc:
            feeds.append(f"step counter of {_tables_of(ctx, sc, limit=1000)}")
        parts.append(f"[{tag}] {'; '.join(feeds)}")
    yield ctx.diag(
        derived.tag_uses[0].field_path,
        f"K = {derived.k}: the learning-rate list must have {derived.k} elements: "
        + "; ".join(parts),
    )


@rule("TAG008", "error", "table without a learning rate")
def no_learning_rate(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table with an algorithm other than `assign` whose `learning_rate` is absent or sets
    neither `constant` nor `dynamic`.

    ## Why is this bad?
    TensorFlow's Python API always writes a learning rate; what the runtime does without one is
    undocumented.

    ## Example
    ```
    optimization_parameters { adagrad { } }
    ```

    ## Use instead
    ```
    optimization_parameters { learning_rate { constant: 0.01 } adagrad { } }
    ```
    or `learning_rate { dynamic { tag: k } }` for a schedule.

    Spec: validation-rules.md section 2.1
    """
    for i, table, path in ctx.tables():
        algorithm = ctx.derived.algorithms[i]
        if algorithm is None or ALGORITHMS[algorithm].learning_rate == "unused":
            continue
        op = table.optimization_parameters
        if (
            op.HasField("learning_rate")
            and op.learning_rate.WhichOneof("learning_rate") is not None
        ):
            continue
        yield ctx.diag(
            f"{path}.optimization_parameters.learning_rate",
            f"{ctx.table_label(i)}: {algorithm} has no learning rate (neither constant nor dynamic "
            "is set)",
            hint="add learning_rate { constant: ... } or learning_rate { dynamic { tag: ... } }",
        )
