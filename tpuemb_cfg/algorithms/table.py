"""The algorithm table: every fact about an optimization algorithm, in one place.

One :class:`Algorithm` per member of the ``OptimizationParameters.parameters`` oneof
(``schema.md`` section 2, ``optimizers.md`` section 12): its slots and their initial values,
its hyper-parameters (each with its embedding constructor's argument and default, and its
constraints with their wording, the constructor's wording and the OPT rule), its per-step
inputs, what its learning rate carries, and the family module holding its update
(``tpuemb_cfg.algorithms.<family>``: the NumPy update and the scalar element the compiled
kernels are made from). Sizing, the constructors, the compiler, the executor and the validator
read it.

This module is plain data and imports nothing heavy (no protobuf, no NumPy), so ``tpuemb
validate`` pays nothing for it. Adding an algorithm: docs/adding-an-optimizer.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from .base import (
    REQUIRED,
    Algorithm,
    Constraint,
    Hyper,
    Slot,
    StepInput,
    negative,
    not_positive,
    outside_unit,
    positive,
)

__all__ = [
    "ADAM_BETA_1",
    "ADAM_BETA_2",
    "ALGORITHMS",
    "BENCHMARK",
    "BENCHMARK_DEFAULT",
    "JAX_PROTO_TYPES",
    "JAX_SLOTS",
    "JAX_SPECS",
    "KERAS_NAMES",
    "KERAS_RS_DEFAULT",
    "SPARSECORE",
    "checked_by",
    "constraints",
    "get",
    "slot_names",
]


#: Every OPT range rule enforces ``validation-rules.md`` section 2.5.
_OPT = "2.5"


def _h(field: str, rule: str, bad: Callable[[float], bool], expected: str, why: str,
       hint: str) -> Hyper:
    """A hyper-parameter with one constraint (the common case)."""
    return Hyper(field, (Constraint(rule, bad, expected, why, hint, _OPT),))


def _in_unit(field: str, rule: str, interval: str, why: str, example: str = "",
             hint: str = "") -> Hyper:
    """``field`` in ``interval`` between 0 and 1, written ``"[0, 1)"``, ``"(0, 1]"``, ``"[0, 1]"``
    or ``"(0, 1)"``; the fix is ``set FIELD to a value in INTERVAL, e.g. EXAMPLE`` unless
    ``hint`` says otherwise."""
    lo_closed, hi_closed = interval[0] == "[", interval[-1] == "]"
    expected = f"0 {'<=' if lo_closed else '<'} {field} {'<=' if hi_closed else '<'} 1"
    hint = hint or f"set {field} to a value in {interval}, e.g. {example}"
    return _h(field, rule, outside_unit(lo_closed, hi_closed), expected, why, hint)


def _positive(field: str, rule: str, why: str, hint: str) -> Hyper:
    """``field`` above 0."""
    return _h(field, rule, not_positive, f"{field} > 0", why, hint)


def _epsilon(rule: str, why: str, example: str) -> Hyper:
    """An ``epsilon`` above 0 (every algorithm adds it to a value that starts at 0)."""
    return _positive("epsilon", rule, why, f"set epsilon to a small positive value, e.g. {example}")


def _non_negative(rule: str, why: str, *fields: str, expected: str = "{f} >= 0",
                  hint: str = "set {f} to 0 or a positive value") -> tuple[Hyper, ...]:
    """Fields that must not be negative, each with the same reason."""
    return tuple(
        _h(f, rule, negative, expected.format(f=f), why, hint.format(f=f)) for f in fields
    )


def _tf(hyper: Hyper, default: Any = REQUIRED, argument: str = "", says: str = "") -> Hyper:
    """``hyper`` with its constructor argument: its ``default``, its name when it is not the
    field's, and ``says``, the constructor's wording when it refuses a value out of the
    constraint's range (``""``: the constructor leaves the range to the rule)."""
    checks = tuple(dataclasses.replace(c, constructor_message=says) for c in hyper.constraints)
    return dataclasses.replace(hyper, constraints=checks, default=default, argument=argument)


