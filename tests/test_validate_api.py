"""The validation library: entry points, selection, suppression, robustness, derived quantities."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, GOLDEN, require_data
from rulecheck import CLEAN, NUM_HOSTS_ZERO, write_config

from tpuemb_cfg import TPUEmbeddingConfiguration
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.formats.io import load
from tpuemb_cfg.model.derived import derive, host_sizes
from tpuemb_cfg.rules import RULES, Context, Diagnostic, rule
from tpuemb_cfg.validation.validator import selected_rules, validate

BROKEN = """\
mode: TRAINING
num_hosts: 0
num_tensor_cores: 8
table_descriptor {
  name: ""
  vocabulary_size: 100
  dimension: 0
  optimization_parameters {
    learning_rate { constant: 0.1 }
    adagrad { }
    gradient_accumulation_status: ENABLED
  }
}
feature_descriptor { table_id: 0 input_shape: 16 }
"""


def test_clean_config_has_no_findings(tmp_path: Path) -> None:
    assert validate(write_config(tmp_path, CLEAN)) == []


def test_findings_sorted_by_line_column_rule(tmp_path: Path) -> None:
    path = write_config(tmp_path, BROKEN)
    found = validate(path)
    assert [(d.line, d.column, d.rule) for d in found] == [
        (2, 1, "TBL008"),
        (5, 3, "TBL002"),
        (7, 3, "TBL006"),
    ]
    assert all(d.path == path for d in found)
    assert found[0].to_dict() == NUM_HOSTS_ZERO


def test_message_and_bytes_inputs_have_no_positions(tmp_path: Path) -> None:
    config = load(write_config(tmp_path, BROKEN))
    from_message = validate(config)
    assert [d.rule for d in from_message] == ["TBL002", "TBL006", "TBL008"]
    assert all(d.line is None and d.column is None and d.path is None for d in from_message)
    from_bytes = validate(config.SerializeToString())
    assert [d.rule for d in from_bytes] == [d.rule for d in from_message]


def test_binary_and_json_files(tmp_path: Path) -> None:
    config = load(write_config(tmp_path, BROKEN))
    binary = tmp_path / "c.binpb"
    binary.write_bytes(config.SerializeToString())
    found = validate(str(binary))
    assert [d.rule for d in found] == ["TBL002", "TBL006", "TBL008"]
    assert all(d.line is None and d.path == str(binary) for d in found)
    from google.protobuf import json_format

    js = tmp_path / "c.json"
    js.write_text(json_format.MessageToJson(config))
    found = validate(str(js))
    assert [d.rule for d in found] == ["TBL002", "TBL006", "TBL008"]
    assert all(d.line is None and d.column is None for d in found)


def test_unreadable_file_is_parse001(tmp_path: Path) -> None:
    missing = validate(str(tmp_path / "nope.pbtxt"))
    assert [(d.rule, d.severity) for d in missing] == [("PARSE001", "error")]
    assert "no such file" in missing[0].message
    bad = validate(write_config(tmp_path, "mode: TRAINING\ntable_descriptor {\n  nme: 'x'\n}\n"))
    assert [(d.rule, d.line) for d in bad] == [("PARSE001", 3)]
    assert "nme" in bad[0].message


def test_select_and_ignore_by_id_and_prefix(tmp_path: Path) -> None:
    path = write_config(tmp_path, BROKEN)
    assert [d.rule for d in validate(path, select=["TBL00"])] == ["TBL008", "TBL002", "TBL006"]
    assert [d.rule for d in validate(path, select="TBL002,TBL008")] == ["TBL008", "TBL002"]
    assert [d.rule for d in validate(path, ignore=["TBL002", "TBL006"])] == ["TBL008"]
    assert validate(path, select=["TAG"]) == []
    with pytest.raises(UsageError, match="matches no rule"):
        validate(path, select=["XYZ"])


def test_on_request_rules_need_exact_id_or_show_derived() -> None:
    default_ids = {r.id for r in selected_rules()}
    assert "TAG007" not in default_ids and "FEAT006" not in default_ids
    assert "TAG007" not in {r.id for r in selected_rules(select=["TAG"])}
    assert "TAG007" in {r.id for r in selected_rules(select=["TAG007"])}
    derived_ids = {r.id for r in selected_rules(show_derived=True)}
    assert {"TAG007", "FEAT006"} <= derived_ids
    tag_ids = {r.id for r in selected_rules(select=["TAG"], show_derived=True)}
    assert "TAG007" in tag_ids and "FEAT006" not in tag_ids
    assert {r.id for r in RULES.values() if r.on_request} >= {"TAG007", "FEAT006"}


def test_suppression_comment_on_the_line(tmp_path: Path) -> None:
    text = BROKEN.replace("num_hosts: 0\n", "num_hosts: 0  # tpuemb: disable=TBL008\n").replace(
        'name: ""\n', 'name: ""  # tpuemb: disable=TBL003, TBL\n'
    )
    assert [d.rule for d in validate(write_config(tmp_path, text))] == ["TBL006"]


def test_severity_override(tmp_path: Path) -> None:
    path = write_config(tmp_path, BROKEN)
    found = validate(path, select=["TBL006"], severity={"TBL006": "warning"})
    assert [(d.rule, d.severity) for d in found] == [("TBL006", "warning")]


@pytest.fixture
def temporary_rules() -> Iterator[list[str]]:
    added: list[str] = []
    yield added
    for rule_id in added:
        RULES.pop(rule_id, None)


def test_user_rule_registration(tmp_path: Path, temporary_rules: list[str]) -> None:
    @rule("XUSR001", "warning", "table names must be lower case")
    def lower_case_names(ctx: Context) -> Iterator[Diagnostic]:
        """Table names are checkpoint keys; this project wants them lower case."""
        for i, table, path in ctx.tables():
            if table.name != table.name.lower():
                yield ctx.diag(f"{path}.name", f"{ctx.table_label(i)}: name is not lower case")

    temporary_rules.append("XUSR001")
    assert RULES["XUSR001"].explanation.startswith("Table names are checkpoint keys")
    found = validate(write_config(tmp_path, CLEAN.replace('"ads"', '"Ads"')), select=["XUSR"])
    assert [(d.rule, d.severity, d.line, d.column, d.message) for d in found] == [
        ("XUSR001", "warning", 5, 3, "table_descriptor[0] 'Ads': name is not lower case")
    ]
    with pytest.raises(ValueError, match="already registered"):
        rule("XUSR001", "warning", "again")(lower_case_names)
    with pytest.raises(ValueError, match="three digits"):
        rule("bad", "warning", "x")


def test_crashing_rule_becomes_internal_error(tmp_path: Path, temporary_rules: list[str]) -> None:
    @rule("XBRK001", "info", "always crashes")
    def crashes(ctx: Context) -> Iterator[Diagnostic]:
        """Crashes."""
        raise KeyError("boom")
        yield  # pragma: no cover

    temporary_rules.append("XBRK001")
    found = validate(write_config(tmp_path, BROKEN), select=["XBRK", "TBL008"])
    assert [(d.rule, d.severity) for d in found] == [("XBRK001", "error"), ("TBL008", "error")]
    assert "internal error in rule XBRK001 (KeyError" in found[0].message


def test_examples_validate_clean() -> None:
    files = sorted(  # every configuration example; examples/sim/ holds simulation specs
        p for p in EXAMPLES.rglob("*")
        if p.suffix in (".pbtxt", ".json", ".binpb", ".pb") and "sim" not in p.parent.parts
    )
    assert len(files) >= 5
    assert files, "no examples found"
    for path in files:
        bad = [d for d in validate(str(path)) if d.severity in ("error", "warning")]
        assert bad == [], f"{path.name}: {bad}"


def test_golden_configs_never_crash_a_rule() -> None:
    files = sorted(GOLDEN.glob("configs/*.pbtxt")) + sorted(GOLDEN.glob("configs/*.binpb"))
    assert files, f"no golden configurations under {require_data(GOLDEN / 'configs')}"
    for path in files:
        for d in validate(str(path), show_derived=True):
            assert "internal error" not in d.message, (path.name, d)


def test_validate_does_not_import_numpy(tmp_path: Path) -> None:
    path = write_config(tmp_path, BROKEN)
    code = (
        "import sys, tpuemb_cfg.validation.validator, tpuemb_cfg.commands.validate\n"
        f"tpuemb_cfg.validation.validator.validate({path!r}, show_derived=True)\n"
        "assert 'numpy' not in sys.modules, 'numpy was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- derived quantities (validation-rules.md section 1) ------------------------------------------


def test_tag_map_counts_unset_step_counter_as_zero(tmp_path: Path) -> None:
    text = """\
