"""Clipping (``CLIP``) and simulated quantization (``QNT``), ``validation-rules.md`` section 2.7.

A ``ClippingLimits`` message is a closed interval [lower, upper] whose bounds are
``google.protobuf.FloatValue`` wrappers: an absent bound is unbounded (minus or plus infinity), a
present one holding 0.0 is a real bound of 0. It appears three times per table: weight clipping
(``clipping_limits``), gradient clipping (``gradient_clipping_limits``) and the quantization range
(``simulated_quantization.clipping_limits``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules._registry import Context, rule
from tpuemb_cfg.rules.common import fmt, op_tables

_WEIGHTS = "clipping_limits"
_GRADIENTS = "gradient_clipping_limits"
_QUANTIZATION = "simulated_quantization.clipping_limits"


def bounds(limits: Any) -> tuple[float | None, float | None]:
    """(lower, upper) of a ``ClippingLimits``; ``None`` for an absent bound."""
    lower = limits.lower.value if limits.HasField("lower") else None
    upper = limits.upper.value if limits.HasField("upper") else None
    return lower, upper


def _limits(ctx: Context, which: str) -> Iterator[tuple[int, str, Any]]:
    """(table index, field path of the limits, limits) for every table that has them."""
    for t in op_tables(ctx):
        i, op = t.i, t.op
        parent: Any
        if which == _QUANTIZATION:
            if not op.HasField("simulated_quantization"):
                continue
            parent = op.simulated_quantization
            field = "clipping_limits"
        else:
            parent, field = op, which
        if parent.HasField(field):
            yield i, f"{t.op_path}.{which}", getattr(parent, field)


def _inverted(lower: float | None, upper: float | None) -> tuple[float, float] | None:
    """(lower, upper) when both bounds are numbers and lower > upper, else ``None``."""
    if lower is None or upper is None or not lower > upper:
        return None
    return lower, upper


def _inverted_limits(ctx: Context, which: str, clipped: str, hint: str) -> Iterator[Diagnostic]:
    """One diagnostic at ``lower`` of every ``which`` limits with lower > upper: every
    ``clipped`` value becomes the upper bound."""
    for i, path, limits in _limits(ctx, which):
        inverted = _inverted(*bounds(limits))
        if inverted is None:
            continue
        lower, upper = (fmt(bound) for bound in inverted)
        yield ctx.diag(
            f"{path}.lower",
            f"{ctx.table_label(i)}: {which}.lower {lower} is above upper {upper}: every "
            f"{clipped} becomes {upper}",
            hint=hint,
        )


@rule("CLIP001", "warning", "weight clipping lower > upper")
def weight_limits_inverted(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports weight clipping limits (`clipping_limits`) whose lower bound is above the upper
    bound.

    ## Why is this bad?
    After each update a weight is clipped with `min(max(w, lower), upper)`: with lower > upper
    every updated weight becomes `upper`, whatever the gradient. TensorFlow accepts
    `clip_weight_min > clip_weight_max` without a word.
    TensorFlow builds and runs such a configuration (no check in its Python API or its C++), so
    this is a warning: the training runs, but its numbers are wrong.

    ## Example
    ```
    clipping_limits { lower { value: 1.0 } upper { value: -1.0 } }
    ```

    ## Use instead
    ```
    clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }
    ```

    Spec: validation-rules.md section 2.7
    """
    return _inverted_limits(ctx, _WEIGHTS, "updated weight", "swap the two bounds")


