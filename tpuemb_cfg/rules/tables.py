"""TBL: tables and topology (``validation-rules.md`` section 2.4)."""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.rules._registry import Context, Diagnostic, rule

_MODES = {1: "INFERENCE", 2: "TRAINING", 3: "BACKWARD_PASS_ONLY"}
_SHARDING = {0: "DIV_DEFAULT", 1: "MOD"}


@rule("TBL001", "error", "no tables")
def no_tables(ctx: Context) -> Iterator[Diagnostic]:
    """The configuration has no ``table_descriptor``.

    **Why is this bad.** Without tables and features TensorFlow fails the batch-size check, and an
    all-default configuration serializes to zero bytes, which TensorFlow rejects as "TPU embedding
    config is empty."
    """
    if ctx.derived.num_tables == 0:
        yield ctx.diag(
            "", "the configuration has no table_descriptor; at least one table is needed"
        )


@rule("TBL002", "error", "empty table name")
def empty_name(ctx: Context) -> Iterator[Diagnostic]:
    """Every table needs a non-empty ``name``.

    **Why is this bad.** Load and retrieve ops find tables by name; TensorFlow rejects "Table t has
    empty name string." (Its Python API names unnamed tables ``table_<index>``.)

    **Use instead.** ``name: "table_0"``.
    """
    for i, table, path in ctx.tables():
        if not table.name:
            yield ctx.diag(
                f"{path}.name",
                f"table_descriptor[{i}] has an empty name; every table needs a unique, non-empty "
                "name",
                hint=f'add name: "table_{i}" (what TensorFlow\'s Python API writes)',
            )


@rule("TBL003", "error", "duplicate table name")
def duplicate_name(ctx: Context) -> Iterator[Diagnostic]:
    """Table names must be unique.

    **Why is this bad.** TensorFlow rejects "Tables i and j have the same name 'X'." (and its
    Python API "Tables must have a unique name"). Checkpoints key tables by name.
    """
    first: dict[str, int] = {}
    for i, table, path in ctx.tables():
        if not table.name:
            continue
        if table.name in first:
            yield ctx.diag(
                f"{path}.name",
                f"table_descriptor[{i}]: name {table.name!r} is already used by "
                f"table_descriptor[{first[table.name]}]",
                hint="give every table a unique name",
            )
        else:
            first[table.name] = i


@rule("TBL004", "error", "vocabulary_size < 1")
def vocabulary_too_small(ctx: Context) -> Iterator[Diagnostic]:
    """``vocabulary_size`` must be at least 1.

    **Why is this bad.** TensorFlow's load/retrieve ops reject empty shards ("All embedding shards
    must be non-empty, shard ID: 0 is empty, vocabulary size: 0 ...") and its Python API rejects
    ``vocabulary_size < 1``.
    """
    for i, table, path in ctx.tables():
        if table.vocabulary_size < 1:
            yield ctx.diag(
                f"{path}.vocabulary_size",
                f"{ctx.table_label(i)}: vocabulary_size is {table.vocabulary_size}; it must be >= "
                "1",
            )


@rule("TBL005", "error", "vocabulary_size < num_hosts")
def fewer_rows_than_hosts(ctx: Context) -> Iterator[Diagnostic]:
    """A table needs at least one row per host.

    **Why is this bad.** Tables are sharded row-wise over ``num_hosts`` hosts; with fewer rows than
    hosts, host shard number V (and every later one) is empty and TensorFlow rejects it: "All
    embedding shards must be non-empty, shard ID: V is empty".

    **Use instead.** Set ``vocabulary_size`` to ``num_hosts`` (TensorFlow's Python API pads the
    vocabulary the same way).
    """
    hosts = ctx.config.num_hosts
    if hosts < 1:
        return
    for i, table, path in ctx.tables():
        if 1 <= table.vocabulary_size < hosts:
            yield ctx.diag(
                f"{path}.vocabulary_size",
                f"{ctx.table_label(i)}: vocabulary_size {table.vocabulary_size} is smaller than "
                f"num_hosts {hosts}; host shard {table.vocabulary_size} and later would be empty",
                hint=f"set vocabulary_size to {hosts} (TensorFlow's Python API pads the "
                "vocabulary to num_hosts)",
            )


