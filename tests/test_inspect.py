"""`tpuemb inspect`: validation like `validate`, legacy feature counts, host lines, left-out
features."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import EXAMPLES, run_cli

from tpuemb_cfg.validation.inspect_summary import format_summary, summarize

INVALID = """\
table_descriptor { name: "t" vocabulary_size: 10 dimension: 8 optimization_parameters {
  stochastic_gradient_descent {} learning_rate { constant: 0.1 } } }
mode: TRAINING num_hosts: 4 num_tensor_cores: 4
feature_descriptor { input_shape: 8 }
feature_descriptor { table_id: 3 input_shape: 8 }
feature_descriptor { input_shape: 0 }
"""


def test_invalid_configuration_exits_1_with_the_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.pbtxt"
    path.write_text(INVALID)
    result = run_cli("inspect", str(path))
    assert result.exit_code == 1
    assert "1 tables, 3 features" in result.stdout
    assert f"{path}:5:22: error[FEAT001]" in result.stderr
    assert f"{path}:6:22: error[FEAT003]" in result.stderr
    assert "does not validate" in result.stderr
    # The derived batch counts feature 0 only, and says which features it left out and why.
    assert "note: feature_descriptor[1] is left out of the derived batch size" in result.stdout
    assert "table_id 3 is out of range (1 table(s))" in result.stdout
    assert "note: feature_descriptor[2] is left out" in result.stdout


def test_invalid_configuration_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.pbtxt"
    path.write_text(INVALID)
    result = run_cli("inspect", str(path), "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["valid"] is False
    assert [d["rule"] for d in data["diagnostics"]] == ["FEAT001", "FEAT003"]
    assert data["left_out_features"] == [
        {"index": 1, "reason": "table_id 3 is out of range (1 table(s))"},
        {"index": 2, "reason": "input_shape [0] has a dimension <= 0"},
    ]


def test_valid_configuration_exits_0() -> None:
    result = run_cli("inspect", str(EXAMPLES / "specs" / "ranking.pbtxt"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["valid"] is True and data["diagnostics"] == []


def test_legacy_features_are_counted() -> None:
    result = run_cli("inspect", str(EXAMPLES / "video_legacy.pbtxt"))
    assert result.exit_code == 0, result.output
    # num_features 2 + 1 + 1 + 1; TensorFlow's conversion gives one feature per table.
    assert "4 tables, 5 features" in result.stdout
    assert "0      video          2             [512]        [512, 48]" in result.stdout
    data = json.loads(run_cli("inspect", str(EXAMPLES / "video_legacy.pbtxt"), "--json").stdout)
    assert data["feature_count"] == 5
    assert [(f["table_id"], f["num_features"], f["input_shape"]) for f in data["features"]] == [
        (0, 2, [512]), (1, 1, [256]), (2, 1, [256]), (3, 1, [256])]


def test_host_lines_do_not_repeat() -> None:
    # 26 tables on 16 hosts: the hosts differ by the odd row of each table (a few KiB), which
    # the JSON keeps and the text groups under one line.
    tables = "".join(
        f'table_descriptor {{ name: "t{i}" vocabulary_size: {1_000_003 + 7 * i} dimension: 64 '
        "optimization_parameters { adagrad {} learning_rate { constant: 0.1 } } }\n"
        for i in range(26)
    )
    features = "".join(f"feature_descriptor {{ table_id: {i} input_shape: 64 }}\n"
                       for i in range(26))
    from tpuemb_cfg.formats.io import load

    config = load((tables + "num_hosts: 16 num_tensor_cores: 64\n" + features).encode(), "text")
    summary = summarize(config)
    assert len(summary["hosts"]) > 1
    host_lines = [line for line in format_summary(summary).splitlines()
                  if line.startswith(("  host ", "  hosts "))]
    assert len(host_lines) == len(set(line.split(": ", 1)[1] for line in host_lines))
    assert host_lines == ["  hosts 0-15: 1.2 GiB (estimate 1.2 GiB) each"]
