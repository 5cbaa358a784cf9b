"""``tpuemb plan``'s remaining gaps (issue 34 item 6): tensor cores left out by the host count
warned about as validate warns, a ``--compare`` variant equal to the configuration shown as its
own column, one host of a multi-host slice, quantization in ``inspect``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.pbtxt"
#: the quickstart's features and their tables' rows (user, item, item, category)
VOCABULARY = {"f0": 20000, "f1": 50000, "f2": 50000, "f3": 1000}


def _config(tmp_path: Path, cores: int, hosts: int = 1) -> Path:
    text = QUICKSTART.read_text()
    assert "num_hosts: 1\nnum_tensor_cores: 2\n" in text
    path = tmp_path / f"c{cores}h{hosts}.pbtxt"
    path.write_text(text.replace("num_hosts: 1\nnum_tensor_cores: 2\n",
                                 f"num_hosts: {hosts}\nnum_tensor_cores: {cores}\n"))
    return path


def _sample(tmp_path: Path, bags: int, steps: int = 1) -> str:
    """``steps`` steps of ``bags`` one-id bags per feature (ids spread over each table)."""
    rng = np.random.default_rng(6)
    arrays: dict[str, Any] = {}
    for s in range(steps):
        for f, (name, vocabulary) in enumerate(VOCABULARY.items()):
            del name
            arrays[f"s{s}/f{f}/ids"] = rng.integers(0, vocabulary, bags).astype(np.int64)
            arrays[f"s{s}/f{f}/row_splits"] = np.arange(bags + 1, dtype=np.int64)
    path = tmp_path / f"B{bags}.npz"
    np.savez(path, **arrays)
    return str(path)


def _plan(*args: str) -> dict[str, Any]:
    result = run_cli("plan", *args, "--format", "json", "-q")
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_hosts_leaving_cores_out_warns_as_validate_does(tmp_path: Path) -> None:
    """8 tensor cores on 3 hosts: each host drives 8 // 3 = 2 devices, so the per-chip memory
    has 6 units and 2 cores are left out; plan reports validate's TBL010 (the same message
    validate gives for num_hosts: 3) with how many cores the memory leaves out."""
    config = _config(tmp_path, 8)
    sample = _sample(tmp_path, 8 * 64)  # a configured batch: 8 cores x 64 bags
    report = _plan(str(config), "--ids", sample, "--hosts", "3")
    (chips,) = report["memory"]["breakdown"]
    assert chips["level"] == "chip" and len(chips["units"]) == 6
    (finding,) = [d for d in report["findings"] if d["rule"] == "TBL010"]
    validated = json.loads(run_cli("validate", str(_config(tmp_path, 8, 3)), "--format",
                                   "json").stdout)
    (rule,) = [d for f in validated["files"] for d in f["diagnostics"] if d["rule"] == "TBL010"]
    assert (finding["message"], finding["severity"]) == (rule["message"], rule["severity"])
    assert finding["hint"] == ("the memory per chip counts 6 of the 8 TensorCores (2 per host): "
                               "2 left out")
    sarif = json.loads(run_cli("plan", str(config), "--ids", sample, "--hosts", "3",
                               "--format", "sarif", "-q").stdout)
    run = sarif["runs"][0]
    (result,) = [r for r in run["results"] if r["ruleId"] == "TBL010"]
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "TBL010"
    # 4 hosts divide 8 cores: nothing to say
    quiet = _plan(str(config), "--ids", sample, "--hosts", "4")
    assert not [d for d in quiet["findings"] if d["rule"] == "TBL010"]


def test_compare_equal_to_the_configuration_is_its_own_column(tmp_path: Path) -> None:
    """A 4-host configuration compared with hosts=4 (and with a v6e-16 slice, 16 chips / 4 per
    host = 4 hosts): each asked-for variant is a column pair of its own, with the numbers of the
    configuration as given."""
    config = _config(tmp_path, 8, 4)
    sample = _sample(tmp_path, 8 * 64)
    report = _plan(str(config), "--ids", sample, "--compare", "hosts=4,2",
                   "--compare", "topology=v6e-16")
    rows = {row["name"]: row for row in report["what_if"]}
    assert list(rows) == ["as configured (DIV_DEFAULT)", "MOD", "hosts=4 DIV_DEFAULT",
                          "hosts=4 MOD", "hosts=2 DIV_DEFAULT", "hosts=2 MOD",
                          "v6e-16 DIV_DEFAULT", "v6e-16 MOD"]
    for same in ("hosts=4", "v6e-16"):
        for strategy, first in (("DIV_DEFAULT", "as configured (DIV_DEFAULT)"), ("MOD", "MOD")):
            assert {**rows[f"{same} {strategy}"], "name": first} == rows[first]
    assert rows["hosts=2 MOD"]["units"] == 2
    text = run_cli("plan", str(config), "--ids", sample, "--compare", "hosts=4", "-q").stdout
    assert "hosts=4 DIV_DEFAULT" in text


# One table of 64 rows on 4 chips x 2 SparseCores (N = 8), a global batch of 32 samples: 8 per
# chip, 4 per SparseCore; limits 2 / 2. On 2 hosts, a host holds 2 chips and reads 16 samples.
HOST_SPEC = '''
from tpuemb_cfg.sparsecore.jte import FeatureSpec, SGDOptimizerSpec, TableSpec

global_device_count = 4
num_sc_per_device = 2
t = TableSpec(name="t", vocabulary_size=64, embedding_dim=8, initializer=None,
              optimizer=SGDOptimizerSpec(learning_rate=0.1), combiner="sum",
              max_ids_per_partition=2, max_unique_ids_per_partition=2)
feature_specs = {"t": FeatureSpec(name="t", table_spec=t, input_shape=[32, 1],
                                  output_shape=[32, 8])}
'''


def test_one_host_of_a_multi_host_slice(tmp_path: Path) -> None:
    """32 rows of id 0. Whole slice: 1 step of 32 samples on 4 local chips; each of the 8
    SparseCores sends 4 entries of row 0 to partition 0 and keeps 2: 16 dropped. Host 1 of 2:
    its 2 chips read 16 samples a step, so 2 steps, 4 SparseCores each dropping 2 a step: 16
    dropped, every step's maximum still 4 ids (1 distinct)."""
    spec = tmp_path / "host.py"
    spec.write_text(HOST_SPEC)
    path = tmp_path / "B.npz"
    np.savez(path, **{"s0/f0/ids": np.zeros(32, np.int64),
                      "s0/f0/row_splits": np.arange(33, dtype=np.int64)})
    whole = _plan(str(spec), "--ids", str(path), "--hosts", "2")
    one = _plan(str(spec), "--ids", str(path), "--hosts", "2", "--host-index", "1")
    for report, steps, devices, host, bags in ((whole, 1, 4, None, 32), (one, 2, 2, 1, 16)):
        limits = report["limits"]
        assert (limits["steps"], limits["local_devices"], limits["host_index"]) == (
            steps, devices, host)
        assert report["configured_bags"] == {"t": bags}
        (stack,) = limits["stacks"]
        assert (stack["observed_max_ids"], stack["observed_max_unique_ids"]) == (4, 1)
        assert stack["current"]["dropped"] == 16
    text = run_cli("plan", str(spec), "--ids", str(path), "--hosts", "2", "--host-index", "1",
                   "-q").stdout
    assert "2 step(s), host 1: its 2 chip(s))" in text
    bad = run_cli("plan", str(spec), "--ids", str(path), "--hosts", "2", "--host-index", "2")
    assert bad.exit_code == 2
    assert "--host-index 2: the slice has 2 host(s), so the index is 0 to 1" in bad.output
    legacy = run_cli("plan", str(QUICKSTART), "--ids", _sample(tmp_path, 128), "--host-index",
                     "0")
    assert legacy.exit_code == 2 and "only a SparseCore slice" in legacy.output


