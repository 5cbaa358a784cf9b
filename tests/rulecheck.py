"""Helpers shared by the rule and validation tests (import as ``from rulecheck import ...``).

Triggering configs mark the line of every expected diagnostic with a trailing ``#@``; ``marked``
turns those marks into the expected (line, column) pairs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from click.testing import CliRunner, Result

from tpuemb_cfg.cli import main
from tpuemb_cfg.validator import validate

# A config every rule passes (used by the validation API and CLI tests).
CLEAN = """\
mode: TRAINING
num_hosts: 1
num_tensor_cores: 8
table_descriptor {
  name: "ads"
  vocabulary_size: 100
  dimension: 8
  optimization_parameters {
    learning_rate { constant: 0.1 }
    adagrad { }
    gradient_accumulation_status: ENABLED
  }
}
feature_descriptor { table_id: 0 input_shape: 16 }
"""


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


def run(tmp_path: Path, rule_id: str, text: str, **kwargs: object) -> list:
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


def write_file(tmp_path: Path, text: str, name: str = "c.pbtxt") -> Path:
    """Write ``text`` to ``tmp_path / name`` (creating folders) and return the path."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
