"""SIZE rules (validation-rules.md 2.8, quantities of 1.6) with hand-computed byte counts.

All state is float32 (4 bytes). S counts parameters, slots and the hidden gradient accumulator
(when accumulation is effective); the estimate pads D to a multiple of 8 floats, or packs rows
(ceil(rows * D / 8) * 8 floats per host) when low-dimensional packing is effective.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rulecheck import text_findings

from tpuemb_cfg.rules import RULES
from tpuemb_cfg.validation.validator import validate

ADAM_TABLE = """\
table_descriptor {
  name: "t"
  vocabulary_size: 8
  dimension: 4
  optimization_parameters {
    gradient_accumulation_status: ENABLED
    adam {
      epsilon: 1e-07
    }
  }
}
"""

# Host 0 holds 2 rows of "a" and 2 of "b", host 1 holds 1 row of "a" and 2 of "b".
TWO_TABLES = """\
table_descriptor {
  name: "a"
  vocabulary_size: 3
  dimension: 8
  optimization_parameters {
    gradient_accumulation_status: ENABLED
    stochastic_gradient_descent {
    }
  }
}
table_descriptor {
  name: "b"
  vocabulary_size: 4
  dimension: 1
  optimization_parameters {
    gradient_accumulation_status: DISABLED
    adagrad {
    }
  }
}
num_hosts: 2
"""


def test_registered_with_spec_severities() -> None:
    # SIZE004 (a TPU device's memory, on by default) is the project's addition to the spec's
    # three; tests/test_rules_device_memory.py covers it.
    ids = ("SIZE001", "SIZE002", "SIZE003", "SIZE004")
    assert {r for r in RULES if r.startswith("SIZE")} == set(ids)
    assert [(RULES[r].severity, RULES[r].on_request) for r in ids] == [
        ("info", True),
        ("info", True),
        ("warning", False),
        ("warning", False),
    ]


def test_bytes_per_table(tmp_path: Path) -> None:
    # adam + accumulation: S = 4. Logical 8 * 4 * 4 * 4 = 512; padded to 8 floats: 8 * 8 * 4 * 4.
    (d,) = text_findings(tmp_path, "SIZE001", ADAM_TABLE + "num_hosts: 1\n")
    assert (d.severity, d.field_path, d.line, d.column) == ("info", "table_descriptor[0]", 1, 1)
    assert d.message == (
        "table_descriptor[0] 't': 512 bytes logical, about 1,024 bytes (1 KiB) on the TPU "
        "(estimate, rows padded to 8 floats); 4 state variable(s): parameters, momenta, "
        "velocities, gradient_accumulators"
    )


@pytest.mark.parametrize(
    ("hosts", "estimate"),
    [
        # V = 10, D = 2, S = 2 (parameters, gradient_accumulators): 20 floats in all.
        (1, "192 bytes"),  # ceil(20 / 8) * 8 * 4 * 2
        (2, "256 bytes"),  # 2 hosts of 5 rows: 2 * ceil(10 / 8) * 8 * 4 * 2
        (3, "192 bytes"),  # 4, 3, 3 rows: 3 * ceil(8 or 6 / 8) * 8 * 4 * 2
    ],
)
def test_packed_estimate_is_per_host(tmp_path: Path, hosts: int, estimate: str) -> None:
    text = (
        'table_descriptor {\n  name: "p"\n  vocabulary_size: 10\n  dimension: 2\n'
        "  optimization_parameters {\n    low_dimensional_packing_status: ENABLED\n"
        "    stochastic_gradient_descent {\n    }\n  }\n}\n"
        f"num_hosts: {hosts}\n"
    )
    (d,) = text_findings(tmp_path, "SIZE001", text)
    assert "160 bytes logical" in d.message  # 10 * 2 * 4 * 2
    assert f"about {estimate} on the TPU (estimate, packed rows)" in d.message


def test_bytes_per_table_unknown_without_algorithm(tmp_path: Path) -> None:
    text = 'table_descriptor {\n  name: "t"\n  vocabulary_size: 8\n  dimension: 4\n}\n'
    (d,) = text_findings(tmp_path, "SIZE001", text)
    assert (d.line, d.column) == (1, 1)
    assert "size unknown" in d.message


def test_bytes_per_host(tmp_path: Path) -> None:
    # a: S = 2, 2 and 1 rows of 8 floats: 128 and 64 bytes (no padding needed).
    # b: S = 2 (parameters, accumulators), 2 rows of 1 float per host: 16 bytes logical,
    #    2 * 8 * 4 * 2 = 128 bytes padded.
    (d,) = text_findings(tmp_path, "SIZE002", TWO_TABLES)
    assert (d.severity, d.field_path, d.line, d.column) == ("info", "", 1, 1)
    assert d.message == (
        "bytes per host (2 host(s), largest first): "
        "host 0: 144 bytes logical, about 256 bytes estimated; "
        "host 1: 80 bytes logical, about 192 bytes estimated"
    )


def test_hosts_with_equal_sizes_are_grouped(tmp_path: Path) -> None:
    # V = 6 over 4 hosts: 2, 2, 1, 1 rows of 8 floats, S = 2.
    text = (
        TWO_TABLES.split('table_descriptor {\n  name: "b"')[0].replace(
            "vocabulary_size: 3", "vocabulary_size: 6"
        )
        + "num_hosts: 4\n"
    )
    (d,) = text_findings(tmp_path, "SIZE002", text)
    assert d.message.endswith(
        "hosts 0-1: 128 bytes logical, about 128 bytes estimated; "
        "hosts 2-3: 64 bytes logical, about 64 bytes estimated"
    )


def test_bytes_per_host_unknown_hosts_and_tables(tmp_path: Path) -> None:
    (d,) = text_findings(tmp_path, "SIZE002", ADAM_TABLE + "num_hosts: -3\n")
    assert d.message == "per-host sizes unknown: num_hosts is -3, expected >= 1"
    text = ADAM_TABLE + 'table_descriptor {\n  name: "x"\n}\nnum_hosts: 1\n'
    (d,) = text_findings(tmp_path, "SIZE002", text)
    assert d.message.endswith("not counted (size unknown): table_descriptor[1] 'x'")


def test_sizes_only_on_request(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text(TWO_TABLES)
    assert not [d for d in validate(str(path)) if d.rule.startswith("SIZE")]
    shown = {d.rule for d in validate(str(path), show_derived=True)}
    assert {"SIZE001", "SIZE002"} <= shown


def test_over_budget(tmp_path: Path) -> None:
    (d,) = text_findings(tmp_path, "SIZE003", TWO_TABLES, options={"memory_budget_bytes": 200})
    assert (d.severity, d.field_path, d.line, d.column) == ("warning", "", 1, 1)
    assert d.message == (
        "1 host(s) exceed the per-host memory budget of 200 bytes "
        "(estimate, largest 256 bytes): host 0: about 256 bytes"
    )
    assert d.hint is not None and "num_hosts" in d.hint


@pytest.mark.parametrize(
    "options", [None, {"memory_budget_bytes": 256}, {"memory_budget_bytes": None}]
)
def test_within_budget_or_no_budget(tmp_path: Path, options: dict | None) -> None:
    assert text_findings(tmp_path, "SIZE003", TWO_TABLES, options=options) == []
