"""TBL rules: tables and topology, exact line:col."""

from __future__ import annotations

from pathlib import Path

from rulecheck import positions, validate_text


def head(mode: str | None = "TRAINING", hosts: str | None = "2", cores: str | None = "8") -> str:
    """Lines 1-3: mode, num_hosts, num_tensor_cores (a comment line where None)."""
    return "".join(
        f"{name}: {value}\n" if value is not None else f"# no {name}\n"
        for name, value in (("mode", mode), ("num_hosts", hosts), ("num_tensor_cores", cores))
    )


def table(name: str | None = "t", vocab: str | None = "100", dim: str | None = "8") -> str:
    """Six lines: name, vocabulary_size and dimension on lines 2-4 (column 3)."""
    lines = [
        f'name: "{name}"' if name is not None else "# no name",
        f"vocabulary_size: {vocab}" if vocab is not None else "# no vocabulary_size",
        f"dimension: {dim}" if dim is not None else "# no dimension",
    ]
    body = "".join(f"  {line}\n" for line in lines)
    opt = "  optimization_parameters { learning_rate { constant: 0.1 } adagrad { } }\n"
    return "table_descriptor {\n" + body + opt + "}\n"


def test_tbl001_no_tables(tmp_path: Path) -> None:
    found = validate_text(tmp_path, head(), "TBL001")
    assert positions(found) == [(1, 1)]
    assert found[0].field_path == ""


def test_tbl001_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head() + table(), "TBL001") == []


def test_tbl002_empty_name(tmp_path: Path) -> None:
    found = validate_text(tmp_path, head() + table("") + table(None), "TBL002")
    # written as "" (5, 3); absent: located at table_descriptor[1] (10, 1).
    assert positions(found) == [(5, 3), (10, 1)]
    assert [d.field_path for d in found] == ["table_descriptor[0].name", "table_descriptor[1].name"]


def test_tbl002_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head() + table("a") + table("b"), "TBL002") == []


def test_tbl003_duplicate_name(tmp_path: Path) -> None:
    found = validate_text(tmp_path, head() + table("a") + table("b") + table("a"), "TBL003")
    assert positions(found) == [(17, 3)]
    assert "name 'a' is already used by table_descriptor[0]" in found[0].message


def test_tbl003_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head() + table("a") + table("A"), "TBL003") == []


def test_tbl004_vocabulary_size(tmp_path: Path) -> None:
    text = head() + table("a", "0") + table("b", None) + table("c", "-5")
    found = validate_text(tmp_path, text, "TBL004")
    assert positions(found) == [(6, 3), (10, 1), (18, 3)]
    assert "vocabulary_size is -5" in found[2].message


def test_tbl004_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head() + table("a", "1"), "TBL004") == []


def test_tbl005_fewer_rows_than_hosts(tmp_path: Path) -> None:
    found = validate_text(tmp_path, head(hosts="4") + table("a", "3") + table("b", "0"), "TBL005")
    assert positions(found) == [(6, 3)]
    assert "host shard 3 and later would be empty" in found[0].message
    assert found[0].hint is not None and "set vocabulary_size to 4" in found[0].hint


def test_tbl005_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head(hosts="4") + table("a", "4"), "TBL005") == []


def test_tbl006_dimension(tmp_path: Path) -> None:
    found = validate_text(tmp_path, head() + table("a", dim="0") + table("b", dim="-1"), "TBL006")
    assert positions(found) == [(7, 3), (13, 3)]


def test_tbl006_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head() + table("a", dim="1"), "TBL006") == []


def test_tbl007_mode_unset_or_undeclared(tmp_path: Path) -> None:
    found = validate_text(tmp_path, head(mode=None) + table(), "TBL007")
    assert positions(found) == [(1, 1)]
    assert "UNSPECIFIED" in found[0].message
    assert found[0].hint is not None and "mode: TRAINING" in found[0].hint
    found = validate_text(tmp_path, "num_hosts: 1\nmode: 7\n" + table(), "TBL007")
    assert positions(found) == [(2, 1)]
    assert "mode is 7, which is not a declared Mode value" in found[0].message


def test_tbl007_clean(tmp_path: Path) -> None:
    for mode in ("INFERENCE", "TRAINING", "BACKWARD_PASS_ONLY"):
        assert validate_text(tmp_path, head(mode=mode) + table(), "TBL007") == []


def test_tbl008_num_hosts(tmp_path: Path) -> None:
    assert positions(validate_text(tmp_path, head(hosts="0") + table(), "TBL008")) == [(2, 1)]
    assert positions(validate_text(tmp_path, head(hosts=None) + table(), "TBL008")) == [(1, 1)]


