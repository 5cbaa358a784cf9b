"""Slices named as Cloud TPU names them (``tpuemb_cfg.sparsecore.topology``).

Hand-derived from Google's pages: https://cloud.google.com/tpu/docs/v5p (v5p-N counts
TensorCores, 2 per chip; v5p-8 is 4 chips on one host, v5p-64 32 chips on 8 hosts; 4
SparseCores and 95 GiB per chip), https://cloud.google.com/tpu/docs/v6e (v6e-N counts chips;
v6e-8 one host of 8 chips, v6e-16 and up 4 chips per host; 2 SparseCores, 32 GiB per chip),
https://cloud.google.com/tpu/docs/tpu7x (2 TensorCores, 4 SparseCores, 192 GiB per chip, seen
as two devices; 4 chips per VM). jax-tpu-embedding's NUM_SC_PER_DEVICE_MAP: TPU7x 2 per device.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
from tpuemb_cfg.sparsecore.feed import stack
from tpuemb_cfg.sparsecore.topology import parse_topology

GIB = 1 << 30


@pytest.mark.parametrize(("text", "chips", "devices", "hosts", "sparse_cores"), [
    ("v5p-8", 4, 4, 1, 16),      # 8 TensorCores = 4 chips, one host
    ("v5p:8", 8, 8, 2, 32),      # 8 chips, 4 per host
    ("v5p-64", 32, 32, 8, 128),  # the v5p page's table: 32 chips on 8 hosts
    ("v6e-8", 8, 8, 1, 16),      # v6e counts chips; v6e-8 is one host of 8
    ("v6e-16", 16, 16, 4, 32),   # v6e-16 and larger: 4 chips per host
    ("v6e:4", 4, 4, 1, 8),
    ("tpu7x-8", 4, 8, 1, 16),    # 8 TensorCores = 4 chips = 8 devices of 2 SparseCores
    ("TPU7x:4", 4, 8, 1, 16),
    ("ironwood-64", 32, 64, 8, 128),
])
def test_accelerator_types_and_chip_counts(text: str, chips: int, devices: int, hosts: int,
                                           sparse_cores: int) -> None:
    t = parse_topology(text)
    assert (t.chips, t.devices, t.hosts, t.num_sparse_cores) == (chips, devices, hosts,
                                                                 sparse_cores)


def test_per_chip_and_per_device_facts() -> None:
    v5p, v6e, ironwood = (parse_topology(t) for t in ("v5p-8", "v6e-8", "tpu7x-8"))
    assert (v5p.sparse_cores_per_chip, v5p.sparse_cores_per_device) == (4, 4)
    assert (v6e.sparse_cores_per_chip, v6e.sparse_cores_per_device) == (2, 2)
    assert (ironwood.sparse_cores_per_chip, ironwood.sparse_cores_per_device) == (4, 2)
    assert v5p.kind is not None and v6e.kind is not None and ironwood.kind is not None
    assert (v5p.kind.hbm_bytes, v5p.hbm_bytes_per_device) == (95 * GIB, 95 * GIB)
    assert (v6e.kind.hbm_bytes, v6e.hbm_bytes_per_device) == (32 * GIB, 32 * GIB)
    assert (ironwood.kind.hbm_bytes, ironwood.hbm_bytes_per_device) == (192 * GIB, 96 * GIB)
    assert ironwood.describe() == "TPU7x: 4 chips, 8 devices, 1 host, 16 SparseCores"


@pytest.mark.parametrize(("text", "message"), [
    ("v5p-3", r"count TensorCores \(2 per chip\), so N must be a multiple of 2 .* write "
              r"v5p:3 for 3 chips"),
    ("tpu7x-1", "write TPU7x:1 for 1 chip$"),
    ("v5p:0", "at least 1"),
    ("v4-8", "unknown TPU chip kind 'v4'"),
    ("v5p 8", "expected an accelerator type KIND-N"),
])
def test_bad_slices(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_topology(text)


def _spec(tmp_path: Path, topology: str, batch: int = 64) -> str:
    path = tmp_path / "spec.py"
    path.write_text(f'''
from tpuemb_cfg.sparsecore.jte import AdagradOptimizerSpec, FeatureSpec, TableSpec

topology = "{topology}"
adagrad = AdagradOptimizerSpec(learning_rate=0.05, initial_accumulator_value=0.1)
user = TableSpec(name="user", vocabulary_size=100_000, embedding_dim=8, initializer=None,
                 optimizer=adagrad, combiner="sum")
feature_specs = {{
    "user": FeatureSpec(name="user", table_spec=user, input_shape=[{batch}, 1],
                        output_shape=[{batch}, 8]),
}}
''')
    return str(path)


def test_inspect_reads_v5p_64_as_32_chips(tmp_path: Path) -> None:
    """The user's `v5p-64` from gcloud: N = 32 chips x 4 = 128 SparseCores; jax pads the
    vocabulary to a multiple of 8 x 128 = 1024: 100,000 -> 100,352, 784 rows per SparseCore
    (read as 64 chips it was 392, half the memory)."""
    spec = _spec(tmp_path, "v5p-64")
    result = run_cli("inspect", spec, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert {k: summary["topology"][k] for k in ("chips", "devices", "hosts", "sparse_cores")} == {
        "chips": 32, "devices": 32, "hosts": 8, "sparse_cores": 128}
    assert summary["stacks"][0]["rows_per_sparse_core"] == 784
    text = run_cli("inspect", spec).stdout
    assert "topology: v5p: 32 chips, 32 devices, 8 hosts, 128 SparseCores" in text


def test_an_odd_v5p_type_is_bad_input(tmp_path: Path) -> None:
    result = run_cli("validate", _spec(tmp_path, "v5p-3"))
    assert result.exit_code == 2, result.output
    assert "v5p:3" in result.output and "Traceback" not in result.output


def test_tpu7x_stacks_over_devices_of_two_sparse_cores(tmp_path: Path) -> None:
    """tpu7x-8: 4 chips, 8 jax devices of 2 SparseCores (N = 16). 64 samples are 8 per device,
    4 per SparseCore; 100,000 rows pad to 8 x 16 = 128: 100,096, 6,256 per SparseCore. Bytes per
    SparseCore 6,256 x 8 x 4 x (1 + 1 Adagrad slot) = 400,384; per device x 2, per chip x 4."""
    config = load_sparsecore_spec(_spec(tmp_path, "tpu7x-8")).config
    stacking = stack(config)
    assert (stacking.num_partitions, stacking.sparse_cores_per_partition) == (8, 2)
    result = run_cli("inspect", _spec(tmp_path, "tpu7x-8"), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    s = summary["stacks"][0]
    assert (s["rows_per_sparse_core"], s["bytes_per_sparse_core"], s["bytes_per_device"],
            s["bytes_per_chip"]) == (6256, 400_384, 800_768, 1_601_536)
    assert summary["hbm_bytes_per_chip"] == 192 * GIB
    text = run_cli("inspect", _spec(tmp_path, "tpu7x-8")).stdout
    assert "topology: TPU7x: 4 chips, 8 devices, 1 host, 16 SparseCores" in text
    assert "per chip: 1.5 MiB, per device: 782 KiB" in text


def test_plan_holds_each_tpu7x_device_against_half_the_chip(tmp_path: Path) -> None:
    """tpuemb plan's memory on tpu7x-8: one unit per jax device (8), each with 2 SparseCores
    against 192 GiB / 2 = 96 GiB; on v5p-8 one unit per chip (4) against 95 GiB."""
    from tpuemb_cfg.planner.memory import sparsecore_memory

    for text, level, units, capacity in (("tpu7x-8", "device", 8, 96 * GIB),
                                         ("v5p-8", "chip", 4, 95 * GIB)):
        config = load_sparsecore_spec(_spec(tmp_path, text)).config
        report = sparsecore_memory(config, stack(config))
        assert (report.level, len(report.units), report.capacity_bytes) == (level, units,
                                                                            capacity)
    config = load_sparsecore_spec(_spec(tmp_path, "tpu7x-8")).config
    assert sparsecore_memory(config, stack(config), hbm_bytes=100).capacity_bytes == 50
