"""User programs, weight decay, simulation, packing, hot ids and enums (``OPT040``-``OPT050``,
``validation-rules.md`` section 2.5).
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.algorithms import ALGORITHMS, checked_by
from tpuemb_cfg.base.schema import HotIdStatus, PackingStatus
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.model.derived import (
    PACKABLE_ALGORITHMS,
    PACKABLE_DIMENSIONS,
    packing_effective,
    program_arity,
)
from tpuemb_cfg.rules._registry import Context, rule
from tpuemb_cfg.rules.common import (
    algorithm_tables,
    finite,
    fmt,
    lr_kind,
    op_tables,
    table_diag,
    undeclared_value,
)


def arity_valid(inputs: int, outputs: int) -> bool:
    """TensorFlow's condition: at least two inputs and 1 or 2 more inputs than outputs."""
    return inputs >= 2 and inputs - outputs in (1, 2)


@rule("OPT040", "error", "user-defined program arity")
def user_program_arity(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks the signature of a `user_defined_program`: with I = the number of
    `program.host_program_shape.parameters` and O = the number of
    `program.host_program_shape.result.tuple_shapes` (both 0 when absent), TensorFlow requires
    I >= 2 and I = O + 1 or I = O + 2.

    ## Why is this bad?
    The program is applied to every row: its inputs are the gradient, the weight, one input per
    slot and optionally one dynamic scalar; its outputs are the new weight and the new slots.
    TensorFlow rejects any other shape when the embedding ops are built and when the TPU is
    initialised ("User-defined TPU embedding optimizer program must have at least two inputs and
    the number of outputs must be 1 or 2 less than the number of inputs";
    `GetBaseAuxiliaryParameterCount` in
    `tensorflow/core/tpu/tpu_embedding_optimization_parameters_utils.cc`).

    ## Example
    A program with 3 parameters (gradient, weight, one slot) and a 1-element result tuple.

    ## Use instead
    A program with 3 parameters and a 2-element result tuple (new weight, new slot), or 4
    parameters (the last one a dynamic scalar) and 2 results.

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *checked_by("OPT040")):
        inputs, outputs = program_arity(at.params)
        if arity_valid(inputs, outputs):
            continue
        if not at.params.HasField("program"):
            found = f"{at.algorithm} has no program"
        else:
            found = f"the user-defined program has {inputs} input(s) and {outputs} output(s)"
        yield table_diag(
            ctx, at, f"{at.algorithm}.program",
            f"{found}; TensorFlow needs at least 2 inputs and 1 or 2 fewer outputs than inputs",
            hint="inputs: gradient, weight, one per slot, optionally a dynamic scalar; "
            "outputs: the new weight and one per slot",
        )


@rule("OPT041", "warning", "user-defined program and dynamic input disagree")
def user_program_dynamic_input(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks that a `user_defined_program` with one input more than needed (I = O + 2) gets its
    extra scalar from a dynamic learning rate, and that a program without it (I = O + 1) does
    not have a dynamic learning rate it would not read.

    ## Why is this bad?
    The optional last input of the program comes through the dynamic learning-rate mechanism
    (proto comment). Without a dynamic learning rate the program has nothing to read; with one
    it does not read, a position of the learning-rate list is sent every step for nothing.

    ## Example
    A program with 4 inputs and 2 outputs and `learning_rate { constant: 0.1 }`.

    ## Use instead
    ```
    learning_rate { dynamic { tag: 0 } }
    ```

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *checked_by("OPT041")):
        inputs, outputs = program_arity(at.params)
        if not arity_valid(inputs, outputs):
            continue  # OPT040
        dynamic = lr_kind(at.op) == "dynamic"
        label = ctx.table_label(at.i)
        if inputs == outputs + 2 and not dynamic:
            yield ctx.diag(
                f"{at.op_path}.learning_rate",
                f"{label}: the user-defined program has {inputs} inputs and {outputs} outputs, "
                "so its last input is a dynamic scalar, but the learning rate is not dynamic",
                hint="use `learning_rate { dynamic { tag: N } }` and send the program's scalar "
                "as input N",
            )
        elif inputs == outputs + 1 and dynamic:
            yield ctx.diag(
                f"{at.op_path}.learning_rate.dynamic",
                f"{label}: the user-defined program has {inputs} inputs and {outputs} outputs "
                "and reads no dynamic scalar, but the table has a dynamic learning rate",
                hint="add the scalar input to the program, or use a constant learning rate",
            )


@rule("OPT042", "error", "weight decay with MDL Adagrad Light")
def mdl_weight_decay(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a `weight_decay_factor` other than 0 on a `mdl_adagrad_light` table.

    ## Why is this bad?
    The proto states that weight decay is supported by all optimizers except MDL Adagrad Light.

    ## Example
    ```
    weight_decay_factor: 0.001
    mdl_adagrad_light { l2: 0.1 }
    ```

    ## Use instead
    ```
    mdl_adagrad_light { l2: 0.1 }
    ```

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *checked_by("OPT042")):
        if at.op.weight_decay_factor != 0:
            yield table_diag(
                ctx, at, "weight_decay_factor",
                f"weight_decay_factor is {fmt(at.op.weight_decay_factor)}, but {at.algorithm} "
                "does not support weight decay",
                hint="remove weight_decay_factor (or choose another optimizer)",
            )


