"""The platform table (tpuemb_cfg/base/platform.py): its records against Google's Cloud TPU pages,
SIZE004 and ``plan`` holding a chip against the same HBM, the docs' chip tables, and a new chip
kind being one record."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import run_cli, zipf_sample
from rulecheck import text_findings

from tpuemb_cfg.base.platform import (
    GIB,
    PLATFORMS,
    chip_names,
    find_chip,
    jax_sparse_core_counts,
    legacy_chips,
    sparsecore_chips,
)
from tpuemb_cfg.base.sparsecore_defaults import DEFAULT_MAX_IDS_PER_PARTITION
from tpuemb_cfg.model.derived import TPU_DEVICE_MEMORY
from tpuemb_cfg.sparsecore.topology import CHIPS, parse_topology

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "examples" / "quickstart.pbtxt")

#: Google's Cloud TPU pages, written out again: HBM per chip in GiB, TensorCores and SparseCores
#: per chip (system-architecture page for v2-v4; the v5e, v5p, v6e and TPU7x pages).
DOCUMENTED = {
    "v2": (16, 2, 0), "v3": (32, 2, 0), "v4": (32, 2, 4), "v5e": (16, 1, 0),
    "v5p": (95, 2, 4), "v6e": (32, 1, 2), "tpu7x": (192, 2, 4),
}  # fmt: skip


def test_records_match_the_cloud_tpu_pages() -> None:
    assert {c.key: (c.hbm_bytes // 2**30, c.tensor_cores_per_chip, c.sparse_cores_per_chip)
            for c in PLATFORMS} == DOCUMENTED
    assert all(c.hbm_bytes % 2**30 == 0 for c in PLATFORMS)  # GiB, never GB
    assert all(c.hbm_source.startswith("https://cloud.google.com/tpu/docs/") for c in PLATFORMS)


def test_tensorflow_and_jax_views_of_tpu7x_differ() -> None:
    tpu7x = CHIPS["tpu7x"]
    # jax-tpu-embedding: two devices of 2 SparseCores and 96 GiB; TensorFlow: one of 4.
    assert (tpu7x.devices_per_chip, tpu7x.sparse_cores_per_device,
            tpu7x.hbm_bytes_per_device) == (2, 2, 96 * 2**30)
    assert (tpu7x.tf_devices_per_chip, tpu7x.tf_sparse_cores_per_device) == (1, 4)
    assert tpu7x.note
    assert jax_sparse_core_counts() == (2, 4)


def test_views_are_the_table() -> None:
    assert list(CHIPS) == ["v5p", "v6e", "tpu7x"]
    assert all(CHIPS[c.key] is c for c in sparsecore_chips())
    # SIZE004: v2 and v3 count a TensorCore as a device (half the chip), the rest a chip.
    assert TPU_DEVICE_MEMORY == {
        "v2": 8 * GIB, "v3": 16 * GIB, "v4": 32 * GIB, "v5e": 16 * GIB, "v5p": 95 * GIB,
        "v6e": 32 * GIB,
    }
    assert find_chip("Ironwood") is CHIPS["tpu7x"] and find_chip("v5litepod").key == "v5e"
    assert find_chip("v7") is None
    assert chip_names(sparsecore_chips(), last=" or ") == "v5p, v6e or TPU7x"


def _size004_budget(tmp_path: Path, generation: str) -> int:
    """The device memory SIZE004 holds a ``generation`` device against, from its message: one
    Adagrad table with accumulation of 200M rows x 128 on one device (307 GB) fits none."""
    text = (
        'table_descriptor { name: "big" vocabulary_size: 200000000 dimension: 128\n'
        "  optimization_parameters { adagrad {} learning_rate { constant: 0.1 }\n"
        "    gradient_accumulation_status: ENABLED } }\n"
        "mode: TRAINING\nnum_hosts: 1\nnum_tensor_cores: 1\n"
        "feature_descriptor { table_id: 0 input_shape: 128 }\n"
    )
    (d,) = text_findings(tmp_path, "SIZE004", text, options={"tpu_generation": generation})
    match = re.search(rf"more than the ([\d,]+) bytes \([^)]*\) of a TPU {generation} device",
                      d.message)
    assert match, d.message
    return int(match.group(1).replace(",", ""))


@pytest.fixture(scope="module")
def legacy_sample(tmp_path_factory: pytest.TempPathFactory) -> str:
    zipf = zipf_sample()
    path = tmp_path_factory.mktemp("platform") / "q.npz"
    columns = zipf.zipf_columns(zipf.schema_of(QUICKSTART), 128, exponent=1.3, max_bag=2)
    zipf.write(str(path), columns, 64)
    return str(path)


def _plan_capacity(sample: str, topology: str) -> int:
    """The HBM ``tpuemb plan`` holds a legacy configuration's device against on ``topology``."""
    result = run_cli("plan", QUICKSTART, "--ids", sample, "--topology", topology,
                     "--format", "json")
    assert result.exit_code in (0, 1), result.output
    (level,) = json.loads(result.stdout)["memory"]["breakdown"]
    return int(level["capacity_bytes"])


@pytest.mark.parametrize("chip", [c.key for c in sparsecore_chips() if c.legacy])
def test_size004_and_plan_agree_on_each_chip(tmp_path: Path, legacy_sample: str,
                                             chip: str) -> None:
    size004 = _size004_budget(tmp_path, chip)
    plan = _plan_capacity(legacy_sample, f"{chip}:1")
    assert size004 == plan == DOCUMENTED[chip][0] * 2**30


def test_size004_budget_of_every_generation(tmp_path: Path) -> None:
    for chip in legacy_chips():
        expected = DOCUMENTED[chip.key][0] * 2**30 // chip.tf_devices_per_chip
        assert _size004_budget(tmp_path, chip.key) == expected, chip.name