def _flag(field: str, default: bool, argument: str = "", *, negated: bool = False,
          bound: bool = True) -> Hyper:
    """A bool field; ``bound=False`` when the update does not read it."""
    return Hyper(field, kind="bool", argument=argument, default=default, negated=negated,
                 bound=bound)


def _float(field: str, default: Any = REQUIRED, *, bound: bool = True) -> Hyper:
    """An unconstrained float field."""
    return Hyper(field, default=default, bound=bound)


def _zero(hypers: tuple[Hyper, ...]) -> tuple[Hyper, ...]:
    """``hypers`` with the default 0.0 and the argument named like the field."""
    return tuple(_tf(h, 0.0) for h in hypers)


def _s(*names: str, **initial: float) -> tuple[Slot, ...]:
    return tuple(Slot(name, initial.get(name, 0.0)) for name in names)


_ADAM_REJECTS = "TensorFlow's Adam rejects it"
#: Adam's beta_1 and beta_2 defaults (TensorFlow's, jax-tpu-embedding's): the one home of the
#: numbers, for every constructor and schedule that repeats them.
ADAM_BETA_1 = 0.9
ADAM_BETA_2 = 0.999
#: TensorFlow's Adam constructor's wording for beta_1 and beta_2 out of [0, 1).
_ADAM_UNIT = "must be >= 0 and < 1"
_TF_DEFAULT = "(TensorFlow's default)"
_NEG_STRENGTH = "a negative strength is ignored"


def _yogi_beta2(rule: str) -> Hyper:
    """Yogi's ``beta2`` in [0, 1) (default 0.999), shared by both Yogi variants (each under its
    own rule)."""
    return _tf(
        _in_unit("beta2", rule, "[0, 1)", "the second moment diverges or never moves", "0.999"),
        0.999,
    )


def _rms_prop_hyper(rho_example: str, *, momentum: bool) -> tuple[Hyper, ...]:
    """``rho`` in [0, 1) (OPT035) for RMSProp and Adadelta (its example is its default), plus
    RMSProp's ``momentum >= 0`` (default 0)."""
    rho = _tf(
        _in_unit(
            "rho", "OPT035", "[0, 1)",
            "the running averages never take in new gradients (or diverge)", rho_example,
        ),
        float(rho_example),
    )
    if not momentum:
        return (rho,)
    return rho, _tf(_h(
        "momentum", "OPT035", negative, "momentum >= 0",
        "a negative momentum reverses part of every earlier step",
        "set momentum to 0 or a value in (0, 1)",
    ), 0.0)


_RMS_PROP_HYPER = (
    *_rms_prop_hyper("0.9", momentum=True),
    _tf(
        _epsilon("OPT026", "the zero initial mean square divides 0 by 0", "1e-10"), 1e-10,
        says="must be > 0 (the mean square starts at 0)",
    ),
)

#: The global step count frequency_aware_adagrad reads (spec 12.5).
_GLOBAL_STEP = StepInput(
    "global_step", "step_counter", "the global step count", "the step count",
)

