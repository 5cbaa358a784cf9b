"""DEP rules (validation-rules.md 2.9): the deprecated FTRL flag and unknown (binary) fields."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from rulecheck import findings

from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
from tpuemb_cfg.rules import RULES

FTRL = """\
table_descriptor {
  name: "t"
  vocabulary_size: 8
  dimension: 4
  optimization_parameters {
    ftrl {
      lr_power: -0.5
      allow_zero_accumulator: %s
    }
  }
}
"""


def test_registered_with_spec_severities() -> None:
    assert {r for r in RULES if r.startswith("DEP")} == {"DEP001", "DEP002"}
    for r in ("DEP001", "DEP002"):
        assert (RULES[r].severity, RULES[r].on_request) == ("warning", False)


def test_allow_zero_accumulator(tmp_path: Path) -> None:
    path = tmp_path / "c.pbtxt"
    path.write_text(FTRL % "true")
    (d,) = findings(path, "DEP001")
    assert (d.severity, d.field_path, d.line, d.column) == (
        "warning",
        "table_descriptor[0].optimization_parameters.ftrl.allow_zero_accumulator",
        8,
        7,
    )
    assert "deprecated" in d.message and "table_descriptor[0] 't'" in d.message


def test_allow_zero_accumulator_false_is_clean(tmp_path: Path) -> None:
    path = tmp_path / "c.pbtxt"
    path.write_text(FTRL % "false")
    assert findings(path, "DEP001") == []


def _config() -> TPUEmbeddingConfiguration:
    config = TPUEmbeddingConfiguration()
    table = config.table_descriptor.add()
    table.name = "t"
    table.vocabulary_size = 8
    table.dimension = 4
    table.optimization_parameters.adagrad.SetInParent()
    return config


def test_unknown_fields_in_binary_input(tmp_path: Path) -> None:
    config = _config()
    # AdagradParameters field 1 (float, wire type 5) = 0.1: the reserved initial_accumulator.
    config.table_descriptor[0].optimization_parameters.adagrad.MergeFromString(
        b"\x0d" + struct.pack("<f", 0.1)
    )
    # TableDescriptor field 9 (varint) = 1: never declared.
    config.table_descriptor[0].MergeFromString(b"\x48\x01")
    # TPUEmbeddingConfiguration field 8 (length-delimited, empty): the reserved output_layout.
    config.MergeFromString(b"\x42\x00")
    path = tmp_path / "c.binpb"
    path.write_bytes(config.SerializeToString())

    found = findings(path, "DEP002")
    assert [(d.severity, d.field_path, d.line, d.column) for d in found] == [
        ("warning", "", None, None),
        ("warning", "table_descriptor[0]", None, None),
        ("warning", "table_descriptor[0].optimization_parameters.adagrad", None, None),
    ]
    top, table, adagrad = (d.message for d in found)
    assert "8 (length-delimited), reserved: was output_layout" in top
    assert "9 (varint)" in table and "reserved" not in table
    assert "1 (32-bit), reserved: was initial_accumulator" in adagrad
    assert "AdagradParameters" in adagrad


@pytest.mark.parametrize("with_program_content", [False, True])
def test_known_fields_and_program_content_are_clean(
    tmp_path: Path, with_program_content: bool
) -> None:
    config = _config()
    if with_program_content:
        # The HLO computations (HloModuleProto field 3) are deliberately undeclared.
        udp = config.table_descriptor[0].optimization_parameters.user_defined_program
        udp.program.MergeFromString(b"\x1a\x00")
    path = tmp_path / "c.binpb"
    path.write_bytes(config.SerializeToString())
    assert findings(path, "DEP002") == []
