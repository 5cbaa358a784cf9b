"""`tpuemb validate --fix [--diff]`: tag renumbering, legacy conversion, explicit accumulation."""

from __future__ import annotations

from pathlib import Path

from rulecheck import HEADER, adagrad_table, invoke, write_file

from tpuemb_cfg.formats.io import load, read_source
from tpuemb_cfg.model.derived import derive
from tpuemb_cfg.validation.fix import fix_source
from tpuemb_cfg.validation.validator import validate

TAGS = (
    "# tags 0, 1 and 3: 3 must become 2\n"
    + HEADER
    + adagrad_table("ads", "learning_rate { dynamic { } }  # tag 0")
    + adagrad_table("video", "learning_rate { dynamic { tag: 1 } }")
    + adagrad_table("news", "learning_rate { dynamic { tag: 3 } }  # keep this comment")
    + "feature_descriptor { table_id: 0 input_shape: 16 }\n"
    + "feature_descriptor { table_id: 1 input_shape: 16 }\n"
    + "feature_descriptor { table_id: 2 input_shape: 16 }\n"
)

LEGACY = """\
mode: TRAINING
num_hosts: 1
num_tensor_cores: 8
batch_size_per_tensor_core: 32
table_descriptor {
  name: "a"
  vocabulary_size: 100
  dimension: 8
  num_features: 2
  optimization_parameters {
    learning_rate { constant: 0.1 } adagrad { } gradient_accumulation_status: ENABLED
  }
}
table_descriptor {
  name: "b"
  vocabulary_size: 100
  dimension: 4
  num_features: 1
  optimization_parameters {
    learning_rate { constant: 0.1 } adagrad { } gradient_accumulation_status: ENABLED
  }
}
"""


def lr_tags(path: Path) -> list[int]:
    config = load(str(path))
    return [t.optimization_parameters.learning_rate.dynamic.tag for t in config.table_descriptor]


def test_fix_renumbers_tags_keeps_comments_and_prints_mapping(tmp_path: Path) -> None:
    path = write_file(tmp_path, TAGS)
    result = invoke("validate", "--fix", str(path))
    assert result.exit_code == 0, result.output
    assert "renumbered dynamic tags (old -> new): 3 -> 2" in result.output
    assert lr_tags(path) == [0, 1, 2]
    text = path.read_text()
    assert "learning_rate { dynamic { tag: 2 } }  # keep this comment" in text
    assert text.startswith("# tags 0, 1 and 3")
    assert validate(str(path), select=["TAG001", "TAG002"]) == []


def test_fix_negative_tags_and_implicit_step_counter(tmp_path: Path) -> None:
    text = """\
table_descriptor { name: "a"
  optimization_parameters { learning_rate { dynamic { tag: -1 } } adagrad { } } }
table_descriptor { name: "b" optimization_parameters {
  learning_rate { constant: 0.1 }
  frequency_aware_adagrad { initial_accumulator_value: 0.1 }
} }
"""
    path = write_file(tmp_path, text)
    source = read_source(str(path))
    result = fix_source(source, {"tags"})
    assert result.tag_mapping == {-1: 0, 0: 1}
    assert result.text is not None
    assert (
        "frequency_aware_adagrad { step_counter { tag: 1 } initial_accumulator_value: 0.1 }"
        in result.text
    )
    fixed = result.message
    assert fixed.table_descriptor[0].optimization_parameters.learning_rate.dynamic.tag == 0
    sc = fixed.table_descriptor[1].optimization_parameters.frequency_aware_adagrad.step_counter
    assert sc.tag == 1
    assert sorted(derive(fixed).tag_map) == [0, 1]


def test_fix_tag_zero_written_explicitly_and_angle_brackets(tmp_path: Path) -> None:
    text = """\
table_descriptor { name: "a"
  optimization_parameters { learning_rate { dynamic < tag: 0 > } adagrad { } } }
table_descriptor { name: "b"
  optimization_parameters { learning_rate { dynamic < > } adagrad { } } }
table_descriptor { name: "c"
  optimization_parameters { learning_rate { dynamic { tag: -5 } } adagrad { } } }
"""
    result = fix_source(read_source(str(write_file(tmp_path, text))), {"tags"})
    assert result.tag_mapping == {-5: 0, 0: 1}
    assert result.text is not None
    assert "dynamic < tag: 1 >" in result.text
    lines = result.text.splitlines()
    assert "dynamic < tag: 1 > }" in lines[1] and "dynamic < tag: 1 > }" in lines[3]
    assert "dynamic { tag: 0 }" in result.text


def test_fix_legacy_to_feature_descriptors(tmp_path: Path) -> None:
    # TensorFlow's own rewrite: one feature per table of [B * num_features] (64 and 32 here).
    path = write_file(tmp_path, LEGACY)
    before = derive(load(str(path)))
    result = invoke("validate", "--fix", str(path))
    assert result.exit_code == 0, result.output
    assert "batch_size_per_tensor_core 32 and num_features to one feature" in result.output
    assert "input shapes [64], [32]" in result.output
    assert "training code does not change" in result.output
    config = load(str(path))
    assert config.batch_size_per_tensor_core == 0
    assert [t.num_features for t in config.table_descriptor] == [0, 0]
    assert [(f.table_id, list(f.input_shape)) for f in config.feature_descriptor] == [
        (0, [64]),
        (1, [32]),
    ]
    after = derive(config)
    assert after.style == "feature"
    # Every table keeps its activation shape: [B * n_t, dimension], legacy and converted.
    assert [shape for _, shape in before.activation_shapes] == [(64, 8), (32, 4)]
    assert [shape for _, shape in after.activation_shapes] == [(64, 8), (32, 4)]
    assert "num_features" not in path.read_text()


