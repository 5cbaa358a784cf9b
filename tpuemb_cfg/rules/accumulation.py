"""Gradient accumulation and state-variable limits (``ACC``, ``validation-rules.md`` section 2.6).

Accumulation is *effective* when ``gradient_accumulation_status`` is UNSPECIFIED or ENABLED
(TensorFlow treats UNSPECIFIED as ENABLED); the rules that need accumulation fire only on an
explicit DISABLED. An undeclared status number is ACC001's error and counts as neither.
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.algorithms import ALGORITHMS, checked_by
from tpuemb_cfg.base.schema import AccumulationStatus
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._registry import Context, rule
from tpuemb_cfg.rules.common import (
    OpTable,
    algorithm_tables,
    fmt,
    op_tables,
    table_diag,
    undeclared_value,
)

#: TensorFlow's kMaxAuxiliaryParameterCount: slots + 1 must fit for accumulation to be supported,
#: and parameters + slots + accumulator must not exceed it by more than one.
MAX_AUXILIARY = 7
_STATUS = "gradient_accumulation_status"


def _disabled(op: object) -> bool:
    return getattr(op, _STATUS, None) == AccumulationStatus.DISABLED


def _disabled_tables(ctx: Context, algorithm: str | None = None) -> Iterator[OpTable]:
    """The tables (of ``algorithm``, when given) whose gradient accumulation is explicitly
    DISABLED."""
    tables = op_tables(ctx) if algorithm is None else algorithm_tables(ctx, algorithm)
    return (at for at in tables if _disabled(at.op))


def _non_lazy_without_accumulation(
    ctx: Context, rule: str, name: str, what: str
) -> Iterator[Diagnostic]:
    """``<label>: non-lazy <name> (<its non-lazy flag>: true) <what>`` at that flag of every
    table of the algorithms of ``rule`` with accumulation DISABLED and the flag set."""
    for algorithm in checked_by(rule):
        flag = ALGORITHMS[algorithm].non_lazy_flag or ""
        said = f"non-lazy {name} ({flag}: true) {what}"
        for at in _disabled_tables(ctx, algorithm):
            if getattr(at.params, flag):
                hint = f"set `{_STATUS}: ENABLED`, or remove {flag}"
                yield table_diag(ctx, at, f"{algorithm}.{flag}", said, hint=hint)


def _algorithm_without_accumulation(
    ctx: Context, rule: str, what: str
) -> Iterator[Diagnostic]:
    """``<label>: <algorithm> with ... DISABLED <what>`` at the status of every table of the
    algorithms of ``rule``."""
    for algorithm in checked_by(rule):
        for at in _disabled_tables(ctx, algorithm):
            yield table_diag(
                ctx, at, _STATUS, f"{algorithm} with {_STATUS} DISABLED{what}",
                hint=f"set `{_STATUS}: ENABLED`",
            )


def slot_count(ctx: Context, i: int) -> int | None:
    """Number of slots of table ``i`` (section 1.4), ``None`` when unknown."""
    slots = ctx.derived.slots
    if 0 <= i < len(slots) and slots[i] is not None:
        return len(slots[i] or ())
    return None


@rule("ACC001", "error", "undeclared gradient accumulation status")
def undeclared_status(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a `gradient_accumulation_status` that is not UNSPECIFIED (0), ENABLED (1) or
    DISABLED (2), which binary, JSON or text input can carry because proto3 enums are open.

    ## Why is this bad?
    TensorFlow fails with an internal error when the embedding ops are built and when the TPU is
    initialised: "Unsupported gradient accumulation status" (followed by an empty name).

    ## Example
    ```
    gradient_accumulation_status: 7
    ```

    ## Use instead
    ```
    gradient_accumulation_status: ENABLED
    ```

    Spec: validation-rules.md section 2.6
    """
    for t in op_tables(ctx):
        yield from undeclared_value(ctx, t, _STATUS, f"write `{_STATUS}: ENABLED` (or DISABLED)")