@rule("TBL006", "error", "dimension < 1")
def dimension_too_small(ctx: Context) -> Iterator[Diagnostic]:
    """A table's ``dimension`` (embedding width) must be at least 1.

    **Why is this bad.** TensorFlow's Python API rejects ``dim < 1``; a zero-width table has no
    embedding and a negative width fails the shape functions.
    """
    for i, table, path in ctx.tables():
        if table.dimension < 1:
            yield ctx.diag(
                f"{path}.dimension",
                f"{ctx.table_label(i)}: dimension is {table.dimension}; it must be >= 1",
            )


@rule("TBL007", "error", "mode UNSPECIFIED or invalid")
def invalid_mode(ctx: Context) -> Iterator[Diagnostic]:
    """``mode`` must be INFERENCE, TRAINING or BACKWARD_PASS_ONLY.

    **Why is this bad.** TensorFlow's partitioner and host-configuration ops reject an unset mode:
    "TPUEmbeddingConfiguration.mode is INVALID. Must be INFERENCE, TRAINING, or
    BACKWARD_PASS_ONLY".

    **Use instead.** ``mode: TRAINING`` (what TensorFlow's Python API writes; it overrides the
    mode per step at enqueue time).
    """
    mode = ctx.config.mode
    if mode not in _MODES:
        found = (
            "UNSPECIFIED (unset)" if mode == 0 else f"{mode}, which is not a declared Mode value"
        )
        yield ctx.diag(
            "mode",
            f"mode is {found}; it must be INFERENCE, TRAINING or BACKWARD_PASS_ONLY",
            hint="add mode: TRAINING (what TensorFlow's Python API writes)",
        )


@rule("TBL008", "error", "num_hosts < 1")
def no_hosts(ctx: Context) -> Iterator[Diagnostic]:
    """``num_hosts`` must be at least 1.

    **Why is this bad.** The load/retrieve ops receive the host count as the number of shards:
    "The number of shards for the embedding layer must be > 0. Currently set to: 0".
    """
    if ctx.config.num_hosts < 1:
        yield ctx.diag(
            "num_hosts",
            f"num_hosts is {ctx.config.num_hosts}; it must be >= 1",
            hint="set num_hosts to the number of TPU hosts",
        )


@rule("TBL009", "error", "num_tensor_cores < 1")
def no_tensor_cores(ctx: Context) -> Iterator[Diagnostic]:
    """``num_tensor_cores`` must be at least 1.

    **Why is this bad.** The TPU runtime needs the number of TensorCores taking part; TensorFlow's
    Python API always writes replicas x cores per replica.
    """
    if ctx.config.num_tensor_cores < 1:
        yield ctx.diag(
            "num_tensor_cores",
            f"num_tensor_cores is {ctx.config.num_tensor_cores}; it must be >= 1",
            hint="set num_tensor_cores to the total number of TensorCores",
        )


@rule("TBL010", "warning", "cores not a multiple of hosts")
def cores_not_multiple_of_hosts(ctx: Context) -> Iterator[Diagnostic]:
    """``num_tensor_cores`` should be a multiple of ``num_hosts``.

    **Why.** Every host drives the same number of TensorCores; TensorFlow 1's API required it.
    """
    hosts, cores = ctx.config.num_hosts, ctx.config.num_tensor_cores
    if hosts >= 1 and cores >= 1 and cores % hosts != 0:
        yield ctx.diag(
            "num_tensor_cores",
            f"num_tensor_cores {cores} is not a multiple of num_hosts {hosts}; every host drives "
            "the same number of TensorCores",
        )