@rule("CLIP002", "warning", "gradient clipping lower > upper")
def gradient_limits_inverted(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports gradient clipping limits (`gradient_clipping_limits`) whose lower bound is above the
    upper bound.

    ## Why is this bad?
    Every gradient component becomes `upper`, whatever the data. TensorFlow's optimizers accept
    `clipvalue=(5, -5)`, and a negative scalar `clipvalue=-v` silently produces lower = +v,
    upper = -v.
    TensorFlow builds and runs such a configuration (no check in its Python API or its C++), so
    this is a warning: the training runs, but its numbers are wrong.

    ## Example
    ```
    gradient_clipping_limits { lower { value: 5.0 } upper { value: -5.0 } }
    ```

    ## Use instead
    ```
    gradient_clipping_limits { lower { value: -5.0 } upper { value: 5.0 } }
    ```

    Spec: validation-rules.md section 2.7
    """
    return _inverted_limits(
        ctx, _GRADIENTS, "gradient component",
        "swap the two bounds (a negative scalar clipvalue produces this order)",
    )


@rule("CLIP003", "warning", "NaN clipping bound")
def nan_bound(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a bound of weight clipping, gradient clipping or the quantization range that is NaN.

    ## Why is this bad?
    Comparisons with NaN are false, so what a clip to NaN does depends on the order of the
    min/max in the implementation: the clipped values may all become NaN. TensorFlow does not
    check it.
    TensorFlow builds and runs such a configuration (no check in its Python API or its C++), so
    this is a warning: the training runs, but its numbers are wrong.

    ## Example
    ```
    clipping_limits { lower { value: nan } upper { value: 1.0 } }
    ```

    ## Use instead
    ```
    clipping_limits { upper { value: 1.0 } }
    ```
    (an absent bound means no limit on that side).

    Spec: validation-rules.md section 2.7
    """
    for which in (_WEIGHTS, _GRADIENTS, _QUANTIZATION):
        for i, path, limits in _limits(ctx, which):
            for side, value in zip(("lower", "upper"), bounds(limits), strict=True):
                if value is not None and math.isnan(value):
                    yield ctx.diag(
                        f"{path}.{side}",
                        f"{ctx.table_label(i)}: {which}.{side} is nan, expected a number",
                        hint=f"set a number, or remove `{side}` for no limit on that side",
                    )


@rule("CLIP004", "warning", "gradient clipping forces every gradient to one value")
def gradient_limits_constant(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports gradient clipping limits that leave no room for the sign of a gradient: lower ==
    upper, lower > 0, or upper < 0 (inverted limits are CLIP002's warning).

    ## Why is this bad?
    With lower == upper every clipped gradient component becomes that constant; the zero-width
    range [-0, 0] that TensorFlow writes for `clipvalue=0` stops all learning. With lower > 0
    (or upper < 0) every component is pushed in the same direction, even a zero gradient.

    ## Example
    ```
    gradient_clipping_limits { lower { value: -0.0 } upper { } }
    ```

    ## Use instead
    ```
    gradient_clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }
    ```

    Spec: validation-rules.md section 2.7
    """
    for i, path, limits in _limits(ctx, _GRADIENTS):
        lower, upper = bounds(limits)
        if any(v is not None and math.isnan(v) for v in (lower, upper)):
            continue  # CLIP003
        if _inverted(lower, upper) is not None:
            continue  # CLIP002
        label = ctx.table_label(i)
        if lower is not None and upper is not None and lower == upper:
            stop = " and nothing is learned" if lower == 0 else ""
            message = (
                f"{label}: gradient_clipping_limits is [{fmt(lower)}, {fmt(upper)}], a zero-width "
                f"range: every gradient component becomes {fmt(upper)}{stop}"
            )
        elif lower is not None and lower > 0:
            message = (
                f"{label}: gradient_clipping_limits.lower is {fmt(lower)} > 0: every gradient "
                f"component becomes at least {fmt(lower)}, even a zero gradient"
            )
        elif upper is not None and upper < 0:
            message = (
                f"{label}: gradient_clipping_limits.upper is {fmt(upper)} < 0: every gradient "
                f"component becomes at most {fmt(upper)}, even a zero gradient"
            )
        else:
            continue
        yield ctx.diag(
            path,
            message,
            hint="use a range around 0, e.g. lower -1.0 and upper 1.0 (clipvalue=1.0)",
        )


@rule("CLIP005", "info", "empty clipping limits")
def empty_limits(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes a `clipping_limits` or `gradient_clipping_limits` message with neither bound.

    ## Why is this bad?
    An absent bound means no limit, so an empty message clips nothing. It is usually a bound
    that was meant to be written (note that a bound of 0 is written as an empty wrapper,
    `lower { }`, which is present and not empty).

    ## Example
    ```
    clipping_limits { }
    ```

    ## Use instead
    Remove the message, or write the bounds:
    ```
    clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }
    ```

    Spec: validation-rules.md section 2.7
    """
    for which in (_WEIGHTS, _GRADIENTS):
        for i, path, limits in _limits(ctx, which):
            if bounds(limits) == (None, None):
                yield ctx.diag(
                    path,
                    f"{ctx.table_label(i)}: {which} has neither a lower nor an upper bound and "
                    "clips nothing",
                    hint=f"remove {which}, or write its bounds",
                )


@rule("CLIP006", "warning", "weight clipping to a single value")
def weight_limits_single_value(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports weight clipping limits (`clipping_limits`) with lower == upper.

    ## Why is this bad?
    Every updated weight is set to that single value, whatever the gradient: the table forgets
    everything it learns.

    ## Example
    ```
    clipping_limits { lower { value: 0.5 } upper { value: 0.5 } }
    ```

    ## Use instead
    ```
    clipping_limits { lower { value: -0.5 } upper { value: 0.5 } }
    ```

    Spec: validation-rules.md section 2.7
    """
    for i, path, limits in _limits(ctx, _WEIGHTS):
        lower, upper = bounds(limits)
        if lower is not None and upper is not None and lower == upper:
            yield ctx.diag(
                path,
                f"{ctx.table_label(i)}: clipping_limits is [{fmt(lower)}, {fmt(upper)}]: every "
                f"updated weight becomes {fmt(upper)}",
                hint="widen the range, or remove clipping_limits",
            )


def _quantization(ctx: Context) -> Iterator[tuple[int, str, Any]]:
    """(table index, path of simulated_quantization, message) for every table that has it."""
    for t in op_tables(ctx):
        i, op = t.i, t.op
        if op.HasField("simulated_quantization"):
            yield i, f"{t.op_path}.simulated_quantization", op.simulated_quantization


@rule("QNT001", "error", "simulated quantization with fewer than 2 buckets")
def too_few_buckets(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports enabled simulated quantization with `num_buckets` < 2.

    ## Why is this bad?
    The quantum is `(upper - lower) / (num_buckets - 1)`, which needs at least 2 levels (the two
    ends of the range). TensorFlow's `QuantizationConfig` rejects it: "num_buckets is N, must be
    at least 2 for simulated quantization".

    ## Example
    ```
    simulated_quantization {
      enabled: true
      clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }
    }
    ```

    ## Use instead
    ```
    simulated_quantization {
      enabled: true
      clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }
      num_buckets: 256
    }
    ```

    Spec: validation-rules.md section 2.7
    """
    for i, path, sq in _quantization(ctx):
        if sq.enabled and sq.num_buckets < 2:
            yield ctx.diag(
                f"{path}.num_buckets",
                f"{ctx.table_label(i)}: simulated_quantization.num_buckets is {sq.num_buckets}, "
                "expected at least 2 (the quantum divides by num_buckets - 1)",
                hint="set num_buckets to the number of levels of the serving table, e.g. 256",
            )


@rule("QNT002", "warning", "unusable simulated quantization range")
def unusable_range(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Checks the range of enabled simulated quantization: `simulated_quantization.clipping_limits`
    must be present with both bounds, both finite, and lower < upper. (A NaN bound is CLIP003's
    warning.)

    ## Why is this bad?
    Looked-up rows are clipped to [lower, upper] and snapped to levels `lower + k * q` with
    `q = (upper - lower) / (num_buckets - 1)`: without both finite bounds there is no quantum,
    and with lower >= upper it is zero or negative. TensorFlow's `QuantizationConfig` accepts
    lower > upper without a word.
    TensorFlow builds and runs such a configuration (no check in its Python API or its C++), so
    this is a warning: the training runs, but its numbers are wrong.

    ## Example
    ```
    simulated_quantization { enabled: true num_buckets: 256 }
    ```

    ## Use instead
    Both bounds, finite, lower below upper, inside `simulated_quantization`:
    ```
    clipping_limits { lower { value: -1.0 } upper { value: 1.0 } }
    ```

    Spec: validation-rules.md section 2.7
    """
    for i, path, sq in _quantization(ctx):
        if not sq.enabled:
            continue
        label = ctx.table_label(i)
        hint = "give simulated_quantization.clipping_limits finite bounds with lower < upper"
        if not sq.HasField("clipping_limits"):
            yield ctx.diag(
                f"{path}.clipping_limits",
                f"{label}: simulated quantization is enabled without clipping_limits; the "
                "quantization range needs a finite lower and upper bound",
                hint=hint,
            )
            continue
        lower, upper = bounds(sq.clipping_limits)
        limits = f"{path}.clipping_limits"
        if lower is None and upper is None:
            yield ctx.diag(
                limits,
                f"{label}: simulated_quantization.clipping_limits has no bounds; the "
                "quantization range needs a finite lower and upper bound",
                hint=hint,
            )
            continue
        bad_side = False
        for side, value in (("lower", lower), ("upper", upper)):
            if value is None:
                found = "absent"
            elif math.isinf(value):
                found = fmt(value)
            else:
                continue  # finite, or NaN (CLIP003)
            bad_side = True
            yield ctx.diag(
                f"{limits}.{side}",
                f"{label}: simulated_quantization.clipping_limits.{side} is {found}; the "
                "quantization range needs a finite bound on both sides",
                hint=hint,
            )
        if bad_side or lower is None or upper is None:
            continue
        if not (math.isnan(lower) or math.isnan(upper)) and lower >= upper:
            yield ctx.diag(
                f"{limits}.lower",
                f"{label}: simulated_quantization.clipping_limits lower {fmt(lower)} is not below "
                f"upper {fmt(upper)}, so the quantum (upper - lower) / (num_buckets - 1) is not "
                "positive",
                hint="set lower < upper (swap them if they are inverted)",
            )


@rule("QNT003", "info", "simulated quantization settings ignored")
def quantization_ignored(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Notes a `simulated_quantization` message with `enabled` false that still sets `num_buckets`
    or `clipping_limits`.

    ## Why is this bad?
    Without `enabled: true` the other two fields are ignored; a forgotten `enabled` is the usual
    cause.

    ## Example
    ```
    simulated_quantization { num_buckets: 256
      clipping_limits { lower { value: -1.0 } upper { value: 1.0 } } }
    ```

    ## Use instead
    ```
    simulated_quantization { enabled: true num_buckets: 256
      clipping_limits { lower { value: -1.0 } upper { value: 1.0 } } }
    ```

    Spec: validation-rules.md section 2.7
    """
    for i, path, sq in _quantization(ctx):
        if sq.enabled:
            continue
        set_fields = [
            name
            for name, present in (
                ("num_buckets", sq.num_buckets != 0),
                ("clipping_limits", sq.HasField("clipping_limits")),
            )
            if present
        ]
        if set_fields:
            yield ctx.diag(
                f"{path}.enabled",
                f"{ctx.table_label(i)}: simulated quantization is not enabled, so "
                f"{' and '.join(set_fields)} {'is' if len(set_fields) == 1 else 'are'} ignored",
                hint="add `enabled: true` to quantize, or remove the other fields",
            )