QUANTIZED_JAX = '''
from tpuemb_cfg.sparsecore.jte import FeatureSpec, QuantizationConfig, SGDOptimizerSpec, TableSpec

global_device_count = 2
num_sc_per_device = 4
t = TableSpec(name="t", vocabulary_size=64, embedding_dim=8, initializer=None,
              optimizer=SGDOptimizerSpec(learning_rate=0.1), combiner="sum",
              quantization_config=QuantizationConfig(min_value=-2.0, max_value=2.0,
                                                     num_buckets=256))
u = TableSpec(name="u", vocabulary_size=64, embedding_dim=16, initializer=None,
              optimizer=SGDOptimizerSpec(learning_rate=0.1), combiner="sum")
feature_specs = {"t": FeatureSpec(name="t", table_spec=t, input_shape=[32, 1],
                                  output_shape=[32, 8]),
                 "u": FeatureSpec(name="u", table_spec=u, input_shape=[32, 1],
                                  output_shape=[32, 16])}
'''
QUANTIZED_TF = '''
from tpuemb_cfg.embedding import SGD, FeatureConfig, QuantizationConfig, TableConfig

topology = "v6e-2"
t = TableConfig(vocabulary_size=64, dim=8, name="t", combiner="sum", optimizer=SGD(0.1),
                quantization_config=QuantizationConfig(num_buckets=256, lower=-2.0, upper=2.0))
feature_config = {"f": FeatureConfig(t, output_shape=[8])}
'''