_LIST: tuple[Algorithm, ...] = (
    Algorithm(
        "adagrad", "AdagradParameters", _s("accumulators", accumulators=0.1),
        equations="TPU-OSS, CPU-KERNEL", packable=True, section="12.2",
        rules=("OPT001",), family="adagrad",
    ),
    Algorithm(
        "adagrad_momentum", "AdagradMomentumParameters", _s("accumulators", "momenta"),
        equations="TPU-OSS", section="12.3", family="adagrad",
        # epsilon before exponent: the order TensorFlow's constructor checks them in.
        hyper=(
            _tf(
                _epsilon(
                    "OPT019", "the zero initial accumulator is raised to a negative power",
                    f"1e-10 {_TF_DEFAULT}",
                ),
                1e-10, says="must be > 0 (it is added to the accumulator before the power)",
            ),
            _tf(
                _positive(
                    "exponent", "OPT018",
                    "the preconditioner divides by it and TensorFlow's AdagradMomentum rejects it",
                    "set exponent to 2.0 (Adagrad's square root, TensorFlow's default)",
                ),
                2, says="(the preconditioner's k in (acc + epsilon)^(-1/k)) must be > 0",
            ),
            _tf(_in_unit(
                "beta2", "OPT020", "(0, 1]",
                "beta2 decays the squared-gradient accumulator (1 = Adagrad's running sum, 0 "
                "keeps only the latest squared gradient, outside [0, 1] it diverges)",
                hint="set beta2: 1.0 for Adagrad's accumulator (TensorFlow's default), or a "
                "decay such as 0.999",
            ), 1),
            _tf(_in_unit(
                "momentum", "OPT020", "[0, 1)", "the momentum buffer never forgets (or oscillates)",
                "0.9",
            ), 0.0),
            _flag("use_nesterov", False),
        ),
    ),
    Algorithm(
        "bounded_adagrad", "BoundedAdagradParameters", _s("accumulators", accumulators=0.1),
        equations="RECON", section="12.4", family="adagrad",
        hyper=(
            _flag("update_accumulator_first", False),
            *_zero(_non_negative(
                "OPT028", "a negative bound is ignored as if it were 0",
                "max_var_update", "max_accumulator",
                expected="{f} >= 0 (0 = no bound)",
                hint="set {f} to a positive bound, or 0 for none",
            )),
        ),
    ),
    Algorithm(
        "frequency_aware_adagrad", "FrequencyAwareAdagradParameters",
        (Slot("accumulators", initial_from="initial_accumulator_value"), Slot("counters")),
        equations="RECON", section="12.5", family="adagrad",
        step_inputs=(_GLOBAL_STEP,),
        hyper=(
            _tf(
                _positive(
                    "initial_accumulator_value", "OPT029",
                    "it is the accumulator's floor, and the step divides by its square root",
                    "set initial_accumulator_value to a positive value, e.g. 0.1",
                ),
                0.1, says="must be > 0 (it is the accumulator's floor and the step divides by "
                "its square root)",
            ),
            _tf(_positive(
                "max_lr_multiplier", "OPT036",
                "the step is scaled by at most this value, so no row is ever updated",
                "set max_lr_multiplier to a positive cap, e.g. 10",
            ), 1.0),
            _tf(_h(
                "probability_exponent", "OPT036", negative, "probability_exponent >= 0",
                "rarely updated rows then learn slower instead of faster",
                "set probability_exponent to 0 or a positive value, e.g. 0.5",
            ), 0.0),
            _tf(_in_unit(
                "accumulator_decay", "OPT036", "(0, 1]",
                "the accumulator forgets everything (0) or grows without bound (> 1)",
                hint="set accumulator_decay: 1.0 for no decay, or a value slightly below 1",
            ), 1.0),
            *_zero(_non_negative(
                "OPT036", _NEG_STRENGTH,
                "l1_regularization_strength", "l2_regularization_strength",
            )),
        ),
    ),
    Algorithm(
        "stochastic_gradient_descent", "StochasticGradientDescentParameters",
        equations="TPU-OSS, CPU-KERNEL", packable=True, section="12.1",
        rules=("OPT001", "ACC007"), family="sgd",
    ),
    Algorithm(
        "ftrl", "FtrlParameters", _s("accumulators", "linears", accumulators=0.1),
        equations="TPU-OSS, CPU-KERNEL", packable=True, section="12.6",
        rules=("OPT014", "OPT037", "OPT048", "DEP001"), family="ftrl",
        hyper=(
            *(
                _tf(h, 0.0, f"{h.field}_regularization_strength")
                for h in _non_negative(
                    "OPT015",
                    "a negative regularization strength breaks FTRL's closed-form update",
                    "l1", "l2",
                )
            ),
            _tf(_h(
                "lr_power", "OPT016", positive, "lr_power <= 0",
                "the step size then grows as gradients accumulate",
                "use lr_power: -0.5 (TensorFlow's default), or 0 for a fixed rate",
            ), -0.5, "learning_rate_power"),
            _tf(_h(
                "beta", "OPT017", negative, "beta >= 0",
                "it lowers FTRL's denominator, which can reach 0",
                "set beta to 0 or a positive value",
            ), 0.0),
            _flag("multiply_linear_by_lr", False, "multiply_linear_by_learning_rate"),
            _flag("allow_zero_accumulator", False, bound=False),
        ),
    ),
    Algorithm(
        "adam", "AdamParameters", _s("momenta", "velocities"),
        non_lazy_flag="use_non_lazy_adam", equations="TPU-OSS, CPU-KERNEL", section="12.7",
        rules=("OPT013", "ACC003"),
        family="adam", learning_rate="bias_corrected",
        hyper=(
            _tf(
                _in_unit("beta1", "OPT010", "[0, 1)", _ADAM_REJECTS, f"0.9 {_TF_DEFAULT}"),
                ADAM_BETA_1, "beta_1", _ADAM_UNIT,
            ),
            _tf(
                _in_unit("beta2", "OPT011", "[0, 1)", _ADAM_REJECTS, f"0.999 {_TF_DEFAULT}"),
                ADAM_BETA_2, "beta_2", _ADAM_UNIT,
            ),
            _tf(
                _epsilon(
                    "OPT012", f"{_ADAM_REJECTS}, and a zero second moment divides by 0",
                    f"1e-07 {_TF_DEFAULT}",
                ),
                1e-07, says="must be > 0",
            ),
            _flag("use_non_lazy_adam", True, "lazy_adam", negated=True, bound=False),
            _flag("use_sum_inside_sqrt", True, "sum_inside_sqrt"),
        ),
    ),
    Algorithm(
        "momentum", "MomentumParameters", _s("momenta"),
        equations="PROTO, CPU-KERNEL", section="12.8", family="momentum",
        hyper=(
            _tf(_in_unit(
                "momentum", "OPT024", "[0, 1)",
                "the momentum buffer grows without bound or oscillates", "0.9",
            ), 0.0),
            _flag("use_nesterov", False),
        ),
    ),
    Algorithm(
        "lion", "LionParameters", _s("momenta"),
        non_lazy_flag="use_non_lazy_lion", equations="PROTO", section="12.9",
        rules=("ACC004",), family="adam",
        hyper=(
            _tf(_in_unit("beta1", "OPT025", "[0, 1]", "the sign step extrapolates", "0.9"), 0.9),
            _tf(_in_unit("beta2", "OPT025", "[0, 1]", "the momentum diverges", "0.99"), 0.99),
            _flag("use_non_lazy_lion", False, bound=False),
        ),
    ),
    Algorithm(
        "rms_prop", "RmsPropParameters", _s("ms", "mom"),
        equations="PROTO, CPU-KERNEL", section="12.10", family="rmsprop", hyper=_RMS_PROP_HYPER,
    ),
    Algorithm(
        "centered_rms_prop", "CenteredRmsPropParameters", _s("ms", "mom", "mg"),
        equations="PROTO, CPU-KERNEL", section="12.11", family="rmsprop", hyper=_RMS_PROP_HYPER,
    ),
    Algorithm(
        "mdl_adagrad_light", "MdlAdagradLightParameters",
        _s("accumulators", "weights", "benefits"),
        equations="NONE", section="12.12", rules=("OPT042",),
        hyper=(
            *(
                _float(f, 0.0) for f in (
                    "l2", "lr_power", "min_servable_mdl_benefit", "mdl_mix_in_margin",
                    "mdl_benefit_rampup_coeff", "mdl_min_weight", "benefit_revisit_scale",
                    "max_event_benefit", "max_total_benefit", "mdl_hard_limit",
                )
            ),
            _flag("hard_limit_min_benefit", False),
            _flag("mdl_regularize", False),
        ),
        unsupported=(
            "TensorFlow publishes no update equations for MDL Adagrad Light (spec section 12.12)"
        ),
    ),
    Algorithm(
        "adadelta", "AdadeltaParameters", _s("accumulators", "updates"),
        equations="PROTO, CPU-KERNEL", section="12.13", family="rmsprop",
        hyper=(
            *_rms_prop_hyper("0.95", momentum=False),
            _tf(
                _epsilon("OPT027", "the zero initial slots give 0/0 on the first step", "1e-07"),
                1e-8, says="must be > 0 (both slots start at 0)",
            ),
        ),
    ),
    Algorithm(
        "proximal_adagrad", "ProximalAdagradParameters", _s("accumulators", accumulators=0.1),
        equations="PROTO, CPU-KERNEL", section="12.14", family="proximal",
        hyper=_zero(_non_negative(
            "OPT021", "a negative strength grows the weights and can divide by zero", "l1", "l2",
        )),
    ),
    Algorithm(
        "online_yogi", "OnlineYogiParameters", _s("vs", "linears"),
        equations="NONE", section="12.15", rules=("OPT013",),
        unsupported=(
            "TensorFlow publishes no update equations for Online Yogi; the proto only describes "
            "it in prose (spec section 12.15)"
        ),
        hyper=(
            *_zero(_non_negative(
                "OPT023", "a negative strength breaks the FTRL-style update", "l1", "l2",
            )),
            _yogi_beta2("OPT023"),
        ),
    ),
    Algorithm(
        "proximal_yogi", "ProximalYogiParameters", _s("v", "m", v=1e-6),
        equations="RECON", section="12.16", rules=("OPT013",), family="proximal",
        hyper=(
            _tf(_in_unit(
                "beta1", "OPT022", "[0, 1)", "the first moment diverges or never moves", "0.9",
            ), 0.0),
            _yogi_beta2("OPT022"),
            _tf(_epsilon("OPT022", "a zero second moment divides by zero", "0.001"), 1e-3),
            *_zero(_non_negative("OPT022", "a negative strength grows the weights", "l1")),
            *_zero(_non_negative("OPT022", "a negative strength can divide by zero", "l2")),
        ),
    ),
    Algorithm(
        "frequency_estimator", "FrequencyEstimatorParameters", _s("last_hit_step"),
        equations="PROTO", section="12.17",
        rules=("OPT032", "OPT033", "OPT034", "ACC009"), family="frequency",
        learning_rate="global_step", initial_rows_from="max_delta",
        hyper=(
            _in_unit(
                "tau", "OPT030", "(0, 1)", "the proto requires tau strictly between 0 and 1", "0.1",
            ),
            _positive(
                "max_delta", "OPT031",
                "it is every row's initial estimate, and the rate 1/D divides by it",
                "set max_delta to the largest gap (in steps) to measure, e.g. 1000",
            ),
            _h(
                "outlier_threshold", "OPT034", not_positive, "> 0",
                "every gap counts as an outlier and the estimate is never averaged",
                "set outlier_threshold to a positive multiple of the estimate, e.g. 10",
            ),
            _float("weight_exponent", bound=False),
        ),
    ),
    Algorithm(
        "user_defined_program", "UserDefinedProgramParameters",
        equations="NONE", section="12.18", rules=("OPT040", "OPT041"), slots_from_program=True,
        unsupported=(
            "simulating a user-defined optimizer needs an XLA HLO interpreter, which the executor "
            "does not have (spec section 12.18)"
        ),
    ),
    Algorithm(
        "assign", "AssignParameters", equations="PROTO", section="12.19",
        rules=("ACC008",), family="sgd",
        learning_rate="unused",
    ),
)

