"""Optimizers and hyper-parameters (``OPT``, ``validation-rules.md`` section 2.5).

Rules OPT010-OPT037 look only at the table's selected algorithm (the member set in the oneof
``optimization_parameters.parameters``). Range rules compare the stored float32 values and skip
NaN and infinities, which OPT002/OPT003 report, so that one bad value gives one diagnostic.

The small helpers at the top (:func:`fmt`, :func:`algorithm_tables`, ...) are shared with the
other rule families of this package (accumulation, clipping, sizing, deprecated fields).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple
from weakref import WeakKeyDictionary

from tpuemb_cfg.protoutil import is_repeated
from tpuemb_cfg.rules._registry import Context, Diagnostic, rule

if TYPE_CHECKING:
    from tpuemb_cfg.proto.optimization_parameters_pb2 import OptimizationParameters
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

    TableDescriptor = TPUEmbeddingConfiguration.TableDescriptor

# Enum numbers (schema.md section 3) as plain ints, so undeclared numbers compare safely.
STATUS_UNSPECIFIED, STATUS_ENABLED, STATUS_DISABLED = 0, 1, 2
HOT_ID_MIGRATION_ONLY = 3
PACKABLE_ALGORITHMS = ("stochastic_gradient_descent", "adagrad", "ftrl")
PACKABLE_DIMENSIONS = (1, 2, 4)


# --------------------------------------------------------------------------------------------
# Shared helpers


def fmt(x: float) -> str:
    """A float32 value in its shortest round-trip form, as protobuf's text format writes it.

    ``0.1`` rather than ``0.10000000149011612``, ``100.0``, ``3.4028235e+38``; ``-0.0``, ``nan``,
    ``inf`` and ``-inf`` as such.
    """
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    for digits in range(1, 10):
        candidate = float(f"{x:.{digits}g}")
        try:
            if struct.unpack("<f", struct.pack("<f", candidate))[0] == x:
                return repr(candidate)
        except OverflowError:  # rounded above float32's maximum
            continue
    return repr(x)  # not a float32 value


def finite(x: float) -> bool:
    """True for a finite float (False for NaN and infinities)."""
    return math.isfinite(x)


def opt_path(table_path: str) -> str:
    """``table_descriptor[i].optimization_parameters``."""
    return f"{table_path}.optimization_parameters"


def optimization(table: TableDescriptor) -> OptimizationParameters | None:
    """The table's ``optimization_parameters``, or ``None`` when absent."""
    if table.HasField("optimization_parameters"):
        return table.optimization_parameters
    return None


def lr_kind(op: OptimizationParameters) -> str | None:
    """``"constant"``, ``"dynamic"`` or ``None`` (no learning rate)."""
    if not op.HasField("learning_rate"):
        return None
    return op.learning_rate.WhichOneof("learning_rate")


class OpTable(NamedTuple):
    """A table that has ``optimization_parameters``."""

    i: int
    table: TableDescriptor
    op: OptimizationParameters
    #: ``table_descriptor[i].optimization_parameters``
    op_path: str
    #: The selected member of the oneof ``parameters`` (``None`` when nothing is selected).
    algorithm: str | None
    #: The algorithm's parameters message (``op.<algorithm>``; ``None`` without an algorithm).
    params: Any


class _Index(NamedTuple):
    with_op: list[OpTable]
    by_algorithm: dict[str, list[OpTable]]


#: Per-validation index of the tables, built once and shared by every rule of this package (a
#: rule iterating only the tables of its algorithm keeps validation linear in the table count).
_INDEX: WeakKeyDictionary[Context, _Index] = WeakKeyDictionary()


def _index(ctx: Context) -> _Index:
    try:
        index = _INDEX.get(ctx)
    except TypeError:  # a context that cannot be weakly referenced: no cache
        index = None
    if index is None:
        with_op: list[OpTable] = []
        by_algorithm: dict[str, list[OpTable]] = {}
        for i, table, path in ctx.tables():
            if not table.HasField("optimization_parameters"):
                continue
            op = table.optimization_parameters
            name = op.WhichOneof("parameters")
            entry = OpTable(i, table, op, opt_path(path), name, getattr(op, name) if name else None)
            with_op.append(entry)
            if name is not None:
                by_algorithm.setdefault(name, []).append(entry)
        index = _Index(with_op, by_algorithm)
        try:
            _INDEX[ctx] = index
        except TypeError:
            pass
    return index


def op_tables(ctx: Context) -> list[OpTable]:
    """Every table that has ``optimization_parameters``, in table order."""
    return _index(ctx).with_op


def algorithm_tables(ctx: Context, *algorithms: str) -> list[OpTable]:
    """Every table whose algorithm is one of ``algorithms``, in table order (every table with an
    algorithm when none is named)."""
    index = _index(ctx)
    if not algorithms:
        return [entry for entry in index.with_op if entry.algorithm is not None]
    found = [entry for name in algorithms for entry in index.by_algorithm.get(name, ())]
    if len(algorithms) > 1:
        found.sort(key=lambda entry: entry.i)
    return found


class Check(NamedTuple):
    """One range condition of a hyper-parameter.

    ``bad(value)`` is true when the finite ``value`` is out of range; ``expected`` states the
    valid range (``"0 <= beta1 < 1"``), ``why`` what goes wrong, ``hint`` the fix.
    """

    field: str
    bad: Callable[[float], bool]
    expected: str
    why: str
    hint: str


def check_ranges(ctx: Context, name: str, checks: Iterable[Check]) -> Iterator[Diagnostic]:
    """One diagnostic per finite field of algorithm ``name`` that fails its check."""
    checks = tuple(checks)
    for at in algorithm_tables(ctx, name):
        for check in checks:
            value = getattr(at.params, check.field, None)
            if not isinstance(value, float) or not finite(value) or not check.bad(value):
                continue
            yield ctx.diag(
                f"{at.op_path}.{name}.{check.field}",
                f"{ctx.table_label(at.i)}: {name}.{check.field} is {fmt(value)}, expected "
                f"{check.expected}: {check.why}",
                hint=check.hint,
            )


