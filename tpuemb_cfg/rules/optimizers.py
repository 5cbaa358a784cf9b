"""Optimizers and learning rates (``OPT``, ``validation-rules.md`` section 2.5): the rules that
are not plain hyper-parameter ranges.

OPT001-OPT005 check that an algorithm is selected and that the learning rate and every float
hyper-parameter are finite and sensible; OPT013, OPT014 and OPT037 look at how the learning rate
meets the algorithm; OPT032-OPT034 at a frequency estimator's table. The range rules generated
from the algorithm table are in :mod:`tpuemb_cfg.rules.hyperparameters`, user programs, weight
decay, simulation, packing, hot ids and enums in :mod:`tpuemb_cfg.rules.programs`.
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.algorithms import ALGORITHMS, checked_by, constraints
from tpuemb_cfg.base.protoutil import is_repeated
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._registry import Context, rule
from tpuemb_cfg.rules.common import (
    algorithm_tables,
    constant_rates,
    finite,
    fmt,
    lr_kind,
    op_tables,
    opt_path,
    optimization,
    table_diag,
    table_violations,
)

# --------------------------------------------------------------------------------------------
# OPT001-OPT005: algorithm and learning rate


@rule("OPT001", "error", "no optimization algorithm")
def no_algorithm(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks that every table selects an optimization algorithm: `optimization_parameters` must be
    present and one member of its oneof `parameters` (`adagrad`, `adam`, `ftrl`, ...) must be set.

    ## Why is this bad?
    TensorFlow rejects the configuration when the embedding ops are built and when the TPU is
    initialised: "No optimization algorithm specified" (`GetBaseAuxiliaryParameterCount` in
    `tensorflow/core/tpu/tpu_embedding_optimization_parameters_utils.cc`). TensorFlow's own
    Python `CustomOptimizer` writes no algorithm and fails exactly this way.

    ## Example
    ```
    table_descriptor {
      name: "ads"
      optimization_parameters {
        learning_rate { constant: 0.1 }
      }
    }
    ```

    ## Use instead
    ```
    table_descriptor {
      name: "ads"
      optimization_parameters {
        learning_rate { constant: 0.1 }
        adagrad { }
      }
    }
    ```

    Spec: validation-rules.md section 2.5
    """
    for i, table, path in ctx.tables():
        op = optimization(table)
        if op is None:
            what = "has no optimization_parameters"
        elif op.WhichOneof("parameters") is None:
            what = "has optimization_parameters but no algorithm in it"
        else:
            continue
        yield ctx.diag(
            opt_path(path),
            f"{ctx.table_label(i)} {what}; TensorFlow fails with 'No optimization algorithm "
            "specified'",
            hint="select one algorithm inside optimization_parameters, e.g. "
            + " or ".join(f"`{name} {{ }}`" for name in checked_by("OPT001")),
        )