def test_tbl008_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head(hosts="1") + table(), "TBL008") == []


def test_tbl009_num_tensor_cores(tmp_path: Path) -> None:
    found = validate_text(tmp_path, head(cores="-8") + table(), "TBL009")
    assert positions(found) == [(3, 1)]
    assert "num_tensor_cores is -8" in found[0].message


def test_tbl009_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head(cores="1", hosts="1") + table(), "TBL009") == []


def test_tbl010_cores_not_multiple_of_hosts(tmp_path: Path) -> None:
    found = validate_text(tmp_path, head(hosts="3", cores="8") + table(), "TBL010")
    assert positions(found) == [(3, 1)]
    assert found[0].severity == "warning"


def test_tbl010_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head(hosts="4", cores="8") + table(), "TBL010") == []
    assert validate_text(tmp_path, head(hosts="0", cores="8") + table(), "TBL010") == []


SPMD_AT = 10  # spmd_sharding starts on line 10 (after head and one table)


def test_tbl011_spmd_without_cores(tmp_path: Path) -> None:
    text = head() + table() + "spmd_sharding {\n  enabled: true\n}\n"
    found = validate_text(tmp_path, text, "TBL011")
    assert positions(found) == [(SPMD_AT, 1)]
    assert found[0].field_path == "spmd_sharding.num_cores_per_replica"
    text = head() + table() + "spmd_sharding {\n  enabled: true\n  num_cores_per_replica: -2\n}\n"
    assert positions(validate_text(tmp_path, text, "TBL011")) == [(SPMD_AT + 2, 3)]


def test_tbl011_clean(tmp_path: Path) -> None:
    text = head() + table() + "spmd_sharding {\n  enabled: true\n  num_cores_per_replica: 2\n}\n"
    assert validate_text(tmp_path, text, "TBL011") == []


def test_tbl012_cores_not_multiple_of_replica(tmp_path: Path) -> None:
    text = (
        head(cores="8")
        + table()
        + "spmd_sharding {\n  enabled: true\n  num_cores_per_replica: 3\n}\n"
    )
    found = validate_text(tmp_path, text, "TBL012")
    assert positions(found) == [(3, 1)]
    assert (
        "num_tensor_cores 8 is not a multiple of spmd_sharding.num_cores_per_replica 3"
        in found[0].message
    )


def test_tbl012_clean(tmp_path: Path) -> None:
    text = (
        head(cores="8")
        + table()
        + "spmd_sharding {\n  enabled: true\n  num_cores_per_replica: 4\n}\n"
    )
    assert validate_text(tmp_path, text, "TBL012") == []
    disabled = head(cores="8") + table() + "spmd_sharding {\n  num_cores_per_replica: 3\n}\n"
    assert validate_text(tmp_path, disabled, "TBL012") == []


def test_tbl013_spmd_settings_ignored(tmp_path: Path) -> None:
    text = (
        head()
        + table()
        + "spmd_sharding {\n  num_cores_per_replica: 2\n  use_manual_partitioning: true\n}\n"
    )
    found = validate_text(tmp_path, text, "TBL013")
    # enabled is absent: located at spmd_sharding.
    assert positions(found) == [(SPMD_AT, 1)]
    assert found[0].field_path == "spmd_sharding.enabled"
    assert "num_cores_per_replica, use_manual_partitioning has no effect" in found[0].message


def test_tbl013_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head() + table() + "spmd_sharding {\n}\n", "TBL013") == []


def test_tbl014_undeclared_sharding_strategy(tmp_path: Path) -> None:
    found = validate_text(tmp_path, head() + table() + "sharding_strategy: 5\n", "TBL014")
    assert positions(found) == [(SPMD_AT, 1)]
    assert "sharding_strategy is 5" in found[0].message


def test_tbl014_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, head() + table() + "sharding_strategy: MOD\n", "TBL014") == []


def test_tbl015_pipelining_without_training(tmp_path: Path) -> None:
    text = head(mode="INFERENCE") + table() + "pipeline_execution_with_tensor_core: true\n"
    found = validate_text(tmp_path, text, "TBL015")
    assert positions(found) == [(SPMD_AT, 1)]
    assert "no effect in mode INFERENCE" in found[0].message


def test_tbl015_clean(tmp_path: Path) -> None:
    text = head(mode="TRAINING") + table() + "pipeline_execution_with_tensor_core: true\n"
    assert validate_text(tmp_path, text, "TBL015") == []
