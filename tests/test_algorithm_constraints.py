"""The algorithm table's hyper-parameter constraints: one source for the OPT range rules and the
embedding constructors (issue 11), and slot names for sizing and the compiler."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import pytest

from tpuemb_cfg import algorithms
from tpuemb_cfg import embedding as emb
from tpuemb_cfg.embedding.errors import EmbeddingConfigError
from tpuemb_cfg.embedding.extra_optimizers import BY_ALGORITHM
from tpuemb_cfg.model import derived
from tpuemb_cfg.rules import RULES
from tpuemb_cfg.rules import hyperparameters as hp

#: The generated range rules (validation-rules.md section 2.5).
RANGE_RULES = [
    "OPT010", "OPT011", "OPT012", "OPT015", "OPT016", "OPT017", "OPT018", "OPT019", "OPT020",
    "OPT021", "OPT022", "OPT023", "OPT024", "OPT025", "OPT026", "OPT027", "OPT028", "OPT029",
    "OPT030", "OPT031", "OPT035", "OPT036",
]  # fmt: skip


def test_range_rules_are_generated_from_the_table() -> None:
    generated = sorted(r.id for r in RULES.values() if r.func.__module__ == hp.__name__)
    assert generated == RANGE_RULES
    for rule_id in RANGE_RULES:
        assert list(algorithms.constraints(rule_id)), rule_id
        assert RULES[rule_id].explanation.endswith("Spec: validation-rules.md section 2.5")


def test_every_constraint_names_a_registered_opt_rule_and_section() -> None:
    for algorithm in algorithms.ALGORITHMS.values():
        for hyper in algorithm.hyper:
            for constraint in hyper.constraints:
                assert constraint.rule in RULES, (algorithm.name, hyper.field)
                assert constraint.section == "2.5"
                assert hyper.field in constraint.expected or constraint.expected == "> 0"


def test_proximal_yogi_constraints_in_rule_order() -> None:
    found = [(a, f, c.expected) for a, f, c in algorithms.constraints("OPT022")]
    assert found == [
        ("proximal_yogi", "beta1", "0 <= beta1 < 1"),
        ("proximal_yogi", "beta2", "0 <= beta2 < 1"),
        ("proximal_yogi", "epsilon", "epsilon > 0"),
        ("proximal_yogi", "l1", "l1 >= 0"),
        ("proximal_yogi", "l2", "l2 >= 0"),
    ]


def test_rms_prop_decay_covers_three_algorithms_in_table_order() -> None:
    found = [(a, f) for a, f, _ in algorithms.constraints("OPT035")]
    assert found == [
        ("rms_prop", "rho"), ("rms_prop", "momentum"), ("centered_rms_prop", "rho"),
        ("centered_rms_prop", "momentum"), ("adadelta", "rho"),
    ]


@pytest.mark.parametrize(
    ("algorithm", "field", "value", "allowed"),
    [
        ("adam", "beta1", 0.0, True),
        ("adam", "beta1", 0.999, True),
        ("adam", "beta1", 1.0, False),
        ("adam", "beta1", -0.1, False),
        ("adam", "beta1", math.nan, False),
        ("adam", "beta1", math.inf, False),
        ("adam", "epsilon", 1e-30, True),
        ("adam", "epsilon", 0.0, False),
        ("adam", "epsilon", math.inf, True),
        ("adagrad_momentum", "beta2", 1.0, True),
        ("adagrad_momentum", "beta2", 0.0, False),
        ("lion", "beta2", 1.0, True),
        ("frequency_estimator", "tau", 1.0, False),
        ("ftrl", "lr_power", 0.0, True),
        ("ftrl", "lr_power", 0.5, False),
        ("bounded_adagrad", "max_var_update", -1.0, False),
        ("adam", "use_non_lazy_adam", 5.0, True),  # no constraint on the field
    ],
)
def test_allows(algorithm: str, field: str, value: float, allowed: bool) -> None:
    assert algorithms.ALGORITHMS[algorithm].allows(field, value) is allowed


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: emb.Adam(beta_1=1.0), "Adam: `beta_1` must be >= 0 and < 1; received 1.0"),
        (lambda: emb.Adam(beta_2=-0.5), "Adam: `beta_2` must be >= 0 and < 1; received -0.5"),
        (lambda: emb.Adam(epsilon=0.0), "Adam: `epsilon` must be > 0; received 0.0"),
        (lambda: emb.Adam(beta_1=math.nan), "Adam: `beta_1` must be >= 0 and < 1; received nan"),
        (
            lambda: emb.AdagradMomentum(exponent=0),
            "AdagradMomentum: `exponent` (the preconditioner's k in (acc + epsilon)^(-1/k)) must "
            "be > 0; received 0",
        ),
        (
            lambda: emb.RMSProp(epsilon=0.0),
            "RMSProp: `epsilon` must be > 0 (the mean square starts at 0); received 0.0",
        ),
        (
            lambda: emb.CenteredRMSProp(epsilon=-1.0),
            "CenteredRMSProp: `epsilon` must be > 0 (the mean square starts at 0); received -1.0",
        ),
        (
            lambda: emb.Adadelta(epsilon=0.0),
            "Adadelta: `epsilon` must be > 0 (both slots start at 0); received 0.0",
        ),
        (
            lambda: emb.AdagradMomentum(exponent=0, epsilon=0),
            "AdagradMomentum: `epsilon` must be > 0 (it is added to the accumulator before the "
            "power); received 0",
        ),
        (
            lambda: emb.FrequencyAwareAdagrad(initial_accumulator_value=0, step_counter=None),
            "FrequencyAwareAdagrad: `initial_accumulator_value` must be > 0 (it is the "
            "accumulator's floor and the step divides by its square root); received 0",
        ),
    ],
)
def test_constructors_apply_the_table_with_their_own_wording(
    make: Callable[[], object], message: str
) -> None:
    with pytest.raises(EmbeddingConfigError) as info:
        make()
    assert str(info.value) == message


def test_constructors_accept_what_the_table_allows() -> None:
    assert emb.Adam(beta_1=0.0, beta_2=0.0, epsilon=math.inf).beta_1 == 0.0
    assert emb.RMSProp(epsilon=1e-30).epsilon == 1e-30


def test_slot_names_come_from_the_table() -> None:
    for name, cls in BY_ALGORITHM.items():
        assert cls.slot_names == algorithms.slot_names(name), name
    assert emb.Adam.slot_names == ("momenta", "velocities")
    assert emb.CenteredRMSProp.slot_names == ("ms", "mom", "mg")
    assert derived.SLOTS["ftrl"] == ("accumulators", "linears")
    assert "user_defined_program" not in derived.SLOTS
    assert set(derived.SLOTS) == set(algorithms.ALGORITHMS) - {"user_defined_program"}
    assert derived.PACKABLE_ALGORITHMS == {"stochastic_gradient_descent", "adagrad", "ftrl"}


def test_first_slot_starts_at_the_initial_accumulator_value() -> None:
    assert emb.ProximalYogi(initial_accumulator_value=0.5).slot_initial_values() == {
        "v": 0.5, "m": 0.0,
    }
    assert emb.MDLAdagradLight().slot_initial_values() == {
        "accumulators": 0.1, "weights": 0.0, "benefits": 0.0,
    }
    assert emb.Momentum().slot_initial_values() == {"momenta": 0.0}
    assert emb.SGD().slot_initial_values() == {}


def test_constructors_check_the_constraints_with_a_constructor_message() -> None:
    checked = [
        (name, hyper.arg, constraint.rule)
        for name, algorithm in algorithms.ALGORITHMS.items()
        for hyper in algorithm.hyper
        for constraint in hyper.constraints
        if constraint.constructor_message
    ]
    assert checked == [
        ("adagrad_momentum", "epsilon", "OPT019"),
        ("adagrad_momentum", "exponent", "OPT018"),
        ("frequency_aware_adagrad", "initial_accumulator_value", "OPT029"),
        ("adam", "beta_1", "OPT010"),
        ("adam", "beta_2", "OPT011"),
        ("adam", "epsilon", "OPT012"),
        ("rms_prop", "epsilon", "OPT026"),
        ("centered_rms_prop", "epsilon", "OPT026"),
        ("adadelta", "epsilon", "OPT027"),
    ]


@pytest.mark.parametrize("name", sorted(BY_ALGORITHM))
def test_signature_defaults_are_the_tables(name: str) -> None:
    """Each constructor shows its defaults in its signature; they are the table's, and every
    hyper-parameter of the table has its argument."""
    parameters = inspect.signature(BY_ALGORITHM[name]).parameters
    for hyper in algorithms.ALGORITHMS[name].hyper:
        default = parameters[hyper.arg].default
        if hyper.default is algorithms.REQUIRED:
            assert default is inspect.Parameter.empty, (name, hyper.arg)
        else:
            assert default == hyper.default, (name, hyper.arg)
            assert type(default) is type(hyper.default), (name, hyper.arg)


@pytest.mark.parametrize("name", sorted(BY_ALGORITHM))
def test_constructor_fields_are_the_tables(name: str) -> None:
    """Which argument writes which proto field, and how, comes from the table."""
    written = {f[0]: (f[1], f[2]) for f in BY_ALGORITHM[name]._fields if f[1] != "kept"}
    expected = {
        h.arg: ("not" if h.negated else h.kind, h.field)
        for h in algorithms.ALGORITHMS[name].hyper
    }
    assert written == expected


def test_renamed_and_negated_arguments() -> None:
    hyper = {h.field: h for h in algorithms.ALGORITHMS["adam"].hyper}
    assert (hyper["beta1"].arg, hyper["beta1"].default) == ("beta_1", 0.9)
    assert (hyper["use_non_lazy_adam"].arg, hyper["use_non_lazy_adam"].negated) == (
        "lazy_adam", True,
    )
    ftrl = {h.arg: h.field for h in algorithms.ALGORITHMS["ftrl"].hyper}
    assert ftrl["learning_rate_power"] == "lr_power"
    assert ftrl["multiply_linear_by_learning_rate"] == "multiply_linear_by_lr"


def test_bound_hyper_parameters_are_the_tables() -> None:
    """Each family's hyper-parameter tuple: the table's bound fields, then its step inputs' tags."""
    from tpuemb_cfg.algorithms import update

    for name, optimizer in update.load().items():
        algorithm = algorithms.ALGORITHMS[name]
        expected = (
            *(h.field for h in algorithm.hyper if h.bound),
            *(s.tag for s in algorithm.step_inputs),
        )
        assert optimizer.hyper._fields == expected, name
