"""TAG rules: each rule with a triggering config (exact line:col) and a clean one."""

from __future__ import annotations

from pathlib import Path

from rulecheck import positions, validate_text

from tpuemb_cfg.validation.validator import validate

# Lines 1-3; table i (0-based) then occupies lines 4 + 10 i .. 13 + 10 i.
HEAD = "mode: TRAINING\nnum_hosts: 1\nnum_tensor_cores: 8\n"
CONST = "learning_rate { constant: 0.1 }"


def dyn(tag: int | None) -> str:
    """A dynamic learning rate; in a table its ``tag`` is at column 31."""
    return (
        "learning_rate { dynamic { } }"
        if tag is None
        else f"learning_rate {{ dynamic {{ tag: {tag} }} }}"
    )


def table(name: str, lr: str = CONST, algo: str = "adagrad { }") -> str:
    return f"""table_descriptor {{
  name: "{name}"
  vocabulary_size: 100
  dimension: 8
  optimization_parameters {{
    {lr}
    {algo}
    gradient_accumulation_status: ENABLED
  }}
}}
"""


def config(*tables: str) -> str:
    features = "".join(
        f"feature_descriptor {{ table_id: {i} input_shape: 16 }}\n" for i in range(len(tables))
    )
    return HEAD + "".join(tables) + features


def test_tag001_negative_learning_rate_and_step_counter(tmp_path: Path) -> None:
    text = config(
        table("ads", dyn(-1)),
        table("news", CONST, "frequency_aware_adagrad { step_counter { tag: -2 } }"),
    )
    found = validate_text(tmp_path, text, "TAG001")
    assert positions(found) == [(9, 31), (20, 46)]
    assert (
        found[0].field_path
        == "table_descriptor[0].optimization_parameters.learning_rate.dynamic.tag"
    )
    assert "learning-rate tag is -1" in found[0].message and "'ads'" in found[0].message
    assert "step-counter tag is -2" in found[1].message
    assert all(d.severity == "error" for d in found)


def test_tag001_clean(tmp_path: Path) -> None:
    assert validate_text(tmp_path, config(table("ads", dyn(0)), table("b", dyn(1))), "TAG001") == []


def test_tag002_gap_names_missing_tag_and_neighbours(tmp_path: Path) -> None:
    text = config(table("ads", dyn(None)), table("video", dyn(1)), table("news", dyn(3)))
    found = validate_text(tmp_path, text, "TAG002")
    assert positions(found) == [(29, 31)]
    d = found[0]
    assert d.field_path == "table_descriptor[2].optimization_parameters.learning_rate.dynamic.tag"
    assert d.message.startswith("dynamic tag 2 is missing")
    assert "tag 1 is used by 'video' and tag 3 is used by 'news'" in d.message
    assert "0..2" in d.message
    assert d.hint is not None and "3 -> 2" in d.hint and "1 -> " not in d.hint


def test_tag002_reports_first_table_of_smallest_tag_above_gap(tmp_path: Path) -> None:
    # tags 1 and 2 in use: 0 is missing; the first table using tag 1 is table 1.
    text = config(table("a", dyn(2)), table("b", dyn(1)), table("c", dyn(1)))
    found = validate_text(tmp_path, text, "TAG002")
    assert positions(found) == [(19, 31)]
    assert found[0].message.startswith("dynamic tag 0 is missing")
    assert found[0].hint is not None and "1 -> 0, 2 -> 1" in found[0].hint


def test_tag002_several_missing(tmp_path: Path) -> None:
    text = config(table("a", dyn(0)), table("b", dyn(4)), table("c", dyn(7)))
    found = validate_text(tmp_path, text, "TAG002")
    assert positions(found) == [(19, 31)]
    assert found[0].message.startswith("dynamic tags 1..3, 5 and 6 are missing")


def test_tag002_clean_with_unset_step_counter_counting_as_zero(tmp_path: Path) -> None:
    # The unset step counter is tag 0, so {0, 1} is dense.
    text = config(table("a", CONST, "frequency_aware_adagrad { }"), table("b", dyn(1)))
    assert validate_text(tmp_path, text, "TAG002") == []


def test_tag002_unset_step_counter_fills_nothing_when_tags_start_at_one(tmp_path: Path) -> None:
    text = config(table("a", dyn(1)), table("b", dyn(2)))
    found = validate_text(tmp_path, text, "TAG002")
    assert positions(found) == [(9, 31)]


