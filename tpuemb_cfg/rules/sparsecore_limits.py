"""SC001-SC004: the limits of a SparseCore configuration's stacks (``sparsecore.md`` section 5).

Limit keys TensorFlow looks up by stacked name (SC001, SC002; :func:`limit_key_renames` is what
``tpuemb validate --fix`` renames), and the limits stacking or keras-rs' conversion loses (SC003,
SC004).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._facts import platform_doc
from tpuemb_cfg.rules._registry import SparseCoreContext, rule
from tpuemb_cfg.rules._sparsecore_common import (
    DEFAULT_LIMIT,
    LIMIT_SETTINGS,
    _names,
    _setting,
    _table,
    limit_key_path,
)

if TYPE_CHECKING:
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig, SparseCoreTable
    from tpuemb_cfg.sparsecore.stacking import Stack, Stacking

__all__ = ["KeyRename", "limit_key_renames"]


# -- SC001 / SC002: limit keys ------------------------------------------------------------------


@dataclass(frozen=True)
class KeyRename:
    """A ``max_ids_per_table`` / ``max_unique_ids_per_table`` key that names no stacked table.

    ``new``: the stacked name of the stack holding the table ``old`` names, when renaming is
    unambiguous (``tpuemb validate --fix`` renames it); ``None`` when the key names no table,
    or the stack already has a key, or two keys name tables of the same stack.
    """

    setting: str
    old: str
    new: str | None
    stack: str | None


def limit_key_renames(config: SparseCoreConfig, stacking: Stacking) -> list[KeyRename]:
    """Every limit key that names no stacked table, and its rename (see :class:`KeyRename`)."""
    names = {s.name for s in stacking.stacks}
    found: list[KeyRename] = []
    for setting in LIMIT_SETTINGS:
        limits: Mapping[str, int] | None = getattr(config, setting)
        if not limits:
            continue
        wrong = [key for key in limits if key not in names]
        stacks: dict[str, str | None] = {}
        for key in wrong:
            try:
                stacks[key] = stacking.stack_of_table(key).name
            except KeyError:
                stacks[key] = None
        targets = [s for s in stacks.values() if s is not None]
        for key in wrong:
            stack = stacks[key]
            unique = stack is not None and stack not in limits and targets.count(stack) == 1
            found.append(KeyRename(setting, key, stack if unique else None, stack))
    return found


@rule("SC001", "warning",
      f"limit key names no stacked table (TensorFlow uses {DEFAULT_LIMIT})", target="sparsecore")
@platform_doc
def limit_key_not_stacked(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports every key of `SparseCoreEmbeddingConfig.max_ids_per_table` and
    `max_unique_ids_per_table` that is not the name of a stacked table, and names the stack
    that holds the table the key names.

    ## Why is this bad?
    `TPUEmbeddingV2` looks the limits up by **stacked** table name (the names of a stack's
    tables joined with `_`, `user_video`), after stacking. A key that names a table inside a
    stack, or nothing at all, is never read: TensorFlow logs a warning and the stack gets the
    default of $default_limit ids per partition, so a batch with more ids aborts on the TPU (or
    drops ids with `allow_id_dropping`), and a smaller limit you meant to save memory is lost.

    ## Example
    Tables `user` and `video` have the same width and optimizer, so they are stacked as
    `user_video`:
    ```
    SparseCoreEmbeddingConfig(max_ids_per_table={"user": 1024, "video": 1024})
    ```

    ## Use instead
    ```
    SparseCoreEmbeddingConfig(max_ids_per_table={"user_video": 1024})
    ```
    `tpuemb validate --fix` renames a key to its stack's name where that is unambiguous;
    `tpuemb inspect` shows the stacks.

    Spec: sparsecore.md section 5
    """
    stacking = ctx.stacking
    if stacking is None:
        return
    for rename in limit_key_renames(ctx.config, stacking):
        path = limit_key_path(rename.setting, rename.old)
        value = (getattr(ctx.config, rename.setting) or {}).get(rename.old)
        if rename.stack is None:
            known = [s.name for s in stacking.stacks]
            yield ctx.diag(
                path,
                f"{rename.setting} key {rename.old!r} ({value}) names no table: the stacked "
                f"tables are {_names(known)}; TensorFlow never reads it",
                hint="key the limit by a stacked table name (tpuemb inspect lists them)",
            )
        elif rename.new is not None:
            yield ctx.diag(
                path,
                f"{rename.setting} key {rename.old!r} ({value}) names a table inside the stack "
                f"{rename.stack!r}: TensorFlow looks limits up by stacked name, so this one is "
                f"never read and {rename.stack!r} gets the default {DEFAULT_LIMIT}",
                hint=f"rename the key {rename.old!r} to {rename.stack!r} (tpuemb validate --fix)",
            )
        else:
            yield ctx.diag(
                path,
                f"{rename.setting} key {rename.old!r} ({value}) names a table inside the stack "
                f"{rename.stack!r}, which already has a key or several table keys: "
                "TensorFlow never reads this one",
                hint=f"keep one entry {rename.stack!r} with the limit the whole stack needs "
                "(its tables share one limit)",
            )


