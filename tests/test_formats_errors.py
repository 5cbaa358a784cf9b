"""Bad input of every kind: one line `FILE:LINE:COL: error: ...` (or a byte offset), exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import golden

from tpuemb_cfg import InputError, load
from tpuemb_cfg.cli import main


def _convert(path: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["convert", str(path), "--to", "json", *extra])
    return result.exit_code, result.stderr


TEXT_CASES = [
    # (file content, line, column, words the message must contain)
    ('table_descriptor {\n  name: "a"\n  bogus_field: 3\n}\n', 3, 3,
     ['no field named "bogus_field"']),
    ("table_descriptor {\n  dimension: 99999999999\n}\n", 2, 14,
     ["out of range", "99999999999", "-2147483648..2147483647"]),
    ("table_descriptor {\n  vocabulary_size: 9223372036854775808\n}\n", 2, 20,
     ["out of range"]),
    ("table_descriptor {\n  optimization_parameters {\n    adagrad {}\n    adam {}\n  }\n}\n",
     4, 5, ['"adam" is specified along with field "adagrad"', 'oneof "parameters"']),
    ("mode: TRAINNG\n", 1, 7,
     ["no value named TRAINNG", "UNSPECIFIED, INFERENCE, TRAINING, BACKWARD_PASS_ONLY"]),
    ("table_descriptor {\n  optimization_parameters {\n    adagrad {\n"
     "      initial_accumulator: 0.1\n    }\n  }\n}\n", 4, 7,
     ['"AdagradParameters" has no field named "initial_accumulator"']),
    ('table_descriptor {\n  name: "a"\n', 2, 9, ['Expected "}"']),
    ("num_hosts: 1\nnum_hosts: 2\n", 2, 1, ['multiple "num_hosts"']),
]


@pytest.mark.parametrize(("content", "line", "column", "words"), TEXT_CASES)
def test_text_errors_name_file_line_and_column(tmp_path: Path, content: str, line: int,
                                               column: int, words: list[str]) -> None:
    path = tmp_path / "bad.pbtxt"
    path.write_text(content)
    code, err = _convert(path)
    assert code == 2
    assert err.count("\n") == 1, err  # exactly one line
    assert err.startswith(f"{path}:{line}:{column}: error: "), err
    for word in words:
        assert word in err
    assert "Traceback" not in err
    assert "tpuemb_cfg.proto" not in err  # users see TensorFlow's message names


def test_truncated_binary_reports_the_byte_offset(tmp_path: Path) -> None:
    data = golden("configs", "c04_features.binpb").read_bytes()
    path = tmp_path / "cut.binpb"
    path.write_bytes(data[:100])
    code, err = _convert(path)
    assert code == 2
    # The first table (key 0x0a, one-byte length L) is complete; the second one starts at
    # byte 2 + L and its length prefix promises more than the 100 bytes kept.
    assert data[0] == 0x0A and data[1] < 0x80
    second = 2 + data[1]
    assert second < 100 and second + 2 + data[second + 1] > 100
    assert err.startswith(f"{path}: byte {second}: error: field 1 runs past the end"), err


def test_truncated_inside_a_nested_message(tmp_path: Path) -> None:
    # table_descriptor { name: "abc" } with the name's length claiming 5 bytes: 0a 05 0a 05 61 62 63
    path = tmp_path / "nested.binpb"
    path.write_bytes(bytes([0x0A, 0x05, 0x0A, 0x05, 0x61, 0x62, 0x63]))
    code, err = _convert(path)
    assert code == 2
    assert f"{path}: byte 2: error: field 1 runs past the end" in err


@pytest.mark.parametrize("seed", range(20))
def test_random_binary_is_an_error_not_an_empty_message(tmp_path: Path, seed: int) -> None:
    import random

    data = random.Random(seed).randbytes(512)
    path = tmp_path / "random.bin"
    path.write_bytes(data)
    with pytest.raises(InputError) as info:
        load(path)
    assert info.value.offset is not None
    code, err = _convert(path)
    assert code == 2 and err.count("\n") == 1 and ": byte " in err


def test_known_field_with_wrong_wire_type(tmp_path: Path) -> None:
    # field 2 (mode, a varint enum) written as a 32-bit value
    path = tmp_path / "wire.pb"
    path.write_bytes(bytes([0x15, 1, 0, 0, 0]))
    code, err = _convert(path)
    assert code == 2
    assert f"{path}: byte 0: error: field mode (number 2) has wire type 32-bit" in err


def test_invalid_utf8_string_in_binary(tmp_path: Path) -> None:
    path = tmp_path / "utf.pb"
    path.write_bytes(bytes([0x0A, 0x04, 0x0A, 0x02, 0xFF, 0xFE]))
    code, err = _convert(path)
    assert code == 2 and f"{path}: byte 4: error: field name is not valid UTF-8" in err


def test_binary_file_with_a_text_extension(tmp_path: Path) -> None:
    path = tmp_path / "oops.pbtxt"
    path.write_bytes(golden("configs", "c04_features.binpb").read_bytes())
    code, err = _convert(path)
    assert code == 2 and ": byte " in err and "binary" in err


def test_json_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "table_descriptor": [{"name": "a",}]\n}')
    code, err = _convert(path)
    assert code == 2
    assert err.startswith(f"{path}:2:37: error: invalid JSON"), err


def test_json_unknown_field_is_located(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "table_descriptor": [\n    {"name": "a", "bogus": 1}\n  ]\n}')
    code, err = _convert(path)
    assert code == 2
    assert err.startswith(f"{path}:3:19: error: "), err
    assert 'no field named "bogus"' in err and err.count("\n") == 1


def test_missing_file_and_directory(tmp_path: Path) -> None:
    code, err = _convert(tmp_path / "nope.pbtxt")
    assert code == 2 and err == f"{tmp_path / 'nope.pbtxt'}: error: no such file\n"
    folder = tmp_path / "dir.pbtxt"
    folder.mkdir()
    code, err = _convert(folder)
    assert code == 2 and "is a directory" in err


def test_unknown_extension_asks_for_a_format(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("mode: TRAINING\n")
    code, err = _convert(path)
    assert code == 2 and "cannot tell the format" in err
    code, _ = _convert(path, "--from", "text")
    assert code == 0


def test_unknown_fields_are_not_silently_dropped_when_writing_text(tmp_path: Path) -> None:
    # A user-defined program whose HLO body (field 3 of HloModuleProto, undeclared here) is
    # carried as unknown fields: binary round-trips, text and JSON refuse.
    program = bytes([0x0A, 0x01, 0x70, 0x1A, 0x02, 0x08, 0x01])  # name "p", field 3 {1: 1}
    udp = bytes([0x0A, len(program)]) + program
    opt = bytes([0xC2, 0x01, len(udp)]) + udp  # field 24 (user_defined_program)
    table = bytes([0x2A, len(opt)]) + opt
    data = bytes([0x0A, len(table)]) + table
    path = tmp_path / "udp.binpb"
    path.write_bytes(data)
    assert load(path).SerializeToString() == data
    code, err = _convert(path)
    assert code == 2
    assert "user_defined_program.program" in err and "binary" in err
    out = tmp_path / "copy.pb"
    result = CliRunner().invoke(main, ["convert", str(path), "-o", str(out)])
    assert result.exit_code == 0 and out.read_bytes() == data


def test_failed_conversion_leaves_the_old_output_untouched(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("mode: NOPE\n")
    out = tmp_path / "out.json"
    out.write_text("precious")
    result = CliRunner().invoke(main, ["convert", str(bad), "-o", str(out)])
    assert result.exit_code == 2
    assert out.read_text() == "precious"
    assert [p.name for p in tmp_path.iterdir()] == sorted(["bad.pbtxt", "out.json"]) or \
        sorted(p.name for p in tmp_path.iterdir()) == ["bad.pbtxt", "out.json"]
