"""Hyper-parameter range rules (``OPT``, ``validation-rules.md`` section 2.5), generated from the
algorithm table.

Each rule below is one :func:`range_rule` (its id, severity and summary) on a function whose
docstring is its explanation; what it checks (the fields, the predicate, the expected range, the
reason and the fix of every message) are the constraints of :mod:`tpuemb_cfg.algorithms` that
name its id, which the embedding constructors check too. Adding a range rule is adding its
constraints to the table and one decorated function here.

A generated rule visits the algorithms of its constraints in table order; for each, every table
of that algorithm (in table order) and each constrained field (in table order). Stored float32
values are compared; NaN and infinities are skipped (OPT002/OPT003 report them).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator

from tpuemb_cfg.algorithms import Constraint, constraints
from tpuemb_cfg.model import Diagnostic, Severity
from tpuemb_cfg.rules._registry import Context, rule
from tpuemb_cfg.rules.common import algorithm_tables, table_violations

RangeRule = Callable[[Context], Iterator[Diagnostic]]


def range_rule(
    id: str, severity: Severity, summary: str | None = None
) -> Callable[[Callable[[], None]], RangeRule]:
    """Register rule ``id``: every constraint of the algorithm table that names it.

    The decorated function's docstring is the explanation ``tpuemb explain`` prints (after its
    first paragraph, the summary, when ``summary`` is not given); the spec section of the
    constraints is appended to it. Raises ``ValueError`` when no constraint names ``id`` or when
    they cite different spec sections (a table or rule typo).
    """
    return functools.partial(_range_rule, id, severity, summary)


def _range_rule(
    id: str, severity: Severity, summary: str | None, explained: Callable[[], None]
) -> RangeRule:
    doc = inspect.cleandoc(explained.__doc__ or "")
    if summary is None:
        summary, _, doc = doc.partition("\n\n")
    found = list(constraints(id))
    sections = {constraint.section for _, _, constraint in found}
    if len(sections) != 1:
        raise ValueError(
            f"rule {id}: expected constraints of the algorithm table citing one spec section, "
            f"found {len(found)} citing {sorted(sections)}"
        )
    by_algorithm: dict[str, list[tuple[str, Constraint]]] = {}
    for algorithm, field, constraint in found:
        by_algorithm.setdefault(algorithm, []).append((field, constraint))

    def check(ctx: Context) -> Iterator[Diagnostic]:
        for algorithm, checks in by_algorithm.items():
            for at in algorithm_tables(ctx, algorithm):
                yield from table_violations(ctx, at, checks)

    check.__name__ = check.__qualname__ = f"range_{id.lower()}"
    check.__doc__ = (
        f"{inspect.cleandoc(doc)}\n\nSpec: validation-rules.md section {sections.pop()}"
    )
    return rule(id, severity, summary)(check)


@range_rule("OPT010", "error", "Adam beta1 outside [0, 1)")
def adam_beta1() -> None:
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


@range_rule("OPT011", "error", "Adam beta2 outside [0, 1)")
def adam_beta2() -> None:
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


@range_rule("OPT012", "error", "Adam epsilon <= 0")
def adam_epsilon() -> None:
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


@range_rule("OPT015", "error", "FTRL l1 or l2 negative")
def ftrl_l1_l2() -> None:
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


@range_rule("OPT016", "warning", "FTRL lr_power > 0")
def ftrl_lr_power() -> None:
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


@range_rule("OPT017", "warning", "FTRL beta < 0")
def ftrl_beta() -> None:
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


@range_rule("OPT018", "error", "AdagradMomentum exponent <= 0")
def adagrad_momentum_exponent() -> None:
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


@range_rule("OPT019", "error", "AdagradMomentum epsilon <= 0")
def adagrad_momentum_epsilon() -> None:
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


@range_rule("OPT020", "warning")
def adagrad_momentum_ranges() -> None:
    """AdagradMomentum beta2 outside (0, 1] or momentum outside [0, 1)

    ## What it does
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


@range_rule("OPT021", "error", "ProximalAdagrad l1 or l2 negative")
def proximal_adagrad_ranges() -> None:
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


@range_rule("OPT022", "error", "ProximalYogi hyper-parameter out of range")
def proximal_yogi_ranges() -> None:
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


@range_rule("OPT023", "warning", "OnlineYogi hyper-parameter out of range")
def online_yogi_ranges() -> None:
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


@range_rule("OPT024", "warning", "Momentum coefficient outside [0, 1)")
def momentum_range() -> None:
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


@range_rule("OPT025", "warning", "Lion betas outside [0, 1]")
def lion_ranges() -> None:
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


@range_rule("OPT026", "error", "RMSProp epsilon <= 0")
def rms_prop_epsilon() -> None:
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


@range_rule("OPT027", "error", "Adadelta epsilon <= 0")
def adadelta_epsilon() -> None:
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


@range_rule("OPT028", "warning", "BoundedAdagrad negative bound")
def bounded_adagrad_bounds() -> None:
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


@range_rule("OPT029", "error", "FrequencyAwareAdagrad initial accumulator <= 0")
def frequency_aware_adagrad_initial() -> None:
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


@range_rule("OPT030", "error", "FrequencyEstimator tau outside (0, 1)")
def frequency_estimator_tau() -> None:
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


@range_rule("OPT031", "error", "FrequencyEstimator max_delta <= 0")
def frequency_estimator_max_delta() -> None:
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


@range_rule("OPT035", "warning", "RMSProp / Adadelta decay out of range")
def rms_prop_decay() -> None:
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


@range_rule("OPT036", "warning", "FrequencyAwareAdagrad hyper-parameter out of range")
def frequency_aware_adagrad_ranges() -> None:
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
