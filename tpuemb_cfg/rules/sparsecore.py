"""SC: SparseCore configurations (TPU v5p, v6e, TPU7x; ``sparsecore.md`` section 5).

These rules read a :class:`~tpuemb_cfg.sparsecore.config.SparseCoreConfig` (from TensorFlow's
``TPUEmbeddingV2``, keras-rs or jax-tpu-embedding) and the :class:`Stacking` both references
would build from it, through a :class:`~tpuemb_cfg.rules.SparseCoreContext`. Field paths are
named after the API the user wrote: ``sparse_core_config.max_ids_per_table["user"]``,
``tables["user"].optimizer``, ``features["user/id"].output_shape``; the validator places each at
the spec line that built the object (its ``Origin``).

Thresholds a project may change (``options`` of :func:`tpuemb_cfg.validate`):
``sparsecore_padding_waste`` (SC010, a fraction, default 0.25) and ``memory_budget_bytes``
(SC012, the host memory ``initialize_tables_on_host`` may use; ``memory-budget`` in
``[tool.tpuemb]``; default 64 GiB).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.algorithms.table import SPARSECORE
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._registry import SparseCoreContext, rule
from tpuemb_cfg.sparsecore.feed import DEFAULT_MAX_IDS_PER_TABLE
from tpuemb_cfg.sparsecore.stacker import ACTIVATION_MEMORY_BYTES_LIMIT, VARIABLE_SHARD_BYTES_LIMIT
from tpuemb_cfg.sparsecore.topology import DEFAULT_SPARSE_CORES, sparse_cores_per_device_text
from tpuemb_cfg.units import format_size

if TYPE_CHECKING:
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig, SparseCoreTable
    from tpuemb_cfg.sparsecore.stacking import Stack, Stacking

__all__ = ["LIMIT_SETTINGS", "KeyRename", "limit_key_path", "limit_key_renames"]

_MIB = 1 << 20
_GIB = 1 << 30
#: TensorFlow's limit for a stack missing from ``max_ids_per_table`` / ``max_unique_ids_per_table``
#: (``TPUEmbeddingV2.DEFAULT_MAX_IDS_PER_TABLE``; jax-tpu-embedding's default limits are equal).
DEFAULT_LIMIT = DEFAULT_MAX_IDS_PER_TABLE
#: Activation bytes per SparseCore at which stacking stops (both references' default, 2 MiB).
ACTIVATION_LIMIT = ACTIVATION_MEMORY_BYTES_LIMIT
#: Bytes of one table's shard per chip at which TensorFlow's stacker stops (2 GiB).
SHARD_LIMIT = VARIABLE_SHARD_BYTES_LIMIT
INT32_MAX = 2**31 - 1
#: SC010's default: a table whose padding is a quarter or more of the memory it takes.
PADDING_WASTE = 0.25
#: SC010 reports only tables whose padding is at least this many bytes (summed over the slice).
PADDING_MIN_BYTES = _MIB
#: SC012's default host budget when no ``memory_budget_bytes`` is set.
HOST_MEMORY = 64 * _GIB
#: The ``SparseCoreEmbeddingConfig`` dictionaries keyed by stacked table name.
LIMIT_SETTINGS = ("max_ids_per_table", "max_unique_ids_per_table")


def _q(name: str) -> str:
    """A name as the key of a field path: ``"user"`` (JSON quoting, so any name is readable)."""
    return json.dumps(name, ensure_ascii=False)


def _table(name: str) -> str:
    return f"tables[{_q(name)}]"


def _feature(name: str) -> str:
    return f"features[{_q(name)}]"


def _setting(name: str) -> str:
    return f"sparse_core_config.{name}"


def limit_key_path(setting: str, key: str) -> str:
    """The field path of a limit key: ``sparse_core_config.max_ids_per_table["user"]``."""
    return f"{_setting(setting)}[{_q(key)}]"


def _join(items: Sequence[str], limit: int = 6) -> str:
    shown = list(items[:limit])
    if len(items) > limit:
        shown.append(f"{len(items) - limit} more")
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _names(items: Sequence[str]) -> str:
    return _join([repr(i) for i in items])


def _api(config: SparseCoreConfig) -> str:
    return {"tensorflow": "TensorFlow's TPUEmbeddingV2", "keras_rs": "keras-rs",
            "jax": "jax-tpu-embedding"}.get(config.api, config.api)


def _roundup(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


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


@rule("SC001", "warning", "limit key names no stacked table (TensorFlow uses 256)",
      target="sparsecore")
def limit_key_not_stacked(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports every key of `SparseCoreEmbeddingConfig.max_ids_per_table` and
    `max_unique_ids_per_table` that is not the name of a stacked table, and names the stack
    that holds the table the key names.

    ## Why is this bad?
    `TPUEmbeddingV2` looks the limits up by **stacked** table name (the names of a stack's
    tables joined with `_`, `user_video`), after stacking. A key that names a table inside a
    stack, or nothing at all, is never read: TensorFlow logs a warning and the stack gets the
    default of 256 ids per partition, so a batch with more ids aborts on the TPU (or drops ids
    with `allow_id_dropping`), and a smaller limit you meant to save memory is lost.

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


@rule("SC002", "info", "stacked table without a limit entry (TensorFlow uses 256)",
      target="sparsecore")
def stack_without_limit(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    When `max_ids_per_table` or `max_unique_ids_per_table` is given, reports (once per
    dictionary) the stacked tables that have no key in it and that no misnamed key (SC001)
    points to.

    ## Why is this bad?
    TensorFlow logs a warning and uses 256 for that stack. That is often what you want for a
    small table (hence an info), but a dictionary that lists some stacks shows that limits were
    meant to be set: a missing stack may have changed name when another table joined it (a new
    table, a changed width or optimizer changes the stacks).

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
            hint=f"add {missing[0]!r}: N (and so on) to {setting} where 256 is not right",
        )


# -- SC003 / SC004: limits lost ------------------------------------------------------------------


@rule("SC003", "warning", "a table's own limits are ignored by its stack", target="sparsecore")
def limits_lost_by_stacking(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    For jax-tpu-embedding (and keras-rs on JAX), reports a table whose own
    `max_ids_per_partition` or `max_unique_ids_per_partition` differs from the limit of the
    stack it ends up in, and a `suggested_coo_buffer_size_per_device` that the stack does not
    keep.

    ## Why is this bad?
    `auto_stack_tables` gives a stack of several tables the limits returned by
    `stack_to_max_ids_per_partition(stack_name, samples)` and
    `stack_to_max_unique_ids_per_partition` (256 by default) and ignores its tables' own
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
    if stacking is None or ctx.config.mode != "jax":
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
def limits_dropped_by_conversion(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    For keras-rs' `DistributedEmbedding` on TensorFlow, reports every table whose
    `max_ids_per_partition` or `max_unique_ids_per_partition` is not TensorFlow's default 256.

    ## Why is this bad?
    keras-rs 0.4.0 converts its configuration into `TPUEmbeddingV2`'s with
    `SparseCoreEmbeddingConfig(disable_table_stacking=..., initialize_tables_on_host=False)`
    and passes no limits: every stack gets 256 whatever the tables say, so a table that needs
    more ids aborts (or drops ids) on the TPU, and one that asked for fewer wastes memory. The
    same conversion forces `initialize_tables_on_host=False`: the tables are initialised on the
    TPU.

    ## Example
    ```
    keras_rs.layers.TableConfig(name="user", ..., max_ids_per_partition=1024)
    ```

    ## Use instead
    Use TensorFlow's `TPUEmbeddingV2` with
    `SparseCoreEmbeddingConfig(max_ids_per_table={"<stacked name>": 1024})`, or keep the
    batch small enough for 256 ids per partition.

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
            hint="use TPUEmbeddingV2 with SparseCoreEmbeddingConfig(max_ids_per_table=...) "
            "keyed by stacked name",
        )


# -- SC005 / SC006: optimizers -------------------------------------------------------------------


def _by_optimizer(config: SparseCoreConfig) -> dict[tuple[Any, ...], list[SparseCoreTable]]:
    """Tables grouped by the optimizer object that serves them (its spec line when known), so a
    finding about a shared optimizer is reported once."""
    groups: dict[tuple[Any, ...], list[SparseCoreTable]] = {}
    for table in config.tables:
        origin = table.optimizer.origin
        key: tuple[Any, ...] = ((origin.path, origin.line, table.optimizer.algorithm)
                                if origin.line is not None else ("table", table.name))
        groups.setdefault(key, []).append(table)
    return groups


@rule("SC005", "error", "optimizer not supported on SparseCore", target="sparsecore")
def unsupported_optimizer(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table whose optimizer SparseCores do not run: anything but SGD, Adagrad,
    Adagrad with momentum, Adam and FTRL (or a custom optimizer of the API).

    ## Why is this bad?
    `TPUEmbeddingV2` and jax-tpu-embedding build the SparseCore update from a fixed list of
    optimizers; the others (RMSProp, Adadelta, proximal Adagrad, ...) exist only for the
    TensorCore embedding of older TPUs and fail when the model is built.

    ## Example
    ```
    TableConfig(vocabulary_size=1000, dim=16, optimizer=RMSProp(learning_rate=0.01))
    ```

    ## Use instead
    ```
    TableConfig(vocabulary_size=1000, dim=16, optimizer=Adagrad(learning_rate=0.01))
    ```

    Spec: sparsecore.md section 5
    """
    supported = ", ".join(SPARSECORE)
    for tables in _by_optimizer(ctx.config).values():
        algorithm = tables[0].optimizer.algorithm
        if algorithm in SPARSECORE or algorithm == "custom":
            continue
        yield ctx.diag(
            f"{_table(tables[0].name)}.optimizer",
            f"{'table' if len(tables) == 1 else 'tables'} {_names([t.name for t in tables])}: "
            f"optimizer {algorithm} does not run on SparseCores ({_api(ctx.config)} runs "
            f"{supported})",
            hint="choose one of the SparseCore optimizers",
        )