def test_tag003_more_tags_than_tables(tmp_path: Path) -> None:
    text = config(table("a", dyn(0), "frequency_aware_adagrad { step_counter { tag: 1 } }"))
    found = validate_text(tmp_path, text, "TAG003")
    assert positions(found) == [(10, 46)]
    assert found[0].severity == "warning"
    assert "2 distinct dynamic tags but only 1 table" in found[0].message


def test_tag003_clean(tmp_path: Path) -> None:
    text = config(
        table("a", dyn(0), "frequency_aware_adagrad { step_counter { tag: 1 } }"),
        table("b", dyn(0)),
    )
    assert validate_text(tmp_path, text, "TAG003") == []


def test_tag004_step_counter_unset(tmp_path: Path) -> None:
    text = config(table("a", dyn(1)), table("b", CONST, "frequency_aware_adagrad { }"))
    found = validate_text(tmp_path, text, "TAG004")
    # step_counter is absent: located at its parent, frequency_aware_adagrad (line 20, column 5).
    assert positions(found) == [(20, 5)]
    assert found[0].field_path == (
        "table_descriptor[1].optimization_parameters.frequency_aware_adagrad.step_counter"
    )


def test_tag004_clean(tmp_path: Path) -> None:
    text = config(table("a", CONST, "frequency_aware_adagrad { step_counter { } }"))
    assert validate_text(tmp_path, text, "TAG004") == []


def test_tag005_tag_shared_by_learning_rate_and_step_counter(tmp_path: Path) -> None:
    text = config(
        table("a", dyn(0)),
        table("b", CONST, "frequency_aware_adagrad { step_counter { tag: 0 } }"),
    )
    found = validate_text(tmp_path, text, "TAG005")
    assert positions(found) == [(20, 46)]
    assert "step-counter tag 0 is also the learning-rate tag of 'a'" in found[0].message


def test_tag005_clean(tmp_path: Path) -> None:
    text = config(
        table("a", dyn(0)),
        table("b", CONST, "frequency_aware_adagrad { step_counter { tag: 1 } }"),
    )
    assert validate_text(tmp_path, text, "TAG005") == []


def test_tag006_mergeable_tags(tmp_path: Path) -> None:
    text = config(table("a", dyn(0)), table("b", dyn(1)), table("c", dyn(1)))
    found = validate_text(tmp_path, text, "TAG006")
    assert positions(found) == [(19, 31)]
    assert found[0].severity == "info"
    assert found[0].message.startswith("tags 0 and 1 could be merged")


def test_tag006_clean_when_optimizers_differ(tmp_path: Path) -> None:
    text = config(table("a", dyn(0)), table("b", dyn(1), "stochastic_gradient_descent { }"))
    assert validate_text(tmp_path, text, "TAG006") == []


def test_tag007_tag_table_on_request_only(tmp_path: Path) -> None:
    text = config(
        table("a", dyn(0)),
        table("b", dyn(1), "frequency_aware_adagrad { step_counter { tag: 0 } }"),
    )
    path = tmp_path / "config.pbtxt"
    path.write_text(text)
    assert [d for d in validate(str(path)) if d.rule == "TAG007"] == []
    found = validate(str(path), select=["TAG007"])
    assert positions(found) == [(9, 31)]
    message = found[0].message
    assert message.startswith("K = 2: the learning-rate list must have 2 elements")
    assert "[0] learning rate of 'a'; step counter of 'b'" in message
    assert "[1] learning rate of 'b'" in message
    assert [d.rule for d in validate(str(path), show_derived=True) if d.rule == "TAG007"] == [
        "TAG007"
    ]


def test_tag007_clean_without_dynamic_tags(tmp_path: Path) -> None:
    assert validate_text(tmp_path, config(table("a")), "TAG007") == []


def test_tag008_no_learning_rate(tmp_path: Path) -> None:
    text = config(table("a", "# no learning rate"), table("b", "learning_rate { }"))
    found = validate_text(tmp_path, text, "TAG008")
    # Table 0: learning_rate absent, located at optimization_parameters (8, 3);
    # table 1: present but empty (19, 5).
    assert positions(found) == [(8, 3), (19, 5)]
    assert found[0].field_path == "table_descriptor[0].optimization_parameters.learning_rate"
    assert "adagrad has no learning rate" in found[0].message


def test_tag008_clean_for_assign(tmp_path: Path) -> None:
    text = config(table("a", "# assign needs no rate", "assign { }"), table("b"))
    assert validate_text(tmp_path, text, "TAG008") == []