@rule("OPT043", "info", "not simulatable")
def not_simulatable(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes tables whose algorithm `tpuemb simulate` cannot run: `mdl_adagrad_light`,
    `online_yogi` and `user_defined_program`.

    ## Why is this bad?
    It is not wrong: TensorFlow accepts these. But no public source gives the update equations
    of MDL Adagrad Light or Online Yogi, and a user program would need an HLO interpreter, so
    the simulator refuses these tables instead of guessing.

    ## Example
    ```
    online_yogi { l1: 0.0 l2: 0.0 beta2: 0.999 }
    ```

    ## Use instead
    Nothing to change for training on a TPU; to simulate, use an algorithm with public
    equations, e.g. `adam` or `ftrl`.

    Spec: validation-rules.md section 2.5
    """
    unsupported = (name for name, a in ALGORITHMS.items() if a.unsupported)
    for at in algorithm_tables(ctx, *unsupported):
        why = (
            "a user program needs an HLO interpreter"
            if at.algorithm is not None and ALGORITHMS[at.algorithm].slots_from_program
            else "it has no public update equations"
        )
        yield table_diag(
            ctx, at, f"{at.algorithm}",
            f"tpuemb simulate cannot run {at.algorithm} ({why}) and refuses this table",
        )


@rule("OPT044", "info", "simulated from reconstructed equations")
def reconstructed_equations(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes tables whose algorithm the simulator runs from reconstructed equations:
    `bounded_adagrad`, `frequency_aware_adagrad` and `proximal_yogi`.

    ## Why is this bad?
    It is not wrong. TensorFlow publishes no equations for these algorithms; the executor's
    update is the project's documented reconstruction (from proto comments and related
    optimizers), deterministic but not verified against a TPU. Do not expect simulated values to
    match TPU training exactly.

    ## Example
    ```
    bounded_adagrad { max_var_update: 1.0 }
    ```

    ## Use instead
    Nothing to change; read the executor's equations for the algorithm in the documentation.

    Spec: validation-rules.md section 2.5
    """
    reconstructed = (name for name, a in ALGORITHMS.items() if a.equations == "RECON")
    for at in algorithm_tables(ctx, *reconstructed):
        yield table_diag(
            ctx, at, f"{at.algorithm}",
            f"tpuemb simulate runs {at.algorithm} from reconstructed equations (TensorFlow "
            "publishes none); simulated values may differ from a TPU",
        )


@rule("OPT045", "warning", "negative weight decay")
def negative_weight_decay(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a negative `weight_decay_factor`.

    ## Why is this bad?
    Weight decay replaces each updated weight w by `w - factor * w`; with a negative factor the
    weights grow every step instead of shrinking. TensorFlow does not check it.

    ## Example
    ```
    weight_decay_factor: -0.001
    ```

    ## Use instead
    ```
    weight_decay_factor: 0.001
    ```

    Spec: validation-rules.md section 2.5
    """
    for t in op_tables(ctx):
        value = t.op.weight_decay_factor
        if finite(value) and value < 0:
            yield table_diag(
                ctx, t, "weight_decay_factor",
                f"weight_decay_factor is {fmt(value)}, expected >= 0: every updated weight grows "
                "by this fraction each step",
                hint=f"use {fmt(-value)} if the sign is a typo",
            )


@rule("OPT046", "info", "learning-rate multiplier without weight decay")
def multiplier_without_decay(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes `multiply_weight_decay_factor_by_learning_rate: true` with no weight decay
    (`weight_decay_factor` 0).

    ## Why is this bad?
    The flag only scales the decay factor by the step's learning rate; without a factor it has
    no effect, which usually means the factor was forgotten.

    ## Example
    ```
    multiply_weight_decay_factor_by_learning_rate: true
    ```

    ## Use instead
    ```
    weight_decay_factor: 0.0001
    multiply_weight_decay_factor_by_learning_rate: true
    ```

    Spec: validation-rules.md section 2.5
    """
    for t in op_tables(ctx):
        op = t.op
        if not op.multiply_weight_decay_factor_by_learning_rate:
            continue
        if op.weight_decay_factor == 0:
            yield table_diag(
                ctx, t, "multiply_weight_decay_factor_by_learning_rate",
                "multiply_weight_decay_factor_by_learning_rate is true but weight_decay_factor is "
                "0, so it has no effect",
                hint="set weight_decay_factor, or remove the flag",
            )


@rule("OPT047", "info", "low-dimensional packing will be ignored")
def packing_ignored(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes `low_dimensional_packing_status: ENABLED` on a table the runtime will not pack: the
    algorithm is not `stochastic_gradient_descent`, `adagrad` or `ftrl`, or the dimension is not
    1, 2 or 4.

    ## Why is this bad?
    Packing stores several narrow rows in one 8-float memory chunk; the runtime only does it for
    optimizers to which a zero gradient is a no-op, and silently turns it off otherwise (also
    for small vocabularies). The setting then only suggests memory savings that do not happen.

    ## Example
    ```
    table_descriptor { dimension: 16 optimization_parameters {
      low_dimensional_packing_status: ENABLED adagrad { } } }
    ```

    ## Use instead
    Remove `low_dimensional_packing_status`, or use it on 1-, 2- or 4-wide SGD, Adagrad or FTRL
    tables.

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx):
        if at.op.low_dimensional_packing_status != PackingStatus.ENABLED:
            continue
        reasons = []
        if at.algorithm not in PACKABLE_ALGORITHMS:
            reasons.append(f"the algorithm is {at.algorithm}, not SGD, Adagrad or FTRL")
        if at.table.dimension not in PACKABLE_DIMENSIONS:
            reasons.append(f"the dimension is {at.table.dimension}, not 1, 2 or 4")
        if reasons:
            yield table_diag(
                ctx, at, "low_dimensional_packing_status",
                "low-dimensional packing is ENABLED but the runtime will not pack this table: "
                + " and ".join(reasons),
                hint="remove low_dimensional_packing_status from this table",
            )


@rule("OPT048", "info", "low-dimensional packing caveats")
def packing_caveats(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes the conditions packing imposes on a table it will pack (ENABLED, SGD/Adagrad/FTRL,
    dimension 1, 2 or 4): with weight clipping (`clipping_limits`), initial weights must lie
    within the limits; with FTRL, initial weights must match the slots (zero weights for zero
    linears).

    ## Why is this bad?
    A packed memory chunk holds neighbouring rows; an update of one row runs the optimizer on its
    neighbours with a zero gradient. For these optimizers that is a no-op, except that weight
    clipping then moves an out-of-range neighbour, and FTRL rebuilds a neighbour's weight from
    its slots, replacing a weight that disagrees with them.

    ## Example
    ```
    clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }
    low_dimensional_packing_status: ENABLED
    adagrad { }
    ```

    ## Use instead
    Initialise the table within [-1, 1], or disable packing.

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *PACKABLE_ALGORITHMS):
        if not packing_effective(at.table, at.algorithm):
            continue
        caveats = []
        if at.op.HasField("clipping_limits"):
            caveats.append(
                "initial weights must lie within clipping_limits (a zero-gradient update of a "
                "packed neighbour clips it)"
            )
        if at.algorithm in checked_by("OPT048"):
            caveats.append(
                "initial weights must match the FTRL slots (zero weights for zero linears), or a "
                "zero-gradient update of a packed neighbour rebuilds its weight from the slots"
            )
        if caveats:
            yield table_diag(
                ctx, at, "low_dimensional_packing_status",
                f"low-dimensional packing: {'; '.join(caveats)}",
            )


@rule("OPT049", "info", "hot-id replication is experimental")
def hot_id_experimental(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes `hot_id_replication_configuration.status` ENABLED or MIGRATION_ONLY.

    ## Why is this bad?
    The proto marks hot-id replication (replicating frequently looked-up ids) as an experimental
    performance feature; its behaviour may change between releases and the simulator does not
    model it (it does not change results).

    ## Example
    ```
    hot_id_replication_configuration { status: ENABLED }
    ```

    ## Use instead
    Nothing, if the experiment is intended.

    Spec: validation-rules.md section 2.5
    """
    for t in op_tables(ctx):
        op = t.op
        if not op.HasField("hot_id_replication_configuration"):
            continue
        status = op.hot_id_replication_configuration.status
        if status in (HotIdStatus.ENABLED, HotIdStatus.MIGRATION_ONLY):
            name = "ENABLED" if status == HotIdStatus.ENABLED else "MIGRATION_ONLY"
            yield table_diag(
                ctx, t, "hot_id_replication_configuration.status",
                f"hot-id replication status {name} is an experimental feature",
            )


@rule("OPT050", "warning", "undeclared enum value")
def undeclared_enum(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports `low_dimensional_packing_status` or `hot_id_replication_configuration.status`
    holding a number its enum does not declare (possible from binary, JSON or text input, since
    proto3 enums are open).

    ## Why is this bad?
    TensorFlow builds and runs such a configuration (no check in its Python API or its C++; its
    Python API writes the raw number it is given, e.g. `low_dimensional_packing_status=3`), so
    this is a warning: what the TPU does with an undeclared status is undefined.

    ## Example
    ```
    low_dimensional_packing_status: 7
    ```

    ## Use instead
    ```
    low_dimensional_packing_status: DISABLED
    ```

    Spec: validation-rules.md section 2.5
    """
    for t in op_tables(ctx):
        yield from undeclared_value(
            ctx, t, "low_dimensional_packing_status",
            "write low_dimensional_packing_status by name, e.g. DISABLED",
        )
        if t.op.HasField("hot_id_replication_configuration"):
            yield from undeclared_value(
                ctx, t, "hot_id_replication_configuration.status",
                "write status by name, e.g. DISABLED",
            )