@rule("TBL011", "error", "SPMD enabled with num_cores_per_replica < 1")
def spmd_without_cores(ctx: Context) -> Iterator[Diagnostic]:
    """With ``spmd_sharding.enabled``, ``num_cores_per_replica`` must be at least 1.

    **Why is this bad.** TensorFlow's shape functions multiply the activations' leading dimension
    by this number: 0 or a negative value gives empty or negative shapes.
    """
    spmd = ctx.config.spmd_sharding
    if spmd.enabled and spmd.num_cores_per_replica < 1:
        yield ctx.diag(
            "spmd_sharding.num_cores_per_replica",
            f"spmd_sharding is enabled but num_cores_per_replica is {spmd.num_cores_per_replica}; "
            "it must be >= 1",
        )


@rule("TBL012", "warning", "cores not a multiple of cores per replica")
def cores_not_multiple_of_replica(ctx: Context) -> Iterator[Diagnostic]:
    """With SPMD, ``num_tensor_cores`` should be a multiple of ``num_cores_per_replica``.

    **Why.** TensorFlow's Python API writes ``num_tensor_cores = replicas * num_cores_per_replica``.
    """
    spmd = ctx.config.spmd_sharding
    cores = ctx.config.num_tensor_cores
    if spmd.enabled and spmd.num_cores_per_replica >= 1 and cores % spmd.num_cores_per_replica != 0:
        yield ctx.diag(
            "num_tensor_cores",
            f"num_tensor_cores {cores} is not a multiple of spmd_sharding.num_cores_per_replica "
            f"{spmd.num_cores_per_replica}",
            hint="num_tensor_cores should be replicas x num_cores_per_replica",
        )


@rule("TBL013", "info", "SPMD settings ignored")
def spmd_settings_ignored(ctx: Context) -> Iterator[Diagnostic]:
    """``spmd_sharding`` sets fields but ``enabled`` is false, so they have no effect."""
    config = ctx.config
    if not config.HasField("spmd_sharding"):
        return
    spmd = config.spmd_sharding
    if spmd.enabled:
        return
    set_fields = [
        name
        for name, value in (
            ("num_cores_per_replica", spmd.num_cores_per_replica != 0),
            ("use_manual_partitioning", spmd.use_manual_partitioning),
            ("use_shardy_partitioner", spmd.use_shardy_partitioner),
        )
        if value
    ]
    if set_fields:
        yield ctx.diag(
            "spmd_sharding.enabled",
            f"spmd_sharding is not enabled, so {', '.join(set_fields)} has no effect",
            hint="add enabled: true, or remove the other spmd_sharding fields",
        )


@rule("TBL014", "error", "undeclared sharding strategy")
def undeclared_sharding(ctx: Context) -> Iterator[Diagnostic]:
    """``sharding_strategy`` must be DIV_DEFAULT or MOD.

    **Why is this bad.** Any other number (possible from binary, JSON or numeric text input) leaves
    the row-to-host mapping undefined in the TPU runtime.
    """
    strategy = ctx.config.sharding_strategy
    if strategy not in _SHARDING:
        yield ctx.diag(
            "sharding_strategy",
            f"sharding_strategy is {strategy}, which is not a declared value; expected DIV_DEFAULT "
            "(0) or MOD (1)",
        )


@rule("TBL015", "info", "pipelining without TRAINING")
def pipelining_without_training(ctx: Context) -> Iterator[Diagnostic]:
    """``pipeline_execution_with_tensor_core`` only affects results when ``mode`` is TRAINING."""
    config = ctx.config
    if config.pipeline_execution_with_tensor_core and config.mode in (1, 3):
        yield ctx.diag(
            "pipeline_execution_with_tensor_core",
            f"pipeline_execution_with_tensor_core has no effect in mode {_MODES[config.mode]}; it "
            "only matters in TRAINING",
        )
