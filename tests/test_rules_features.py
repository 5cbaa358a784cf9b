"""FEAT rules: feature descriptors, exact line:col."""

from __future__ import annotations

from pathlib import Path

from rulecheck import positions, validate_text

from tpuemb_cfg.formats.io import load
from tpuemb_cfg.model.derived import derive

HEAD = "mode: TRAINING\nnum_hosts: 1\nnum_tensor_cores: 8\n"
OPT = "optimization_parameters { learning_rate { constant: 0.1 } adagrad { } }"


def table(name: str | None) -> str:
    """One line; ``name`` starts at column 20."""
    named = f'name: "{name}" ' if name is not None else ""
    return f"table_descriptor {{ {named}vocabulary_size: 100 dimension: 8 {OPT} }}\n"


def feature(name: str, table_id: int | None, shape: str) -> str:
    """Five lines: name on the 2nd, table_id on the 3rd, the shape text on the 4th (column 3)."""
    tid = f"table_id: {table_id}" if table_id is not None else "# table 0"
    return f'feature_descriptor {{\n  name: "{name}"\n  {tid}\n  {shape}\n}}\n'


def config(tables: list[str | None], features: list[str]) -> str:
    """HEAD on lines 1-3, table i on line 4 + i, then five lines per feature."""
    return HEAD + "".join(table(t) for t in tables) + "".join(features)


def test_feat001_table_id_out_of_range(tmp_path: Path) -> None:
    text = config(
        ["a", "b"],
        [
            feature("f0", 0, "input_shape: 16"),
            feature("f1", 2, "input_shape: 16"),
            feature("f2", -1, "input_shape: 16"),
        ],
    )
    found = validate_text(tmp_path, text, "FEAT001")
    assert positions(found) == [(13, 3), (18, 3)]
    assert found[0].field_path == "feature_descriptor[1].table_id"
    assert "'f1': table_id 2 is out of range; expected 0..1" in found[0].message


def test_feat001_unset_table_id_without_tables(tmp_path: Path) -> None:
    found = validate_text(tmp_path, config([], [feature("f0", None, "input_shape: 16")]), "FEAT001")
    # table_id absent (0), no tables: located at feature_descriptor[0] (4, 1).
    assert positions(found) == [(4, 1)]


def test_feat001_clean(tmp_path: Path) -> None:
    text = config(
        ["a", "b"], [feature("f0", None, "input_shape: 16"), feature("f1", 1, "input_shape: 8")]
    )
    assert validate_text(tmp_path, text, "FEAT001") == []


def test_feat002_empty_input_shape(tmp_path: Path) -> None:
    text = config(["a"], [feature("f0", 0, "input_shape: 16"), feature("f1", 0, "# no shape")])
    found = validate_text(tmp_path, text, "FEAT002")
    assert positions(found) == [(10, 1)]
    assert found[0].field_path == "feature_descriptor[1].input_shape"


def test_feat002_clean(tmp_path: Path) -> None:
    text = config(["a"], [feature("f0", 0, "input_shape: 16")])
    assert validate_text(tmp_path, text, "FEAT002") == []


def test_feat003_non_positive_entries(tmp_path: Path) -> None:
    text = config(
        ["a"],
        [feature("f0", 0, "input_shape: 16 input_shape: 0"), feature("f1", 0, "input_shape: -3")],
    )
    found = validate_text(tmp_path, text, "FEAT003")
    assert positions(found) == [(8, 19), (13, 3)]
    assert [d.field_path for d in found] == [
        "feature_descriptor[0].input_shape[1]",
        "feature_descriptor[1].input_shape[0]",
    ]
    assert "input_shape[1] is 0" in found[0].message


def test_feat003_list_syntax_position(tmp_path: Path) -> None:
    text = config(["a"], [feature("f0", 0, "input_shape: [16, 0]")])
    assert positions(validate_text(tmp_path, text, "FEAT003")) == [(8, 21)]


def test_feat003_clean(tmp_path: Path) -> None:
    text = config(["a"], [feature("f0", 0, "input_shape: [16, 4]")])
    assert validate_text(tmp_path, text, "FEAT003") == []


def test_feat004_table_without_features(tmp_path: Path) -> None:
    text = config(
        ["a", None, "c"],
        [feature("f0", None, "input_shape: 16"), feature("f1", 7, "input_shape: 16")],
    )
    found = validate_text(tmp_path, text, "FEAT004")
    # table 1 has no name: at table_descriptor[1] (5, 1); table 2 at its name (6, 20).
    assert positions(found) == [(5, 1), (6, 20)]
    assert "table_descriptor[2] 'c': no feature_descriptor has table_id 2" in found[1].message


def test_feat004_not_in_legacy_style(tmp_path: Path) -> None:
    text = HEAD + "batch_size_per_tensor_core: 8\n" + table("a")
    assert validate_text(tmp_path, text, "FEAT004") == []


def test_feat004_clean(tmp_path: Path) -> None:
    text = config(
        ["a", "b"], [feature("f0", 1, "input_shape: 16"), feature("f1", 0, "input_shape: 16")]
    )
    assert validate_text(tmp_path, text, "FEAT004") == []


