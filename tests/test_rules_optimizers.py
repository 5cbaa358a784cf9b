"""OPT rules (validation-rules.md 2.5): one config that triggers each rule, one that does not.

Each triggering config marks the line of every expected diagnostic with a trailing ``#@``; the
expected column is that line's first non-blank character (one field per line, the field name
first). Field paths are written out by hand.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from conftest import examples, golden
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rulecheck import config, family_tests, text_findings

from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
from tpuemb_cfg.rules import RULES
from tpuemb_cfg.rules.common import fmt
from tpuemb_cfg.validation.validator import run_rules, validate

T = "table_descriptor[0].optimization_parameters"

SEVERITY = {
    "OPT001": "error", "OPT002": "warning", "OPT003": "warning", "OPT004": "warning",
    "OPT005": "warning", "OPT010": "error", "OPT011": "error", "OPT012": "error",
    "OPT013": "info", "OPT014": "warning", "OPT015": "error", "OPT016": "warning",
    "OPT017": "warning", "OPT018": "error", "OPT019": "error", "OPT020": "warning",
    "OPT021": "error", "OPT022": "error", "OPT023": "warning", "OPT024": "warning",
    "OPT025": "warning", "OPT026": "error", "OPT027": "error", "OPT028": "warning",
    "OPT029": "error", "OPT030": "error", "OPT031": "error", "OPT032": "error",
    "OPT033": "warning", "OPT034": "warning", "OPT035": "warning", "OPT036": "warning",
    "OPT037": "info", "OPT040": "error", "OPT041": "warning", "OPT042": "error",
    "OPT043": "info", "OPT044": "info", "OPT045": "warning", "OPT046": "info",
    "OPT047": "info", "OPT048": "info", "OPT049": "info", "OPT050": "warning",
}  # fmt: skip


def program(inputs: int, outputs: int) -> str:
    """A user_defined_program whose program declares the given arity (lines unmarked)."""
    params = "\n".join("      parameters { element_type: 11 }" for _ in range(inputs))
    results = "\n".join("        tuple_shapes { element_type: 11 }" for _ in range(outputs))
    return (
        "user_defined_program {\n"
        "  program {  #@\n"
        "    host_program_shape {\n"
        f"{params}\n"
        "      result {\n"
        "        element_type: 13\n"
        f"{results}\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "}"
    ).replace("\n\n", "\n")


FE_OK = """\
frequency_estimator {
  tau: 0.1
  max_delta: 100.0
  outlier_threshold: 10.0
}"""

# (rule, config text, field paths of the expected diagnostics in file order)
TRIGGER = [
    (
        "OPT001",
        'table_descriptor {  #@\n  name: "t"\n  vocabulary_size: 8\n  dimension: 4\n}\n',
        [T],
    ),
    (
        "OPT001",
        config("learning_rate {\n  constant: 0.1\n}").replace(
            "  optimization_parameters {\n", "  optimization_parameters {  #@\n"
        ),
        [T],
    ),
    (
        "OPT002",
        config("learning_rate {\n  constant: inf  #@\n}\nadagrad {\n}"),
        [f"{T}.learning_rate.constant"],
    ),
    (
        "OPT003",
        config("""
        learning_rate {
          constant: 0.1
        }
        adam {
          beta1: 0.9
          beta2: 0.999
          epsilon: nan  #@
        }
        weight_decay_factor: -inf  #@
        """),
        [f"{T}.adam.epsilon", f"{T}.weight_decay_factor"],
    ),
    (
        "OPT004",
        config("learning_rate {\n  constant: -0.5  #@\n}\nadagrad {\n}"),
        [f"{T}.learning_rate.constant"],
    ),
    (
        "OPT005",
        config("learning_rate {\n  constant: -0.0  #@\n}\nadagrad {\n}"),
        [f"{T}.learning_rate.constant"],
    ),
    (
        "OPT010",
        config("adam {\n  beta1: 1.0  #@\n  beta2: 0.999\n  epsilon: 1e-07\n}"),
        [f"{T}.adam.beta1"],
    ),
    (
        "OPT011",
        config("adam {\n  beta1: 0.9\n  beta2: -0.5  #@\n  epsilon: 1e-07\n}"),
        [f"{T}.adam.beta2"],
    ),
    ("OPT012", config("adam {  #@\n  beta1: 0.9\n  beta2: 0.999\n}"), [f"{T}.adam.epsilon"]),
    (
        "OPT013",
        config("learning_rate {\n  constant: 0.001  #@\n}\nproximal_yogi {\n}"),
        [f"{T}.learning_rate.constant"],
    ),
    (
        "OPT014",
        config("learning_rate {\n  constant: 0.0\n}\nftrl {  #@\n  lr_power: -0.5\n}"),
        [f"{T}.ftrl.multiply_linear_by_lr"],
    ),
    ("OPT015", config("ftrl {\n  l1: 0.5\n  l2: -0.5  #@\n  lr_power: -0.5\n}"), [f"{T}.ftrl.l2"]),
    ("OPT016", config("ftrl {\n  lr_power: 0.5  #@\n}"), [f"{T}.ftrl.lr_power"]),
    ("OPT017", config("ftrl {\n  lr_power: -0.5\n  beta: -1.0  #@\n}"), [f"{T}.ftrl.beta"]),
    (
        "OPT018",
        config("adagrad_momentum {\n  exponent: -2.0  #@\n  epsilon: 1e-10\n}"),
        [f"{T}.adagrad_momentum.exponent"],
    ),
    (
        "OPT019",
        config("adagrad_momentum {  #@\n  exponent: 2.0\n}"),
        [f"{T}.adagrad_momentum.epsilon"],
    ),
    (
        "OPT020",
        config("""
        adagrad_momentum {  #@
          momentum: 1.0  #@
          exponent: 2.0
          epsilon: 1e-10
        }"""),
        [f"{T}.adagrad_momentum.beta2", f"{T}.adagrad_momentum.momentum"],
    ),
    ("OPT021", config("proximal_adagrad {\n  l1: -0.1  #@\n}"), [f"{T}.proximal_adagrad.l1"]),
    (
        "OPT022",
        config("""
        proximal_yogi {
          beta1: 1.0  #@
          beta2: 0.999
          epsilon: -0.001  #@
        }"""),
        [f"{T}.proximal_yogi.beta1", f"{T}.proximal_yogi.epsilon"],
    ),
    ("OPT023", config("online_yogi {\n  beta2: 1.0  #@\n}"), [f"{T}.online_yogi.beta2"]),
    ("OPT024", config("momentum {\n  momentum: 1.0  #@\n}"), [f"{T}.momentum.momentum"]),
    ("OPT025", config("lion {\n  beta1: 1.5  #@\n  beta2: 0.99\n}"), [f"{T}.lion.beta1"]),
    (
        "OPT026",
        config("centered_rms_prop {\n  rho: 0.9\n  epsilon: -1.0  #@\n}"),
        [f"{T}.centered_rms_prop.epsilon"],
    ),
    ("OPT027", config("adadelta {  #@\n  rho: 0.95\n}"), [f"{T}.adadelta.epsilon"]),
    (
        "OPT028",
        config("bounded_adagrad {\n  max_accumulator: -1.0  #@\n}"),
        [f"{T}.bounded_adagrad.max_accumulator"],
    ),
    (
        "OPT029",
        config("""
        frequency_aware_adagrad {  #@
          probability_exponent: 0.5
          max_lr_multiplier: 10.0
          accumulator_decay: 1.0
        }"""),
        [f"{T}.frequency_aware_adagrad.initial_accumulator_value"],
    ),
    (
        "OPT030",
        config(FE_OK.replace("tau: 0.1", "tau: 1.0  #@"), dimension="1"),
        [f"{T}.frequency_estimator.tau"],
    ),
    (
        "OPT031",
        config(FE_OK.replace("max_delta: 100.0", "max_delta: -1.0  #@"), dimension="1"),
        [f"{T}.frequency_estimator.max_delta"],
    ),
    ("OPT032", config(FE_OK, dimension="4  #@"), ["table_descriptor[0].dimension"]),
    (
        "OPT033",
        config("learning_rate {  #@\n  constant: 1.0\n}\n" + FE_OK, dimension="1"),
        [f"{T}.learning_rate"],
    ),
    (
        "OPT034",
        config(
            "weight_decay_factor: 0.5  #@\n"
            + FE_OK.replace("outlier_threshold: 10.0", "outlier_threshold: -1.0  #@"),
            dimension="1",
        ),
        [f"{T}.weight_decay_factor", f"{T}.frequency_estimator.outlier_threshold"],
    ),
    (
        "OPT035",
        config("rms_prop {\n  rho: 1.0  #@\n  momentum: -0.5  #@\n  epsilon: 1e-10\n}"),
        [f"{T}.rms_prop.rho", f"{T}.rms_prop.momentum"],
    ),
    (
        "OPT036",
        config("""
        frequency_aware_adagrad {
          probability_exponent: -0.5  #@
          max_lr_multiplier: 10.0
          accumulator_decay: 1.5  #@
          initial_accumulator_value: 0.1
        }"""),
        [
            f"{T}.frequency_aware_adagrad.probability_exponent",
            f"{T}.frequency_aware_adagrad.accumulator_decay",
        ],
    ),
    (
        "OPT037",
        config("learning_rate {\n  dynamic {\n  }\n}\nftrl {  #@\n  lr_power: -0.5\n}"),
        [f"{T}.ftrl.multiply_linear_by_lr"],
    ),
    ("OPT040", config("user_defined_program {  #@\n}"), [f"{T}.user_defined_program.program"]),
    ("OPT040", config(program(3, 0)), [f"{T}.user_defined_program.program"]),
    (
        "OPT041",
        config("learning_rate {  #@\n  constant: 0.1\n}\n" + program(4, 2).replace("  #@", "")),
        [f"{T}.learning_rate"],
    ),
    (
        "OPT041",
        config(
            "learning_rate {\n  dynamic {  #@\n    tag: 0\n  }\n}\n"
            + program(3, 2).replace("  #@", "")
        ),
        [f"{T}.learning_rate.dynamic"],
    ),
    (
        "OPT042",
        config("weight_decay_factor: 0.01  #@\nmdl_adagrad_light {\n}"),
        [f"{T}.weight_decay_factor"],
    ),
    ("OPT043", config("online_yogi {  #@\n  beta2: 0.999\n}"), [f"{T}.online_yogi"]),
    ("OPT044", config("bounded_adagrad {  #@\n}"), [f"{T}.bounded_adagrad"]),
    (
        "OPT045",
        config("weight_decay_factor: -0.01  #@\nadagrad {\n}"),
        [f"{T}.weight_decay_factor"],
    ),
    (
        "OPT046",
        config("multiply_weight_decay_factor_by_learning_rate: true  #@\nadagrad {\n}"),
        [f"{T}.multiply_weight_decay_factor_by_learning_rate"],
    ),
    (
        "OPT047",
        config("low_dimensional_packing_status: ENABLED  #@\nadam {\n  epsilon: 1e-07\n}"),
        [f"{T}.low_dimensional_packing_status"],
    ),
    (
        "OPT047",
        config("low_dimensional_packing_status: ENABLED  #@\nadagrad {\n}", dimension="8"),
        [f"{T}.low_dimensional_packing_status"],
    ),
    (
        "OPT048",
        config("""
        clipping_limits {
          lower {
            value: -1.0
          }
        }
        low_dimensional_packing_status: ENABLED  #@
        adagrad {
        }"""),
        [f"{T}.low_dimensional_packing_status"],
    ),
    (
        "OPT048",
        config(
            "low_dimensional_packing_status: ENABLED  #@\nftrl {\n  lr_power: -0.5\n}",
            dimension="2",
        ),
        [f"{T}.low_dimensional_packing_status"],
    ),
    (
        "OPT049",
        config("hot_id_replication_configuration {\n  status: MIGRATION_ONLY  #@\n}\nadagrad {\n}"),
        [f"{T}.hot_id_replication_configuration.status"],
    ),
    (
        "OPT050",
        config("""
        low_dimensional_packing_status: 7  #@
        hot_id_replication_configuration {
          status: 4  #@
        }
        adagrad {
        }"""),
        [f"{T}.low_dimensional_packing_status", f"{T}.hot_id_replication_configuration.status"],
    ),
]

# (rule, config text): near misses that must not trigger the rule
CLEAN = [
    ("OPT001", config("adagrad {\n}")),
    ("OPT002", config("learning_rate {\n  constant: 3.4028235e+38\n}\nadagrad {\n}")),
    ("OPT003", config("adam {\n  epsilon: 1e-07\n}\nweight_decay_factor: 1e-05")),
    ("OPT004", config("learning_rate {\n  constant: -0.0\n}\nadagrad {\n}")),
    ("OPT005", config("learning_rate {\n  constant: 0.0\n}\nassign {\n}")),
    ("OPT005", config("learning_rate {\n  constant: 0.0\n}\nftrl {\n}")),  # OPT014's case
    ("OPT005", config("learning_rate {\n  dynamic {\n  }\n}\nadagrad {\n}")),
    ("OPT010", config("adam {\n  beta1: 0.0\n  beta2: 0.999\n  epsilon: 1e-07\n}")),
    ("OPT010", config("adam {\n  beta1: nan\n}")),  # OPT003's finding, not a range error
    ("OPT011", config("adam {\n  beta1: 0.9\n  beta2: 0.999\n  epsilon: 1e-07\n}")),
    ("OPT012", config("adam {\n  epsilon: 1e-07\n}")),
    ("OPT013", config("learning_rate {\n  dynamic {\n  }\n}\nadam {\n  epsilon: 1e-07\n}")),
    (
        "OPT014",
        config("learning_rate {\n  constant: 0.0\n}\nftrl {\n  multiply_linear_by_lr: true\n}"),
    ),
    ("OPT015", config("ftrl {\n  l1: 0.5\n  l2: 0.5\n}")),
    ("OPT016", config("ftrl {\n  lr_power: 0.0\n}")),
    ("OPT017", config("ftrl {\n  beta: 0.1\n}")),
    ("OPT018", config("adagrad_momentum {\n  exponent: 2.0\n  epsilon: 1e-10\n}")),
    ("OPT019", config("adagrad_momentum {\n  exponent: 2.0\n  epsilon: 1e-10\n}")),
    ("OPT020", config("adagrad_momentum {\n  momentum: 0.0\n  beta2: 1.0\n}")),
    ("OPT021", config("proximal_adagrad {\n  l1: 0.1\n  l2: 0.0\n}")),
    ("OPT022", config("proximal_yogi {\n  beta1: 0.9\n  beta2: 0.999\n  epsilon: 0.001\n}")),
    ("OPT023", config("online_yogi {\n  beta2: 0.0\n}")),
    ("OPT024", config("momentum {\n  momentum: 0.9\n}")),
    ("OPT025", config("lion {\n  beta1: 1.0\n  beta2: 0.0\n}")),
    ("OPT026", config("rms_prop {\n  epsilon: 1e-10\n}")),
    ("OPT027", config("adadelta {\n  epsilon: 1e-07\n}")),
    ("OPT028", config("bounded_adagrad {\n  max_var_update: 0.0\n  max_accumulator: 10.0\n}")),
    ("OPT029", config("frequency_aware_adagrad {\n  initial_accumulator_value: 0.1\n}")),
    ("OPT030", config(FE_OK, dimension="1")),
    ("OPT031", config(FE_OK, dimension="1")),
    ("OPT032", config(FE_OK, dimension="1")),
    ("OPT032", config("adagrad {\n}", dimension="8")),
    ("OPT033", config("learning_rate {\n  dynamic {\n    tag: 1\n  }\n}\n" + FE_OK)),
    ("OPT034", config(FE_OK + "\nsimulated_quantization {\n  num_buckets: 4\n}", dimension="1")),
    ("OPT035", config("adadelta {\n  rho: 0.0\n  epsilon: 1e-07\n}")),
    (
        "OPT036",
        config("""
        frequency_aware_adagrad {
          probability_exponent: 0.0
          max_lr_multiplier: 10.0
          accumulator_decay: 1.0
          initial_accumulator_value: 0.1
        }"""),
    ),
    (
        "OPT037",
        config("learning_rate {\n  dynamic {\n  }\n}\nftrl {\n  multiply_linear_by_lr: true\n}"),
    ),
    ("OPT037", config("learning_rate {\n  constant: 0.1\n}\nftrl {\n}")),
    ("OPT040", config(program(3, 2).replace("  #@", ""))),
    ("OPT040", config(program(4, 2).replace("  #@", ""))),
    ("OPT041", config("learning_rate {\n  constant: 0.1\n}\n" + program(3, 2).replace("  #@", ""))),
    (
        "OPT041",
        config("learning_rate {\n  dynamic {\n  }\n}\n" + program(4, 2).replace("  #@", "")),
    ),
    ("OPT042", config("mdl_adagrad_light {\n  l2: 0.1\n}")),
    ("OPT042", config("weight_decay_factor: 0.01\nadagrad {\n}")),
    ("OPT043", config("adam {\n  epsilon: 1e-07\n}")),
    ("OPT044", config("adagrad {\n}")),
    ("OPT045", config("weight_decay_factor: 0.01\nadagrad {\n}")),
    (
        "OPT046",
        config(
            "weight_decay_factor: 0.01\n"
            "multiply_weight_decay_factor_by_learning_rate: true\nadagrad {\n}"
        ),
    ),
    ("OPT047", config("low_dimensional_packing_status: ENABLED\nadagrad {\n}")),
    ("OPT047", config("low_dimensional_packing_status: DISABLED\nadam {\n}", dimension="8")),
    ("OPT048", config("low_dimensional_packing_status: ENABLED\nadagrad {\n}")),
    (
        "OPT048",
        config(
            "clipping_limits {\n  lower {\n  }\n}\n"
            "low_dimensional_packing_status: ENABLED\nadagrad {\n}",
            dimension="8",
        ),
    ),
    ("OPT049", config("hot_id_replication_configuration {\n  status: DISABLED\n}\nadagrad {\n}")),
    (
        "OPT050",
        config(
            "low_dimensional_packing_status: DISABLED\n"
            "hot_id_replication_configuration {\n  status: MIGRATION_ONLY\n}\n"
            "adagrad {\n}"
        ),
    ),
]


test_rule_triggers_at_the_marked_field, test_rule_does_not_trigger, test_family_is_complete = (
    family_tests(SEVERITY, TRIGGER, CLEAN)
)


def test_messages_name_value_and_expected_range(tmp_path: Path) -> None:
    text = config("adam {\n  beta1: 1.0\n  beta2: 0.999\n  epsilon: 1e-07\n}")
    (d,) = text_findings(tmp_path, "OPT010", text)
    assert "adam.beta1 is 1.0" in d.message
    assert "0 <= beta1 < 1" in d.message
    assert d.hint is not None and "0.9" in d.hint


def test_float32_values_print_in_shortest_form(tmp_path: Path) -> None:
    # 0.1 is stored as float32 0x3DCCCCCD; the message shows "0.1", not 0.10000000149011612.
    text = config("learning_rate {\n  constant: -0.1\n}\nadagrad {\n}")
    (d,) = text_findings(tmp_path, "OPT004", text)
    assert "is -0.1," in d.message
    assert d.hint is not None and "0.1" in d.hint


@pytest.mark.parametrize(
    ("bits", "text"),
    [
        ("3dcccccd", "0.1"),
        ("42c80000", "100.0"),
        ("501502f9", "10000000000.0"),
        ("7f7fffff", "3.4028235e+38"),
        ("00000001", "1e-45"),
        ("80000000", "-0.0"),
        ("3eaaaaab", "0.33333334"),
        ("7f800000", "inf"),
        ("7fc00000", "nan"),
    ],
)
def test_fmt_writes_float32_like_the_text_format(bits: str, text: str) -> None:
    (value,) = struct.unpack(">f", bytes.fromhex(bits))
    assert fmt(value) == text


def test_one_nan_value_gives_one_diagnostic(tmp_path: Path) -> None:
    text = config("adam {\n  beta1: nan\n  beta2: 0.999\n  epsilon: 1e-07\n}")
    path = tmp_path / "c.pbtxt"
    path.write_text(text)
    found = [d for d in validate(str(path), select=["OPT"]) if d.field_path.endswith("beta1")]
    assert [d.rule for d in found] == ["OPT003"]


def test_several_tables_are_reported_separately(tmp_path: Path) -> None:
    one = config("adam {\n  beta1: 0.9\n  beta2: 1.0\n  epsilon: 1e-07\n}")
    table = one[: one.index("mode:")]
    text = table + table.replace('"t"', '"u"') + "mode: TRAINING\n"
    found = text_findings(tmp_path, "OPT011", text)
    assert [(d.field_path, d.line) for d in found] == [
        (f"{T}.adam.beta2", 8),
        ("table_descriptor[1].optimization_parameters.adam.beta2", 20),
    ]
    assert "table_descriptor[1] 'u'" in found[1].message


FAMILIES = ["OPT", "ACC", "CLIP", "QNT", "SIZE", "DEP"]


def _golden_configs() -> list[Path]:
    folder = golden("configs")
    return sorted(p for p in folder.iterdir() if p.suffix in (".pbtxt", ".binpb", ".json"))


def test_families_never_crash_on_golden_configs() -> None:
    """TensorFlow-written configs full of extreme, negative, NaN and undeclared values."""
    for path in _golden_configs():
        for d in validate(
            str(path), select=FAMILIES, show_derived=True, options={"memory_budget_bytes": 1}
        ):
            assert "internal error" not in d.message, (path.name, d)


def test_families_never_crash_on_mutated_binary() -> None:
    seeds = [p.read_bytes() for p in _golden_configs() if p.suffix == ".binpb"]
    seeds = [s for s in seeds if s]
    rules = [RULES[r] for r in sorted(RULES) if r.startswith(tuple(FAMILIES))]

    @settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(seeds), st.data())
    def check(seed: bytes, data: st.DataObject) -> None:
        raw = bytearray(seed)
        for _ in range(data.draw(st.integers(1, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        config = TPUEmbeddingConfiguration()
        try:
            config.ParseFromString(bytes(raw))
        except Exception:  # noqa: BLE001 - an unparsable mutation is PARSE001's business
            return
        for d in run_rules(config, rules, options={"memory_budget_bytes": 1}):
            assert "internal error" not in d.message, d

    check()
