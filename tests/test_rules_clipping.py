"""CLIP and QNT rules (validation-rules.md 2.7): configs that trigger each rule and near misses.

Triggering configs mark the line of every expected diagnostic with a trailing ``#@``; the expected
column is that line's first non-blank character. Field paths are written out by hand.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from rulecheck import family_tests, text_findings

T = "table_descriptor[0].optimization_parameters"
W = f"{T}.clipping_limits"
G = f"{T}.gradient_clipping_limits"
Q = f"{T}.simulated_quantization"

SEVERITY = {
    "CLIP001": "warning", "CLIP002": "warning", "CLIP003": "warning", "CLIP004": "warning",
    "CLIP005": "info", "CLIP006": "warning", "QNT001": "error", "QNT002": "warning",
    "QNT003": "info",
}  # fmt: skip


def config(op: str) -> str:
    """One Adagrad table whose optimization_parameters also hold ``op`` (dedented)."""
    body = textwrap.indent(textwrap.dedent(op).strip("\n"), "    ")
    return (
        "table_descriptor {\n"
        '  name: "t"\n'
        "  vocabulary_size: 8\n"
        "  dimension: 4\n"
        "  optimization_parameters {\n"
        f"{body}\n"
        "    gradient_accumulation_status: ENABLED\n"
        "    adagrad {\n"
        "    }\n"
        "  }\n"
        "}\n"
        "mode: TRAINING\n"
    )


def limits(name: str, lower: str | None, upper: str | None, *, mark: str = "") -> str:
    """``name { lower { value: L } upper { value: U } }`` one field per line; ``mark`` is a
    comma-separated list of the lines to mark: ``self``, ``lower``, ``upper``."""
    marks = set(mark.split(","))

    def tag(what: str) -> str:
        return "  #@" if what in marks else ""

    lines = [f"{name} {{{tag('self')}"]
    for side, value in (("lower", lower), ("upper", upper)):
        if value is None:
            continue
        lines.append(f"  {side} {{{tag(side)}")
        if value != "":
            lines.append(f"    value: {value}")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def quantization(body: str, *, mark: bool = False) -> str:
    inner = textwrap.indent(textwrap.dedent(body).strip("\n"), "  ")
    return f"simulated_quantization {{{'  #@' if mark else ''}\n{inner}\n}}"


RANGE = "clipping_limits {\n  lower {\n    value: -1.0\n  }\n  upper {\n    value: 1.0\n  }\n}"

TRIGGER = [
    ("CLIP001", config(limits("clipping_limits", "1.0", "-1.0", mark="lower")), [f"{W}.lower"]),
    (
        "CLIP002",
        config(limits("gradient_clipping_limits", "5.0", "-5.0", mark="lower")),
        [f"{G}.lower"],
    ),
    (
        "CLIP003",
        config(
            limits("clipping_limits", "nan", None, mark="lower")
            + "\n"
            + quantization(
                "enabled: true\n"
                + limits("clipping_limits", "-1.0", "nan", mark="upper")
                + "\nnum_buckets: 8"
            )
        ),
        [f"{W}.lower", f"{Q}.clipping_limits.upper"],
    ),
    # clipvalue=0 in TensorFlow writes [-0.0, 0.0]: a zero-width range
    ("CLIP004", config(limits("gradient_clipping_limits", "-0.0", "", mark="self")), [G]),
    ("CLIP004", config(limits("gradient_clipping_limits", "0.5", None, mark="self")), [G]),
    ("CLIP004", config(limits("gradient_clipping_limits", None, "-0.5", mark="self")), [G]),
    ("CLIP005", config("clipping_limits {  #@\n}\ngradient_clipping_limits {  #@\n}"), [W, G]),
    ("CLIP006", config(limits("clipping_limits", "0.5", "0.5", mark="self")), [W]),
    (
        "QNT001",
        config(quantization("enabled: true\n" + RANGE + "\nnum_buckets: 1  #@")),
        [f"{Q}.num_buckets"],
    ),
    ("QNT001", config(quantization("enabled: true\n" + RANGE, mark=True)), [f"{Q}.num_buckets"]),
    (
        "QNT002",
        config(quantization("enabled: true\nnum_buckets: 8", mark=True)),
        [f"{Q}.clipping_limits"],
    ),
    (
        "QNT002",
        config(
            quantization(
                "enabled: true\n"
                + limits("clipping_limits", "-1.0", None, mark="self")
                + "\nnum_buckets: 8"
            )
        ),
        [f"{Q}.clipping_limits.upper"],
    ),
    (
        "QNT002",
        config(
            quantization(
                "enabled: true\n"
                + limits("clipping_limits", "-inf", "1.0", mark="lower")
                + "\nnum_buckets: 8"
            )
        ),
        [f"{Q}.clipping_limits.lower"],
    ),
    (
        "QNT002",
        config(
            quantization(
                "enabled: true\n"
                + limits("clipping_limits", "1.0", "1.0", mark="lower")
                + "\nnum_buckets: 8"
            )
        ),
        [f"{Q}.clipping_limits.lower"],
    ),
    ("QNT003", config(quantization("num_buckets: 256", mark=True)), [f"{Q}.enabled"]),
]

CLEAN = [
    ("CLIP001", config(limits("clipping_limits", "-1.0", "1.0"))),
    ("CLIP001", config(limits("clipping_limits", "1.0", None))),
    ("CLIP002", config(limits("gradient_clipping_limits", "-5.0", "5.0"))),
    ("CLIP003", config(limits("clipping_limits", "-inf", "inf"))),
    ("CLIP004", config(limits("gradient_clipping_limits", "-1.0", "1.0"))),
    ("CLIP004", config(limits("gradient_clipping_limits", "", None))),  # lower 0: [0, inf)
    ("CLIP004", config(limits("gradient_clipping_limits", "5.0", "-5.0"))),  # CLIP002's case
    ("CLIP005", config(limits("clipping_limits", "", None))),  # a bound of 0 is a bound
    ("CLIP005", config(quantization("clipping_limits {\n}"))),  # QNT003's business
    ("CLIP006", config(limits("clipping_limits", "-0.5", "0.5"))),
    ("CLIP006", config(limits("gradient_clipping_limits", "0.5", "0.5"))),  # CLIP004's case
    ("QNT001", config(quantization("enabled: true\n" + RANGE + "\nnum_buckets: 2"))),
    ("QNT001", config(quantization("num_buckets: 1"))),  # not enabled
    ("QNT002", config(quantization("enabled: true\n" + RANGE + "\nnum_buckets: 2"))),
    ("QNT002", config(quantization("num_buckets: 8"))),
    ("QNT003", config(quantization("enabled: true\n" + RANGE + "\nnum_buckets: 2"))),
    ("QNT003", config(quantization("enabled: false"))),
]


test_rule_triggers_at_the_marked_field, test_rule_does_not_trigger, test_family_is_complete = (
    family_tests(SEVERITY, TRIGGER, CLEAN)
)


def test_zero_width_gradient_range_says_learning_stops(tmp_path: Path) -> None:
    text = config(limits("gradient_clipping_limits", "-0.0", ""))
    (d,) = text_findings(tmp_path, "CLIP004", text)
    assert "[-0.0, 0.0]" in d.message
    assert "nothing is learned" in d.message


def test_inverted_limits_name_both_values(tmp_path: Path) -> None:
    text = config(limits("gradient_clipping_limits", "5.0", "-5.0"))
    (d,) = text_findings(tmp_path, "CLIP002", text)
    assert "lower 5.0 is above upper -5.0" in d.message
    assert d.hint is not None and "swap" in d.hint
