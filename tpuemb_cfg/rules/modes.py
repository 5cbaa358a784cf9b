"""MODE: legacy versus feature-descriptor style (``validation-rules.md`` section 2.2).

A configuration either lists ``feature_descriptor`` messages (feature style; TensorFlow derives the
batch size and per-table feature counts) or sets ``batch_size_per_tensor_core`` and every table's
``num_features`` (legacy style). TensorFlow decides by ``feature_descriptor`` being non-empty and
rejects a mixture when the TPU embedding is initialised.
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._registry import Context, rule


@rule("MODE001", "error", "batch_size_per_tensor_core set with feature descriptors")
def batch_size_with_features(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports `batch_size_per_tensor_core` set in a configuration that uses `feature_descriptor`.

    ## Why is this bad?
    TensorFlow derives the batch size from the features' `input_shape` (the GCD of their sizes)
    and rejects an explicit one at initialisation: "The batch_size_per_tensor_core field must NOT
    be populated when the feature_descriptor fields are filled in."

    ## Example
    ```
    batch_size_per_tensor_core: 16
    feature_descriptor { table_id: 0 input_shape: 16 }
    ```

    ## Use instead
    ```
    feature_descriptor { table_id: 0 input_shape: 16 }
    ```
    Delete `batch_size_per_tensor_core`.

    Spec: validation-rules.md section 2.2
    """
    config = ctx.config
    if ctx.derived.style == "feature" and config.batch_size_per_tensor_core != 0:
        derived_b = ctx.derived.batch_size
        yield ctx.diag(
            "batch_size_per_tensor_core",
            f"batch_size_per_tensor_core is {config.batch_size_per_tensor_core} but the "
            "configuration uses feature_descriptor; it must not be set in feature-descriptor "
            "style",
            hint="delete it: TensorFlow derives the batch size from the features"
            + (f" (here {derived_b})" if derived_b > 0 else ""),
        )


