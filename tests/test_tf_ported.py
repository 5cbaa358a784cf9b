"""TensorFlow's own tests of this API, ported: same inputs, TensorFlow 2.21's answers.

The cases are TensorFlow 2.21's ``tensorflow/python/tpu/tpu_embedding_v2_utils_test.py`` (every
case but one that has no counterpart here, listed in the data) and the configuration-level
cases of its TPU embedding tests (``tensorflow/python/tpu/tests/``: correctness, invalid and
valid input, sequence features, optimizers, initialization, checkpoint, model-parallel
strategy), plus TensorFlow's SparseCore classes. Every expected value (configuration bytes,
exception class, attribute, equality, ``repr``) was computed by TensorFlow itself, in a separate
environment, by ``data/tf/generate.py``; the cases are replayed here with tpuemb's classes
(``tfcases.py``). Error messages may differ; exception classes may not.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import tfcases
from conftest import run_cli

from tpuemb_cfg import embedding as emb
from tpuemb_cfg import validate
from tpuemb_cfg.formats.io import serialize
from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

UTILS = tfcases.load("utils_cases.json")
TPU = tfcases.load("tpu_cases.json")
COERCION = tfcases.load("coercion_cases.json")
SIDE = tfcases.tpuemb_side()
VALIDATING = tfcases.tpuemb_side(validate=True)


def _ids(cases: list[dict]) -> list[str]:
    return [c["name"] for c in cases]


def test_data_was_computed_by_tensorflow_2_21() -> None:
    for data in (UTILS, TPU, COERCION):
        assert data["tensorflow"].startswith("2.21.")
        assert data["protobuf"] == "6.31.1"
    assert len(UTILS["cases"]) == 54
    assert len(TPU["cases"]) == 57
    assert len(COERCION["cases"]) == 62
    # The one case of the utils test without a counterpart (device names of a TPUStrategy).
    assert list(UTILS["not_ported"]) == [
        "TPUEmbeddingUtilityFunctionTest.test_sort_device_spec_strings"
    ]


@pytest.mark.parametrize("case", UTILS["cases"], ids=_ids(UTILS["cases"]))
def test_utils_case(case: dict) -> None:
    got = tfcases.run(case, SIDE)
    assert tfcases.same_outcome(case["expect"], got) is None, (case["expect"], got)


@pytest.mark.parametrize("case", COERCION["cases"], ids=_ids(COERCION["cases"]))
def test_python_values_as_tensorflow_takes_them(case: dict) -> None:
    """Issue 13's values (bools as numbers, truth values of flags, ints and names for enums,
    NumPy scalars, odd shapes and names): TensorFlow's bytes or exception class."""
    got = tfcases.run(case, SIDE)
    assert tfcases.same_outcome(case["expect"], got) is None, (case["expect"], got)


@pytest.mark.parametrize("case", TPU["cases"], ids=_ids(TPU["cases"]))
def test_tpu_case(case: dict) -> None:
    got = tfcases.run(case, SIDE)
    assert tfcases.same_outcome(case["expect"], got) is None, (case["expect"], got)


@pytest.mark.parametrize("case", TPU["cases"], ids=_ids(TPU["cases"]))
def test_tpu_case_passes_validation(case: dict) -> None:
    """TensorFlow's TPU tests run these configurations on TPUs: build_config's validation,
    on by default, must accept every one TensorFlow builds."""
    got = tfcases.run(case, VALIDATING)
    assert tfcases.same_outcome(case["expect"], got) is None, (case["expect"], got)


def _case(cases: dict, name: str) -> dict:
    return next(c for c in cases["cases"] if c["name"] == name)


@pytest.mark.parametrize("name", ["same_config_different_instantiations_dynamic",
                                  "same_config_different_instantiations_constant"])
def test_same_config_different_instantiations(name: str) -> None:
    """Two instantiations from the same description give the same configuration."""
    case = _case(TPU, name)
    first, second = tfcases.run(case, SIDE), tfcases.run(case, SIDE)
    assert first["config"] == second["config"] == case["expect"]["config"]


def test_learning_rate_tag_order() -> None:
    config = TPUEmbeddingConfiguration.FromString(
        bytes.fromhex(_case(TPU, "learning_rate_tag_order")["expect"]["config"]))
    for i, table in enumerate(config.table_descriptor):
        assert table.optimization_parameters.learning_rate.dynamic.tag == i


