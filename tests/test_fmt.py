"""`tpuemb fmt`: one canonical layout, idempotent, comments kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, golden, golden_names, run_cli

MESSY = """\
# header comment, stays on top
num_hosts:2   # trailing comment on num_hosts
mode :TRAINING
table_descriptor <
  # about the table name
  name:'t0' dimension: 4 vocabulary_size: 10
  optimization_parameters { adagrad { } learning_rate { constant: 0.10000000149 } }
>
feature_descriptor { input_shape: [8, 2] }
# a comment after everything
"""

CANONICAL = """\
# header comment, stays on top
table_descriptor {
  # about the table name
  name: "t0"
  vocabulary_size: 10
  dimension: 4
  optimization_parameters {
    adagrad {
    }
    learning_rate {
      constant: 0.1
    }
  }
}
mode: TRAINING
num_hosts: 2  # trailing comment on num_hosts
feature_descriptor {
  input_shape: 8
  input_shape: 2
}
# a comment after everything
"""


def run_fmt(*args: str) -> tuple[int, str, str]:
    """``tpuemb fmt ARGS``: exit code, stdout, stderr."""
    result = run_cli("fmt", *args)
    return result.exit_code, result.stdout, result.stderr


def test_formats_to_the_canonical_layout_with_comments(tmp_path: Path) -> None:
    path = tmp_path / "c.pbtxt"
    path.write_text(MESSY)
    code, _, err = run_fmt(str(path))
    assert code == 0 and "reformatted" in err
    assert path.read_text() == CANONICAL
    code, _, err = run_fmt("--check", str(path))  # idempotent
    assert code == 0 and err == ""
    assert path.read_text() == CANONICAL


def test_check_and_diff_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "c.pbtxt"
    path.write_text(MESSY)
    code, _, err = run_fmt("--check", str(path))
    assert code == 1 and f"would reformat {path}" in err
    code, out, _ = run_fmt("--diff", str(path))
    assert code == 1
    assert "-num_hosts:2   # trailing comment on num_hosts" in out
    assert "+num_hosts: 2  # trailing comment on num_hosts" in out
    assert path.read_text() == MESSY


@pytest.mark.parametrize("name", golden_names("configs", "*.pbtxt", exclude="state_variable"))
def test_tensorflow_text_is_already_canonical(name: str) -> None:
    code, _, err = run_fmt("--check", str(golden("configs", name)))
    assert code == 0, err


def test_examples_are_canonical() -> None:
    files = sorted(str(p) for p in EXAMPLES.glob("*.pbtxt"))
    assert len(files) >= 3
    code, _, err = run_fmt("--check", *files)
    assert code == 0, err


def test_json_files_get_protobufs_layout(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"num_hosts": 2, "mode": "TRAINING"}')
    assert run_fmt(str(path))[0] == 0
    assert path.read_text() == '{\n  "mode": "TRAINING",\n  "num_hosts": 2\n}'


def test_unparsable_file_is_reported_and_left_alone(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("num_hosts: two\n")
    good = tmp_path / "good.pbtxt"
    good.write_text("num_hosts:  2\n")
    code, _, err = run_fmt(str(bad), str(good))
    assert code == 2
    assert err.startswith(f"{bad}:1:12: error:")
    assert bad.read_text() == "num_hosts: two\n"
    assert good.read_text() == "num_hosts: 2\n"  # the other file is still formatted


def test_binary_files_are_refused(tmp_path: Path) -> None:
    code, _, err = run_fmt(str(golden("configs", "c03_legacy.binpb")))
    assert code == 2 and "text and JSON" in err