def constant_rates(ctx: Context) -> Iterator[tuple[OpTable, float]]:
    """(table, learning_rate.constant) of every table with a constant learning rate."""
    for t in op_tables(ctx):
        if lr_kind(t.op) == "constant":
            yield t, t.op.learning_rate.constant


def _in_unit(lo_closed: bool, hi_closed: bool) -> Callable[[float], bool]:
    """A predicate that is true outside the interval between 0 and 1 (ends as given)."""

    def bad(v: float) -> bool:
        below = v < 0 if lo_closed else v <= 0
        above = v > 1 if hi_closed else v >= 1
        return below or above

    return bad


def _negative(v: float) -> bool:
    return v < 0


def _not_positive(v: float) -> bool:
    return v <= 0


# --------------------------------------------------------------------------------------------
# OPT001-OPT005: algorithm and learning rate


@rule("OPT001", "error", "no optimization algorithm")
def no_algorithm(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks that every table selects an optimization algorithm: `optimization_parameters` must be
    present and one member of its oneof `parameters` (`adagrad`, `adam`, `ftrl`, ...) must be set.

    ## Why is this bad?
    TensorFlow rejects the configuration when the embedding ops are built and when the TPU is
    initialised: "No optimization algorithm specified". TensorFlow's own Python `CustomOptimizer`
    writes no algorithm and fails exactly this way.

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
            hint="select one algorithm inside optimization_parameters, e.g. `adagrad { }` or "
            "`stochastic_gradient_descent { }`",
        )


