"""Round trips against the configurations TensorFlow 2.21 wrote (shared/golden/configs)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import golden

from tpuemb_cfg import StateVariableSpecification, TPUEmbeddingConfiguration, load
from tpuemb_cfg.cli import main
from tpuemb_cfg.formats.io import serialize

SUFFIX = {"binary": "binpb", "text": "pbtxt", "json": "json"}


def _cases() -> list[dict[str, object]]:
    manifest = golden("configs", "cases.json")
    return list(json.loads(manifest.read_text())["cases"])


def _message_type(case: dict[str, object]) -> type:
    if case["message"] == "StateVariableSpecification":
        return StateVariableSpecification
    return TPUEmbeddingConfiguration


try:
    CASES = _cases()
except pytest.fail.Exception:  # golden data absent: the tests below fail in golden(...)
    CASES = [{"name": "no-golden-data", "message": "TPUEmbeddingConfiguration"}]


@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c["name"]))
@pytest.mark.parametrize("source", ["binary", "text", "json"])
def test_every_format_reproduces_tensorflow_bytes(case: dict[str, object], source: str) -> None:
    name = str(case["name"])
    message = load(golden("configs", f"{name}.{SUFFIX[source]}"), message_type=_message_type(case))
    for target in ("binary", "text", "json"):
        expected = golden("configs", f"{name}.{SUFFIX[target]}").read_bytes()
        assert serialize(message, target) == expected, f"{name}: {source} -> {target}"


def test_manifest_hashes_match_the_binary_files() -> None:
    import hashlib

    for case in _cases():
        data = golden("configs", f"{case['name']}.binpb").read_bytes()
        assert len(data) == case["bytes"]
        assert hashlib.sha256(data).hexdigest() == case["sha256"]


def test_float32_max_json_is_read_although_protobuf_json_rejects_it() -> None:
    # c17's JSON spells float32 max as 3.4028235e+38; protobuf's own JSON parser refuses it.
    message = load(golden("configs", "c17_float_extremes.json"))
    assert message.table_descriptor[0].optimization_parameters.adam.beta1 == pytest.approx(
        3.4028234663852886e38)


@pytest.mark.parametrize("target", ["binary", "text", "json"])
def test_cli_convert_writes_tensorflow_bytes(tmp_path, target: str) -> None:
    out = tmp_path / f"out.{SUFFIX[target]}"
    result = CliRunner().invoke(
        main, ["convert", str(golden("configs", "c04_features.pbtxt")), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == golden("configs", f"c04_features.{SUFFIX[target]}").read_bytes()


def test_cli_convert_to_stdout_with_explicit_format() -> None:
    result = CliRunner().invoke(
        main, ["convert", str(golden("configs", "c03_legacy.binpb")), "--to", "json"])
    assert result.exit_code == 0
    assert result.stdout_bytes == golden("configs", "c03_legacy.json").read_bytes()


def test_stdin_input_is_text_by_default() -> None:
    text = golden("configs", "c03_legacy.pbtxt").read_bytes()
    result = CliRunner().invoke(main, ["convert", "-", "--to", "binary", "-o", "-"], input=text)
    assert result.exit_code == 0
    assert result.stdout_bytes == golden("configs", "c03_legacy.binpb").read_bytes()
