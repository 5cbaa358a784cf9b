"""FEAT: feature descriptors (``validation-rules.md`` section 2.3), feature style only.

TensorFlow checks each feature's ``table_id``, then that its ``input_shape`` is non-empty, then
that every entry is positive, stopping at the first failure; then that every table has a feature.
This module reports every finding at once.
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.model.derived import INT32_MAX
from tpuemb_cfg.rules._registry import Context, rule
from tpuemb_cfg.rules.common import duplicate_names

_INT32_MIN = -(2**31)


def _feature_label(ctx: Context, j: int) -> str:
    descriptors = ctx.config.feature_descriptor
    if 0 <= j < len(descriptors) and descriptors[j].name:
        return f"feature_descriptor[{j}] {descriptors[j].name!r}"
    return f"feature_descriptor[{j}]"


@rule("FEAT001", "error", "table_id out of range")
def table_id_out_of_range(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a feature whose `table_id` does not index an existing table (below 0, or not below
    the number of tables).

    ## Why is this bad?
    TensorFlow rejects it at initialisation: "Invalid table_id: T found in feature_descriptor:
    ..., all table_ids must be in the range[0, N)".

    ## Example
    With one table:
    ```
    feature_descriptor { table_id: 1 input_shape: 16 }
    ```

    ## Use instead
    ```
    feature_descriptor { table_id: 0 input_shape: 16 }
    ```
    A `table_id` between 0 and the number of tables - 1 (a table's id is its position in
    `table_descriptor`; an unset `table_id` means 0).

    Spec: validation-rules.md section 2.3
    """
    n = ctx.derived.num_tables
    for j, fd in enumerate(ctx.config.feature_descriptor):
        if not 0 <= fd.table_id < n:
            expected = f"0..{n - 1}" if n else "nothing: there are no tables"
            yield ctx.diag(
                f"feature_descriptor[{j}].table_id",
                f"{_feature_label(ctx, j)}: table_id {fd.table_id} is out of range; expected "
                f"{expected}",
                hint="a table's id is its position in table_descriptor",
            )