@rule("ACC002", "info", "accumulation status not written (UNSPECIFIED means ENABLED)")
def unspecified_status(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes a table whose `gradient_accumulation_status` is not written (UNSPECIFIED).

    ## Why is this bad?
    It is not wrong: TensorFlow's C++ treats UNSPECIFIED as ENABLED. But the meaning is implicit
    and has changed across releases; TensorFlow's Python API always writes the status. Writing it
    makes the configuration say what it does.

    ## Example
    ```
    optimization_parameters { learning_rate { constant: 0.1 } adagrad { } }
    ```

    ## Use instead
    ```
    optimization_parameters {
      learning_rate { constant: 0.1 }
      gradient_accumulation_status: ENABLED
      adagrad { }
    }
    ```
    `tpuemb validate --fix` writes it.

    Spec: validation-rules.md section 2.6
    """
    for t in op_tables(ctx):
        if t.op.gradient_accumulation_status == AccumulationStatus.UNSPECIFIED:
            yield table_diag(
                ctx, t, _STATUS, f"{_STATUS} is not set; UNSPECIFIED means ENABLED",
                hint=f"write `{_STATUS}: ENABLED` (tpuemb validate --fix)",
            )


@rule("ACC003", "error", "non-lazy Adam without gradient accumulation")
def non_lazy_adam(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports `adam.use_non_lazy_adam: true` with `gradient_accumulation_status: DISABLED`.

    ## Why is this bad?
    Non-lazy Adam updates every row every step, which needs the accumulated gradient of the
    whole step. TensorFlow's `Adam(lazy_adam=False, use_gradient_accumulation=False)` raises
    ("When disabling lazy Adam, gradient accumulation must be used"; its advice to set
    `use_gradient_accumulation` to False is a typo for True), and the runtime warns that this
    "may change to an error".

    ## Example
    ```
    gradient_accumulation_status: DISABLED
    adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-07 use_non_lazy_adam: true }
    ```

    ## Use instead
    ```
    gradient_accumulation_status: ENABLED
    adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-07 use_non_lazy_adam: true }
    ```

    Spec: validation-rules.md section 2.6
    """
    return _non_lazy_without_accumulation(
        ctx, "ACC003", "Adam", f"needs gradient accumulation, but {_STATUS} is DISABLED"
    )


@rule("ACC004", "warning", "non-lazy Lion without gradient accumulation")
def non_lazy_lion(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports `lion.use_non_lazy_lion: true` with `gradient_accumulation_status: DISABLED`.

    ## Why is this bad?
    Like non-lazy Adam (which TensorFlow rejects without accumulation), non-lazy Lion updates
    every row every step; without accumulation every partial gradient moves every row of the
    table, once per partial instead of once per step. TensorFlow has no Python class for Lion
    and does not check it.

    ## Example
    ```
    gradient_accumulation_status: DISABLED
    lion { beta1: 0.9 beta2: 0.99 use_non_lazy_lion: true }
    ```

    ## Use instead
    ```
    gradient_accumulation_status: ENABLED
    lion { beta1: 0.9 beta2: 0.99 use_non_lazy_lion: true }
    ```

    Spec: validation-rules.md section 2.6
    """
    return _non_lazy_without_accumulation(
        ctx, "ACC004", "Lion",
        f"with {_STATUS} DISABLED updates every row once per partial gradient",
    )


@rule("ACC005", "error", "gradient clipping without gradient accumulation")
def clipping_without_accumulation(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports `gradient_clipping_limits` with at least one bound on a table whose
    `gradient_accumulation_status` is DISABLED.

    ## Why is this bad?
    Gradient clipping acts on the accumulated gradient of a row. TensorFlow's optimizers reject
    it: "When `use_gradient_accumulation` is False, gradient clipping cannot be used and
    `clipvalue` should be left as None". (TensorFlow's SGD docstring still says clipping turns
    accumulation on; that was only true of the removed TensorFlow 1 API.)

    ## Example
    ```
    gradient_clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }
    gradient_accumulation_status: DISABLED
    ```

    ## Use instead
    ```
    gradient_clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }
    gradient_accumulation_status: ENABLED
    ```

    Spec: validation-rules.md section 2.6
    """
    for t in _disabled_tables(ctx):
        limits = t.op.gradient_clipping_limits  # an absent message has neither bound
        if limits.HasField("lower") or limits.HasField("upper"):
            yield table_diag(
                ctx, t, "gradient_clipping_limits",
                f"gradient clipping needs gradient accumulation, but {_STATUS} is DISABLED; "
                "TensorFlow rejects this combination",
                hint=f"set `{_STATUS}: ENABLED`, or remove gradient_clipping_limits",
            )


@rule("ACC006", "warning", "weight decay without gradient accumulation")
def decay_without_accumulation(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a `weight_decay_factor` other than 0 on a table whose
    `gradient_accumulation_status` is DISABLED.

    ## Why is this bad?
    Without accumulation every partial gradient is a full update, and the decay is applied once
    per partial update instead of once per step: a row looked up on 8 cores decays 8 times. The
    proto says users who want weight decay also want accumulation "so that the decay will happen
    once per global batch".

    ## Example
    ```
    weight_decay_factor: 0.0001
    gradient_accumulation_status: DISABLED
    ```

    ## Use instead
    ```
    weight_decay_factor: 0.0001
    gradient_accumulation_status: ENABLED
    ```

    Spec: validation-rules.md section 2.6
    """
    for t in _disabled_tables(ctx):
        if t.op.weight_decay_factor != 0:
            yield table_diag(
                ctx, t, "weight_decay_factor",
                f"weight_decay_factor {fmt(t.op.weight_decay_factor)} with {_STATUS} DISABLED "
                "decays a row once per partial update, not once per step",
                hint=f"set `{_STATUS}: ENABLED`",
            )


@rule("ACC007", "info", "SGD with weight decay")
def sgd_weight_decay(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes a `stochastic_gradient_descent` table with a `weight_decay_factor`.

    ## Why is this bad?
    Older TensorFlow releases warned that SGD "does not behave as expected" with weight decay:
    SGD used to run without gradient accumulation by default, so the decay was applied once per
    partial update. Keep accumulation enabled (the default) so the decay happens once per step.

    ## Example
    ```
    weight_decay_factor: 0.0001
    gradient_accumulation_status: DISABLED
    stochastic_gradient_descent { }
    ```

    ## Use instead
    ```
    weight_decay_factor: 0.0001
    gradient_accumulation_status: ENABLED
    stochastic_gradient_descent { }
    ```

    Spec: validation-rules.md section 2.6
    """
    for at in algorithm_tables(ctx, *checked_by("ACC007")):
        if at.op.weight_decay_factor == 0:
            continue
        state = "DISABLED" if _disabled(at.op) else "effective"
        yield table_diag(
            ctx, at, "weight_decay_factor",
            f"SGD with weight_decay_factor {fmt(at.op.weight_decay_factor)} (gradient accumulation "
            f"{state}); the decay happens once per step only with accumulation",
            hint=f"keep `{_STATUS}: ENABLED`",
        )


@rule("ACC008", "warning", "Assign without gradient accumulation")
def assign_without_accumulation(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports an `assign` table whose `gradient_accumulation_status` is DISABLED.

    ## Why is this bad?
    Assign replaces each touched weight by its gradient. The proto says this is correct only
    with accumulation (the step's contributions are summed first) or with per-host id
    de-duplication; without it, the partial gradient that arrives last wins and the result
    depends on how ids are spread over cores.

    ## Example
    ```
    gradient_accumulation_status: DISABLED
    assign { }
    ```

    ## Use instead
    ```
    gradient_accumulation_status: ENABLED
    assign { }
    ```

    Spec: validation-rules.md section 2.6
    """
    return _algorithm_without_accumulation(
        ctx, "ACC008",
        ": the last partial gradient to arrive wins, so the result depends on the core layout",
    )


@rule("ACC009", "warning", "FrequencyEstimator without gradient accumulation")
def frequency_estimator_without_accumulation(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a `frequency_estimator` table whose `gradient_accumulation_status` is DISABLED.

    ## Why is this bad?
    The estimator must see each hit of an id once per step; without accumulation an id looked
    up on several cores is counted several times with a gap of 0 steps, which drags its
    estimate down. The removed TensorFlow 1 API forced accumulation on for this algorithm.

    ## Example
    ```
    gradient_accumulation_status: DISABLED
    frequency_estimator { tau: 0.1 max_delta: 1000.0 outlier_threshold: 10.0 }
    ```

    ## Use instead
    ```
    gradient_accumulation_status: ENABLED
    frequency_estimator { tau: 0.1 max_delta: 1000.0 outlier_threshold: 10.0 }
    ```

    Spec: validation-rules.md section 2.6
    """
    return _algorithm_without_accumulation(
        ctx, "ACC009", " counts an id once per partial update, not once per step"
    )


def _too_many_for_accumulation(ctx: Context, i: int) -> tuple[int, bool] | None:
    """(slots, accumulation effective) when table ``i`` asks for accumulation it cannot have."""
    slots = slot_count(ctx, i)
    effective = ctx.derived.accumulation[i] if i < len(ctx.derived.accumulation) else False
    if slots is None or not effective or slots + 1 <= MAX_AUXILIARY:
        return None
    return slots, effective


@rule("ACC010", "error", "gradient accumulation requested but not supported")
def accumulation_not_supported(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a table with effective gradient accumulation (UNSPECIFIED or ENABLED) whose
    algorithm has so many slots that accumulation is not supported: slots + 1 > 7. Only a
    `user_defined_program` with 8 or more outputs gets there.

    ## Why is this bad?
    The hidden gradient accumulator is an extra state variable, and TensorFlow allows at most 7
    auxiliary ones (kMaxAuxiliaryParameterCount). TensorFlow rejects the table: "Optimization
    algorithm ... does not support gradient accumulation but parameters specify it".

    ## Example
    A user program with 9 inputs and 8 outputs (7 slots) and no accumulation status (which means
    ENABLED).

    ## Use instead
    ```
    gradient_accumulation_status: DISABLED
    ```
    or a program with at most 6 slots.

    Spec: validation-rules.md section 2.6
    """
    for at in algorithm_tables(ctx):
        found = _too_many_for_accumulation(ctx, at.i)
        if found is None:
            continue
        slots, _ = found
        yield table_diag(
            ctx, at, _STATUS,
            f"{at.algorithm} has {slots} slots, so gradient accumulation is not supported "
            f"(slots + 1 must be <= {MAX_AUXILIARY}), but {_STATUS} asks for it",
            hint=f"set `{_STATUS}: DISABLED`, or use at most {MAX_AUXILIARY - 1} slots",
        )


@rule("ACC011", "error", "too many state variables")
def too_many_state_variables(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Counts the state variables of each table: the parameters, the algorithm's slots and, when
    accumulation is effective, the hidden gradient accumulator. At most 8 are allowed. Only a
    `user_defined_program` with many outputs can exceed the limit; when the excess comes from
    the gradient accumulator, ACC010 reports it instead.

    ## Why is this bad?
    TensorFlow rejects the table ("Optimization algorithm ... does not support gradient
    accumulation because it already has too many other accumulators").

    ## Example
    A user program with 10 inputs and 9 outputs (8 slots, 9 state variables without the
    accumulator).

    ## Use instead
    A program with at most 7 slots (6 with gradient accumulation).

    Spec: validation-rules.md section 2.6
    """
    for at in algorithm_tables(ctx):
        i = at.i
        slots = slot_count(ctx, i)
        if slots is None or _too_many_for_accumulation(ctx, i) is not None:
            continue  # unknown, or ACC010
        effective = ctx.derived.accumulation[i] if i < len(ctx.derived.accumulation) else False
        total = 1 + slots + (1 if effective else 0)
        if total > MAX_AUXILIARY + 1:
            yield table_diag(
                ctx, at, f"{at.algorithm}",
                f"{at.algorithm} needs {total} state variables (parameters and {slots} slots), "
                f"more than the {MAX_AUXILIARY + 1} TensorFlow supports",
                hint=f"reduce the program to at most {MAX_AUXILIARY} slots",
            )


@rule("ACC012", "info", "state variables", on_request=True)
def state_variables(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Lists each table's state variables in TensorFlow's order (the order of the load/retrieve ops
    and of checkpoints): `parameters`, then the algorithm's slots, then the hidden
    `gradient_accumulators` when accumulation is effective. Reported only on request.

    ## Why is this bad?
    It is a derived fact, not a problem: it tells which variables a checkpoint of the table
    holds and how many copies of the table the memory must fit.

    ## Example
    An `adam` table with accumulation has 4: parameters, momenta, velocities,
    gradient_accumulators.

    ## Use instead
    Nothing to change.

    Spec: validation-rules.md section 2.6
    """
    states = ctx.derived.state_variables
    for at in algorithm_tables(ctx):
        names = states[at.i] if at.i < len(states) else None
        if names is None:
            message = f"state variables unknown ({at.algorithm} declares no usable output count)"
        else:
            message = f"{len(names)} state variable(s) ({at.algorithm}): " + ", ".join(names)
        yield table_diag(ctx, at, "", message)
