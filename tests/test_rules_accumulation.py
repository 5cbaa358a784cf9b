"""ACC rules (validation-rules.md 2.6): one config that triggers each rule, one that does not.

Triggering configs mark the line of every expected diagnostic with a trailing ``#@``; the expected
column is that line's first non-blank character. Field paths are written out by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rulecheck import config, family_tests, text_findings

from tpuemb_cfg.validation.validator import validate

T = "table_descriptor[0].optimization_parameters"
STATUS = f"{T}.gradient_accumulation_status"

SEVERITY = {
    "ACC001": "error", "ACC002": "info", "ACC003": "error", "ACC004": "warning",
    "ACC005": "error", "ACC006": "warning", "ACC007": "info", "ACC008": "warning",
    "ACC009": "warning", "ACC010": "error", "ACC011": "error", "ACC012": "info",
}  # fmt: skip


def program(inputs: int, outputs: int, *, mark: bool = False) -> str:
    """A user_defined_program with the given arity; ``mark`` marks its first line."""
    params = "".join("      parameters {\n      }\n" for _ in range(inputs))
    results = "".join("        tuple_shapes {\n        }\n" for _ in range(outputs))
    return (
        f"user_defined_program {{{'  #@' if mark else ''}\n"
        "  program {\n"
        "    host_program_shape {\n"
        f"{params}"
        "      result {\n"
        f"{results}"
        "      }\n"
        "    }\n"
        "  }\n"
        "}"
    )


ADAM = "adam {\n  beta1: 0.9\n  beta2: 0.999\n  epsilon: 1e-07\n  use_non_lazy_adam: true  #@\n}"
LION = "lion {\n  beta1: 0.9\n  beta2: 0.99\n  use_non_lazy_lion: true  #@\n}"
FE = "frequency_estimator {\n  tau: 0.1\n  max_delta: 100.0\n  outlier_threshold: 10.0\n}"

TRIGGER = [
    ("ACC001", config("gradient_accumulation_status: 7  #@\nadagrad {\n}"), [STATUS]),
    (
        "ACC002",
        config("adagrad {\n}").replace(
            "  optimization_parameters {\n", "  optimization_parameters {  #@\n"
        ),
        [STATUS],
    ),
    (
        "ACC003",
        config("gradient_accumulation_status: DISABLED\n" + ADAM),
        [f"{T}.adam.use_non_lazy_adam"],
    ),
    (
        "ACC004",
        config("gradient_accumulation_status: DISABLED\n" + LION),
        [f"{T}.lion.use_non_lazy_lion"],
    ),
    (
        "ACC005",
        config("""
        gradient_clipping_limits {  #@
          upper {
            value: 1.0
          }
        }
        gradient_accumulation_status: DISABLED
        adagrad {
        }"""),
        [f"{T}.gradient_clipping_limits"],
    ),
    (
        "ACC006",
        config(
            "weight_decay_factor: 0.01  #@\ngradient_accumulation_status: DISABLED\nadagrad {\n}"
        ),
        [f"{T}.weight_decay_factor"],
    ),
    (
        "ACC007",
        config(
            "weight_decay_factor: 0.01  #@\n"
            "gradient_accumulation_status: ENABLED\nstochastic_gradient_descent {\n}"
        ),
        [f"{T}.weight_decay_factor"],
    ),
    ("ACC008", config("gradient_accumulation_status: DISABLED  #@\nassign {\n}"), [STATUS]),
    (
        "ACC009",
        config("gradient_accumulation_status: DISABLED  #@\n" + FE, dimension="1"),
        [STATUS],
    ),
    # 9 inputs, 8 outputs: 7 slots; with the accumulator 9 state variables.
    ("ACC010", config("gradient_accumulation_status: ENABLED  #@\n" + program(9, 8)), [STATUS]),
    # 10 inputs, 9 outputs: 8 slots, 9 state variables even without accumulation.
    (
        "ACC011",
        config("gradient_accumulation_status: DISABLED\n" + program(10, 9, mark=True)),
        [f"{T}.user_defined_program"],
    ),
]

CLEAN = [
    ("ACC001", config("gradient_accumulation_status: DISABLED\nadagrad {\n}")),
    ("ACC002", config("gradient_accumulation_status: ENABLED\nadagrad {\n}")),
    ("ACC002", 'table_descriptor {\n  name: "t"\n}\n'),  # no optimization_parameters: OPT001
    ("ACC003", config("gradient_accumulation_status: ENABLED\n" + ADAM)),
    ("ACC003", config(ADAM)),  # UNSPECIFIED means ENABLED
    ("ACC004", config("gradient_accumulation_status: ENABLED\n" + LION)),
    (
        "ACC005",
        config(
            "gradient_clipping_limits {\n}\ngradient_accumulation_status: DISABLED\nadagrad {\n}"
        ),
    ),
    ("ACC005", config("gradient_clipping_limits {\n  lower {\n  }\n}\nadagrad {\n}")),
    (
        "ACC006",
        config("weight_decay_factor: 0.01\ngradient_accumulation_status: ENABLED\nadagrad {\n}"),
    ),
    ("ACC007", config("weight_decay_factor: 0.01\nadagrad {\n}")),
    ("ACC007", config("stochastic_gradient_descent {\n}")),
    ("ACC008", config("gradient_accumulation_status: ENABLED\nassign {\n}")),
    ("ACC009", config(FE, dimension="1")),
    ("ACC010", config("gradient_accumulation_status: DISABLED\n" + program(9, 8))),
    ("ACC010", config("gradient_accumulation_status: ENABLED\n" + program(8, 7))),
    ("ACC011", config("gradient_accumulation_status: DISABLED\n" + program(9, 8))),
    ("ACC011", config("gradient_accumulation_status: ENABLED\n" + program(10, 9))),  # ACC010
    ("ACC012", 'table_descriptor {\n  name: "t"\n}\n'),
]


test_rule_triggers_at_the_marked_field, test_rule_does_not_trigger, test_family_is_complete = (
    # ACC012 (on request) is tested by test_state_variable_list
    family_tests(
        SEVERITY, TRIGGER, CLEAN, on_request=frozenset({"ACC012"}),
        untriggered=frozenset({"ACC012"}),
    )
)


@pytest.mark.parametrize(
    ("op", "names"),
    [
        ("adam {\n  epsilon: 1e-07\n}", "parameters, momenta, velocities, gradient_accumulators"),
        (
            "gradient_accumulation_status: DISABLED\nadam {\n  epsilon: 1e-07\n}",
            "parameters, momenta, velocities",
        ),
        (
            "gradient_accumulation_status: ENABLED\ncentered_rms_prop {\n}",
            "parameters, ms, mom, mg, gradient_accumulators",
        ),
        ("gradient_accumulation_status: DISABLED\nassign {\n}", "parameters"),
        ("gradient_accumulation_status: DISABLED\n" + program(4, 3), "parameters, Slot_0, Slot_1"),
    ],
)
def test_state_variable_list(tmp_path: Path, op: str, names: str) -> None:
    text = config(op)
    (d,) = text_findings(tmp_path, "ACC012", text)
    assert (d.field_path, d.line, d.column, d.severity) == (T, 5, 3, "info")
    assert d.message.endswith(names)
    assert f"{len(names.split(', '))} state variable(s)" in d.message


def test_state_variables_are_reported_only_on_request(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text(config("adagrad {\n}"))
    assert not [d for d in validate(str(path)) if d.rule == "ACC012"]
    assert [d.rule for d in validate(str(path), select=["ACC"]) if d.rule == "ACC012"] == []
    assert [d.rule for d in validate(str(path), show_derived=True) if d.rule == "ACC012"] == [
        "ACC012"
    ]


def test_undeclared_status_message_lists_the_enum(tmp_path: Path) -> None:
    text = config("gradient_accumulation_status: 7\nadagrad {\n}")
    (d,) = text_findings(tmp_path, "ACC001", text)
    assert "gradient_accumulation_status is 7" in d.message
    assert "UNSPECIFIED (0), ENABLED (1), DISABLED (2)" in d.message