@rule("OPT002", "error", "learning rate not finite")
def learning_rate_not_finite(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a constant learning rate (`learning_rate.constant`) that is NaN or infinite.

    ## Why is this bad?
    Every update multiplies by the learning rate, so the first step writes NaN or infinity into
    every touched row. TensorFlow stores whatever float it is given and never checks it (a Python
    value of 1e40 silently becomes `inf` in float32).

    ## Example
    ```
    learning_rate { constant: inf }
    ```

    ## Use instead
    ```
    learning_rate { constant: 0.01 }
    ```
    """
    for t, value in constant_rates(ctx):
        if not finite(value):
            yield ctx.diag(
                f"{t.op_path}.learning_rate.constant",
                f"{ctx.table_label(t.i)}: learning_rate.constant is {fmt(value)}, expected a "
                "finite number: the first update turns every touched row into NaN or infinity",
                hint="set a finite learning rate (float32 overflows above about 3.4e38)",
            )


@rule("OPT003", "error", "hyper-parameter or weight decay factor not finite")
def hyper_parameter_not_finite(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports every float hyper-parameter of the selected algorithm (`adam.epsilon`, `ftrl.l1`,
    ...) and every `weight_decay_factor` that is NaN or infinite.

    ## Why is this bad?
    The value enters every update of the table; NaN or infinity propagates into the weights and
    slots on the first step. TensorFlow does not check these values.

    ## Example
    ```
    adam { beta1: 0.9 beta2: 0.999 epsilon: nan }
    ```

    ## Use instead
    ```
    adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-08 }
    ```
    """
    for t in op_tables(ctx):
        i, op = t.i, t.op
        base = t.op_path
        name = op.WhichOneof("parameters")
        if name is not None:
            params = getattr(op, name)
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
    """
    for t, value in constant_rates(ctx):
        if finite(value) and value < 0:
            yield ctx.diag(
                f"{t.op_path}.learning_rate.constant",
                f"{ctx.table_label(t.i)}: learning_rate.constant is {fmt(value)}, expected >= 0: "
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
    """
    for t, value in constant_rates(ctx):
        if value != 0:
            continue
        op = t.op
        name = op.WhichOneof("parameters")
        if name in ("assign", "frequency_estimator"):
            continue
        if name == "ftrl" and not op.ftrl.multiply_linear_by_lr:
            continue  # OPT014
        yield ctx.diag(
            f"{t.op_path}.learning_rate.constant",
            f"{ctx.table_label(t.i)}: learning_rate.constant is {fmt(value)}: "
            "the weights never change (only the slots do)",
            hint="set a positive learning rate, or use a dynamic learning rate for a schedule",
        )


# --------------------------------------------------------------------------------------------
# OPT010-OPT037: the selected algorithm's hyper-parameters


@rule("OPT010", "error", "Adam beta1 outside [0, 1)")
def adam_beta1(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `adam.beta1`, the decay of Adam's first moment, is in [0, 1).

    ## Why is this bad?
    TensorFlow's `Adam` constructor rejects it: "Argument `beta_1` must be >= 0 and < 1". With
    beta1 = 1 the momentum never takes in a gradient; above 1 or below 0 it diverges or
    oscillates.

    ## Example
    ```
    adam { beta1: 1.0 beta2: 0.999 epsilon: 1e-08 }
    ```

    ## Use instead
    ```
    adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-08 }
    ```
    """
    yield from check_ranges(
        ctx,
        "adam",
        [
            Check(
                "beta1",
                _in_unit(True, False),
                "0 <= beta1 < 1",
                "TensorFlow's Adam rejects it",
                "set beta1 to a value in [0, 1), e.g. 0.9 (TensorFlow's default)",
            )
        ],
    )


@rule("OPT011", "error", "Adam beta2 outside [0, 1)")
def adam_beta2(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `adam.beta2`, the decay of Adam's second moment, is in [0, 1).

    ## Why is this bad?
    TensorFlow's `Adam` constructor rejects it ("Argument `beta_2` must be >= 0 and < 1"; its
    message prints beta_1's value by mistake). With beta2 = 1 the second moment stays at its
    initial 0 and the update divides by epsilon alone.

    ## Example
    ```
    adam { beta1: 0.9 beta2: 1.0 epsilon: 1e-08 }
    ```

    ## Use instead
    ```
    adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-08 }
    ```
    """
    yield from check_ranges(
        ctx,
        "adam",
        [
            Check(
                "beta2",
                _in_unit(True, False),
                "0 <= beta2 < 1",
                "TensorFlow's Adam rejects it",
                "set beta2 to a value in [0, 1), e.g. 0.999 (TensorFlow's default)",
            )
        ],
    )


@rule("OPT012", "error", "Adam epsilon <= 0")
def adam_epsilon(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `adam.epsilon` is positive.

    ## Why is this bad?
    TensorFlow's `Adam` constructor rejects it ("epsilon must be positive"). Epsilon keeps the
    denominator `sqrt(v) + epsilon` away from 0: a row whose gradient has always been 0 divides
    0 by 0. A hand-written `adam { }` has epsilon 0 and fails here.

    ## Example
    ```
    adam { beta1: 0.9 beta2: 0.999 }
    ```

    ## Use instead
    ```
    adam { beta1: 0.9 beta2: 0.999 epsilon: 1e-07 }
    ```
    """
    yield from check_ranges(
        ctx,
        "adam",
        [
            Check(
                "epsilon",
                _not_positive,
                "epsilon > 0",
                "TensorFlow's Adam rejects it, and a zero second moment divides by 0",
                "set epsilon to a small positive value, e.g. 1e-07 (TensorFlow's default)",
            )
        ],
    )


_NO_BIAS_CORRECTION = ("adam", "proximal_yogi", "online_yogi")


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
    """
    for at in algorithm_tables(ctx, *_NO_BIAS_CORRECTION):
        if lr_kind(at.op) != "constant":
            continue
        yield ctx.diag(
            f"{at.op_path}.learning_rate.constant",
            f"{ctx.table_label(at.i)}: {at.algorithm} with a constant learning rate "
            f"({fmt(at.op.learning_rate.constant)}) runs without bias correction on the TPU",
            hint="for ordinary Adam behaviour use a dynamic learning rate and feed "
            "lr * sqrt(1 - beta2^t) / (1 - beta1^t) at step t = 1, 2, ...",
        )


@rule("OPT014", "error", "FTRL divides by a zero learning rate")
def ftrl_zero_learning_rate(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports an `ftrl` table with a constant learning rate of 0 and `multiply_linear_by_lr`
    false.

    ## Why is this bad?
    Without `multiply_linear_by_lr`, FTRL's update divides by the learning rate
    (`linear += G - dp * w / lr`, `den = (p + beta) / lr + 2 * l2`): a zero rate produces NaN
    or infinity on the first step. The proto recommends `multiply_linear_by_lr` for zero or
    near-zero rates; TensorFlow does not check it.

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
    """
    for at in algorithm_tables(ctx, "ftrl"):
        if at.params.multiply_linear_by_lr or lr_kind(at.op) != "constant":
            continue
        if at.op.learning_rate.constant != 0:
            continue
        yield ctx.diag(
            f"{at.op_path}.ftrl.multiply_linear_by_lr",
            f"{ctx.table_label(at.i)}: ftrl with learning_rate.constant "
            f"{fmt(at.op.learning_rate.constant)} and multiply_linear_by_lr false divides by the "
            "learning rate: the first update produces NaN or infinity",
            hint="set `multiply_linear_by_lr: true` in ftrl, or use a positive learning rate",
        )


@rule("OPT015", "error", "FTRL l1 or l2 negative")
def ftrl_l1_l2(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `ftrl.l1` and `ftrl.l2` are not negative (one diagnostic per field).

    ## Why is this bad?
    A negative l1 makes FTRL's shrinkage interval [-l1, l1] empty and a negative l2 can make the
    denominator of the closed-form weight 0 or negative: weights flip sign or blow up. The
    removed TensorFlow 1 API rejected both; TensorFlow 2.21 no longer checks them.

    ## Example
    ```
    ftrl { l1: -0.01 lr_power: -0.5 }
    ```

    ## Use instead
    ```
    ftrl { l1: 0.01 lr_power: -0.5 }
    ```
    """
    yield from check_ranges(
        ctx,
        "ftrl",
        [
            Check(
                f,
                _negative,
                f"{f} >= 0",
                "a negative regularization strength breaks FTRL's closed-form update",
                f"set {f} to 0 or a positive value",
            )
            for f in ("l1", "l2")
        ],
    )


@rule("OPT016", "warning", "FTRL lr_power > 0")
def ftrl_lr_power(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `ftrl.lr_power` is at most 0.

    ## Why is this bad?
    FTRL's per-coordinate step size is `lr / accumulator^(-lr_power)`; a positive lr_power makes
    the step grow as gradients accumulate instead of shrinking. The usual value is -0.5; 0 gives
    a fixed per-coordinate rate. The removed TensorFlow 1 API required lr_power <= 0.

    ## Example
    ```
    ftrl { lr_power: 0.5 }
    ```

    ## Use instead
    ```
    ftrl { lr_power: -0.5 }
    ```
    """
    yield from check_ranges(
        ctx,
        "ftrl",
        [
            Check(
                "lr_power",
                lambda v: v > 0,
                "lr_power <= 0",
                "the step size then grows as gradients accumulate",
                "use lr_power: -0.5 (TensorFlow's default), or 0 for a fixed rate",
            )
        ],
    )


@rule("OPT017", "warning", "FTRL beta < 0")
def ftrl_beta(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `ftrl.beta` is not negative.

    ## Why is this bad?
    `beta` acts like an extra L2 term of `beta / (2 * lr)`; a negative value lowers FTRL's
    denominator and can make it 0 or negative (NaN or sign-flipping weights).

    ## Example
    ```
    ftrl { lr_power: -0.5 beta: -1.0 }
    ```

    ## Use instead
    ```
    ftrl { lr_power: -0.5 beta: 0.0 }
    ```
    """
    yield from check_ranges(
        ctx,
        "ftrl",
        [
            Check(
                "beta",
                _negative,
                "beta >= 0",
                "it lowers FTRL's denominator, which can reach 0",
                "set beta to 0 or a positive value",
            )
        ],
    )


@rule("OPT018", "error", "AdagradMomentum exponent <= 0")
def adagrad_momentum_exponent(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `adagrad_momentum.exponent` (k in the preconditioner `(acc + epsilon)^(-1/k)`) is
    positive.

    ## Why is this bad?
    TensorFlow's `AdagradMomentum` constructor rejects it ("Precondition exponent must >0"); the
    update computes 1/k. A hand-written `adagrad_momentum { }` has exponent 0 and fails here.

    ## Example
    ```
    adagrad_momentum { momentum: 0.9 beta2: 1.0 epsilon: 1e-10 }
    ```

    ## Use instead
    ```
    adagrad_momentum { momentum: 0.9 exponent: 2.0 beta2: 1.0 epsilon: 1e-10 }
    ```
    """
    yield from check_ranges(
        ctx,
        "adagrad_momentum",
        [
            Check(
                "exponent",
                _not_positive,
                "exponent > 0",
                "the preconditioner divides by it and TensorFlow's AdagradMomentum rejects it",
                "set exponent to 2.0 (Adagrad's square root, TensorFlow's default)",
            )
        ],
    )


@rule("OPT019", "error", "AdagradMomentum epsilon <= 0")
def adagrad_momentum_epsilon(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `adagrad_momentum.epsilon`, the offset added to the accumulator before the power, is
    positive.

    ## Why is this bad?
    TensorFlow's `AdagradMomentum` constructor rejects it ("epsilon must be positive"). The
    accumulator starts at 0, so without epsilon the first update raises 0 to a negative power.

    ## Example
    ```
    adagrad_momentum { momentum: 0.9 exponent: 2.0 beta2: 1.0 }
    ```

    ## Use instead
    ```
    adagrad_momentum { momentum: 0.9 exponent: 2.0 beta2: 1.0 epsilon: 1e-10 }
    ```
    """
    yield from check_ranges(
        ctx,
        "adagrad_momentum",
        [
            Check(
                "epsilon",
                _not_positive,
                "epsilon > 0",
                "the zero initial accumulator is raised to a negative power",
                "set epsilon to a small positive value, e.g. 1e-10 (TensorFlow's default)",
            )
        ],
    )


@rule("OPT020", "warning", "AdagradMomentum beta2 outside (0, 1] or momentum outside [0, 1)")
def adagrad_momentum_ranges(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `adagrad_momentum.beta2` is in (0, 1] and `adagrad_momentum.momentum` in [0, 1) (one
    diagnostic per field).

    ## Why is this bad?
    beta2 = 1 is plain Adagrad (a running sum), below 1 an exponential average; the default 0
    keeps only the current squared gradient, which is rarely intended, and values outside [0, 1]
    make the accumulator negative or divergent. A momentum of 1 or more never forgets old steps.
    TensorFlow does not check either field.

    ## Example
    ```
    adagrad_momentum { momentum: 1.0 exponent: 2.0 epsilon: 1e-10 }
    ```

    ## Use instead
    ```
    adagrad_momentum { momentum: 0.9 exponent: 2.0 beta2: 1.0 epsilon: 1e-10 }
    ```
    """
    yield from check_ranges(
        ctx,
        "adagrad_momentum",
        [
            Check(
                "beta2",
                _in_unit(False, True),
                "0 < beta2 <= 1",
                "beta2 decays the squared-gradient accumulator (1 = Adagrad's running sum, 0 keeps "
                "only the latest squared gradient, outside [0, 1] it diverges)",
                "set beta2: 1.0 for Adagrad's accumulator (TensorFlow's default), or a decay "
                "such as 0.999",
            ),
            Check(
                "momentum",
                _in_unit(True, False),
                "0 <= momentum < 1",
                "the momentum buffer never forgets (or oscillates)",
                "set momentum to a value in [0, 1), e.g. 0.9",
            ),
        ],
    )


@rule("OPT021", "error", "ProximalAdagrad l1 or l2 negative")
def proximal_adagrad_ranges(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `proximal_adagrad.l1` and `proximal_adagrad.l2` are not negative.

    ## Why is this bad?
    The proximal step shrinks weights by `eta * l1` and divides by `1 + eta * l2`; negative
    strengths grow weights instead and the denominator can reach 0. The TensorFlow 1 API
    rejected them ("l1_regularization_strength must be greater than or equal to 0").

    ## Example
    ```
    proximal_adagrad { l1: -0.1 }
    ```

    ## Use instead
    ```
    proximal_adagrad { l1: 0.1 }
    ```
    """
    yield from check_ranges(
        ctx,
        "proximal_adagrad",
        [
            Check(
                f,
                _negative,
                f"{f} >= 0",
                "a negative strength grows the weights and can divide by zero",
                f"set {f} to 0 or a positive value",
            )
            for f in ("l1", "l2")
        ],
    )


@rule("OPT022", "error", "ProximalYogi hyper-parameter out of range")
def proximal_yogi_ranges(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `proximal_yogi`: `beta1` and `beta2` in [0, 1), `epsilon` > 0, `l1` and `l2` >= 0;
    one diagnostic per field.

    ## Why is this bad?
    These are the ranges the TensorFlow 1 API enforced; outside them the moments diverge, the
    step divides by zero (`lr / (sqrt(v) + epsilon)`) or the proximal step grows the weights.
    TensorFlow 2.21 no longer checks them.

    ## Example
    ```
    proximal_yogi { beta1: 0.9 beta2: 0.999 }
    ```

    ## Use instead
    ```
    proximal_yogi { beta1: 0.9 beta2: 0.999 epsilon: 0.001 }
    ```
    """
    unit = _in_unit(True, False)
    yield from check_ranges(
        ctx,
        "proximal_yogi",
        [
            Check(
                "beta1",
                unit,
                "0 <= beta1 < 1",
                "the first moment diverges or never moves",
                "set beta1 to a value in [0, 1), e.g. 0.9",
            ),
            Check(
                "beta2",
                unit,
                "0 <= beta2 < 1",
                "the second moment diverges or never moves",
                "set beta2 to a value in [0, 1), e.g. 0.999",
            ),
            Check(
                "epsilon",
                _not_positive,
                "epsilon > 0",
                "a zero second moment divides by zero",
                "set epsilon to a small positive value, e.g. 0.001",
            ),
            Check(
                "l1",
                _negative,
                "l1 >= 0",
                "a negative strength grows the weights",
                "set l1 to 0 or a positive value",
            ),
            Check(
                "l2",
                _negative,
                "l2 >= 0",
                "a negative strength can divide by zero",
                "set l2 to 0 or a positive value",
            ),
        ],
    )


@rule("OPT023", "warning", "OnlineYogi hyper-parameter out of range")
def online_yogi_ranges(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `online_yogi`: `l1` and `l2` >= 0 and `beta2` in [0, 1); one diagnostic per field.

    ## Why is this bad?
    Negative regularization strengths break the FTRL-style closed form; a beta2 outside [0, 1)
    makes Yogi's second moment diverge or never move. TensorFlow does not check them.

    ## Example
    ```
    online_yogi { l1: -0.1 beta2: 0.999 }
    ```

    ## Use instead
    ```
    online_yogi { l1: 0.1 beta2: 0.999 }
    ```
    """
    yield from check_ranges(
        ctx,
        "online_yogi",
        [
            Check(
                "l1",
                _negative,
                "l1 >= 0",
                "a negative strength breaks the FTRL-style update",
                "set l1 to 0 or a positive value",
            ),
            Check(
                "l2",
                _negative,
                "l2 >= 0",
                "a negative strength breaks the FTRL-style update",
                "set l2 to 0 or a positive value",
            ),
            Check(
                "beta2",
                _in_unit(True, False),
                "0 <= beta2 < 1",
                "the second moment diverges or never moves",
                "set beta2 to a value in [0, 1), e.g. 0.999",
            ),
        ],
    )


@rule("OPT024", "warning", "Momentum coefficient outside [0, 1)")
def momentum_range(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `momentum.momentum` is in [0, 1).

    ## Why is this bad?
    The momentum buffer is `m = momentum * m + G`; with a coefficient of 1 or more it never
    forgets old gradients and grows without bound, below 0 it oscillates. TensorFlow does not
    check it.

    ## Example
    ```
    momentum { momentum: 1.5 }
    ```

    ## Use instead
    ```
    momentum { momentum: 0.9 }
    ```
    """
    yield from check_ranges(
        ctx,
        "momentum",
        [
            Check(
                "momentum",
                _in_unit(True, False),
                "0 <= momentum < 1",
                "the momentum buffer grows without bound or oscillates",
                "set momentum to a value in [0, 1), e.g. 0.9",
            ),
        ],
    )


@rule("OPT025", "warning", "Lion betas outside [0, 1]")
def lion_ranges(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `lion.beta1` and `lion.beta2` are in [0, 1] (one diagnostic per field).

    ## Why is this bad?
    Lion interpolates between the momentum and the gradient with beta1 and decays its momentum
    with beta2; outside [0, 1] the interpolation extrapolates and the momentum diverges.
    TensorFlow does not check them.

    ## Example
    ```
    lion { beta1: 0.9 beta2: 1.5 }
    ```

    ## Use instead
    ```
    lion { beta1: 0.9 beta2: 0.99 }
    ```
    """
    unit = _in_unit(True, True)
    yield from check_ranges(
        ctx,
        "lion",
        [
            Check(
                "beta1",
                unit,
                "0 <= beta1 <= 1",
                "the sign step extrapolates",
                "set beta1 to a value in [0, 1], e.g. 0.9",
            ),
            Check(
                "beta2",
                unit,
                "0 <= beta2 <= 1",
                "the momentum diverges",
                "set beta2 to a value in [0, 1], e.g. 0.99",
            ),
        ],
    )


@rule("OPT026", "error", "RMSProp epsilon <= 0")
def rms_prop_epsilon(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `rms_prop.epsilon` and `centered_rms_prop.epsilon` are positive.

    ## Why is this bad?
    The step divides by `sqrt(ms + epsilon)` (centered: `sqrt(ms - mg^2 + epsilon)`). The mean
    square starts at 0, so a zero gradient with epsilon 0 divides 0 by 0 and writes NaN.
    TensorFlow does not check it.

    ## Example
    ```
    rms_prop { rho: 0.9 momentum: 0.0 }
    ```

    ## Use instead
    ```
    rms_prop { rho: 0.9 momentum: 0.0 epsilon: 1e-10 }
    ```
    """
    for name in ("rms_prop", "centered_rms_prop"):
        yield from check_ranges(
            ctx,
            name,
            [
                Check(
                    "epsilon",
                    _not_positive,
                    "epsilon > 0",
                    "the zero initial mean square divides 0 by 0",
                    "set epsilon to a small positive value, e.g. 1e-10",
                ),
            ],
        )


@rule("OPT027", "error", "Adadelta epsilon <= 0")
def adadelta_epsilon(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `adadelta.epsilon` is positive.

    ## Why is this bad?
    Adadelta's step is `sqrt(upd + epsilon) / sqrt(acc + epsilon) * G`; both slots start at 0,
    so epsilon 0 gives 0/0 (NaN) on the first step. TensorFlow does not check it.

    ## Example
    ```
    adadelta { rho: 0.95 }
    ```

    ## Use instead
    ```
    adadelta { rho: 0.95 epsilon: 1e-07 }
    ```
    """
    yield from check_ranges(
        ctx,
        "adadelta",
        [
            Check(
                "epsilon",
                _not_positive,
                "epsilon > 0",
                "the zero initial slots give 0/0 on the first step",
                "set epsilon to a small positive value, e.g. 1e-07",
            ),
        ],
    )


@rule("OPT028", "warning", "BoundedAdagrad negative bound")
def bounded_adagrad_bounds(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `bounded_adagrad.max_var_update` and `bounded_adagrad.max_accumulator` are not
    negative.

    ## Why is this bad?
    0 disables a bound; a negative bound is treated as "no bound" too, which is almost certainly
    not what the author meant. TensorFlow does not check them.

    ## Example
    ```
    bounded_adagrad { max_var_update: -1.0 }
    ```

    ## Use instead
    ```
    bounded_adagrad { max_var_update: 1.0 }
    ```
    """
    yield from check_ranges(
        ctx,
        "bounded_adagrad",
        [
            Check(
                f,
                _negative,
                f"{f} >= 0 (0 = no bound)",
                "a negative bound is ignored as if it were 0",
                f"set {f} to a positive bound, or 0 for none",
            )
            for f in ("max_var_update", "max_accumulator")
        ],
    )


@rule("OPT029", "error", "FrequencyAwareAdagrad initial accumulator <= 0")
def frequency_aware_adagrad_initial(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `frequency_aware_adagrad.initial_accumulator_value` is positive.

    ## Why is this bad?
    The value is both the accumulator's initial value and its floor; the step divides by the
    accumulator's square root, so 0 (the default of a hand-written message) allows a zero
    denominator. TensorFlow does not check it.

    ## Example
    ```
    frequency_aware_adagrad { max_lr_multiplier: 10.0 accumulator_decay: 1.0 }
    ```

    ## Use instead
    ```
    frequency_aware_adagrad {
      max_lr_multiplier: 10.0 accumulator_decay: 1.0 initial_accumulator_value: 0.1
    }
    ```
    """
    yield from check_ranges(
        ctx,
        "frequency_aware_adagrad",
        [
            Check(
                "initial_accumulator_value",
                _not_positive,
                "initial_accumulator_value > 0",
                "it is the accumulator's floor, and the step divides by its square root",
                "set initial_accumulator_value to a positive value, e.g. 0.1",
            ),
        ],
    )


@rule("OPT030", "error", "FrequencyEstimator tau outside (0, 1)")
def frequency_estimator_tau(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `frequency_estimator.tau` is strictly between 0 and 1.

    ## Why is this bad?
    tau is the averaging rate of the estimate `D = D * (1 - tau) + delta * tau`; the proto
    requires it "between 0 and 1 (exclusive)". At 0 the estimate never changes, at 1 it keeps
    only the last gap, outside it diverges.

    ## Example
    ```
    frequency_estimator { tau: 0.0 max_delta: 1000.0 outlier_threshold: 10.0 }
    ```

    ## Use instead
    ```
    frequency_estimator { tau: 0.1 max_delta: 1000.0 outlier_threshold: 10.0 }
    ```
    """
    yield from check_ranges(
        ctx,
        "frequency_estimator",
        [
            Check(
                "tau",
                _in_unit(False, False),
                "0 < tau < 1",
                "the proto requires tau strictly between 0 and 1",
                "set tau to a value in (0, 1), e.g. 0.1",
            ),
        ],
    )


@rule("OPT031", "error", "FrequencyEstimator max_delta <= 0")
def frequency_estimator_max_delta(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `frequency_estimator.max_delta` is positive.

    ## Why is this bad?
    max_delta caps the measured gap between two hits and is the initial value of every row's
    estimate D; the weight transform divides by it. With 0 every estimate is 0 (a sampling rate
    of 1/0). TensorFlow does not check it.

    ## Example
    ```
    frequency_estimator { tau: 0.1 outlier_threshold: 10.0 }
    ```

    ## Use instead
    ```
    frequency_estimator { tau: 0.1 max_delta: 1000.0 outlier_threshold: 10.0 }
    ```
    """
    yield from check_ranges(
        ctx,
        "frequency_estimator",
        [
            Check(
                "max_delta",
                _not_positive,
                "max_delta > 0",
                "it is every row's initial estimate, and the rate 1/D divides by it",
                "set max_delta to the largest gap (in steps) to measure, e.g. 1000",
            ),
        ],
    )


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
    """
    for at in algorithm_tables(ctx, "frequency_estimator"):
        if at.table.dimension != 1:
            yield ctx.diag(
                at.op_path.rsplit(".", 1)[0] + ".dimension",
                f"{ctx.table_label(at.i)}: a frequency_estimator table has dimension "
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
    """
    for at in algorithm_tables(ctx, "frequency_estimator"):
        kind = lr_kind(at.op)
        if kind == "dynamic":
            continue
        found = "a constant learning rate" if kind == "constant" else "no learning rate"
        yield ctx.diag(
            f"{at.op_path}.learning_rate",
            f"{ctx.table_label(at.i)}: frequency_estimator has {found}; its learning-rate "
            "input must carry the global step, which needs a dynamic learning rate",
            hint="use `learning_rate { dynamic { tag: N } }` and send the global step as input N",
        )


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
    """
    for at in algorithm_tables(ctx, "frequency_estimator"):
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
                f"{label}: {what} on a frequency_estimator table acts on the stored frequency "
                "estimate, not on an embedding",
                hint=f"remove {field.split('.')[0]} from this table",
            )
        threshold = at.params.outlier_threshold
        if finite(threshold) and threshold <= 0:
            yield ctx.diag(
                f"{at.op_path}.frequency_estimator.outlier_threshold",
                f"{label}: frequency_estimator.outlier_threshold is {fmt(threshold)}, expected "
                "> 0: every gap counts as an outlier and the estimate is never averaged",
                hint="set outlier_threshold to a positive multiple of the estimate, e.g. 10",
            )


@rule("OPT035", "warning", "RMSProp / Adadelta decay out of range")
def rms_prop_decay(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `rho` is in [0, 1) for `rms_prop`, `centered_rms_prop` and `adadelta`, and that
    `momentum` is not negative for the two RMSProp variants (one diagnostic per field).

    ## Why is this bad?
    rho is the decay of running averages: at 1 or more they never take in a new gradient (or
    grow without bound), below 0 they oscillate. A negative momentum reverses part of every
    previous step. TensorFlow does not check them.

    ## Example
    ```
    rms_prop { rho: 1.0 momentum: 0.0 epsilon: 1e-10 }
    ```

    ## Use instead
    ```
    rms_prop { rho: 0.9 momentum: 0.0 epsilon: 1e-10 }
    ```
    """
    rho = Check(
        "rho",
        _in_unit(True, False),
        "0 <= rho < 1",
        "the running averages never take in new gradients (or diverge)",
        "set rho to a value in [0, 1), e.g. 0.9",
    )
    momentum = Check(
        "momentum",
        _negative,
        "momentum >= 0",
        "a negative momentum reverses part of every earlier step",
        "set momentum to 0 or a value in (0, 1)",
    )
    yield from check_ranges(ctx, "rms_prop", [rho, momentum])
    yield from check_ranges(ctx, "centered_rms_prop", [rho, momentum])
    yield from check_ranges(
        ctx, "adadelta", [rho._replace(hint="set rho to a value in [0, 1), e.g. 0.95")]
    )


@rule("OPT036", "warning", "FrequencyAwareAdagrad hyper-parameter out of range")
def frequency_aware_adagrad_ranges(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks `frequency_aware_adagrad`: `max_lr_multiplier` > 0, `probability_exponent` >= 0,
    `accumulator_decay` in (0, 1], `l1_regularization_strength` and
    `l2_regularization_strength` >= 0; one diagnostic per field.

    ## Why is this bad?
    The step is scaled by `min((global steps / row updates)^probability_exponent,
    max_lr_multiplier)`: a multiplier <= 0 means no update at all, a negative exponent makes
    rare rows learn slower instead of faster. An accumulator decay of 0 forgets all history
    (the accumulator is its floor plus the last squared gradient), above 1 it grows without
    bound. Negative regularization strengths are silently ignored. TensorFlow does not check
    them.

    ## Example
    ```
    frequency_aware_adagrad { initial_accumulator_value: 0.1 }
    ```

    ## Use instead
    ```
    frequency_aware_adagrad {
      probability_exponent: 0.5 max_lr_multiplier: 10.0 accumulator_decay: 1.0
      initial_accumulator_value: 0.1
    }
    ```
    """
    yield from check_ranges(
        ctx,
        "frequency_aware_adagrad",
        [
            Check(
                "max_lr_multiplier",
                _not_positive,
                "max_lr_multiplier > 0",
                "the step is scaled by at most this value, so no row is ever updated",
                "set max_lr_multiplier to a positive cap, e.g. 10",
            ),
            Check(
                "probability_exponent",
                _negative,
                "probability_exponent >= 0",
                "rarely updated rows then learn slower instead of faster",
                "set probability_exponent to 0 or a positive value, e.g. 0.5",
            ),
            Check(
                "accumulator_decay",
                _in_unit(False, True),
                "0 < accumulator_decay <= 1",
                "the accumulator forgets everything (0) or grows without bound (> 1)",
                "set accumulator_decay: 1.0 for no decay, or a value slightly below 1",
            ),
            Check(
                "l1_regularization_strength",
                _negative,
                "l1_regularization_strength >= 0",
                "a negative strength is ignored",
                "set l1_regularization_strength to 0 or a positive value",
            ),
            Check(
                "l2_regularization_strength",
                _negative,
                "l2_regularization_strength >= 0",
                "a negative strength is ignored",
                "set l2_regularization_strength to 0 or a positive value",
            ),
        ],
    )


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
    """
    for at in algorithm_tables(ctx, "ftrl"):
        if at.params.multiply_linear_by_lr or lr_kind(at.op) != "dynamic":
            continue
        yield ctx.diag(
            f"{at.op_path}.ftrl.multiply_linear_by_lr",
            f"{ctx.table_label(at.i)}: ftrl on a dynamic learning rate without "
            "multiply_linear_by_lr divides by the rate: a step whose rate is 0 produces NaN",
            hint="set `multiply_linear_by_lr: true` in ftrl if the schedule can reach 0 "
            "(the linears slot then holds lr * linear)",
        )


# --------------------------------------------------------------------------------------------
# OPT040-OPT050: user programs, weight decay, simulation, packing, hot ids, enums


def program_arity(udp: Any) -> tuple[int, int]:
    """(I, O): parameters and result tuple elements of a user program (0 when absent)."""
    try:
        if not udp.HasField("program"):
            return 0, 0
        program = udp.program
        if not program.HasField("host_program_shape"):
            return 0, 0
        shape = program.host_program_shape
        return len(shape.parameters), len(shape.result.tuple_shapes)
    except (AttributeError, ValueError):  # a program type without these fields
        return 0, 0


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
    the number of outputs must be 1 or 2 less than the number of inputs").

    ## Example
    A program with 3 parameters (gradient, weight, one slot) and a 1-element result tuple.

    ## Use instead
    A program with 3 parameters and a 2-element result tuple (new weight, new slot), or 4
    parameters (the last one a dynamic scalar) and 2 results.
    """
    for at in algorithm_tables(ctx, "user_defined_program"):
        inputs, outputs = program_arity(at.params)
        if arity_valid(inputs, outputs):
            continue
        if not at.params.HasField("program"):
            found = "user_defined_program has no program"
        else:
            found = f"the user-defined program has {inputs} input(s) and {outputs} output(s)"
        yield ctx.diag(
            f"{at.op_path}.user_defined_program.program",
            f"{ctx.table_label(at.i)}: {found}; TensorFlow needs at least 2 inputs and 1 or 2 "
            "fewer outputs than inputs",
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
    """
    for at in algorithm_tables(ctx, "user_defined_program"):
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
    """
    for at in algorithm_tables(ctx, "mdl_adagrad_light"):
        if at.op.weight_decay_factor != 0:
            yield ctx.diag(
                f"{at.op_path}.weight_decay_factor",
                f"{ctx.table_label(at.i)}: weight_decay_factor is "
                f"{fmt(at.op.weight_decay_factor)}, but mdl_adagrad_light does not support "
                "weight decay",
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
    """
    for at in algorithm_tables(ctx, "mdl_adagrad_light", "online_yogi", "user_defined_program"):
        why = (
            "a user program needs an HLO interpreter"
            if at.algorithm == "user_defined_program"
            else "it has no public update equations"
        )
        yield ctx.diag(
            f"{at.op_path}.{at.algorithm}",
            f"{ctx.table_label(at.i)}: tpuemb simulate cannot run {at.algorithm} ({why}) "
            "and refuses this table",
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
    """
    for at in algorithm_tables(ctx, "bounded_adagrad", "frequency_aware_adagrad", "proximal_yogi"):
        yield ctx.diag(
            f"{at.op_path}.{at.algorithm}",
            f"{ctx.table_label(at.i)}: tpuemb simulate runs {at.algorithm} from reconstructed "
            "equations (TensorFlow publishes none); simulated values may differ from a TPU",
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
    """
    for t in op_tables(ctx):
        i, op = t.i, t.op
        value = op.weight_decay_factor
        if finite(value) and value < 0:
            yield ctx.diag(
                f"{t.op_path}.weight_decay_factor",
                f"{ctx.table_label(i)}: weight_decay_factor is {fmt(value)}, expected >= 0: "
                "every updated weight grows by this fraction each step",
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
    """
    for t in op_tables(ctx):
        i, op = t.i, t.op
        if not op.multiply_weight_decay_factor_by_learning_rate:
            continue
        if op.weight_decay_factor == 0:
            yield ctx.diag(
                f"{t.op_path}.multiply_weight_decay_factor_by_learning_rate",
                f"{ctx.table_label(i)}: multiply_weight_decay_factor_by_learning_rate is true "
                "but weight_decay_factor is 0, so it has no effect",
                hint="set weight_decay_factor, or remove the flag",
            )


def packing_effective(table: TableDescriptor, name: str | None) -> bool:
    """Low-dimensional packing ENABLED, dimension 1, 2 or 4, and SGD, Adagrad or FTRL."""
    op = optimization(table)
    return (
        op is not None
        and op.low_dimensional_packing_status == STATUS_ENABLED
        and table.dimension in PACKABLE_DIMENSIONS
        and name in PACKABLE_ALGORITHMS
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
    """
    for at in algorithm_tables(ctx):
        if at.op.low_dimensional_packing_status != STATUS_ENABLED:
            continue
        reasons = []
        if at.algorithm not in PACKABLE_ALGORITHMS:
            reasons.append(f"the algorithm is {at.algorithm}, not SGD, Adagrad or FTRL")
        if at.table.dimension not in PACKABLE_DIMENSIONS:
            reasons.append(f"the dimension is {at.table.dimension}, not 1, 2 or 4")
        if reasons:
            yield ctx.diag(
                f"{at.op_path}.low_dimensional_packing_status",
                f"{ctx.table_label(at.i)}: low-dimensional packing is ENABLED but the "
                f"runtime will not pack this table: {' and '.join(reasons)}",
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
        if at.algorithm == "ftrl":
            caveats.append(
                "initial weights must match the FTRL slots (zero weights for zero linears), or a "
                "zero-gradient update of a packed neighbour rebuilds its weight from the slots"
            )
        if caveats:
            yield ctx.diag(
                f"{at.op_path}.low_dimensional_packing_status",
                f"{ctx.table_label(at.i)}: low-dimensional packing: {'; '.join(caveats)}",
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
    """
    for t in op_tables(ctx):
        i, op = t.i, t.op
        if not op.HasField("hot_id_replication_configuration"):
            continue
        status = op.hot_id_replication_configuration.status
        if status in (STATUS_ENABLED, HOT_ID_MIGRATION_ONLY):
            name = "ENABLED" if status == STATUS_ENABLED else "MIGRATION_ONLY"
            yield ctx.diag(
                f"{t.op_path}.hot_id_replication_configuration.status",
                f"{ctx.table_label(i)}: hot-id replication status {name} is an experimental "
                "feature",
            )


def enum_name(message: Any, field: str, number: int) -> str | None:
    """The name of enum value ``number`` of ``message.field``, ``None`` when undeclared."""
    try:
        value = message.DESCRIPTOR.fields_by_name[field].enum_type.values_by_number.get(number)
    except (AttributeError, KeyError):
        return None
    return None if value is None else value.name


def enum_names(message: Any, field: str) -> str:
    """``"UNSPECIFIED (0), ENABLED (1), ..."`` for the enum of ``message.field``."""
    try:
        values = message.DESCRIPTOR.fields_by_name[field].enum_type.values
    except (AttributeError, KeyError):
        return "?"
    return ", ".join(f"{v.name} ({v.number})" for v in values)


@rule("OPT050", "error", "undeclared enum value")
def undeclared_enum(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports `low_dimensional_packing_status` or `hot_id_replication_configuration.status`
    holding a number its enum does not declare (possible from binary, JSON or text input, since
    proto3 enums are open).

    ## Why is this bad?
    What the TPU runtime does with an undeclared status is undefined.

    ## Example
    ```
    low_dimensional_packing_status: 7
    ```

    ## Use instead
    ```
    low_dimensional_packing_status: DISABLED
    ```
    """
    for t in op_tables(ctx):
        i, op = t.i, t.op
        base = t.op_path
        fields: list[tuple[Any, str, str]] = [(op, "low_dimensional_packing_status", "")]
        if op.HasField("hot_id_replication_configuration"):
            hot_id = "hot_id_replication_configuration."
            fields.append((op.hot_id_replication_configuration, "status", hot_id))
        for message, field, parent in fields:
            number = getattr(message, field)
            if enum_name(message, field, number) is None:
                yield ctx.diag(
                    f"{base}.{parent}{field}",
                    f"{ctx.table_label(i)}: {parent}{field} is {number}, which the enum does not "
                    f"declare; expected one of {enum_names(message, field)}",
                    hint=f"write {field} by name, e.g. DISABLED",
                )
