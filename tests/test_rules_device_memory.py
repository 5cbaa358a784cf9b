"""SIZE004 and the per-device share of SIZE002: the tables' bytes on one TPU device.

One Adagrad table with accumulation (S = 3), dimension 128 (no padding): 1,536 bytes per row.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rulecheck import invoke, text_findings, write_config

from tpuemb_cfg.model.derived import TPU_DEVICE_MEMORY
from tpuemb_cfg.validation.validator import validate

ROW = 128 * 4 * 3


def config(rows: int, hosts: int, cores: int) -> str:
    return (
        f'table_descriptor {{ name: "big" vocabulary_size: {rows} dimension: 128\n'
        "  optimization_parameters { adagrad {} learning_rate { constant: 0.1 }\n"
        "    gradient_accumulation_status: ENABLED } }\n"
        f"mode: TRAINING\nnum_hosts: {hosts}\nnum_tensor_cores: {cores}\n"
        "feature_descriptor { table_id: 0 input_shape: 128 }\n"
    )


def test_device_memory_table_matches_the_documented_chips() -> None:
    gib = 2**30
    # per chip (GiB, Google's Cloud TPU pages) / devices per chip (v2, v3: one device per
    # TensorCore; v4, v5p: megacore)
    assert TPU_DEVICE_MEMORY == {
        "v2": 16 * gib // 2, "v3": 32 * gib // 2, "v4": 32 * gib,
        "v5e": 16 * gib, "v5p": 95 * gib, "v6e": 32 * gib,
    }


def test_default_budget_is_the_largest_device(tmp_path: Path) -> None:
    # 70M rows on 1 host with 1 device: 107.5 GB per device, more than a v5p's 95 GiB (102 GB).
    (d,) = text_findings(tmp_path, "SIZE004", config(70_000_000, 1, 1))
    assert (d.severity, d.field_path, d.line, d.column) == ("warning", "num_tensor_cores", 6, 1)
    assert d.message == (
        "each TPU device must hold about 107,520,000,000 bytes (100.1 GiB) of tables (estimate: "
        "the fullest host's tables over its 1 device(s)), more than the 102,005,473,280 bytes "
        "(95 GiB) of the largest TPU device (v5p; no known generation has more)"
    )
    assert d.hint is not None and d.hint.startswith("add hosts")
    # The same tables over 4 devices fit a v5p device, so nothing is reported by default.
    assert text_findings(tmp_path, "SIZE004", config(70_000_000, 1, 4)) == []


def test_named_generation(tmp_path: Path) -> None:
    # 20M rows over 2 hosts of 4 devices: 2.5M rows = 3.84 GB per device.
    text = config(20_000_000, 2, 8)
    assert text_findings(tmp_path, "SIZE004", text, options={"tpu_generation": "v5e"}) == []
    (d,) = text_findings(tmp_path, "SIZE004", config(100_000_000, 2, 8),
                         options={"tpu_generation": "v2"})
    assert "about 19,200,000,000 bytes (17.9 GiB)" in d.message
    assert "more than the 8,589,934,592 bytes (8 GiB) of a TPU v2 device" in d.message
    assert d.hint is not None and d.hint.startswith("fits v4, v5p, v6e; ")


def test_unknown_cores_or_hosts_report_nothing(tmp_path: Path) -> None:
    assert text_findings(tmp_path, "SIZE004", config(70_000_000, 2, 1)) == []
    assert text_findings(tmp_path, "SIZE004", config(70_000_000, 0, 8)) == []


def test_show_derived_gives_the_share_and_the_generations(tmp_path: Path) -> None:
    (d,) = text_findings(tmp_path, "SIZE002", config(20_000_000, 2, 8))
    assert d.message.endswith(
        "; per TPU device (4 per host): about 3,840,000,000 bytes (3.6 GiB) of tables, fits "
        "v2, v3, v4, v5e, v5p, v6e"
    )
    (d,) = text_findings(tmp_path, "SIZE002", config(100_000_000, 2, 8))
    assert d.message.endswith("fits v4, v5p, v6e, too large for v2, v3, v5e")


def test_setting_and_option(tmp_path: Path) -> None:
    path = write_config(tmp_path, config(100_000_000, 2, 8))
    assert not [d for d in validate(path) if d.rule == "SIZE004"]
    result = invoke("validate", "--tpu", "V2", path)
    assert result.exit_code == 0 and "warning[SIZE004]" in result.output
    (tmp_path / "pyproject.toml").write_text('[tool.tpuemb]\ntpu = "v3"\n')
    result = invoke("validate", path)
    assert "warning[SIZE004]" in result.output and "TPU v3 device" in result.output
    assert "warning[SIZE004]" not in invoke("validate", "--tpu", "v4", path).output


@pytest.mark.parametrize("value", ["v9", "tpu"])
def test_unknown_generation_is_refused(tmp_path: Path, value: str) -> None:
    path = write_config(tmp_path, config(1000, 1, 1))
    result = invoke("validate", "--tpu", value, path)
    assert result.exit_code == 2
    assert "one of v2, v3, v4, v5e, v5p, v6e" in result.output
    (tmp_path / "pyproject.toml").write_text(f'[tool.tpuemb]\ntpu = "{value}"\n')
    result = invoke("validate", path)
    assert result.exit_code == 2 and "tool.tpuemb.tpu" in result.output