#: Every algorithm by its oneof member name, in the proto's declaration order of this table.
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in _LIST}


#: The optimizers the benchmark (``tpuemb bench``) runs, by the name it calls them, in its order:
#: (the algorithm, its hyper-parameters as configuration text). ``BENCHMARK_DEFAULT``: the
#: anchor workload's.
BENCHMARK: dict[str, tuple[str, str]] = {
    "sgd": ("stochastic_gradient_descent", ""),
    "adagrad": ("adagrad", ""),
    "momentum": ("momentum", "momentum: 0.9"),
    "adam": ("adam", "beta1: 0.9 beta2: 0.999 epsilon: 1e-08"),
    "ftrl": ("ftrl", "l1: 0.001 l2: 0.001 lr_power: -0.5 beta: 0.0"),
    "rms_prop": ("rms_prop", "rho: 0.9 momentum: 0.9 epsilon: 1e-07"),
    "proximal_adagrad": ("proximal_adagrad", "l1: 0.001 l2: 0.001"),
}
BENCHMARK_DEFAULT = "adagrad"

#: The optimizer names TFRS and keras-rs accept (lower case only), in their order, and the
#: algorithm each stands for (with TensorFlow's defaults); ``KERAS_RS_DEFAULT``: the name a
#: keras-rs table without an optimizer gets.
KERAS_NAMES: dict[str, str] = {
    "sgd": "stochastic_gradient_descent", "adagrad": "adagrad", "adam": "adam", "ftrl": "ftrl",
}
KERAS_RS_DEFAULT = "adam"

