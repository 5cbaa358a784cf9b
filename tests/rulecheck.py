"""Helpers shared by the rule and validation tests (import as ``from rulecheck import ...``).

Triggering configs mark the line of every expected diagnostic with a trailing ``#@``; ``marked``
turns those marks into the expected (line, column) pairs, and :func:`family_tests` builds the
trigger / near-miss / registration tests a family file declares with its case lists.

Running rules: :func:`findings` (a file, one rule's diagnostics), :func:`text_findings` (the same
for text), :func:`validate_text` (everything ``validate`` reports for text with one selector).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tpuemb_cfg.cli import main
from tpuemb_cfg.rules import RULES
from tpuemb_cfg.validation.validator import validate

#: The top-level scalars of the validation API, CLI and --fix configs.
HEADER = "mode: TRAINING\nnum_hosts: 1\nnum_tensor_cores: 8\n"


def adagrad_table(name: str, learning_rate: str) -> str:
    """A 100 x 8 Adagrad table with accumulation ENABLED; ``learning_rate`` is its whole line."""
    return (
        "table_descriptor {\n"
        f'  name: "{name}"\n'
        "  vocabulary_size: 100\n"
        "  dimension: 8\n"
        "  optimization_parameters {\n"
        f"    {learning_rate}\n"
        "    adagrad { }\n"
        "    gradient_accumulation_status: ENABLED\n"
        "  }\n"
        "}\n"
    )


# A config every rule passes (used by the validation API and CLI tests).
CLEAN = (
    HEADER
    + adagrad_table("ads", "learning_rate { constant: 0.1 }")
    + "feature_descriptor { table_id: 0 input_shape: 16 }\n"
)

#: The JSON form of the TBL008 diagnostic of ``num_hosts: 0`` on line 2.
NUM_HOSTS_ZERO = {
    "rule": "TBL008",
    "severity": "error",
    "message": "num_hosts is 0; it must be >= 1",
    "field_path": "num_hosts",
    "line": 2,
    "column": 1,
    "hint": "set num_hosts to the number of TPU hosts",
}


def config(op: str, *, dimension: str = "4") -> str:
    """One table whose optimization_parameters body is ``op`` (dedented, indented 4)."""
    body = textwrap.indent(textwrap.dedent(op).strip("\n"), "    ")
    return (
        "table_descriptor {\n"
        '  name: "t"\n'
        "  vocabulary_size: 8\n"
        f"  dimension: {dimension}\n"
        "  optimization_parameters {\n"
        f"{body}\n"
        "  }\n"
        "}\n"
        "mode: TRAINING\n"
        "num_hosts: 1\n"
        "num_tensor_cores: 1\n"
    )


def marked(text: str) -> list[tuple[int, int]]:
    """(line, column) of every line ending in ``#@``: its first non-blank character."""
    return [
        (n, len(line) - len(line.lstrip()) + 1)
        for n, line in enumerate(text.splitlines(), 1)
        if line.rstrip().endswith("#@")
    ]


def findings(path: Path, rule_id: str, **kwargs: object) -> list:
    """The diagnostics of ``rule_id`` for the file at ``path``; no rule may crash."""
    found = validate(str(path), select=[rule_id], **kwargs)  # type: ignore[arg-type]
    assert all("internal error" not in d.message for d in found), found
    return [d for d in found if d.rule == rule_id]


def text_findings(tmp_path: Path, rule_id: str, text: str, **kwargs: object) -> list:
    """``findings`` for ``text`` written to ``tmp_path / "config.pbtxt"``."""
    path = tmp_path / "config.pbtxt"
    path.write_text(text)
    return findings(path, rule_id, **kwargs)


def validate_text(tmp_path: Path, text: str, rule_id: str) -> list:
    """Everything ``validate`` reports for ``text`` with only ``rule_id`` selected."""
    path = tmp_path / "config.pbtxt"
    path.write_text(text)
    return validate(str(path), select=[rule_id])


def positions(diagnostics: list) -> list[tuple[int, int]]:
    return [(d.line, d.column) for d in diagnostics]


def invoke(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin)


def write_config(tmp_path: Path, text: str, name: str = "c.pbtxt") -> str:
    """:func:`write_file`, as the ``str`` path ``validate`` and the CLI take."""
    return str(write_file(tmp_path, text, name))


def write_file(tmp_path: Path, text: str, name: str = "c.pbtxt") -> Path:
    """Write ``text`` to ``tmp_path / name`` (creating folders) and return the path."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def case_ids(cases: Sequence[tuple[Any, ...]]) -> list[str]:
    """``OPT010-3``: the rule id and position of each case (unique test ids)."""
    return [f"{case[0]}-{i}" for i, case in enumerate(cases)]


def family_tests(
    severity: dict[str, str],
    trigger: Sequence[tuple[str, str, list[str]]],
    clean: Sequence[tuple[str, str]],
    *,
    on_request: frozenset[str] = frozenset(),
    untriggered: frozenset[str] = frozenset(),
) -> tuple[Callable[..., None], Callable[..., None], Callable[[], None]]:
    """The three tests of a rule family declared by its cases; bind them to ``test_*`` names.

    ``trigger``: (rule id, config, field paths), one path per ``#@`` line in order, each
    diagnostic of single table ``'t'`` at its marked line's first non-blank column with the
    family's severity. ``clean``: (rule id, config) near misses the rule must pass. The family
    (the ids' prefixes) must register exactly ``severity``'s rules, each with a trigger case
    (except ``untriggered``, tested elsewhere) and a near miss, on request only if listed.
    """
    families = {rule_id.rstrip("0123456789") for rule_id in severity}

    @pytest.mark.parametrize(("rule_id", "text", "paths"), trigger, ids=case_ids(trigger))
    def test_rule_triggers_at_the_marked_field(
        tmp_path: Path, rule_id: str, text: str, paths: list[str]
    ) -> None:
        found = text_findings(tmp_path, rule_id, text)
        expected = [(p, *pos) for p, pos in zip(paths, marked(text), strict=True)]
        assert [(d.field_path, d.line, d.column) for d in found] == expected
        assert {d.severity for d in found} == {severity[rule_id]}
        for d in found:
            assert "table_descriptor[0] 't'" in d.message

    @pytest.mark.parametrize(("rule_id", "text"), clean, ids=case_ids(clean))
    def test_rule_does_not_trigger(tmp_path: Path, rule_id: str, text: str) -> None:
        assert text_findings(tmp_path, rule_id, text) == []

    def test_every_rule_is_registered_and_tested() -> None:
        ours = {rule_id for rule_id, rule in RULES.items() if rule.family in families}
        assert ours == set(severity)
        assert {c[0] for c in trigger} | untriggered == ours
        assert {c[0] for c in clean} == ours
        for rule_id in ours:
            assert RULES[rule_id].severity == severity[rule_id]
            assert RULES[rule_id].on_request == (rule_id in on_request)

    return (
        test_rule_triggers_at_the_marked_field,
        test_rule_does_not_trigger,
        test_every_rule_is_registered_and_tested,
    )
