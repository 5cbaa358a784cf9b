"""MODE: legacy versus feature-descriptor style (``validation-rules.md`` section 2.2).

A configuration either lists ``feature_descriptor`` messages (feature style; TensorFlow derives the
batch size and per-table feature counts) or sets ``batch_size_per_tensor_core`` and every table's
``num_features`` (legacy style). TensorFlow decides by ``feature_descriptor`` being non-empty and
rejects a mixture when the TPU embedding is initialised.
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.rules._registry import Context, Diagnostic, rule


@rule("MODE001", "error", "batch_size_per_tensor_core set with feature descriptors")
def batch_size_with_features(ctx: Context) -> Iterator[Diagnostic]:
    """``batch_size_per_tensor_core`` must not be set when ``feature_descriptor`` is used.

    **Why is this bad.** TensorFlow derives the batch size from the features' ``input_shape``
    (the GCD of their sizes) and rejects an explicit one at initialisation: "The
    batch_size_per_tensor_core field must NOT be populated when the feature_descriptor fields are
    filled in."

    **Use instead.** Delete ``batch_size_per_tensor_core``.
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
    """A table's ``num_features`` must be 0 (unset) when ``feature_descriptor`` is used.

    **Why is this bad.** TensorFlow derives every table's feature count from the feature
    descriptors and rejects an explicit one: "The TableDescriptor.num_features field must NOT be
    populated when the feature_descriptor fields are filled in" (first table only; this rule
    reports every table).

    **Use instead.** Delete ``num_features`` from every table.
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
    """Legacy style needs ``batch_size_per_tensor_core`` > 0.

    **What it does.** Without ``feature_descriptor`` the configuration is in legacy style, where
    ``batch_size_per_tensor_core`` must be positive (this includes a configuration with no tables
    and no features).

    **Why is this bad.** TensorFlow rejects it first on the legacy path: "Invalid
    batch_size_per_tensor_core: 0 found in the TPU embedding configuration. Valid values are >0."

    **Use instead.** Either list the features (``feature_descriptor``) or set
    ``batch_size_per_tensor_core`` to the number of samples per TensorCore and step.
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
    """Legacy style needs every table's ``num_features`` > 0.

    **Why is this bad.** TensorFlow rejects it (first table only): "Invalid num_features: 0 found
    for table: NAME in the TPU embedding configuration. Valid values are >0."

    **Use instead.** Set ``num_features`` to the number of features that look the table up.
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
    """The configuration uses the legacy batch-size / ``num_features`` style.

    **Why.** TensorFlow's current Python API writes feature descriptors; the legacy fields are
    still supported by the C++ runtime. A valid legacy configuration converts mechanically:
    ``tpuemb validate --fix`` removes ``batch_size_per_tensor_core`` and every ``num_features`` and
    appends, for each table t, ``num_features`` descriptors ``{table_id: t, input_shape: [B]}``.
    Re-deriving gives back exactly the same batch size and feature counts.

    **Caution.** The TensorCore program then receives one activation per feature instead of one per
    table, so the training code changes with it.
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
        f"num_features on {derived.num_tables} table(s); convertible to {total} feature "
        "descriptor(s)",
        hint="tpuemb validate --fix converts it to feature_descriptor; the TensorCore program "
        "then receives one activation per feature instead of one per table, so the training code "
        "must change with it",
    )
