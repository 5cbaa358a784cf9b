"""``tpuemb validate`` and ``tpuemb inspect`` of a spec (.py/.toml): compiled, findings in the spec.

Each spec below builds one defect the validator reports on TensorFlow's configuration (weight
clipping with lower > upper, CLIP001; an empty table name, TBL002) at a known line; the findings
must point at that line of the spec (the optimizer's call for a finding about the optimizer, the
table's for one about the table), or say they are in the compiled configuration.
"""

from __future__ import annotations

import json
from pathlib import Path

from rulecheck import invoke, write_file

from tpuemb_cfg.session import validate

PY = """\
from tpuemb_cfg.embedding import SGD, Adagrad, FeatureConfig, TableConfig

clipped = Adagrad(0.1, clip_weight_min=1.0, clip_weight_max=-1.0)
user = TableConfig(1000, 8, name="user", optimizer=clipped)
item = TableConfig(500, 8, name="")  # the global optimizer
feature_config = {
    "user_id": FeatureConfig(user),
    "item_id": FeatureConfig(item),
}
optimizer = SGD(0.05)
per_replica_batch_size = 16
num_hosts = 2
"""

TOML = """\
num_hosts = 2
per_replica_batch_size = 16

[optimizers.clipped]
type = "Adagrad"
learning_rate = 0.1
clip_weight_min = 1.0
clip_weight_max = -1.0

[tables.user]
vocabulary_size = 1000
dim = 8
optimizer = "clipped"

[tables.item]
name = ""
vocabulary_size = 500
dim = 8
optimizer = {type = "SGD", learning_rate = 0.05}

[features.user_id]
table = "user"

[features.item_id]
table = "item"
"""


def test_a_python_spec_is_validated_with_its_lines(tmp_path: Path) -> None:
    path = write_file(tmp_path, PY, "model.py")
    result = invoke("validate", str(path))
    assert result.exit_code == 1, result.output  # TBL002 is an error
    lines = result.output.splitlines()
    # The optimizer's finding at its call (line 3, column 11), the table's at its call (5, 8).
    assert any(line.startswith(f"{path}:3:11: warning[CLIP001]") for line in lines), lines
    assert any(line.startswith(f"{path}:5:8: error[TBL002]") for line in lines), lines


def test_a_toml_spec_is_validated_with_its_lines(tmp_path: Path) -> None:
    path = write_file(tmp_path, TOML, "model.toml")
    found = validate(str(path))
    by_rule = {d.rule: d for d in found}
    assert (by_rule["CLIP001"].line, by_rule["CLIP001"].column) == (4, 1)  # [optimizers.clipped]
    assert (by_rule["TBL002"].line, by_rule["TBL002"].column) == (15, 1)  # [tables.item]
    assert by_rule["TBL002"].path == str(path)
    assert by_rule["CLIP001"].field_path.startswith("table_descriptor[1].optimization_parameters")


def test_findings_without_a_spec_line_say_where_they_are(tmp_path: Path) -> None:
    path = write_file(tmp_path, PY, "model.py")
    found = validate(str(path), select=["SIZE002"], show_derived=True)
    assert len(found) == 1 and found[0].line is None
    assert "about the whole configuration compiled from this spec" in found[0].message


def test_disable_comments_on_the_spec_line(tmp_path: Path) -> None:
    # A disable comment on the optimizer's line silences CLIP001, which is placed there.
    text = PY.replace("clip_weight_max=-1.0)", "clip_weight_max=-1.0)  # tpuemb: disable=CLIP001")
    path = write_file(tmp_path, text, "model.py")
    assert "CLIP001" not in {d.rule for d in validate(str(path))}
    assert "CLIP001" in {d.rule for d in validate(str(write_file(tmp_path, PY, "other.py")))}


def test_a_spec_that_does_not_compile_is_parse001(tmp_path: Path) -> None:
    path = write_file(tmp_path, PY.replace("TableConfig(500, 8", "TableConfig(-5, 8"), "bad.py")
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert f"{path}:5:" in result.output and "PARSE001" in result.output
    assert "vocabulary_size" in result.output


def test_fix_leaves_a_spec_alone(tmp_path: Path) -> None:
    path = write_file(tmp_path, PY, "model.py")
    result = invoke("validate", "--fix", str(path))
    assert "a spec is not rewritten by --fix" in result.output
    assert path.read_text() == PY