@rule("SC006", "error", "weight decay on SparseCore (TensorFlow raises NotImplementedError)",
      target="sparsecore")
def weight_decay(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports an optimizer with `weight_decay_factor` or
    `multiply_weight_decay_factor_by_learning_rate` set, on a SparseCore configuration.

    ## Why is this bad?
    `TPUEmbeddingV2` raises `NotImplementedError` for weight decay when it builds its tables:
    SparseCores apply no decay. keras-rs passes a Keras optimizer's `weight_decay` on as
    `weight_decay_factor`, so the same failure comes from a Keras optimizer.

    ## Example
    ```
    Adagrad(learning_rate=0.01, weight_decay_factor=1e-5)
    ```

    ## Use instead
    ```
    Adagrad(learning_rate=0.01)
    ```
    and regularise the embeddings in the loss if needed.

    Spec: sparsecore.md section 5
    """
    for tables in _by_optimizer(ctx.config).values():
        if not tables[0].optimizer.weight_decay:
            continue
        yield ctx.diag(
            f"{_table(tables[0].name)}.optimizer",
            f"{'table' if len(tables) == 1 else 'tables'} {_names([t.name for t in tables])}: "
            "the optimizer sets weight decay, which SparseCores do not apply: TPUEmbeddingV2 "
            "raises NotImplementedError",
            hint="remove weight_decay_factor and multiply_weight_decay_factor_by_learning_rate "
            "(or the Keras optimizer's weight_decay)",
        )


# -- SC007 / SC008: batch and ids ----------------------------------------------------------------


@rule("SC007", "error", "batch not divisible by the SparseCores", target="sparsecore")
def batch_not_divisible(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a feature whose batch per chip (per replica for TensorFlow; the global batch over
    the devices for jax-tpu-embedding) is not a multiple of the SparseCores per chip.

    ## Why is this bad?
    Each chip cuts its batch into one contiguous slice per SparseCore. jax-tpu-embedding's
    preprocessing aborts the process ("Check failed: batch_size_for_device %
    num_sc_per_device == 0"); TensorFlow truncates the per-SparseCore batch size (7 samples over
    2 SparseCores gives 3), so the sizes it compiles for do not match the batch.

    ## Example
    On v6e (2 SparseCores per chip), a per-replica output shape of `[127]`.

    ## Use instead
    A per-replica batch of `[128]` (a multiple of 2 on v6e and TPU7x, of 4 on v5p).

    Spec: sparsecore.md section 5
    """
    config = ctx.config
    cores = config.topology.sparse_cores_per_device
    chips = config.topology.num_partitions
    if cores <= 0 or chips <= 0:
        return
    for feature in config.features:
        if not feature.output_shape[:-1]:
            continue
        batch = feature.output_shape[0]
        if config.mode == "jax":
            if batch % (chips * cores) == 0:
                continue
            what = (f"global batch {batch} over {chips} device(s) "
                    f"({config.topology.describe()}) is {batch // chips} per device"
                    f"{'' if batch % chips == 0 else ' (not even)'}")
            effect = "jax-tpu-embedding's preprocessing aborts"
            good = _roundup(batch, chips * cores)
        else:
            if batch % cores == 0:
                continue
            what = f"batch {batch} per replica"
            effect = (f"TensorFlow computes {batch // cores} samples per SparseCore and the "
                      "compiled sizes do not match the batch")
            good = _roundup(batch, cores)
        yield ctx.diag(
            f"{_feature(feature.name)}.output_shape",
            f"feature {feature.name!r}: {what}, not a multiple of the {cores} SparseCores per "
            f"{'device' if config.mode == 'jax' else 'chip'}: {effect}",
            hint=f"use a batch that is a multiple of "
            f"{cores if config.mode != 'jax' else chips * cores} (e.g. {good})",
        )


@rule("SC008", "error", "vocabulary beyond int32 ids", target="sparsecore")
def vocabulary_beyond_int32(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table whose vocabulary has ids above 2^31 - 1 (more than 2^31 rows).

    ## Why is this bad?
    SparseCore ids are int32 in both references: TensorFlow's stacker refuses stacked tables of
    2^31 - 1 rows or more, and jax-tpu-embedding's preprocessing wraps larger ids without an
    error (id 2^33 becomes row 0), so rows above 2^31 - 1 can never be looked up.

    ## Example
    ```
    TableConfig(vocabulary_size=3_000_000_000, dim=16)
    ```

    ## Use instead
    Hash the ids into fewer rows (or split the table into two tables of under 2^31 rows).

    Spec: sparsecore.md section 5
    """
    for table in ctx.config.tables:
        if table.vocabulary_size - 1 > INT32_MAX:
            yield ctx.diag(
                f"{_table(table.name)}.vocabulary_size",
                f"table {table.name!r}: vocabulary_size {table.vocabulary_size:,} has ids above "
                f"2^31 - 1 = {INT32_MAX:,}; SparseCore ids are int32",
                hint="hash the ids into at most 2,147,483,648 rows, or split the table",
            )


# -- SC009 / SC010: sizes ------------------------------------------------------------------------


def _activation_bytes(config: SparseCoreConfig, table: SparseCoreTable, padded_dim: int,
                      n: int) -> int:
    """Bytes of the table's activations per SparseCore, as each reference's stacker counts
    them: TensorFlow 4 x padded width x (samples per replica // SparseCores per chip),
    jax-tpu-embedding 4 x padded dim x sum of (each feature's samples // N)."""
    if config.mode == "jax":
        rows = sum(f.samples // n for f in config.features if f.table == table.name)
    else:
        samples = sum(f.samples for f in config.features if f.table == table.name)
        rows = samples // max(1, config.topology.sparse_cores_per_device)
    return 4 * padded_dim * rows


@rule("SC009", "warning", "a table above the activation or shard limit", target="sparsecore")
def table_above_limits(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table whose own activations per SparseCore reach the stacking limit (2 MiB by
    default; jax-tpu-embedding's `activation_mem_bytes_limit`), or whose shard per chip reaches
    TensorFlow's 2 GiB variable shard limit.

    ## Why is this bad?
    Both stackers close a stack when it would reach these limits, so such a table is always
    alone in its stack: it can never be stacked, and every table of its width and optimizer
    makes a stack of its own. The limits are there because the activations of a step (and the
    shard) must fit in a SparseCore's memory: a table above them may not fit at all, which
    shows only when the model is compiled on a TPU.

    ## Example
    On v6e-8 (2 SparseCores per chip): dim 128 and a per-replica batch of 16384 is
    4 x 128 x 8192 = 4 MiB per SparseCore.

    ## Use instead
    A smaller per-replica batch or width, or more chips (for the shard).

    Spec: sparsecore.md section 5
    """
    stacking = ctx.stacking
    if stacking is None:
        return
    config = ctx.config
    limit = config.activation_mem_bytes_limit if config.mode == "jax" else None
    limit = ACTIVATION_LIMIT if limit is None else limit
    n = stacking.num_sparse_cores
    for stack in stacking.stacks:
        for member in stack.tables:
            table = next((t for t in config.tables if t.name == member.name), None)
            if table is None:
                continue
            activation = _activation_bytes(config, table, member.padded_dim, n)
            # TensorFlow refuses a join at the limit (total + new < limit), jax above it
            over = activation > limit if config.mode == "jax" else activation >= limit
            if limit > 0 and over:
                alone = (" and is never stacked with another table" if len(stack.tables) == 1
                         else f" (stacked in {stack.name!r} all the same: TensorFlow 2.21 counts "
                         "only the first feature's samples when it stacks)")
                yield ctx.diag(
                    _table(table.name),
                    f"table {table.name!r}: its activations take {format_size(activation)} "
                    f"per SparseCore (4 x {member.padded_dim} x rows), at or above the "
                    f"{format_size(limit)} stacking limit: it may not fit in a SparseCore's "
                    f"memory{alone}",
                    hint="lower the per-replica batch or the width, or use more chips",
                )
            shard = 4 * member.padded_dim * member.padded_vocabulary_size // max(
                1, stacking.num_partitions)
            if config.mode != "jax" and shard >= SHARD_LIMIT:
                yield ctx.diag(
                    _table(table.name),
                    f"table {table.name!r}: its shard per chip is {format_size(shard)} "
                    f"(4 x {member.padded_dim} x {member.padded_vocabulary_size:,} rows / "
                    f"{stacking.num_partitions} chips), at or above TensorFlow's "
                    f"{format_size(SHARD_LIMIT)} shard limit: it is never stacked and may not "
                    "fit",
                    hint="use more chips, or fewer rows (hashing) or a smaller width",
                )


@rule("SC010", "warning", "padding wastes a large part of a table", target="sparsecore")
def padding_waste(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table whose padding takes 25% or more of the memory it uses (option
    `sparsecore_padding_waste`), when that is at least 1 MiB: the width is padded to a
    multiple of 8 and the rows to a multiple of 8 x N (N: every SparseCore of the slice).

    ## Why is this bad?
    The padding is allocated in HBM and moved like real rows. 25% is where it matters: a
    quarter of a table is what a width of 6 (padded to 8) or 12 (to 16) costs, and small
    widths (1-5) waste half or more; a small vocabulary spread over many SparseCores wastes
    rows instead.

    ## Example
    ```
    TableConfig(vocabulary_size=10_000_000, dim=4)   # padded to 8: half the table is padding
    ```

    ## Use instead
    ```
    TableConfig(vocabulary_size=10_000_000, dim=8)
    ```
    The padding is there anyway: a width of 8 costs the same memory and may train better.

    Spec: sparsecore.md section 5
    """
    stacking = ctx.stacking
    if stacking is None:
        return
    threshold = float(ctx.options.get("sparsecore_padding_waste", PADDING_WASTE))
    n = stacking.num_sparse_cores
    for stack in stacking.stacks:
        for member in stack.tables:
            padded = member.padded_vocabulary_size * member.padded_dim
            used = member.vocabulary_size * member.dim
            if padded <= 0 or used <= 0:
                continue
            waste = 1 - used / padded
            if waste < threshold or 4 * (padded - used) < PADDING_MIN_BYTES:
                continue
            reasons = []
            if member.padded_dim != member.dim:
                reasons.append(f"width {member.dim} padded to {member.padded_dim}")
            if member.padded_vocabulary_size >= 1.01 * member.vocabulary_size:
                reasons.append(f"{member.vocabulary_size:,} rows padded to "
                               f"{member.padded_vocabulary_size:,} (a multiple of 8 x {n} "
                               "SparseCores)")
            yield ctx.diag(
                _table(member.name),
                f"table {member.name!r}: {waste:.0%} of its {format_size(4 * padded)} is "
                f"padding ({'; '.join(reasons)})",
                hint=(f"a width of {member.padded_dim} costs the same memory"
                      if member.padded_dim != member.dim
                      else "fewer SparseCores, or a larger vocabulary, use the padded rows"),
            )


# -- SC011: learning-rate callables --------------------------------------------------------------


@rule("SC011", "warning", "tables kept apart by distinct learning-rate callables",
      target="sparsecore")
def distinct_rate_callables(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports tables of the same padded width, optimizer and hyper-parameters whose
    learning rates are different callable objects, when that puts them in different stacks.

    ## Why is this bad?
    Both references compare a learning-rate callable by identity: TensorFlow hashes the
    optimizer's attributes (a function hashes by identity) into the group string, and
    jax-tpu-embedding compares optimizer specs by their hyper-parameters' hashes. Two equal
    schedules written as two lambdas, or one optimizer per table built in a loop, keep
    otherwise identical tables in separate stacks: more stacks, more SparseCore programs and
    smaller batches of work each step. keras-rs' TensorFlow conversion does this for every
    Keras schedule (`lambda: optimizer.learning_rate` per table).

    ## Example
    ```
    TableConfig(..., optimizer=Adagrad(learning_rate=lambda: schedule(step)))
    TableConfig(..., optimizer=Adagrad(learning_rate=lambda: schedule(step)))
    ```

    ## Use instead
    ```
    rate = lambda: schedule(step)
    TableConfig(..., optimizer=Adagrad(learning_rate=rate))
    TableConfig(..., optimizer=Adagrad(learning_rate=rate))
    ```

    Spec: sparsecore.md section 5
    """
    stacking = ctx.stacking
    config = ctx.config
    if stacking is None or config.disable_table_stacking:
        return
    groups: dict[tuple[Any, ...], list[SparseCoreTable]] = {}
    for table in config.tables:
        rate = table.optimizer.learning_rate
        if not callable(rate):
            continue
        hyper = sorted((k, repr(v)) for k, v in table.optimizer.hyper.items()
                       if k != "learning_rate")
        key = (_roundup(table.dim, 8), table.optimizer.algorithm, tuple(hyper),
               table.quantization, table.combiner if config.mode == "jax" else None)
        groups.setdefault(key, []).append(table)
    for tables in groups.values():
        rates = {id(t.optimizer.learning_rate) for t in tables}
        stacks = set()
        for table in tables:
            try:
                stacks.add(stacking.stack_of_table(table.name).name)
            except KeyError:
                continue
        if len(rates) < 2 or len(stacks) < 2:
            continue
        names = [t.name for t in tables]
        yield ctx.diag(
            f"{_table(tables[1].name)}.optimizer",
            f"tables {_names(names)} differ only in their learning-rate callables "
            f"({len(rates)} distinct objects), so they are kept in {len(stacks)} stacks "
            f"({_names(sorted(stacks))}); the references compare callables by identity",
            hint="pass one callable object to every optimizer that follows the same schedule",
        )


# -- SC012 / SC013: host and topology ------------------------------------------------------------


@rule("SC012", "warning", "initialize_tables_on_host needs more host memory than allowed",
      target="sparsecore")
def host_initialization_memory(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    With `initialize_tables_on_host=True` (TensorFlow's default), adds up the bytes of every
    full table (4 bytes x vocabulary x width) and reports when that exceeds the host budget
    (`memory-budget` in `[tool.tpuemb]`, else 64 GiB).

    ## Why is this bad?
    `TPUEmbeddingV2` then builds each table's whole initial value in host memory before it is
    sharded onto the SparseCores, so the host needs memory for every full table at once; a
    host that runs out is killed while the model is built. (keras-rs always sets
    `initialize_tables_on_host=False`, SC004.)

    ## Example
    Tables of 100 GB in total with `SparseCoreEmbeddingConfig()` (the default is `True`).

    ## Use instead
    ```
    SparseCoreEmbeddingConfig(initialize_tables_on_host=False)
    ```
    which initialises the tables on the TPU.

    Spec: sparsecore.md section 5
    """
    config = ctx.config
    if not config.initialize_tables_on_host or config.mode == "jax":
        return
    budget = ctx.options.get("memory_budget_bytes") or HOST_MEMORY
    total = sum(4 * t.vocabulary_size * t.dim for t in config.tables)
    if total <= budget:
        return
    largest = max(config.tables, key=lambda t: t.vocabulary_size * t.dim)
    yield ctx.diag(
        _setting("initialize_tables_on_host"),
        f"initialize_tables_on_host builds every full table on the host: "
        f"{format_size(total)} for {len(config.tables)} table(s) (largest {largest.name!r}, "
        f"{format_size(4 * largest.vocabulary_size * largest.dim)}), above the "
        f"{format_size(int(budget))} host budget",
        hint="set SparseCoreEmbeddingConfig(initialize_tables_on_host=False), or raise "
        "memory-budget in [tool.tpuemb]",
    )


@rule("SC013", "warning", "SparseCore count unknown: TensorFlow assumes 4", target="sparsecore")
def sparse_cores_defaulted(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a topology whose SparseCores per chip were not known (a chip count without a chip
    kind), so 4 was assumed as TensorFlow does.

    ## Why is this bad?
    When the chip reports no SparseCore count, `TPUEmbeddingV2` logs a warning and uses 4.
    v5p has 4, but v6e and TPU7x have 2: with the wrong count the stacks' activation sizes,
    the shard rotations, the per-SparseCore batch and the limits are all computed for a chip
    that is not there.

    ## Example
    ```
    topology = 64        # chips of an unknown kind
    ```

    ## Use instead
    ```
    topology = "v6e-64"
    ```

    Spec: sparsecore.md section 5
    """
    topology = ctx.config.topology
    if topology.sparse_cores_defaulted:
        yield ctx.diag(
            "topology",
            f"the SparseCores per chip are unknown, so {DEFAULT_SPARSE_CORES} are assumed (as "
            f"TensorFlow does; {sparse_cores_per_device_text()}): stacking, rotations and "
            f"limits differ",
            hint="name the chip kind: topology = 'v6e-64' (or 'v5p-16', 'TPU7x-8')",
        )


# -- SC014 - SC016: preprocessing checks of jax-tpu-embedding --------------------------------------


def _theoretical_buffer(max_ids: int, stacking: Stacking) -> int:
    """jax-tpu-embedding's theoretical COO buffer per device: roundup8(max_ids) x SparseCores
    per device x N."""
    return _roundup(max_ids, 8) * stacking.sparse_cores_per_partition * stacking.num_sparse_cores


@rule("SC014", "error", "suggested COO buffer above the theoretical maximum",
      target="sparsecore")
def suggested_buffer_too_large(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    For jax-tpu-embedding, reports a stack whose `suggested_coo_buffer_size_per_device` is
    larger than the theoretical maximum, roundup8(`max_ids_per_partition`) x SparseCores per
    device x N.

    ## Why is this bad?
    Preprocessing aborts the process ("Check failed: suggested_value <= theoretical_max").

    ## Example
    `max_ids_per_partition=16` on 4 devices of 4 SparseCores (N = 16): the maximum is
    16 x 4 x 16 = 1024, so
    ```
    TableSpec(..., max_ids_per_partition=16, suggested_coo_buffer_size_per_device=4096)
    ```

    ## Use instead
    ```
    TableSpec(..., max_ids_per_partition=16, suggested_coo_buffer_size_per_device=1024)
    ```
    or no suggestion (the maximum is then used).

    Spec: sparsecore.md section 5
    """
    stacking = ctx.stacking
    if stacking is None or ctx.config.mode != "jax":
        return
    for stack in stacking.stacks:
        wanted = stack.suggested_coo_buffer_size_per_device
        if wanted is None or stack.max_ids_per_partition <= 0:
            continue
        maximum = _theoretical_buffer(stack.max_ids_per_partition, stacking)
        if wanted > maximum:
            yield ctx.diag(
                f"{_table(stack.tables[0].name)}.suggested_coo_buffer_size_per_device",
                f"stack {stack.name!r}: suggested_coo_buffer_size_per_device {wanted:,} is "
                f"above the theoretical maximum {maximum:,} (roundup8("
                f"{stack.max_ids_per_partition}) x {stacking.sparse_cores_per_partition} x "
                f"{stacking.num_sparse_cores}): "
                "preprocessing aborts",
                hint=f"suggest at most {maximum:,}, or nothing",
            )


@rule("SC015", "error", "a limit that preprocessing cannot use", target="sparsecore")
def unusable_limit(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a stack whose `max_ids_per_partition` or `max_unique_ids_per_partition` is 0 or
    negative, or (jax-tpu-embedding) whose COO buffer, roundup8(`max_ids_per_partition`) x
    SparseCores per device x N entries, does not fit in int32.

    ## Why is this bad?
    A limit of 0 leaves no room for any id: jax-tpu-embedding aborts on the buffer size 0
    ("input_preprocessing_util.cc:314"), and with TensorFlow every id of the stack is over the
    limit. A buffer of 2^31 entries or more cannot be indexed by int32 row pointers.

    ## Example
    ```
    SparseCoreEmbeddingConfig(max_ids_per_table={"user": 0})
    ```

    ## Use instead
    The largest number of ids one SparseCore sends to one partition in a step (the
    preprocessing statistic `max_ids_per_partition` of real batches), e.g. `{"user": 256}`.

    Spec: sparsecore.md section 5
    """
    stacking = ctx.stacking
    if stacking is None:
        return
    for stack in stacking.stacks:
        for field, value in (("max_ids_per_partition", stack.max_ids_per_partition),
                             ("max_unique_ids_per_partition",
                              stack.max_unique_ids_per_partition)):
            if value <= 0:
                yield ctx.diag(
                    _limit_path(ctx.config, stack, field),
                    f"stack {stack.name!r}: {field} is {value}; no id fits under it "
                    "(jax-tpu-embedding aborts on a buffer of size 0)",
                    hint=f"set {field} to at least 1 (256 is the default)",
                )
        size = _theoretical_buffer(stack.max_ids_per_partition, stacking)
        if ctx.config.mode == "jax" and size > INT32_MAX:
            yield ctx.diag(
                _limit_path(ctx.config, stack, "max_ids_per_partition"),
                f"stack {stack.name!r}: max_ids_per_partition {stack.max_ids_per_partition:,} "
                f"makes a COO buffer of {size:,} entries per device, beyond int32",
                hint="lower max_ids_per_partition (or use fewer SparseCores)",
            )


def _limit_path(config: SparseCoreConfig, stack: Stack, field: str) -> str:
    """Where a stack's limit is written: the limit dictionary's key (TensorFlow), the table's
    own limit (a one-table jax stack) or the stack callable (jax)."""
    if config.mode != "jax":
        setting = "max_ids_per_table" if field == "max_ids_per_partition" else \
            "max_unique_ids_per_table"
        return limit_key_path(setting, stack.name)
    if len(stack.tables) == 1:
        return f"{_table(stack.tables[0].name)}.{field}"
    return f"stack_to_{field}"


@rule("SC016", "error", "SparseCore count jax-tpu-embedding refuses", target="sparsecore")
def sparse_core_count(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    For jax-tpu-embedding, reports SparseCores per device other than 2 or 4, and a total
    number of SparseCores N (devices x SparseCores per device) that is not a power of two.

    ## Why is this bad?
    jax-tpu-embedding raises "Invalid num_sc_per_device: 3" when it stacks, and "Total number
    of SparseCores (6) must be a power of 2." when it preprocesses: ids are spread with
    `id & (N - 1)`.

    ## Example
    ```
    topology = Topology(chips=3, sparse_cores_per_chip=2)
    ```

    ## Use instead
    ```
    topology = "v6e-4"
    ```

    Spec: sparsecore.md section 5
    """
    config = ctx.config
    if config.mode != "jax":
        return
    topology = config.topology
    if topology.sparse_cores_per_device not in (2, 4):
        yield ctx.diag(
            "topology.sparse_cores_per_chip",
            f"{topology.sparse_cores_per_device} SparseCores per device: jax-tpu-embedding "
            f"accepts 2 or 4 ({sparse_cores_per_device_text()})",
            hint="name the chip kind: topology = 'v5p-16'",
        )
    n = topology.num_sparse_cores
    if n <= 0 or n & (n - 1):
        yield ctx.diag(
            "topology",
            f"{topology.devices} device(s) x {topology.sparse_cores_per_device} SparseCores = {n} "
            "SparseCores, not a power of two: jax-tpu-embedding's preprocessing refuses it",
            hint="use a power-of-two number of devices",
        )


@rule("SC017", "error", "the tables cannot be stacked", target="sparsecore")
def cannot_stack(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a configuration that the reference's stacking refuses (tpuemb stacks it as
    TensorFlow or jax-tpu-embedding would, and that failed), with the reason. The rules that
    read the stacks (SC001-SC003, SC009-SC011, SC014, SC015) are then silent.

    ## Why is this bad?
    The model cannot be built: the reference raises the same error when it stacks (for
    example jax-tpu-embedding's "Invalid num_sc_per_device: 3", or a feature naming a table the
    configuration does not define).

    ## Example
    Two different tables both named `user`.

    ## Use instead
    What the message asks for (here: distinct table names).

    Spec: sparsecore.md section 5
    """
    if ctx.stacking is None and ctx.stacking_error is not None:
        yield ctx.diag(
            "",
            f"the tables cannot be stacked: {ctx.stacking_error}",
            hint="fix this first: the rules that read the stacks did not run",
        )