table_descriptor { name: "a" optimization_parameters {
  learning_rate { dynamic { tag: 1 } } adagrad { } } }
table_descriptor { name: "b" optimization_parameters {
  learning_rate { constant: 1 } frequency_aware_adagrad { } } }
table_descriptor { name: "c" optimization_parameters {
  learning_rate { dynamic { } } frequency_aware_adagrad { step_counter { tag: 2 } } } }
"""
    derived = derive(load(write_config(tmp_path, text)))
    assert derived.k == 3
    lr = "optimization_parameters.learning_rate.dynamic.tag"
    sc = "optimization_parameters.frequency_aware_adagrad.step_counter.tag"
    assert derived.tag_map == {
        1: [(0, f"table_descriptor[0].{lr}")],
        0: [(1, f"table_descriptor[1].{sc}"), (2, f"table_descriptor[2].{lr}")],
        2: [(2, f"table_descriptor[2].{sc}")],
    }
    assert [u.present for u in derived.tag_uses] == [True, False, True, True]


def test_state_variables_and_sizes() -> None:
    config = TPUEmbeddingConfiguration(num_hosts=4)
    a = config.table_descriptor.add(name="a", vocabulary_size=10, dimension=3)
    a.optimization_parameters.adagrad.SetInParent()
    b = config.table_descriptor.add(name="b", vocabulary_size=5, dimension=4)
    b.optimization_parameters.stochastic_gradient_descent.SetInParent()
    b.optimization_parameters.gradient_accumulation_status = 2  # DISABLED
    b.optimization_parameters.low_dimensional_packing_status = 1  # ENABLED
    c = config.table_descriptor.add(name="c", vocabulary_size=5, dimension=4)
    c.optimization_parameters.centered_rms_prop.SetInParent()
    config.table_descriptor.add(name="d")  # no optimizer: state unknown
    derived = derive(config)
    assert derived.algorithms == [
        "adagrad",
        "stochastic_gradient_descent",
        "centered_rms_prop",
        None,
    ]
    assert derived.state_variables == [
        ("parameters", "accumulators", "gradient_accumulators"),
        ("parameters",),
        ("parameters", "ms", "mom", "mg", "gradient_accumulators"),
        None,
    ]
    assert [derived.rows_on_host(10, h) for h in range(4)] == [3, 3, 2, 2]
    sizes = derived.table_sizes
    # a: 10 rows x 3 floats x 4 bytes x 3 variables; padded to 8 floats per row.
    assert (sizes[0].logical_bytes, sizes[0].estimate_bytes) == (360, 10 * 8 * 4 * 3)
    # b: packed, rows per host 2, 1, 1, 1 -> ceil(rows * 4 / 8) * 8 floats each.
    assert (sizes[1].logical_bytes, sizes[1].estimate_bytes, sizes[1].packed) == (80, 4 * 32, True)
    assert sizes[3] is None
    ranges = host_sizes(config, derived)
    # Per host: a has 3, 3, 2, 2 rows; b and c 2, 1, 1, 1.
    c_row = 4 * 4 * 5
    c_est = 8 * 4 * 5
    assert [(r.first, r.last, r.logical_bytes, r.estimate_bytes) for r in ranges] == [
        (0, 0, 108 + 32 + 2 * c_row, 288 + 32 + 2 * c_est),
        (1, 1, 108 + 16 + c_row, 288 + 32 + c_est),
        (2, 3, 72 + 16 + c_row, 192 + 32 + c_est),
    ]


def test_legacy_derivation_and_activation_shapes() -> None:
    config = TPUEmbeddingConfiguration(batch_size_per_tensor_core=16)
    config.table_descriptor.add(name="a", dimension=8, num_features=2)
    config.spmd_sharding.enabled = True
    config.spmd_sharding.num_cores_per_replica = 2
    derived = derive(config)
    assert derived.style == "legacy"
    assert (derived.batch_size, derived.num_features) == (16, [2])
    assert derived.activation_shapes == [("table_descriptor[0]", (64, 8))]


def test_user_program_state_variables() -> None:
    config = TPUEmbeddingConfiguration()
    t = config.table_descriptor.add(name="u")
    program = t.optimization_parameters.user_defined_program.program
    for _ in range(3):
        program.host_program_shape.result.tuple_shapes.add()
    t.optimization_parameters.gradient_accumulation_status = 2
    unknown = config.table_descriptor.add(name="v")
    unknown.optimization_parameters.user_defined_program.SetInParent()
    derived = derive(config)
    assert derived.state_variables == [("parameters", "Slot_0", "Slot_1"), None]
