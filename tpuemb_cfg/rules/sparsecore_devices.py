"""SC013-SC017: SparseCore counts, COO buffers, and what preprocessing and stacking refuse
(``sparsecore.md`` section 5)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from tpuemb_cfg.base.platform import chip_names, jax_sparse_core_counts
from tpuemb_cfg.base.sparsecore_defaults import theoretical_coo_buffer
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._facts import platform_doc
from tpuemb_cfg.rules._registry import SparseCoreContext, rule
from tpuemb_cfg.rules._sparsecore_common import (
    DEFAULT_LIMIT,
    INT32_MAX,
    _or,
    _table,
    limit_key_path,
)
from tpuemb_cfg.sparsecore.topology import CHIPS, DEFAULT_SPARSE_CORES, sparse_cores_per_device_text

if TYPE_CHECKING:
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig
    from tpuemb_cfg.sparsecore.stacking import Stack, Stacking


@rule("SC013", "warning", f"SparseCore count unknown: TensorFlow assumes {DEFAULT_SPARSE_CORES}",
      target="sparsecore")
@platform_doc
def sparse_cores_defaulted(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    Reports a topology whose SparseCores per chip were not known (a chip count without a chip
    kind), so $assumed_sparse_cores was assumed as TensorFlow does.

    ## Why is this bad?
    When the chip reports no SparseCore count, `TPUEmbeddingV2` logs a warning and uses
    $assumed_sparse_cores. The chips differ ($sparse_cores_per_device per device): with the
    wrong count the stacks' activation sizes, the shard rotations, the per-SparseCore batch and
    the limits are all computed for a chip that is not there.

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
            hint=f"name the chip kind ({chip_names(CHIPS.values(), last=' or ')}): "
            "topology = 'v6e-64'",
        )


# -- SC014 - SC016: preprocessing checks of jax-tpu-embedding --------------------------------------


def _theoretical_buffer(max_ids: int, stacking: Stacking) -> int:
    """jax-tpu-embedding's theoretical COO buffer per device: roundup8(max_ids) x SparseCores
    per device x N."""
    return theoretical_coo_buffer(max_ids, stacking.sparse_cores_per_partition,
                                  stacking.num_sparse_cores)


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
@platform_doc
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
    preprocessing statistic `max_ids_per_partition` of real batches), e.g.
    `{"user": $default_limit}`.

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
                    hint=f"set {field} to at least 1 ({DEFAULT_LIMIT} is the default)",
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
    own limit (a one-table jax stack; keras-rs on JAX: the table whose limit is the largest,
    which the stack takes) or the stack callable (jax)."""
    if config.mode != "jax":
        setting = "max_ids_per_table" if field == "max_ids_per_partition" else \
            "max_unique_ids_per_table"
        return limit_key_path(setting, stack.name)
    if config.stack_limits_from_tables:
        own = {t.name: getattr(t, field) for t in config.tables}
        applied = getattr(stack, field)
        name = next((t.name for t in stack.tables if own.get(t.name) == applied),
                    stack.tables[0].name)
        return f"{_table(name)}.{field}"
    if len(stack.tables) == 1:
        return f"{_table(stack.tables[0].name)}.{field}"
    return f"stack_to_{field}"


@rule("SC016", "error", "SparseCore count jax-tpu-embedding refuses", target="sparsecore")
@platform_doc
def sparse_core_count(ctx: SparseCoreContext) -> Iterator[Diagnostic]:
    """## What it does
    For jax-tpu-embedding, reports SparseCores per device other than $jax_sparse_core_counts,
    and a total number of SparseCores N (devices x SparseCores per device) that is not a power
    of two.

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
    if topology.sparse_cores_per_device not in jax_sparse_core_counts():
        yield ctx.diag(
            "topology.sparse_cores_per_chip",
            f"{topology.sparse_cores_per_device} SparseCores per device: jax-tpu-embedding "
            f"accepts {_or(jax_sparse_core_counts())} ({sparse_cores_per_device_text()})",
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