def test_tpu7x_device_in_plan(legacy_sample: str) -> None:
    # Not a SIZE004 generation (TensorFlow does not run on TPU7x); plan holds each device
    # against half the chip.
    assert "tpu7x" not in TPU_DEVICE_MEMORY
    assert parse_topology("tpu7x-8").hbm_bytes_per_device == 96 * 2**30


def test_a_new_chip_kind_is_one_record(tmp_path: Path) -> None:
    # A copy of the table with one more record, installed before anything reads it: every view,
    # option and text that lists chips picks it up.
    script = textwrap.dedent("""
        import dataclasses, json
        import tpuemb_cfg.base.platform as platform
        new = dataclasses.replace(platform.PLATFORMS[-1], name="TPU9z", hbm_bytes=512 << 30,
                                  aliases=("9z",), sparse_cores_per_chip=8, legacy=True,
                                  hbm_source="https://cloud.google.com/tpu/docs/tpu9z")
        platform.PLATFORMS = (*platform.PLATFORMS, new)
        from click.testing import CliRunner
        from tpuemb_cfg.cli import main
        from tpuemb_cfg.model.derived import TPU_DEVICE_MEMORY
        from tpuemb_cfg.validation.settings import parse_tpu
        from tpuemb_cfg.sparsecore.topology import CHIPS, parse_topology, chip_kind
        from tpuemb_cfg.rules._facts import FACTS
        runner = CliRunner()
        def unknown():
            try:
                chip_kind("v1")
            except ValueError as exc:
                return str(exc)
        print(json.dumps({
            "chips": list(CHIPS),
            "memory": TPU_DEVICE_MEMORY.get("tpu9z"),
            "tpu": parse_tpu("TPU9z"),
            "slice": parse_topology("tpu9z-16").describe(),
            "alias": chip_kind("9z").name,
            "unknown": unknown(),
            "facts": FACTS["sparse_cores_per_device"],
            "validate_help": " ".join(runner.invoke(main, ["validate", "--help"]).output.split()),
            "plan_help": " ".join(runner.invoke(main, ["plan", "--help"]).output.split()),
            "explain": runner.invoke(main, ["explain", "SIZE004"]).output,
        }))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300, check=True).stdout
    seen = json.loads(out)
    assert seen["chips"] == ["v5p", "v6e", "tpu7x", "tpu9z"]
    assert seen["memory"] == 512 << 30
    assert seen["tpu"] == "tpu9z"
    assert seen["slice"] == "TPU9z: 8 chips, 16 devices, 2 hosts, 64 SparseCores"
    assert seen["alias"] == "TPU9z"
    assert seen["unknown"].endswith("expected one of v5p, v6e, TPU7x, TPU9z")
    assert seen["facts"] == "v5p 4, v6e 2, TPU7x 2, TPU9z 4"
    assert "(v2, v3, v4, v5e, v5p, v6e, tpu9z)" in seen["validate_help"]
    assert "v5p, TPU7x and TPU9z count TensorCores" in seen["plan_help"]
    assert "TPU9z 512 GiB per chip" in seen["explain"]


# -- the docs' chip tables ------------------------------------------------------------------------

def _rows(page: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table of ``docs/page`` whose header line starts with ``header``."""
    lines = (ROOT / "docs" / page).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _gib(text: str) -> int:
    match = re.fullmatch(r"(\d+) GiB", text)
    assert match, f"{text!r}: HBM in the docs is written in GiB"
    return int(match.group(1)) * 2**30


def test_validate_md_size004_table_is_the_table() -> None:
    rows = _rows("validate.md", "| generation | HBM per chip")
    assert [r[0].strip("`") for r in rows] == [c.key for c in legacy_chips()]
    for row, chip in zip(rows, legacy_chips(), strict=True):
        assert _gib(row[1]) == chip.hbm_bytes, chip.name
        assert int(row[2].split()[0]) == chip.tf_devices_per_chip, chip.name
        assert _gib(row[3]) == TPU_DEVICE_MEMORY[chip.key], chip.name


def test_sparsecore_md_slice_table_is_the_table() -> None:
    rows = _rows("sparsecore.md", "| kind | `KIND-N` counts")
    assert [r[0].strip("`") for r in rows] == [c.name for c in sparsecore_chips()]
    for row, chip in zip(rows, sparsecore_chips(), strict=True):
        assert row[1].startswith(chip.type_unit), chip.name
        per_chip = re.fullmatch(r"(\d+) TensorCores?, (\d+) SparseCores, (\d+ GiB)", row[2])
        assert per_chip, row[2]
        assert (int(per_chip.group(1)), int(per_chip.group(2)), _gib(per_chip.group(3))) == (
            chip.tensor_cores_per_chip, chip.sparse_cores_per_chip, chip.hbm_bytes)
        assert int(row[3].split()[0]) == chip.devices_per_chip, chip.name
        if chip.devices_per_chip > 1:
            assert f"{chip.sparse_cores_per_device} SparseCores" in row[3]
            assert f"{chip.hbm_bytes_per_device // 2**30} GiB" in row[3]


def test_plan_md_names_each_chip_hbm() -> None:
    text = " ".join((ROOT / "docs" / "plan.md").read_text(encoding="utf-8").split())
    listing = ", ".join(f"{c.name} {c.hbm_bytes // 2**30} GiB" for c in sparsecore_chips())
    assert f"(`tpuemb_cfg.base.platform.PLATFORMS`: {listing}," in text


def test_docs_default_limit() -> None:
    rules = (ROOT / "docs" / "sparsecore" / "rules.md").read_text(encoding="utf-8")
    assert f"gets the default {DEFAULT_MAX_IDS_PER_PARTITION}" in rules