def test_equal_optimizers_share_a_tag_only_when_identical_callables() -> None:
    """Value equality of optimizers does not merge tags: tags follow the callables."""
    def lr() -> float:
        return 0.1

    tables = [emb.TableConfig(8, 2, optimizer=emb.SGD(lr), name=n) for n in ("a", "b")]
    compiled = emb.build_config([emb.FeatureConfig(t) for t in tables],
                                per_replica_batch_size=4)
    assert tables[0].optimizer == tables[1].optimizer
    assert compiled.dynamic_learning_rates == [lr]


def test_no_truncate() -> None:
    """TPUEmbeddingConfigurationTest.test_no_truncate: TensorFlow logs a 500-table
    configuration line by line; tpuemb's text output is TensorFlow's, line for line."""
    data = tfcases.load("no_truncate.json")
    config = TPUEmbeddingConfiguration.FromString(bytes.fromhex(data["config"]))
    text = serialize(config, "text").decode()
    assert hashlib.sha256(text.encode()).hexdigest() == data["text_sha256"]
    lines = text.splitlines()
    assert len(lines) == data["text_lines"]
    assert "table_499" in text
    assert max(len(line) for line in lines) == data["longest_line"] < data["truncate_length"]


# -- a TensorFlow-written user-defined program (element types by name) -----------------------------

PROGRAM_TEXT = tfcases.DATA / "user_program.pbtxt"
PROGRAM_BINARY = tfcases.DATA / "user_program.binpb"


def test_user_program_parses_with_element_types_by_name() -> None:
    from tpuemb_cfg.formats.io import load

    config = load(str(PROGRAM_TEXT))
    assert config.SerializeToString() == PROGRAM_BINARY.read_bytes()
    shape = config.table_descriptor[0].optimization_parameters.user_defined_program.program
    assert [p.element_type for p in shape.host_program_shape.parameters] == [11, 11, 11, 11]
    assert shape.host_program_shape.result.element_type == 13  # TUPLE


def test_user_program_validates_and_the_program_rules_run() -> None:
    diagnostics = validate(str(PROGRAM_TEXT))
    assert not [d for d in diagnostics if str(getattr(d.severity, "value", d.severity)) == "error"]
    # The arity rules read the program: breaking its signature is reported.
    from tpuemb_cfg.formats.io import load

    config = load(str(PROGRAM_TEXT))
    del config.table_descriptor[0].optimization_parameters.user_defined_program.program \
        .host_program_shape.result.tuple_shapes[1]
    assert "OPT040" in {d.rule for d in validate(config)}


@pytest.mark.parametrize(("source", "target"), [
    (PROGRAM_TEXT, PROGRAM_BINARY), (PROGRAM_BINARY, PROGRAM_TEXT),
])
def test_user_program_converts_byte_for_byte(source: Path, target: Path, tmp_path: Path) -> None:
    out = tmp_path / f"out{target.suffix}"
    result = run_cli("convert", str(source), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == target.read_bytes()


def test_user_program_survives_json(tmp_path: Path) -> None:
    as_json = tmp_path / "program.json"
    back = tmp_path / "program.pbtxt"
    assert run_cli("convert", str(PROGRAM_TEXT), "-o", str(as_json)).exit_code == 0
    assert b'"elementType": "F32"' in as_json.read_bytes() or b'"element_type": "F32"' in \
        as_json.read_bytes()
    assert run_cli("convert", str(as_json), "-o", str(back)).exit_code == 0
    assert back.read_bytes() == PROGRAM_TEXT.read_bytes()


def test_user_program_text_is_already_formatted() -> None:
    result = run_cli("fmt", "--check", str(PROGRAM_TEXT))
    assert result.exit_code == 0, result.output


def test_unknown_element_type_numbers_survive_text() -> None:
    """An element type a newer XLA adds (a number this schema does not name) round-trips."""
    from tpuemb_cfg.formats.io import load

    config = load(str(PROGRAM_BINARY))
    program = config.table_descriptor[1].optimization_parameters.user_defined_program.program
    program.host_program_shape.parameters[0].element_type = 99  # type: ignore[assignment]
    text = serialize(config, "text")
    assert b"element_type: 99" in text
    again = TPUEmbeddingConfiguration()
    from google.protobuf import text_format

    text_format.Parse(text.decode(), again)
    assert again == config