def test_inspect_shows_a_sparsecore_tables_quantization(tmp_path: Path) -> None:
    """Each API's quantization config, as the spec wrote it, under its table (text and JSON);
    a table without one shows none."""
    for name, text, written in (
            ("jax", QUANTIZED_JAX,
             "QuantizationConfig(min_value=-2.0, max_value=2.0, num_buckets=256)"),
            ("tf", QUANTIZED_TF, "QuantizationConfig(num_buckets=256, lower=-2.0, upper=2.0)")):
        spec = tmp_path / f"quantized_{name}.py"
        spec.write_text(text)
        shown = run_cli("inspect", str(spec)).stdout
        lines = shown.splitlines()
        at = lines.index("  t: 64 x 8 -> 64 x 8, row offset 0, rotation 0")
        assert lines[at + 1] == f"    quantization: {written}"
        assert shown.count("quantization:") == 1
        summary = json.loads(run_cli("inspect", "--json", str(spec)).stdout)
        tables = {t["name"]: t for s in summary["stacks"] for t in s["tables"]}
        assert tables["t"]["quantization"] == written
        assert all(t["quantization"] is None for n, t in tables.items() if n != "t")
    # legacy: the table's simulated quantization beside its optimizer (examples/specs/ranking:
    # price_bucket, 256 buckets over [-2, 2])
    legacy = run_cli("inspect", str(ROOT / "examples" / "specs" / "ranking.pbtxt")).stdout
    (row,) = [line for line in legacy.splitlines() if " price_bucket " in line]
    assert "quantized 256 in [-2.0, 2.0]" in row


def test_host_index_of_the_wrong_type_is_a_type_error(tmp_path: Path) -> None:
    from tpuemb_cfg.planner.planning import PlanOptions
    from tpuemb_cfg.session import open_plan

    spec = tmp_path / "host.py"
    spec.write_text(HOST_SPEC)
    path = tmp_path / "B.npz"
    np.savez(path, **{"s0/f0/ids": np.zeros(32, np.int64),
                      "s0/f0/row_splits": np.arange(33, dtype=np.int64)})
    for bad in ("1", 1.0, True):
        with pytest.raises(TypeError, match="PlanOptions.host_index: expected a whole number"):
            open_plan(str(spec), str(path), options=PlanOptions(host_index=bad))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="PlanOptions.host_index: expected at least 0, got -1"):
        PlanOptions(host_index=-1)