#: The algorithms SparseCores (TPU v5p, v6e, TPU7x) run: TensorFlow 2.21's ``TPUEmbeddingV2``
#: builders and jax-tpu-embedding 0.2.0's optimizer specs (a custom optimizer aside).
SPARSECORE: tuple[str, ...] = (
    "stochastic_gradient_descent", "adagrad", "adagrad_momentum", "adam", "ftrl",
)

#: jax-tpu-embedding 0.2.0's optimizer spec classes for those algorithms: class name ->
#: (the spec's ``short_name()``, the algorithm). ``tpuemb_cfg.sparsecore.jte`` mirrors the classes.
JAX_SPECS: dict[str, tuple[str, str]] = {
    "SGDOptimizerSpec": ("sgd", "stochastic_gradient_descent"),
    "AdagradOptimizerSpec": ("adagrad", "adagrad"),
    "AdagradMomentumOptimizerSpec": ("adagrad_momentum", "adagrad_momentum"),
    "AdamOptimizerSpec": ("adam", "adam"),
    "FTRLOptimizerSpec": ("ftrl", "ftrl"),
}

#: The names jax-tpu-embedding 0.2.0 gives those algorithms' slots (its ``*SlotVariables`` named
#: tuples; a checkpoint's ``<stack>/slot/<name>``), in TensorFlow's slot order: the i-th is
#: TensorFlow's i-th slot (``slot_names``).
JAX_SLOTS: dict[str, tuple[str, ...]] = {
    "stochastic_gradient_descent": (),
    "adagrad": ("accumulator",),
    "adagrad_momentum": ("accumulator", "momentum"),
    "adam": ("momentum", "velocity"),
    "ftrl": ("accumulator", "linear"),
}

