"""TBL: tables and topology (``validation-rules.md`` section 2.4)."""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.base.schema import MODE_NAMES, SHARDING_NAMES, Mode
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._registry import Context, rule
from tpuemb_cfg.rules.common import duplicate_names


def _tables_below_one(ctx: Context, field: str) -> Iterator[Diagnostic]:
    """``table_descriptor[i].<field> is V; it must be >= 1`` for every table below 1."""
    for i, table, path in ctx.tables():
        value = getattr(table, field)
        if value < 1:
            yield ctx.diag(
                f"{path}.{field}", f"{ctx.table_label(i)}: {field} is {value}; it must be >= 1"
            )


def _count_below_one(ctx: Context, field: str, hint: str) -> Iterator[Diagnostic]:
    """``<field> is V; it must be >= 1`` for a top-level count below 1."""
    value = getattr(ctx.config, field)
    if value < 1:
        yield ctx.diag(field, f"{field} is {value}; it must be >= 1", hint=hint)


@rule("TBL001", "error", "no tables")
def no_tables(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a configuration without any `table_descriptor`.

    ## Why is this bad?
    Without tables and features TensorFlow fails the batch-size check
    (`tensorflow/core/tpu/tpu_embedding_configuration_proto_rewrite.cc`), and an all-default
    configuration serializes to zero bytes, which TensorFlow rejects as "TPU embedding config is
    empty." (`tensorflow/core/tpu/graph_rewrite/configure_tpu_embedding_rewrite_pass.cc`).

    ## Example
    ```
    mode: TRAINING
    num_hosts: 1
    ```

    ## Use instead
    ```
    mode: TRAINING
    num_hosts: 1
    table_descriptor { name: "ads" vocabulary_size: 100 dimension: 8 ... }
    ```

    Spec: validation-rules.md section 2.4
    """
    if ctx.derived.num_tables == 0:
        yield ctx.diag(
            "", "the configuration has no table_descriptor; at least one table is needed"
        )


@rule("TBL002", "error", "empty table name")
def empty_name(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table whose `name` is empty or unset.

    ## Why is this bad?
    Load and retrieve ops find tables by name. TensorFlow's C++ rejects it on the TPU host:
    `ValidateEmbeddingTableNames` in
    `tensorflow/core/tpu/graph_rewrite/combine_tpu_embedding_load_retrieve_pass.cc` fails with
    "Table N has empty name string." TensorFlow's Python API writes such a table
    (`TableConfig(name="")`) without complaint. (It names tables created without a name
    `table_<index>`.)

    ## Example
    ```
    table_descriptor { name: "" vocabulary_size: 100 dimension: 8 ... }
    ```

    ## Use instead
    ```
    table_descriptor { name: "table_0" vocabulary_size: 100 dimension: 8 ... }
    ```

    Spec: validation-rules.md section 2.4
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
    """## What it does
    Reports a table whose name an earlier table already uses, naming the earlier index.

    ## Why is this bad?
    TensorFlow rejects "Tables i and j have the same name 'X'." (and its Python API "Tables must
    have a unique name"). Checkpoints key tables by name.

    ## Example
    ```
    table_descriptor { name: "ads" ... }
    table_descriptor { name: "ads" ... }
    ```

    ## Use instead
    ```
    table_descriptor { name: "ads" ... }
    table_descriptor { name: "video" ... }
    ```

    Spec: validation-rules.md section 2.4
    """
    return duplicate_names(ctx, "table_descriptor", "table", ctx.config.table_descriptor)


@rule("TBL004", "error", "vocabulary_size < 1")
def vocabulary_too_small(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table whose `vocabulary_size` is below 1.

    ## Why is this bad?
    TensorFlow's load/retrieve ops reject empty shards ("All embedding shards must be non-empty,
    shard ID: 0 is empty, vocabulary size: 0 ...") and its Python API rejects
    `vocabulary_size < 1`.

    ## Example
    ```
    table_descriptor { name: "ads" vocabulary_size: 0 dimension: 8 ... }
    ```

    ## Use instead
    ```
    table_descriptor { name: "ads" vocabulary_size: 100 dimension: 8 ... }
    ```

    Spec: validation-rules.md section 2.4
    """
    return _tables_below_one(ctx, "vocabulary_size")


@rule("TBL005", "error", "vocabulary_size < num_hosts")
def fewer_rows_than_hosts(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table with fewer rows (`vocabulary_size`) than hosts (`num_hosts`).

    ## Why is this bad?
    Tables are sharded row-wise over `num_hosts` hosts; with fewer rows than hosts, host shard
    number V (and every later one) is empty and TensorFlow rejects it: "All embedding shards must
    be non-empty, shard ID: V is empty".

    ## Example
    ```
    num_hosts: 4
    table_descriptor { name: "ads" vocabulary_size: 3 ... }
    ```

    ## Use instead
    ```
    num_hosts: 4
    table_descriptor { name: "ads" vocabulary_size: 4 ... }
    ```
    Set `vocabulary_size` to `num_hosts` (TensorFlow's Python API pads the vocabulary the same
    way).

    Spec: validation-rules.md section 2.4
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
    """## What it does
    Reports a table whose `dimension` (embedding width) is below 1.

    ## Why is this bad?
    TensorFlow's Python API rejects `dim < 1`; a zero-width table has no embedding and a negative
    width fails the shape functions.

    ## Example
    ```
    table_descriptor { name: "ads" vocabulary_size: 100 dimension: 0 ... }
    ```

    ## Use instead
    A width of at least 1, e.g. `dimension: 8`.

    Spec: validation-rules.md section 2.4
    """
    return _tables_below_one(ctx, "dimension")


@rule("TBL007", "error", "mode UNSPECIFIED or invalid")
def invalid_mode(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a `mode` that is UNSPECIFIED (unset) or an undeclared number; it must be INFERENCE,
    TRAINING or BACKWARD_PASS_ONLY.

    ## Why is this bad?
    TensorFlow's partitioner and host-configuration ops reject an unset mode:
    "TPUEmbeddingConfiguration.mode is INVALID. Must be INFERENCE, TRAINING, or
    BACKWARD_PASS_ONLY".

    ## Example
    ```
    mode: UNSPECIFIED
    ```

    ## Use instead
    ```
    mode: TRAINING
    ```
    This is what TensorFlow's Python API writes; it overrides the mode per step at enqueue time.

    Spec: validation-rules.md section 2.4
    """
    mode = ctx.config.mode
    if mode == Mode.UNSPECIFIED or mode not in MODE_NAMES:
        found = (
            "UNSPECIFIED (unset)" if mode == Mode.UNSPECIFIED
            else f"{mode}, which is not a declared Mode value"
        )
        yield ctx.diag(
            "mode",
            f"mode is {found}; it must be INFERENCE, TRAINING or BACKWARD_PASS_ONLY",
            hint="add mode: TRAINING (what TensorFlow's Python API writes)",
        )


@rule("TBL008", "error", "num_hosts < 1")
def no_hosts(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a `num_hosts` below 1 (unset included).

    ## Why is this bad?
    The load/retrieve ops receive the host count as the number of shards: "The number of shards
    for the embedding layer must be > 0. Currently set to: 0".

    ## Example
    ```
    num_hosts: 0
    ```

    ## Use instead
    ```
    num_hosts: 1
    ```
    The number of TPU hosts.

    Spec: validation-rules.md section 2.4
    """
    return _count_below_one(ctx, "num_hosts", "set num_hosts to the number of TPU hosts")


@rule("TBL009", "error", "num_tensor_cores < 1")
def no_tensor_cores(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a `num_tensor_cores` below 1 (unset included).

    ## Why is this bad?
    The TPU runtime needs the number of TensorCores taking part; TensorFlow's Python API always
    writes replicas x cores per replica.

    ## Example
    ```
    num_tensor_cores: 0
    ```

    ## Use instead
    ```
    num_tensor_cores: 8
    ```

    Spec: validation-rules.md section 2.4
    """
    return _count_below_one(
        ctx, "num_tensor_cores", "set num_tensor_cores to the total number of TensorCores"
    )


@rule("TBL010", "warning", "cores not a multiple of hosts")
def cores_not_multiple_of_hosts(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a `num_tensor_cores` that is not a multiple of `num_hosts`.

    ## Why is this bad?
    Every host drives the same number of TensorCores; TensorFlow 1's API required it.

    ## Example
    ```
    num_hosts: 3
    num_tensor_cores: 8
    ```

    ## Use instead
    ```
    num_hosts: 2
    num_tensor_cores: 8
    ```

    Spec: validation-rules.md section 2.4
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
    """## What it does
    Reports `spmd_sharding.enabled` with a `num_cores_per_replica` below 1.

    ## Why is this bad?
    TensorFlow's shape functions multiply the activations' leading dimension by this number: 0 or a
    negative value gives empty or negative shapes.

    ## Example
    ```
    spmd_sharding { enabled: true }
    ```

    ## Use instead
    ```
    spmd_sharding { enabled: true num_cores_per_replica: 2 }
    ```

    Spec: validation-rules.md section 2.4
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
    """## What it does
    With SPMD enabled, reports a `num_tensor_cores` that is not a multiple of
    `num_cores_per_replica`.

    ## Why is this bad?
    TensorFlow's Python API writes `num_tensor_cores = replicas * num_cores_per_replica`; another
    count cannot come from it and leaves some cores without a whole replica.

    ## Example
    ```
    num_tensor_cores: 8
    spmd_sharding { enabled: true num_cores_per_replica: 3 }
    ```

    ## Use instead
    ```
    num_tensor_cores: 8
    spmd_sharding { enabled: true num_cores_per_replica: 2 }
    ```

    Spec: validation-rules.md section 2.4
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
    """## What it does
    Notes a `spmd_sharding` message that sets fields while `enabled` is false.

    ## Why is this bad?
    The settings have no effect, which usually means `enabled: true` was forgotten.

    ## Example
    ```
    spmd_sharding { num_cores_per_replica: 2 }
    ```

    ## Use instead
    ```
    spmd_sharding { enabled: true num_cores_per_replica: 2 }
    ```
    or remove `spmd_sharding`.

    Spec: validation-rules.md section 2.4
    """
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
    """## What it does
    Reports a `sharding_strategy` other than DIV_DEFAULT or MOD.

    ## Why is this bad?
    Any other number (possible from binary, JSON or numeric text input) leaves the row-to-host
    mapping undefined in the TPU runtime.

    ## Example
    ```
    sharding_strategy: 5
    ```

    ## Use instead
    ```
    sharding_strategy: MOD
    ```

    Spec: validation-rules.md section 2.4
    """
    strategy = ctx.config.sharding_strategy
    if strategy not in SHARDING_NAMES:
        yield ctx.diag(
            "sharding_strategy",
            f"sharding_strategy is {strategy}, which is not a declared value; expected DIV_DEFAULT "
            "(0) or MOD (1)",
        )


@rule("TBL015", "info", "pipelining without TRAINING")
def pipelining_without_training(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes `pipeline_execution_with_tensor_core: true` when `mode` is INFERENCE or
    BACKWARD_PASS_ONLY.

    ## Why is this bad?
    The proto states that pipelining only affects results when `mode` is TRAINING; elsewhere the
    setting does nothing.

    ## Example
    ```
    mode: INFERENCE
    pipeline_execution_with_tensor_core: true
    ```

    ## Use instead
    ```
    mode: INFERENCE
    ```

    Spec: validation-rules.md section 2.4
    """
    config = ctx.config
    mode = config.mode
    if config.pipeline_execution_with_tensor_core and mode in (Mode.INFERENCE,
                                                               Mode.BACKWARD_PASS_ONLY):
        yield ctx.diag(
            "pipeline_execution_with_tensor_core",
            f"pipeline_execution_with_tensor_core has no effect in mode {MODE_NAMES[mode]}; it "
            "only matters in TRAINING",
        )