@rule("OPT002", "warning", "learning rate not finite")
def learning_rate_not_finite(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a constant learning rate (`learning_rate.constant`) that is NaN or infinite.

    ## Why is this bad?
    Every update multiplies by the learning rate, so the first step writes NaN or infinity into
    every touched row. TensorFlow stores whatever float it is given and never checks it (a Python
    value of 1e40 silently becomes `inf` in float32).
    TensorFlow builds and runs such a configuration (no check in its Python API or its C++), so
    this is a warning: the training runs, but its numbers are wrong.

    ## Example
    ```
    learning_rate { constant: inf }
    ```

    ## Use instead
    ```
    learning_rate { constant: 0.01 }
    ```

    Spec: validation-rules.md section 2.5
    """
    for t, value in constant_rates(ctx):
        if not finite(value):
            yield table_diag(
                ctx, t, "learning_rate.constant",
                f"learning_rate.constant is {fmt(value)}, expected a "
                "finite number: the first update turns every touched row into NaN or infinity",
                hint="set a finite learning rate (float32 overflows above about 3.4e38)",
            )


@rule("OPT003", "warning", "hyper-parameter or weight decay factor not finite")
def hyper_parameter_not_finite(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports every float hyper-parameter of the selected algorithm (`adam.epsilon`, `ftrl.l1`,
    ...) and every `weight_decay_factor` that is NaN or infinite.

    ## Why is this bad?
    The value enters every update of the table; NaN or infinity propagates into the weights and
    slots on the first step. TensorFlow does not check these values.
    TensorFlow builds and runs such a configuration (no check in its Python API or its C++), so
    this is a warning: the training runs, but its numbers are wrong.

    ## Example
    ```
    adam { beta1: 0.9 beta2: 0.999 epsilon: nan }
    ```

    ## Use instead
    ```
    adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-08 }
    ```

    Spec: validation-rules.md section 2.5
    """
    for t in op_tables(ctx):
        i, op = t.i, t.op
        base = t.op_path
        name, params = t.algorithm, t.params
        if name is not None:
            for fd in params.DESCRIPTOR.fields:
                if fd.type != fd.TYPE_FLOAT or is_repeated(fd):
                    continue
                value = getattr(params, fd.name)
                if not finite(value):
                    yield ctx.diag(
                        f"{base}.{name}.{fd.name}",
                        f"{ctx.table_label(i)}: {name}.{fd.name} is {fmt(value)}, expected a "
                        "finite number: it enters every update and poisons the table",
                        hint=f"set {name}.{fd.name} to a finite value",
                    )
        decay = op.weight_decay_factor
        if not finite(decay):
            yield ctx.diag(
                f"{base}.weight_decay_factor",
                f"{ctx.table_label(i)}: weight_decay_factor is {fmt(decay)}, expected a finite "
                "number: every updated weight becomes NaN or infinite",
                hint="set weight_decay_factor to a small finite value, or remove it (0 = off)",
            )


@rule("OPT004", "warning", "negative learning rate")
def negative_learning_rate(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a negative constant learning rate.

    ## Why is this bad?
    A negative rate moves the weights up the gradient: training maximises the loss. TensorFlow
    accepts any value.

    ## Example
    ```
    learning_rate { constant: -0.1 }
    ```

    ## Use instead
    ```
    learning_rate { constant: 0.1 }
    ```

    Spec: validation-rules.md section 2.5
    """
    for t, value in constant_rates(ctx):
        if finite(value) and value < 0:
            yield table_diag(
                ctx, t, "learning_rate.constant",
                f"learning_rate.constant is {fmt(value)}, expected >= 0: "
                "a negative rate climbs the gradient and increases the loss",
                hint=f"use {fmt(-value)} if the sign is a typo",
            )


@rule("OPT005", "warning", "zero learning rate")
def zero_learning_rate(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a constant learning rate of exactly 0 (or -0.0) for an algorithm that uses its
    learning rate. `assign` (which ignores the rate) and `frequency_estimator` (whose "rate" is
    the global step) are exempt, and FTRL without `multiply_linear_by_lr` is left to OPT014.

    ## Why is this bad?
    The weights never move; only the slots (accumulators, momenta) change. This is usually a
    leftover of a schedule that was meant to be fed through a dynamic learning rate.

    ## Example
    ```
    learning_rate { constant: 0.0 }
    adagrad { }
    ```

    ## Use instead
    ```
    learning_rate { constant: 0.05 }
    adagrad { }
    ```
    or a dynamic learning rate (`learning_rate { dynamic { tag: 0 } }`) for a schedule.

    Spec: validation-rules.md section 2.5
    """
    for t, value in constant_rates(ctx):
        if value != 0:
            continue
        name = t.algorithm
        if name is not None and ALGORITHMS[name].learning_rate in ("unused", "global_step"):
            continue
        if name in checked_by("OPT014") and not getattr(t.op, name).multiply_linear_by_lr:
            continue  # OPT014
        yield table_diag(
            ctx, t, "learning_rate.constant",
            f"learning_rate.constant is {fmt(value)}: "
            "the weights never change (only the slots do)",
            hint="set a positive learning rate, or use a dynamic learning rate for a schedule",
        )


# --------------------------------------------------------------------------------------------
# OPT013, OPT014: the learning rate meets the algorithm


_NO_BIAS_CORRECTION = checked_by("OPT013")


@rule("OPT013", "info", "no bias correction with a constant learning rate")
def no_bias_correction(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes an `adam`, `proximal_yogi` or `online_yogi` table with a constant learning rate.

    ## Why is this bad?
    On the TPU these optimizers do not correct the bias of their moment estimates. The proto
    asks users to feed a bias-corrected rate `lr * sqrt(1 - beta2^t) / (1 - beta1^t)` (t = 1, 2,
    ...) through a dynamic learning rate, which is what TensorFlow's Python API does. With a
    constant rate the first steps are smaller (or larger) than in ordinary Adam.

    ## Example
    ```
    learning_rate { constant: 0.001 }
    adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-07 }
    ```

    ## Use instead
    ```
    learning_rate { dynamic { tag: 0 } }
    adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-07 }
    ```
    and send `lr * sqrt(1 - beta2**t) / (1 - beta1**t)` as learning-rate input 0 at step t.

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *_NO_BIAS_CORRECTION):
        if lr_kind(at.op) != "constant":
            continue
        yield table_diag(
            ctx, at, "learning_rate.constant",
            f"{at.algorithm} with a constant learning rate "
            f"({fmt(at.op.learning_rate.constant)}) runs without bias correction on the TPU",
            hint="for ordinary Adam behaviour use a dynamic learning rate and feed "
            "lr * sqrt(1 - beta2^t) / (1 - beta1^t) at step t = 1, 2, ...",
        )


@rule("OPT014", "warning", "FTRL divides by a zero learning rate")
def ftrl_zero_learning_rate(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports an `ftrl` table with a constant learning rate of 0 and `multiply_linear_by_lr`
    false.

    ## Why is this bad?
    Without `multiply_linear_by_lr`, FTRL's update divides by the learning rate
    (`linear += G - dp * w / lr`, `den = (p + beta) / lr + 2 * l2`): a zero rate produces NaN
    or infinity on the first step. The proto recommends `multiply_linear_by_lr` for zero or
    near-zero rates; TensorFlow does not check it.
    TensorFlow builds and runs such a configuration (no check in its Python API or its C++), so
    this is a warning: the training runs, but its numbers are wrong.

    ## Example
    ```
    learning_rate { constant: 0.0 }
    ftrl { l1: 0.01 lr_power: -0.5 }
    ```

    ## Use instead
    ```
    learning_rate { constant: 0.0 }
    ftrl { l1: 0.01 lr_power: -0.5 multiply_linear_by_lr: true }
    ```
    (or a positive learning rate).

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *checked_by("OPT014")):
        if at.params.multiply_linear_by_lr or lr_kind(at.op) != "constant":
            continue
        if at.op.learning_rate.constant != 0:
            continue
        yield table_diag(
            ctx, at, f"{at.algorithm}.multiply_linear_by_lr",
            f"{at.algorithm} with learning_rate.constant "
            f"{fmt(at.op.learning_rate.constant)} and multiply_linear_by_lr false divides by the "
            "learning rate: the first update produces NaN or infinity",
            hint=f"set `multiply_linear_by_lr: true` in {at.algorithm}, or use a positive "
            "learning rate",
        )


# --------------------------------------------------------------------------------------------
# OPT032-OPT034: frequency estimator tables


@rule("OPT032", "error", "FrequencyEstimator table not 1 wide")
def frequency_estimator_dimension(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks that a `frequency_estimator` table has `dimension: 1`.

    ## Why is this bad?
    A frequency estimator stores one number per id (the estimated gap between hits). The
    removed TensorFlow 1 API rejected other widths ("FrequencyEstimator tables should only have
    a dimension of 1").

    ## Example
    ```
    table_descriptor { name: "freq" vocabulary_size: 1000 dimension: 8 ... }
    ```

    ## Use instead
    ```
    table_descriptor { name: "freq" vocabulary_size: 1000 dimension: 1 ... }
    ```

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *checked_by("OPT032")):
        if at.table.dimension != 1:
            yield ctx.diag(
                at.op_path.rsplit(".", 1)[0] + ".dimension",
                f"{ctx.table_label(at.i)}: a {at.algorithm} table has dimension "
                f"{at.table.dimension}, expected 1 (one estimate per id)",
                hint="set dimension: 1",
            )


@rule("OPT033", "warning", "FrequencyEstimator without a dynamic input")
def frequency_estimator_dynamic(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks that a `frequency_estimator` table has a dynamic learning rate.

    ## Why is this bad?
    A frequency estimator has no learning rate: its "learning rate" input must carry the global
    step (as a float), which changes every step, so it must come through a dynamic tag. With a
    constant every hit looks like a gap of 0 steps.

    ## Example
    ```
    learning_rate { constant: 1.0 }
    frequency_estimator { tau: 0.1 max_delta: 1000.0 outlier_threshold: 10.0 }
    ```

    ## Use instead
    ```
    learning_rate { dynamic { tag: 0 } }
    frequency_estimator { tau: 0.1 max_delta: 1000.0 outlier_threshold: 10.0 }
    ```
    and send the global step as learning-rate input 0.

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *checked_by("OPT033")):
        kind = lr_kind(at.op)
        if kind == "dynamic":
            continue
        found = "a constant learning rate" if kind == "constant" else "no learning rate"
        yield table_diag(
            ctx, at, "learning_rate",
            f"{at.algorithm} has {found}; its learning-rate "
            "input must carry the global step, which needs a dynamic learning rate",
            hint="use `learning_rate { dynamic { tag: N } }` and send the global step as input N",
        )


#: ``outlier_threshold > 0``, the one range OPT034 checks (from the algorithm table).
_OUTLIER_THRESHOLD = [(field, constraint) for _, field, constraint in constraints("OPT034")]


@rule("OPT034", "warning", "FrequencyEstimator with weight decay, clipping, quantization")
def frequency_estimator_extras(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports settings of a `frequency_estimator` table that act on its stored estimate D as if it
    were an embedding: `weight_decay_factor`, `clipping_limits`, `gradient_clipping_limits` and
    enabled `simulated_quantization`; and an `outlier_threshold` <= 0. One diagnostic per field.

    ## Why is this bad?
    The table does not hold embeddings: decaying, clipping or quantizing D corrupts the
    frequency estimate. An outlier threshold <= 0 makes every gap an outlier, so the estimate
    is never averaged.

    ## Example
    ```
    weight_decay_factor: 0.01
    frequency_estimator { tau: 0.1 max_delta: 1000.0 outlier_threshold: 10.0 }
    ```

    ## Use instead
    ```
    frequency_estimator { tau: 0.1 max_delta: 1000.0 outlier_threshold: 10.0 }
    ```

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *checked_by("OPT034")):
        label = ctx.table_label(at.i)
        op = at.op
        found: list[tuple[str, str]] = []
        if op.weight_decay_factor != 0:
            decay = f"weight_decay_factor {fmt(op.weight_decay_factor)}"
            found.append(("weight_decay_factor", decay))
        if op.HasField("clipping_limits"):
            found.append(("clipping_limits", "clipping_limits"))
        if op.HasField("gradient_clipping_limits"):
            found.append(("gradient_clipping_limits", "gradient_clipping_limits"))
        if op.HasField("simulated_quantization") and op.simulated_quantization.enabled:
            found.append(("simulated_quantization.enabled", "simulated quantization"))
        for field, what in found:
            yield ctx.diag(
                f"{at.op_path}.{field}",
                f"{label}: {what} on a {at.algorithm} table acts on the stored frequency "
                "estimate, not on an embedding",
                hint=f"remove {field.split('.')[0]} from this table",
            )
        yield from table_violations(ctx, at, _OUTLIER_THRESHOLD)


@rule("OPT037", "info", "FTRL on a dynamic learning rate without multiply_linear_by_lr")
def ftrl_dynamic_without_mlbl(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes an `ftrl` table with a dynamic learning rate and `multiply_linear_by_lr` false.

    ## Why is this bad?
    Without `multiply_linear_by_lr` FTRL divides by the learning rate, so any step whose rate is
    0 (a warm-up that starts at 0, a schedule that ends at 0) produces NaN. The proto recommends
    `multiply_linear_by_lr` for zero or near-zero rates; it gives the same weights for a
    constant rate, but changes what the `linears` slot holds (lr * linear), so convert existing
    checkpoints with care.

    ## Example
    ```
    learning_rate { dynamic { tag: 0 } }
    ftrl { l1: 0.01 lr_power: -0.5 }
    ```

    ## Use instead
    ```
    learning_rate { dynamic { tag: 0 } }
    ftrl { l1: 0.01 lr_power: -0.5 multiply_linear_by_lr: true }
    ```

    Spec: validation-rules.md section 2.5
    """
    for at in algorithm_tables(ctx, *checked_by("OPT037")):
        if at.params.multiply_linear_by_lr or lr_kind(at.op) != "dynamic":
            continue
        yield table_diag(
            ctx, at, f"{at.algorithm}.multiply_linear_by_lr",
            f"{at.algorithm} on a dynamic learning rate without "
            "multiply_linear_by_lr divides by the rate: a step whose rate is 0 produces NaN",
            hint=f"set `multiply_linear_by_lr: true` in {at.algorithm} if the schedule can reach 0 "
            "(the linears slot then holds lr * linear)",
        )
