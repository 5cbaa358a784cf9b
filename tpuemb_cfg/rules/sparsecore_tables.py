"""SC005-SC012: what each SparseCore table asks of the chips (``sparsecore.md`` section 5).

Optimizers (SC005, SC006), the batch per SparseCore and int32 ids (SC007, SC008), activation,
shard and padding sizes (SC009, SC010), learning-rate callables that keep tables apart (SC011)
and the host memory of ``initialize_tables_on_host`` (SC012).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.algorithms.table import SPARSECORE
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._facts import platform_doc
from tpuemb_cfg.rules._registry import SparseCoreContext, rule
from tpuemb_cfg.rules._sparsecore_common import (
    ACTIVATION_LIMIT,
    HOST_MEMORY,
    INT32_MAX,
    PADDING_MIN_BYTES,
    PADDING_WASTE,
    SHARD_LIMIT,
    _api,
    _feature,
    _names,
    _roundup,
    _setting,
    _table,
)

if TYPE_CHECKING:
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig, SparseCoreTable


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
    SparseCores apply no decay. keras-rs on TensorFlow passes a Keras optimizer's
    `weight_decay` on as `weight_decay_factor`, so the same failure comes from a Keras
    optimizer. keras-rs on JAX does not fail: its `keras_to_jte_optimizer` does not read
    `weight_decay`, so the tables silently train without it (reported as a warning).

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
        which = f"{'table' if len(tables) == 1 else 'tables'} {_names([t.name for t in tables])}"
        if ctx.config.keras_backend == "jax":
            yield ctx.diag(
                f"{_table(tables[0].name)}.optimizer",
                f"{which}: the Keras optimizer sets weight_decay, which keras-rs on JAX drops "
                "without a word (keras_to_jte_optimizer does not read it): the tables train "
                "without weight decay",
                hint="remove the Keras optimizer's weight_decay (SparseCores apply none), and "
                "regularise the embeddings in the loss if needed",
                severity="warning",
            )
            continue
        yield ctx.diag(
            f"{_table(tables[0].name)}.optimizer",
            f"{which}: the optimizer sets weight decay, which SparseCores do not apply: "
            "TPUEmbeddingV2 raises NotImplementedError",
            hint="remove weight_decay_factor and multiply_weight_decay_factor_by_learning_rate "
            "(or the Keras optimizer's weight_decay)",
        )


# -- SC007 / SC008: batch and ids ----------------------------------------------------------------


@rule("SC007", "error", "batch not divisible by the SparseCores", target="sparsecore")
@platform_doc
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
    On v6e ($sc_v6e SparseCores per chip), a per-replica output shape of `[127]`.

    ## Use instead
    A per-replica batch of `[128]`, a multiple of the SparseCores per device
    ($sparse_cores_per_device).

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
@platform_doc
def table_above_limits(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table whose own activations per SparseCore reach the stacking limit
    ($activation_limit by default; jax-tpu-embedding's `activation_mem_bytes_limit`), or whose
    shard per chip reaches TensorFlow's $shard_limit variable shard limit.

    ## Why is this bad?
    Both stackers close a stack when it would reach these limits, so such a table is always
    alone in its stack: it can never be stacked, and every table of its width and optimizer
    makes a stack of its own. The limits are there because the activations of a step (and the
    shard) must fit in a SparseCore's memory: a table above them may not fit at all, which
    shows only when the model is compiled on a TPU.

    ## Example
    On v6e-8 ($sc_v6e SparseCores per chip): dim 128 and a per-replica batch of 16384 is
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