@rule("SC002", "info", f"stacked table without a limit entry (TensorFlow uses {DEFAULT_LIMIT})",
      target="sparsecore")
@platform_doc
def stack_without_limit(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    When `max_ids_per_table` or `max_unique_ids_per_table` is given, reports (once per
    dictionary) the stacked tables that have no key in it and that no misnamed key (SC001)
    points to.

    ## Why is this bad?
    TensorFlow logs a warning and uses $default_limit for that stack. That is often what you
    want for a small table (hence an info), but a dictionary that lists some stacks shows that
    limits were meant to be set: a missing stack may have changed name when another table
    joined it (a new table, a changed width or optimizer changes the stacks).

    ## Example
    Stacks `ads` and `user_video`:
    ```
    SparseCoreEmbeddingConfig(max_ids_per_table={"ads": 512})
    ```

    ## Use instead
    ```
    SparseCoreEmbeddingConfig(max_ids_per_table={"ads": 512, "user_video": 1024})
    ```

    Spec: sparsecore.md section 5
    """
    stacking = ctx.stacking
    if stacking is None:
        return
    pointed = {(r.setting, r.stack) for r in limit_key_renames(ctx.config, stacking)}
    for setting in LIMIT_SETTINGS:
        limits = getattr(ctx.config, setting)
        if limits is None:
            continue
        missing = [s.name for s in stacking.stacks
                   if s.name not in limits and (setting, s.name) not in pointed]
        if not missing:
            continue
        noun = "stacked table" if len(missing) == 1 else f"{len(missing)} stacked tables"
        yield ctx.diag(
            _setting(setting),
            f"{setting} has no entry for the {noun} {_names(missing)}: TensorFlow uses "
            f"{DEFAULT_LIMIT} for {'it' if len(missing) == 1 else 'each'}",
            hint=f"add {missing[0]!r}: N (and so on) to {setting} where {DEFAULT_LIMIT} is not "
            "right",
        )


# -- SC003 / SC004: limits lost ------------------------------------------------------------------


@rule("SC003", "warning", "a table's own limits are ignored by its stack", target="sparsecore")
@platform_doc
def limits_lost_by_stacking(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    For jax-tpu-embedding, reports a table whose own `max_ids_per_partition` or
    `max_unique_ids_per_partition` differs from the limit of the stack it ends up in, and a
    `suggested_coo_buffer_size_per_device` that the stack does not keep.

    keras-rs is not affected on either backend. On JAX, keras-rs 0.4.0 stacks with
    `auto_stack_tables` too but then sets each stack's limits to the largest of its tables' own
    (`update_preprocessing_parameters` in `DistributedEmbedding.sparsecore_build`), so no
    table's limit is lowered, and it passes no suggested buffer size. On TensorFlow the limits
    never reach TensorFlow at all: that is SC004.

    ## Why is this bad?
    `auto_stack_tables` gives a stack of several tables the limits returned by
    `stack_to_max_ids_per_partition(stack_name, samples)` and
    `stack_to_max_unique_ids_per_partition` ($default_limit by default) and ignores its tables' own
    limits, with only a log warning (keras-rs issue 166). A table that needed 1024 then aborts
    preprocessing ("Observed max ids per partition ... is greater than the set max ids per
    partition"), or drops ids with `allow_id_dropping`. `auto_stack_tables` also never carries
    a table's `suggested_coo_buffer_size_per_device` into the stack, even a one-table stack.

    ## Example
    ```
    TableSpec(name="user", ..., max_ids_per_partition=1024)  # stacked with 'video'
    ```

    ## Use instead
    Return the limit the stack needs from the callables:
    ```
    auto_stack_tables(feature_specs, ..., stack_to_max_ids_per_partition=lambda name, n: 1024)
    ```
    or keep the table out of the stack (a different width or optimizer).

    Spec: sparsecore.md section 5
    """
    stacking = ctx.stacking
    if stacking is None or ctx.config.mode != "jax" or ctx.config.stack_limits_from_tables:
        return
    tables = {t.name: t for t in ctx.config.tables}
    for stack in stacking.stacks:
        for member in stack.tables:
            table = tables.get(member.name)
            if table is None:
                continue
            if len(stack.tables) > 1:
                yield from _lost_limits(ctx, table, stack)
            wanted = table.suggested_coo_buffer_size_per_device
            if wanted is not None and stack.suggested_coo_buffer_size_per_device is None:
                yield ctx.diag(
                    f"{_table(table.name)}.suggested_coo_buffer_size_per_device",
                    f"table {table.name!r}: suggested_coo_buffer_size_per_device {wanted} is "
                    f"not kept by its stack {stack.name!r}: auto_stack_tables drops it, and "
                    "preprocessing sizes the buffer for the worst case instead",
                    hint="set it again on the stacked spec after stacking "
                    "(update_preprocessing_parameters)",
                )


def _lost_limits(ctx: SparseCoreContext, table: SparseCoreTable,
                 stack: Stack) -> Iterator[Diagnostic]:
    for field, own, applied in (
        ("max_ids_per_partition", table.max_ids_per_partition, stack.max_ids_per_partition),
        ("max_unique_ids_per_partition", table.max_unique_ids_per_partition,
         stack.max_unique_ids_per_partition),
    ):
        if own is None or own == applied:
            continue
        others = [t.name for t in stack.tables if t.name != table.name]
        yield ctx.diag(
            f"{_table(table.name)}.{field}",
            f"table {table.name!r}: {field} {own} is ignored: it is stacked with "
            f"{_names(others)} into {stack.name!r}, whose limit is {applied} (from "
            f"stack_to_{field}); batches with more {'unique ' if 'unique' in field else ''}ids "
            "abort preprocessing",
            hint=f"return {max(own, applied)} for {stack.name!r} from stack_to_{field}",
        )


@rule("SC004", "warning", "keras-rs' TensorFlow conversion drops the tables' limits",
      target="sparsecore")
@platform_doc
def limits_dropped_by_conversion(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    For keras-rs' `DistributedEmbedding` on TensorFlow, reports every table whose
    `max_ids_per_partition` or `max_unique_ids_per_partition` is not TensorFlow's default
    $default_limit.

    Only on TensorFlow (the Keras backend the spec runs on: `tpuemb inspect` names it); on
    JAX keras-rs keeps the limits (each stack takes the largest of its tables').

    ## Why is this bad?
    keras-rs 0.4.0 converts its configuration into `TPUEmbeddingV2`'s with
    `SparseCoreEmbeddingConfig(disable_table_stacking=..., initialize_tables_on_host=False)`
    and passes no limits: every stack gets $default_limit whatever the tables say, so a table
    that needs more ids aborts (or drops ids) on the TPU, and one that asked for fewer wastes
    memory. The same conversion forces `initialize_tables_on_host=False`: the tables are
    initialised on the TPU.

    ## Example
    ```
    keras_rs.layers.TableConfig(name="user", ..., max_ids_per_partition=1024)
    ```

    ## Use instead
    Run keras-rs on JAX (`KERAS_BACKEND=jax`; in a spec `keras_backend = "jax"`), where the
    tables' limits are kept; or use TensorFlow's `TPUEmbeddingV2` with
    `SparseCoreEmbeddingConfig(max_ids_per_table={"<stacked name>": 1024})`, or keep the
    batch small enough for $default_limit ids per partition.

    Spec: sparsecore.md section 5
    """
    config = ctx.config
    if not config.limits_dropped_by_conversion:
        return
    for table in config.tables:
        changed = [
            f"{field} {value}"
            for field, value in (("max_ids_per_partition", table.max_ids_per_partition),
                                 ("max_unique_ids_per_partition",
                                  table.max_unique_ids_per_partition))
            if value is not None and value != DEFAULT_LIMIT
        ]
        if not changed:
            continue
        field = "max_ids_per_partition" if "max_ids" in changed[0] else \
            "max_unique_ids_per_partition"
        yield ctx.diag(
            f"{_table(table.name)}.{field}",
            f"table {table.name!r}: {' and '.join(changed)} "
            f"{'never reaches' if len(changed) == 1 else 'never reach'} TensorFlow: keras-rs' "
            f"conversion passes no limits, so its stack uses {DEFAULT_LIMIT} (and tables are "
            "initialised on the TPU: initialize_tables_on_host=False)",
            hint="run keras-rs on its JAX backend (KERAS_BACKEND=jax, or keras_backend = "
            "\"jax\" in the spec), where each stack takes the largest of its tables' limits, "
            "or use TPUEmbeddingV2 with SparseCoreEmbeddingConfig(max_ids_per_table=...) keyed "
            "by stacked name",
        )