#: jax-tpu-embedding's ``OptimizerSpecProto.OptimizerType`` names (its ``EmbeddingSpecProto``,
#: a checkpoint's stacking) and the algorithm each stands for; ``F2A`` and ``CUSTOM`` have none.
JAX_PROTO_TYPES: dict[str, str] = {
    "SGD": "stochastic_gradient_descent", "ADAGRAD": "adagrad", "ADAM": "adam", "FTRL": "ftrl",
    "ADAGRAD_MOMENTUM": "adagrad_momentum",
}


def get(name: str) -> Algorithm:
    """The algorithm named ``name``; ``KeyError`` never escapes: ``ValueError`` lists the names."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(
            f"unknown optimization algorithm {name!r}; expected one of: "
            + ", ".join(sorted(ALGORITHMS))
        ) from None


def checked_by(rule: str) -> tuple[str, ...]:
    """The algorithms rule ``rule`` was written for (their ``rules``), in table order."""
    return tuple(a.name for a in _LIST if rule in a.rules)


def slot_names(name: str) -> tuple[str, ...]:
    """The slot names of algorithm ``name`` in TensorFlow's state order (``()`` if unknown).

    ``user_defined_program`` has no fixed slots (they come from its program; see ``derived``).
    """
    algorithm = ALGORITHMS.get(name)
    return algorithm.slot_names if algorithm is not None else ()


def constraints(rule: str) -> Iterator[tuple[str, str, Constraint]]:
    """(algorithm, field, constraint) of every constraint reported by ``rule``, in table order."""
    for algorithm in _LIST:
        for hyper in algorithm.hyper:
            for constraint in hyper.constraints:
                if constraint.rule == rule:
                    yield algorithm.name, hyper.field, constraint