def test_fix_explicit_accumulation(tmp_path: Path) -> None:
    text = """\
table_descriptor {
  name: "a"
  optimization_parameters {
    adagrad { }
  }
}
table_descriptor {
  name: "b"
  optimization_parameters { gradient_accumulation_status: UNSPECIFIED adagrad { } }
}
table_descriptor {
  name: "c"
  optimization_parameters { adagrad { } gradient_accumulation_status: DISABLED }
}
"""
    path = write_file(tmp_path, text)
    result = invoke("validate", "--fix", "--select", "ACC002", str(path))
    assert result.exit_code == 0, result.output
    config = load(str(path))
    statuses = [
        t.optimization_parameters.gradient_accumulation_status for t in config.table_descriptor
    ]
    assert statuses == [1, 1, 2]
    lines = path.read_text().splitlines()
    assert lines[2:5] == [
        "  optimization_parameters {",
        "    gradient_accumulation_status: ENABLED",
        "    adagrad { }",
    ]
    assert (
        lines[9]
        == "  optimization_parameters { gradient_accumulation_status: ENABLED adagrad { } }"
    )


def test_fix_respects_selection(tmp_path: Path) -> None:
    text = TAGS.replace("    gradient_accumulation_status: ENABLED\n", "")
    path = write_file(tmp_path, text)
    result = invoke("validate", "--fix", "--select", "TAG", str(path))
    assert result.exit_code == 0, result.output
    config = load(str(path))
    assert lr_tags(path) == [0, 1, 2]
    assert [
        t.optimization_parameters.gradient_accumulation_status for t in config.table_descriptor
    ] == [0, 0, 0]


def test_diff_does_not_write(tmp_path: Path) -> None:
    path = write_file(tmp_path, TAGS)
    result = invoke("validate", "--fix", "--diff", str(path))
    assert path.read_text() == TAGS
    assert "-    learning_rate { dynamic { tag: 3 } }  # keep this comment" in result.output
    assert "+    learning_rate { dynamic { tag: 2 } }  # keep this comment" in result.output
    assert result.exit_code == 1  # the file on disk still has the gap


def test_fix_binary_file(tmp_path: Path) -> None:
    config = load(str(write_file(tmp_path, TAGS)))
    binary = tmp_path / "c.binpb"
    binary.write_bytes(config.SerializeToString())
    result = invoke("validate", "--fix", str(binary))
    assert result.exit_code == 0, result.output
    assert lr_tags(binary) == [0, 1, 2]


def test_nothing_to_fix_leaves_file_untouched(tmp_path: Path) -> None:
    text = TAGS.replace("tag: 3", "tag: 2")
    path = write_file(tmp_path, text)
    mtime = path.stat().st_mtime_ns
    result = invoke("validate", "--fix", str(path))
    assert result.exit_code == 0
    assert path.stat().st_mtime_ns == mtime and path.read_text() == text


def test_fix_unparsable_file_reports_parse_error(tmp_path: Path) -> None:
    path = write_file(tmp_path, "table_descriptor {\n")
    result = invoke("validate", "--fix", str(path))
    assert result.exit_code == 2
    assert path.read_text() == "table_descriptor {\n"


def test_fix_that_cannot_be_written_is_exit_2(tmp_path: Path, monkeypatch) -> None:
    import tpuemb_cfg.validation.fix
    from tpuemb_cfg.base.errors import InputError

    def refuse(source, fixes=None):  # type: ignore[no-untyped-def]
        raise InputError("the fixed file would not parse back", path=source.path)

    monkeypatch.setattr(tpuemb_cfg.validation.fix, "fix_source", refuse)
    path = write_file(tmp_path, TAGS)
    result = invoke("validate", "--fix", str(path))
    assert result.exit_code == 2
    assert f"{path}: error: the fixed file would not parse back (not fixed)" in result.output
    assert path.read_text() == TAGS


def test_fix_legacy_moves_the_comments_of_deleted_fields(tmp_path: Path) -> None:
    text = (LEGACY.replace("batch_size_per_tensor_core: 32", "batch_size_per_tensor_core: 32  # B")
            .replace("num_features: 2", "num_features: 2  # query and title"))
    path = write_file(tmp_path, text)
    result = invoke("validate", "--fix", "--select", "MODE005", str(path))
    assert result.exit_code == 0, result.output
    fixed = path.read_text()
    # No comment is left alone on a line where its field was; each follows its replacement.
    assert "  input_shape: 64  # query and title\n" in fixed
    assert "feature_descriptor {  # B\n" in fixed
    assert fixed.count("#") == 2 and "num_features" not in fixed
    assert [list(f.input_shape) for f in load(str(path)).feature_descriptor] == [[64], [32]]


def test_fix_legacy_says_why_it_cannot_convert(tmp_path: Path) -> None:
    # 2,000,000,000 x 2 overflows TensorFlow's 32-bit product: nothing to mirror, but a note.
    text = LEGACY.replace("batch_size_per_tensor_core: 32",
                          "batch_size_per_tensor_core: 2000000000")
    path = write_file(tmp_path, text)
    result = invoke("validate", "--fix", "--select", "MODE005", str(path))
    assert path.read_text() == text
    assert ("legacy style not converted to feature descriptors (MODE005): table_descriptor[0]: "
            "batch_size_per_tensor_core 2000000000 x num_features 2 = 4,000,000,000 exceeds "
            "2^31 - 1") in result.output
    zero = LEGACY.replace("num_features: 1", "num_features: 0")
    result = invoke("validate", "--fix", "--select", "MODE005", str(write_file(tmp_path, zero)))
    assert "table_descriptor[1] has num_features 0" in result.output