@rule("MODE002", "error", "num_features set with feature descriptors")
def num_features_with_features(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports every table whose `num_features` is not 0 (unset) in a configuration that uses
    `feature_descriptor`.

    ## Why is this bad?
    TensorFlow derives every table's feature count from the feature descriptors and rejects an
    explicit one: "The TableDescriptor.num_features field must NOT be populated when the
    feature_descriptor fields are filled in" (first table only; this rule reports every table).

    ## Example
    ```
    table_descriptor { name: "ads" num_features: 1 ... }
    feature_descriptor { table_id: 0 input_shape: 16 }
    ```

    ## Use instead
    ```
    table_descriptor { name: "ads" ... }
    feature_descriptor { table_id: 0 input_shape: 16 }
    ```
    Delete `num_features` from every table.

    Spec: validation-rules.md section 2.2
    """
    if ctx.derived.style != "feature":
        return
    for i, table, path in ctx.tables():
        if table.num_features != 0:
            yield ctx.diag(
                f"{path}.num_features",
                f"{ctx.table_label(i)}: num_features is {table.num_features} but the configuration "
                "uses feature_descriptor; it must not be set in feature-descriptor style",
                hint="delete num_features: TensorFlow derives it from the feature descriptors",
            )


@rule("MODE003", "error", "legacy style without a positive batch size")
def legacy_without_batch_size(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Without `feature_descriptor` the configuration is in legacy style, where
    `batch_size_per_tensor_core` must be positive; reports it when it is not (this includes a
    configuration with no tables and no features).

    ## Why is this bad?
    TensorFlow rejects it first on the legacy path: "Invalid batch_size_per_tensor_core: 0 found in
    the TPU embedding configuration. Valid values are >0."
    (`tensorflow/core/tpu/tpu_embedding_configuration_proto_rewrite.cc`).

    ## Example
    ```
    table_descriptor { name: "ads" num_features: 1 ... }
    ```

    ## Use instead
    ```
    batch_size_per_tensor_core: 16
    table_descriptor { name: "ads" num_features: 1 ... }
    ```
    Either list the features (`feature_descriptor`) or set `batch_size_per_tensor_core` to the
    number of samples per TensorCore and step.

    Spec: validation-rules.md section 2.2
    """
    config = ctx.config
    if ctx.derived.style == "legacy" and config.batch_size_per_tensor_core <= 0:
        yield ctx.diag(
            "batch_size_per_tensor_core",
            f"batch_size_per_tensor_core is {config.batch_size_per_tensor_core}; a configuration "
            "without feature_descriptor (legacy style) needs a positive batch size",
            hint="set batch_size_per_tensor_core > 0, or describe the inputs with "
            "feature_descriptor",
        )


@rule("MODE004", "error", "legacy style with num_features <= 0")
def legacy_num_features(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports, in legacy style, every table whose `num_features` is 0 or negative.

    ## Why is this bad?
    TensorFlow rejects it (first table only): "Invalid num_features: 0 found for table: NAME in the
    TPU embedding configuration. Valid values are >0."

    ## Example
    ```
    batch_size_per_tensor_core: 16
    table_descriptor { name: "ads" num_features: 0 ... }
    ```

    ## Use instead
    ```
    batch_size_per_tensor_core: 16
    table_descriptor { name: "ads" num_features: 1 ... }
    ```
    Set `num_features` to the number of features that look the table up.

    Spec: validation-rules.md section 2.2
    """
    if ctx.derived.style != "legacy":
        return
    for i, table, path in ctx.tables():
        if table.num_features <= 0:
            yield ctx.diag(
                f"{path}.num_features",
                f"{ctx.table_label(i)}: num_features is {table.num_features}; in legacy style "
                "every table needs num_features > 0",
                hint="set num_features to the number of features that look this table up",
            )


@rule("MODE005", "info", "legacy style (convertible)")
def legacy_style(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes a valid configuration in the legacy batch-size / `num_features` style.

    ## Why is this bad?
    It is not wrong: TensorFlow's current Python API writes feature descriptors, and the legacy
    fields are still supported by the C++ runtime, which converts them itself when the TPU
    system starts (`PopulateFeatureDescriptors` in `tpu_embedding_configuration_proto_rewrite.cc`):
    one feature per table with input shape `[batch_size_per_tensor_core * num_features]`. Writing
    that conversion into the file shows the features the runtime really uses. Each table keeps
    its one activation of `[B * num_features, dimension]`, so the training code does not change.

    ## Example
    ```
    batch_size_per_tensor_core: 16
    table_descriptor { name: "ads" num_features: 2 ... }
    ```

    ## Use instead
    ```
    table_descriptor { name: "ads" ... }
    feature_descriptor { table_id: 0 input_shape: 32 }
    ```
    `tpuemb validate --fix` writes TensorFlow's own conversion: for each table t, one descriptor
    `{table_id: t, input_shape: [B * num_features]}`, and removes `batch_size_per_tensor_core`
    and every `num_features` (TensorFlow rejects a file with both).

    Spec: validation-rules.md section 2.2
    """
    config = ctx.config
    derived = ctx.derived
    if derived.style != "legacy" or config.batch_size_per_tensor_core <= 0:
        return
    if any(table.num_features <= 0 for _, table, _ in ctx.tables()):
        return
    total = sum(derived.num_features)
    yield ctx.diag(
        "batch_size_per_tensor_core",
        f"legacy style: batch_size_per_tensor_core {config.batch_size_per_tensor_core} with "
        f"num_features on {derived.num_tables} table(s) ({total} feature(s) of "
        f"{config.batch_size_per_tensor_core} samples); TensorFlow converts it to one feature "
        f"descriptor per table when the TPU system starts",
        hint="tpuemb validate --fix writes TensorFlow's own conversion into the file (one "
        "feature_descriptor of input_shape [batch_size_per_tensor_core * num_features] per "
        "table); every table keeps its activation shape, so the training code does not change",
    )