@rule("FEAT002", "error", "empty input_shape")
def empty_input_shape(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a feature whose `input_shape` has no entry.

    ## Why is this bad?
    TensorFlow's C++ rejects it when the TPU is configured: `ValidateFeatureDescriptors` in
    `tensorflow/core/tpu/tpu_embedding_configuration_proto_rewrite.cc` fails with "The
    input_shape field cannot be empty in feature_descriptor: ...". TensorFlow's Python API
    writes it for `FeatureConfig(output_shape=[])`. The shape is the per-replica input shape
    without the axis the combiner reduces; its first entry is usually the batch size.

    ## Example
    ```
    feature_descriptor { table_id: 0 }
    ```

    ## Use instead
    ```
    feature_descriptor { table_id: 0 input_shape: 32 }
    ```
    One `input_shape` line per dimension.

    Spec: validation-rules.md section 2.3
    """
    for j, fd in enumerate(ctx.config.feature_descriptor):
        if len(fd.input_shape) == 0:
            yield ctx.diag(
                f"feature_descriptor[{j}].input_shape",
                f"{_feature_label(ctx, j)}: input_shape is empty; it needs at least one entry "
                "(usually the batch size)",
                hint="add input_shape: <batch size per replica>",
            )


@rule("FEAT003", "error", "input_shape entry <= 0")
def non_positive_input_shape(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports every `input_shape` entry that is 0 or negative (one diagnostic per entry).

    ## Why is this bad?
    TensorFlow's C++ rejects it when the TPU is configured: `ValidateFeatureDescriptors` in
    `tensorflow/core/tpu/tpu_embedding_configuration_proto_rewrite.cc` fails with "The
    input_shape dimension sizes must all be >0 in feature_descriptor: ..., found dimension size
    set to D". TensorFlow's Python API writes it for `FeatureConfig(output_shape=[0])`.

    ## Example
    ```
    feature_descriptor { table_id: 0 input_shape: [16, -1] }
    ```

    ## Use instead
    ```
    feature_descriptor { table_id: 0 input_shape: [16, 4] }
    ```
    Positive, fully known dimensions.

    Spec: validation-rules.md section 2.3
    """
    for j, fd in enumerate(ctx.config.feature_descriptor):
        for k, d in enumerate(fd.input_shape):
            if d <= 0:
                yield ctx.diag(
                    f"feature_descriptor[{j}].input_shape[{k}]",
                    f"{_feature_label(ctx, j)}: input_shape[{k}] is {d}; every dimension must be > "
                    "0",
                )


@rule("FEAT004", "error", "table without features")
def table_without_features(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports, in feature style, a table that no feature looks up.

    ## Why is this bad?
    TensorFlow rejects it: "No feature_descriptor fields found for table: NAME (ID: t) in the TPU
    embedding configuration."

    ## Example
    Two tables and only
    ```
    feature_descriptor { table_id: 0 input_shape: 16 }
    ```

    ## Use instead
    ```
    feature_descriptor { table_id: 0 input_shape: 16 }
    feature_descriptor { table_id: 1 input_shape: 16 }
    ```
    or remove the unused table (and renumber the later `table_id` values).

    Spec: validation-rules.md section 2.3
    """
    derived = ctx.derived
    if derived.style != "feature":
        return
    for i, table, path in ctx.tables():
        if derived.features_per_table[i] == 0:
            yield ctx.diag(
                f"{path}.name" if table.name else path,
                f"{ctx.table_label(i)}: no feature_descriptor has table_id {i}; every table needs "
                "a feature",
                hint=f"add feature_descriptor {{ table_id: {i} input_shape: ... }} or remove "
                "the table",
            )


@rule("FEAT005", "error", "32-bit overflow of a feature size")
def size_overflow(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a feature whose size (the product of its `input_shape`), or a legacy table whose
    `batch_size_per_tensor_core * num_features`, does not fit in a signed 32-bit integer.

    ## Why is this bad?
    TensorFlow computes these products in 32-bit signed arithmetic, where an overflow is undefined
    behaviour: the derived batch size and feature counts become garbage.

    ## Example
    ```
    feature_descriptor { table_id: 0 input_shape: [65536, 65536] }
    ```

    ## Use instead
    ```
    feature_descriptor { table_id: 0 input_shape: [256, 64] }
    ```
    Smaller shapes (the size is per replica and per step).

    Spec: validation-rules.md section 2.3
    """
    derived = ctx.derived
    if derived.style == "feature":
        for j, size in enumerate(derived.feature_sizes):
            if size is not None and size > INT32_MAX:
                yield ctx.diag(
                    f"feature_descriptor[{j}].input_shape",
                    f"{_feature_label(ctx, j)}: input_shape multiplies to {size}, which exceeds "
                    f"2^31 - 1 = {INT32_MAX} (TensorFlow computes it in 32-bit integers)",
                )
        return
    batch = ctx.config.batch_size_per_tensor_core
    for i, table, path in ctx.tables():
        product = batch * table.num_features
        if not _INT32_MIN <= product <= INT32_MAX:
            yield ctx.diag(
                f"{path}.num_features",
                f"{ctx.table_label(i)}: batch_size_per_tensor_core {batch} x num_features "
                f"{table.num_features} = {product} does not fit in 32 bits (TensorFlow computes it "
                "in 32-bit integers)",
            )


def _feature_style_valid(ctx: Context) -> bool:
    derived = ctx.derived
    n = derived.num_tables
    for j, fd in enumerate(ctx.config.feature_descriptor):
        size = derived.feature_sizes[j]
        if not 0 <= fd.table_id < n or size is None or size > INT32_MAX:
            return False
    return all(count > 0 for count in derived.features_per_table)


@rule("FEAT006", "info", "derived batch size and feature counts", on_request=True)
def derived_counts(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    States the batch size and per-table feature counts TensorFlow derives from the features. On
    request only (`--select FEAT006` or `--show-derived`).

    ## Why is this bad?
    It is not wrong; these are the numbers the TPU sees. Feature j's size is the product of all its
    `input_shape` entries; `batch_size_per_tensor_core` is the GCD of the sizes and table t's
    `num_features` is the sum of size / B over its features.

    ## Example
    Features [32] and [32, 4] on table 0 and [48] on table 1 give B = 16 and `num_features` 10
    and 3.

    ## Use instead
    Nothing to change; check the numbers against the training code's batch.

    Spec: validation-rules.md section 2.3
    """
    derived = ctx.derived
    if derived.style != "feature" or not _feature_style_valid(ctx):
        return
    counts = ", ".join(f"{ctx.table_label(i)}: {n}" for i, n in enumerate(derived.num_features))
    yield ctx.diag(
        "feature_descriptor[0]",
        f"derived batch_size_per_tensor_core = {derived.batch_size}; num_features per table: "
        f"{counts}",
    )


@rule("FEAT007", "info", "features disagree on the batch (GCD used)")
def batch_disagreement(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports features whose leading `input_shape` entries (their batch dimensions) differ: the
    first feature whose leading dimension differs from the derived batch size (the GCD of all
    feature sizes), when the features do not share one leading batch dimension.

    ## Why is this bad?
    TensorFlow silently uses the GCD: with features [32] and [48] the TPU sees a batch of 16 and
    two "features" of 16 for the first. Usually the features were meant to share a batch size.
    Features that share their leading dimension are fine even when the GCD is larger: sequence
    features all of shape [16, 200] give a batch of 3200 (each is one feature of 3200 ids), and
    [16] with [16, 5] a batch of 16 (the second is 5 features of 16).

    ## Example
    ```
    feature_descriptor { table_id: 0 input_shape: 32 }
    feature_descriptor { table_id: 1 input_shape: 48 }
    ```

    ## Use instead
    One batch size for every feature, here `input_shape: 48` for both (extra ids per sample go
    in a second dimension). Reported only when the leading dimensions differ: the GCD also
    differs from them for features that all share a sequence axis, and that is no disagreement.

    Spec: validation-rules.md section 2.3
    """
    derived = ctx.derived
    if derived.style != "feature" or derived.batch_size <= 0:
        return
    features = [f for f in derived.features if f.index is not None]
    leading = {f.input_shape[0] for f in features}
    if len(leading) < 2:  # one batch dimension shared by every feature
        return
    for f in features:
        if f.input_shape[0] != derived.batch_size:
            other = next(g for g in features if g.input_shape[0] != f.input_shape[0])
            assert other.index is not None and f.index is not None
            yield ctx.diag(
                f"feature_descriptor[{f.index}].input_shape[0]",
                f"{_feature_label(ctx, f.index)}: leading dimension {f.input_shape[0]} differs "
                f"from the derived batch size {derived.batch_size} (the GCD of all feature sizes) "
                f"and from the {other.input_shape[0]} of {_feature_label(ctx, other.index)}; "
                "the features do not share one batch dimension",
                hint="TensorFlow uses the GCD silently; check that the features' batch sizes "
                "are what you meant",
            )
            return


@rule("FEAT008", "warning", "duplicate feature names")
def duplicate_feature_names(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a feature descriptor whose non-empty `name` an earlier one already uses.

    ## Why is this bad?
    TensorFlow ignores feature names, but tools (and people) that key features by name collide.

    ## Example
    ```
    feature_descriptor { name: "user" table_id: 0 input_shape: 16 }
    feature_descriptor { name: "user" table_id: 1 input_shape: 16 }
    ```

    ## Use instead
    ```
    feature_descriptor { name: "user" table_id: 0 input_shape: 16 }
    feature_descriptor { name: "item" table_id: 1 input_shape: 16 }
    ```
    Unique names, or no names.

    Spec: validation-rules.md section 2.3
    """
    return duplicate_names(ctx, "feature_descriptor", "feature", ctx.config.feature_descriptor)
