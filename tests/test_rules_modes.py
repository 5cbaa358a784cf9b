"""MODE rules: legacy versus feature-descriptor style, exact line:col."""

from __future__ import annotations

from pathlib import Path

from rulecheck import positions, validate_text

HEAD = "mode: TRAINING\nnum_hosts: 1\nnum_tensor_cores: 8\n"


def table(name: str, num_features: str | None = None) -> str:
    """11 lines; ``num_features`` is on the table's 5th line (column 3)."""
    nf = f"num_features: {num_features}" if num_features is not None else "# no num_features"
    return f"""table_descriptor {{
  name: "{name}"
  vocabulary_size: 100
  dimension: 8
  {nf}
  optimization_parameters {{
    learning_rate {{ constant: 0.1 }}
    adagrad {{ }}
    gradient_accumulation_status: ENABLED
  }}
}}
"""


def config(batch: str | None, *tables: str, features: bool = False) -> str:
    """HEAD on lines 1-3, batch size on line 4, table i from line 5 + 11 i."""
    line4 = f"batch_size_per_tensor_core: {batch}\n" if batch is not None else "# no batch size\n"
    fds = ""
    if features:
        fds = "".join(
            f"feature_descriptor {{ table_id: {i} input_shape: 16 }}\n" for i in range(len(tables))
        )
    return HEAD + line4 + "".join(tables) + fds


def test_mode001_batch_size_with_features(tmp_path: Path) -> None:
    found = validate_text(tmp_path, config("16", table("a"), features=True), "MODE001")
    assert positions(found) == [(4, 1)]
    assert found[0].field_path == "batch_size_per_tensor_core"
    assert "batch_size_per_tensor_core is 16" in found[0].message
    assert found[0].hint is not None and "here 16" in found[0].hint


def test_mode001_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, config(None, table("a"), features=True), "MODE001") == []


def test_mode002_num_features_with_features(tmp_path: Path) -> None:
    text = config(None, table("a", "2"), table("b"), table("c", "-1"), features=True)
    found = validate_text(tmp_path, text, "MODE002")
    assert positions(found) == [(9, 3), (31, 3)]
    assert [d.field_path for d in found] == [
        "table_descriptor[0].num_features",
        "table_descriptor[2].num_features",
    ]
    assert "num_features is -1" in found[1].message


def test_mode002_clean(tmp_path: Path) -> None:
    text = config(None, table("a"), table("b"), features=True)
    assert validate_text(tmp_path, text, "MODE002") == []


def test_mode003_legacy_without_batch_size(tmp_path: Path) -> None:
    # Unset: reported at the top-level message (1:1).
    found = validate_text(tmp_path, config(None, table("a", "1")), "MODE003")
    assert positions(found) == [(1, 1)]
    assert found[0].field_path == "batch_size_per_tensor_core"
    found = validate_text(tmp_path, config("-4", table("a", "1")), "MODE003")
    assert positions(found) == [(4, 1)]
    assert "batch_size_per_tensor_core is -4" in found[0].message


def test_mode003_empty_configuration(tmp_path: Path) -> None:
    found = validate_text(tmp_path, "", "MODE003")
    assert positions(found) == [(1, 1)]


def test_mode003_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, config("8", table("a", "1")), "MODE003") == []


def test_mode004_non_positive_num_features(tmp_path: Path) -> None:
    text = config("16", table("a", "0"), table("b"), table("c", "3"))
    found = validate_text(tmp_path, text, "MODE004")
    # a: written as 0 (9, 3); b: absent, located at table_descriptor[1] (16, 1).
    assert positions(found) == [(9, 3), (16, 1)]
    assert "'a': num_features is 0" in found[0].message


def test_mode004_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, config("16", table("a", "2"), table("b", "3")), "MODE004") == []


def test_mode005_legacy_style_info(tmp_path: Path) -> None:
    found = validate_text(tmp_path, config("16", table("a", "2"), table("b", "3")), "MODE005")
    assert positions(found) == [(4, 1)]
    assert found[0].severity == "info"
    assert "(5 feature(s) of 16 samples)" in found[0].message
    assert "one feature descriptor per table" in found[0].message
    assert found[0].hint is not None and "training code does not change" in found[0].hint


def test_mode005_not_with_legacy_errors_or_features(tmp_path: Path) -> None:
    assert validate_text(tmp_path, config("16", table("a", "0")), "MODE005") == []
    assert validate_text(tmp_path, config(None, table("a", "2")), "MODE005") == []
    assert validate_text(tmp_path, config(None, table("a"), features=True), "MODE005") == []