def test_feat005_feature_size_overflow(tmp_path: Path) -> None:
    text = config(["a"], [feature("f0", 0, "input_shape: 65536 input_shape: 32768")])
    found = validate_text(tmp_path, text, "FEAT005")
    assert positions(found) == [(8, 3)]
    assert "multiplies to 2147483648" in found[0].message


def test_feat005_legacy_overflow(tmp_path: Path) -> None:
    text = (
        "mode: TRAINING\nbatch_size_per_tensor_core: 65536\n"
        'table_descriptor {\n  name: "a"\n  num_features: 32768\n}\n'
    )
    found = validate_text(tmp_path, text, "FEAT005")
    assert positions(found) == [(5, 3)]
    assert "= 2147483648 does not fit in 32 bits" in found[0].message


def test_feat005_clean_at_the_limit(tmp_path: Path) -> None:
    # 65535 * 32768 = 2^31 - 2^15 fits.
    text = config(["a"], [feature("f0", 0, "input_shape: [65535, 32768]")])
    assert validate_text(tmp_path, text, "FEAT005") == []


SPEC_EXAMPLE = config(
    ["a", "b"],
    [
        feature("f0", 0, "input_shape: 32"),
        feature("f1", 0, "input_shape: [32, 4]"),
        feature("f2", 1, "input_shape: 48"),
    ],
)


def test_derived_batch_size_spec_example(tmp_path: Path) -> None:
    # validation-rules.md 1.2: sizes 32, 128, 48 -> B = 16, num_features 10 and 3.
    path = tmp_path / "c.pbtxt"
    path.write_text(SPEC_EXAMPLE)
    derived = derive(load(str(path)))
    assert derived.style == "feature"
    assert derived.batch_size == 16
    assert derived.num_features == [10, 3]
    assert derived.feature_sizes == [32, 128, 48]
    assert [shape for _, shape in derived.activation_shapes] == [(32, 8), (32, 4, 8), (48, 8)]


def test_feat006_derived_counts_on_request(tmp_path: Path) -> None:
    assert [d for d in validate_text(tmp_path, SPEC_EXAMPLE, "FEAT") if d.rule == "FEAT006"] == []
    found = validate_text(tmp_path, SPEC_EXAMPLE, "FEAT006")
    assert positions(found) == [(6, 1)]
    assert found[0].message == (
        "derived batch_size_per_tensor_core = 16; num_features per table: "
        "table_descriptor[0] 'a': 10, table_descriptor[1] 'b': 3"
    )


def test_feat006_not_with_feature_errors(tmp_path: Path) -> None:
    text = config(["a"], [feature("f0", 3, "input_shape: 16")])
    assert validate_text(tmp_path, text, "FEAT006") == []


def test_feat007_features_disagree_on_batch(tmp_path: Path) -> None:
    found = validate_text(tmp_path, SPEC_EXAMPLE, "FEAT007")
    assert positions(found) == [(9, 3)]
    assert found[0].field_path == "feature_descriptor[0].input_shape[0]"
    assert "leading dimension 32 differs from the derived batch size 16" in found[0].message


def test_feat007_clean(tmp_path: Path) -> None:
    text = config(
        ["a"], [feature("f0", 0, "input_shape: 16"), feature("f1", 0, "input_shape: [16, 3]")]
    )
    assert validate_text(tmp_path, text, "FEAT007") == []


def test_feat008_duplicate_feature_names(tmp_path: Path) -> None:
    text = config(
        ["a"],
        [
            feature("x", 0, "input_shape: 16"),
            feature("y", 0, "input_shape: 16"),
            feature("x", 0, "input_shape: 16"),
        ],
    )
    found = validate_text(tmp_path, text, "FEAT008")
    assert positions(found) == [(16, 3)]
    assert "name 'x' is already used by feature_descriptor[0]" in found[0].message


def test_feat008_clean_with_empty_names(tmp_path: Path) -> None:
    text = config(["a"], [feature("", 0, "input_shape: 16"), feature("", 0, "input_shape: 16")])
    assert validate_text(tmp_path, text, "FEAT008") == []


def test_feat007_not_for_sequence_features_sharing_their_batch(tmp_path: Path) -> None:
    # Every feature [16, 200]: TensorFlow's batch is the GCD of the sizes, 3200, yet the
    # features share one batch dimension (16); [16] with [16, 5] likewise (batch 16).
    text = config(["a"], [feature("f0", 0, "input_shape: [16, 200]"),
                          feature("f1", 0, "input_shape: [16, 200]")])
    path = tmp_path / "s.pbtxt"
    path.write_text(text)
    assert derive(load(str(path))).batch_size == 3200
    assert validate_text(tmp_path, text, "FEAT007") == []
    text = config(["a"], [feature("f0", 0, "input_shape: 16"),
                          feature("f1", 0, "input_shape: [16, 5]")])
    assert validate_text(tmp_path, text, "FEAT007") == []


def test_feat007_names_the_other_leading_dimension(tmp_path: Path) -> None:
    found = validate_text(tmp_path, SPEC_EXAMPLE, "FEAT007")
    assert "and from the 48 of feature_descriptor[2] 'f2'" in found[0].message