def test_inspect_a_spec(tmp_path: Path) -> None:
    path = write_file(tmp_path, TOML.replace('name = ""\n', ""), "model.toml")
    result = invoke("inspect", "--json", str(path))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["valid"] is True
    assert [t["name"] for t in summary["tables"]] == ["item", "user"]
    broken = write_file(tmp_path, TOML, "broken.toml")
    result = invoke("inspect", str(broken))
    assert result.exit_code == 1
    assert f"{broken}:15:1: error[TBL002]" in result.output


def test_the_examples_validate_clean(tmp_path: Path) -> None:
    from conftest import ROOT

    for spec in ("examples/specs/ranking.py", "examples/specs/video_retrieval.toml",
                 "examples/models/dlrm_criteo.py"):
        errors = [d for d in validate(str(ROOT / spec)) if d.severity == "error"]
        assert errors == [], (spec, errors)


def test_convert_says_a_spec_needs_compiling(tmp_path: Path) -> None:
    path = write_file(tmp_path, PY, "model.py")
    result = invoke("convert", str(path), "--to", "json")
    assert result.exit_code == 2
    assert "is a spec (the input of tpuemb compile), not a configuration" in result.output
    assert f"tpuemb compile {path} -o {tmp_path / 'model'}.pbtxt" in result.output


KERAS_RS = """\
from dataclasses import dataclass


@dataclass
class TableConfig:  # keras-rs' TableConfig, by its fields
    name: str
    vocabulary_size: int
    embedding_dim: int
    optimizer: object = "adam"
    combiner: str = "mean"
    placement: str = "auto"


@dataclass
class FeatureConfig:  # keras-rs' FeatureConfig
    name: str
    table: TableConfig
    input_shape: tuple
    output_shape: tuple


def table(name, rows):
    return TableConfig(name, rows, 16, optimizer="sgd")


user = TableConfig("user", 1000, 16, optimizer="sgd")
item = table("", 500)
feature_config = {
    "user_id": FeatureConfig("user_id", user, (128, 1), (128, 16)),
    "item_id": FeatureConfig("item_id", item, (128, 1), (128, 16)),
}
num_replicas = 8
"""


def test_keras_rs_objects_get_the_spec_line_that_built_them(tmp_path: Path) -> None:
    from tpuemb_cfg.spec_check import compile_spec

    path = write_file(tmp_path, KERAS_RS, "model.py")
    # Features are visited in sorted key order: item_id (table 0), user_id (table 1). Each
    # object is placed at the call that built it, the innermost in the spec as for tpuemb's own
    # objects: the helper's TableConfig call (line 23) for item, the TableConfig call of line 26
    # for user, the FeatureConfig calls of lines 29 and 30.
    positions = compile_spec(path).locations.positions
    assert positions["table_descriptor[0]"] == (23, 12)
    assert positions["table_descriptor[1]"] == (26, 8)
    assert positions["feature_descriptor[0]"] == (30, 16)
    assert positions["feature_descriptor[1]"] == (29, 16)
    # The empty name the helper gave item (TBL002) is found at line 23, in validate and inspect.
    found = [d for d in validate(str(path)) if d.rule == "TBL002"]
    assert [(d.line, d.column) for d in found] == [(23, 12)], found
    assert "compiled from this spec" not in found[0].message
    assert f"{path}:23:12: error[TBL002]" in invoke("inspect", str(path)).output


def test_the_trace_is_removed_and_chained(tmp_path: Path) -> None:
    import sys

    from tpuemb_cfg.embedding import origins

    path = write_file(tmp_path, KERAS_RS, "model.py")
    seen: list[str] = []

    def outer(frame, event, arg):  # type: ignore[no-untyped-def]
        seen.append(frame.f_code.co_filename)

    before = sys.gettrace()
    sys.settrace(outer)
    try:
        with origins.recording(str(path), lambda obj: True):
            from tpuemb_cfg.embedding.spec import load_spec

            load_spec(str(path))
        assert sys.gettrace() is outer
    finally:
        sys.settrace(before)
    assert str(path) in seen  # the trace function that was there still saw the spec run
