"""``planner.memory``: bytes per host (legacy) and per SparseCore / chip / host (SparseCore).

Hand-derived numbers for a small legacy configuration (uneven rows, MOD and DIV_DEFAULT, a
non-lazy table) and a small stacked, padded SparseCore configuration; equality with what each
Ray host of the executor allocates (the Ray backend is the independent measurement) on the
example models, vocabularies scaled down; the out-of-memory findings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ADAM_AND_MOMENTUM_TABLES, EXAMPLES
from raycluster import ray_cluster  # noqa: F401  (the fixture)

import tpuemb_cfg
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.schema import ShardingStrategy
from tpuemb_cfg.formats.io import read_source
from tpuemb_cfg.planner.memory import legacy_memory, memory_findings, sparsecore_memory
from tpuemb_cfg.sparsecore.config import (
    SparseCoreConfig,
    SparseCoreFeature,
    SparseCoreOptimizer,
    SparseCoreTable,
)
from tpuemb_cfg.sparsecore.feed import stack
from tpuemb_cfg.sparsecore.summary import summarize_sparsecore
from tpuemb_cfg.sparsecore.topology import Topology

# ------------------------------------------------------------------------------------- legacy

SMALL = """
table_descriptor { name: "a" vocabulary_size: 10 dimension: 3 optimization_parameters {
  adagrad { } learning_rate { constant: 0.1 } } }
table_descriptor { name: "b" vocabulary_size: 7 dimension: 2 optimization_parameters {
  adam { beta1: 0.9 beta2: 0.99 epsilon: 1e-6 use_non_lazy_adam: true }
  learning_rate { constant: 0.1 } } }
table_descriptor { name: "c" vocabulary_size: 5 dimension: 4 optimization_parameters {
  stochastic_gradient_descent { } learning_rate { constant: 0.1 } } }
mode: TRAINING num_hosts: 3 num_tensor_cores: 3 batch_size_per_tensor_core: 2
sharding_strategy: MOD
"""

# 3 hosts: a (10 rows) 4/3/3, b (7) 3/2/2, c (5) 2/2/1 rows - under MOD (ids h, h+3, ...) and
# DIV_DEFAULT (contiguous ranges) alike. Bytes = rows x D x 4:
#   host 0: a 48, b 24, c 32 -> tables 104; slots a 48 + b 2 x 24 = 96; b's snapshot 24
#   host 1: a 36, b 16, c 32 -> tables 84;  slots 36 + 32 = 68;          snapshot 16
#   host 2: a 36, b 16, c 16 -> tables 68;  slots 68;                    snapshot 16
SMALL_HOSTS = [
    {"tables": 104, "slots": 96, "snapshots": 24},
    {"tables": 84, "slots": 68, "snapshots": 16},
    {"tables": 68, "slots": 68, "snapshots": 16},
]


def _load(text: str) -> Any:
    return tpuemb_cfg.load(text.encode(), "text")


@pytest.mark.parametrize("strategy", ["MOD", "DIV_DEFAULT"])
def test_legacy_hand_derived(strategy: str) -> None:
    report = legacy_memory(_load(SMALL), strategy=strategy)
    assert report.level == "host"
    assert [dict(u.parts) for u in report.units] == SMALL_HOSTS
    assert [u.total for u in report.units] == [224, 168, 152]
    # host 0: a 48 x (1 + 1), b 24 x (1 + 2 + snapshot), c 32
    assert report.dominant == (("a", 96), ("b", 96), ("c", 32))
    assert report.paths["b"] == "table_descriptor[1]"
    assert report.fits and report.capacity_bytes is None
    assert memory_findings(report) == []


def test_legacy_more_hosts_than_rows_and_inference() -> None:
    # 8 hosts: a 2,2,1,1,1,1,1,1 rows; b 1 each of hosts 0..6; c 1 each of hosts 0..4.
    report = legacy_memory(_load(SMALL.replace("TRAINING", "INFERENCE")), hosts=8)
    a = [2, 2, 1, 1, 1, 1, 1, 1]
    b = [1] * 7 + [0]
    c = [1] * 5 + [0] * 3
    assert [dict(u.parts) for u in report.units] == [
        {"tables": a[h] * 12 + b[h] * 8 + c[h] * 16, "slots": a[h] * 12 + b[h] * 16,
         "snapshots": 0}  # INFERENCE never updates: no pre-step copy
        for h in range(8)]


def test_legacy_out_of_memory_finding() -> None:
    report = legacy_memory(_load(SMALL), host_memory_bytes=200)
    assert not report.fits
    (finding,) = memory_findings(report)
    assert finding.rule == "PLAN001" and finding.severity == "error"
    assert finding.field_path == "table_descriptor[0]"  # "a", the largest on host 0
    assert "host 0 needs 224 bytes" in finding.message
    assert "more than its 200 bytes of host memory (1 of 3 hosts over)" in finding.message
    # 4 hosts: host 0 holds a 3 rows (72 with its slot), b 2 (64 with slots and copy), c 2 (32).
    assert finding.hint is not None and finding.hint.startswith("use 4 hosts (num_hosts)")
    assert "fewer slots ('b' has 2)" in finding.hint
    assert memory_findings(legacy_memory(_load(SMALL), host_memory_bytes=224)) == []


def test_legacy_tpu_devices() -> None:
    # TensorFlow's estimate (section 1.6): state variables with gradient accumulators (a 3,
    # b 4, c 2), rows padded to 8 floats. Host 0 (one device): a 4 x 3 x 4 x 3 = 144,
    # b 3 x 2 x 4 x 4 = 96, c 2 x 4 x 4 x 2 = 64; padded a 4 x 8 x 4 x 3 = 384, b 384, c 128.
    report = legacy_memory(_load(SMALL), device_memory_bytes=896)
    (devices,) = report.breakdown
    assert devices.level == "chip"
    assert [dict(u.parts) for u in devices.units] == [
        {"state": 304, "padding": 592}, {"state": 236, "padding": 436},
        {"state": 204, "padding": 404}]
    assert report.fits
    # One host, three devices: the host's 744 state bytes and 2176 padded, a third each.
    one = legacy_memory(_load(SMALL), hosts=1, device_memory_bytes=725)
    assert [dict(u.parts) for u in one.breakdown[0].units] == [
        {"state": 248, "padding": 478}] * 3
    (finding,) = memory_findings(one)
    assert finding.rule == "PLAN004" and finding.field_path == "table_descriptor[0]"
    assert "chip 0 needs 726 bytes" in finding.message and "(3 of 3 chips over)" in finding.message


def test_legacy_bad_arguments() -> None:
    with pytest.raises(UsageError, match="'ROUND': expected 'MOD' or 'DIV_DEFAULT'"):
        legacy_memory(_load(SMALL), strategy="ROUND")
    with pytest.raises(UsageError, match="hosts.* 0: a table needs at least one host"):
        legacy_memory(_load(SMALL), hosts=0)


# ------------------------------------------------------------- legacy against the Ray hosts

LEGACY_EXAMPLES = ["quickstart.pbtxt", "ads_ranking.pbtxt", "video_legacy.pbtxt",
                   "models/dlrm_criteo.pbtxt", "models/dcnv2_mlperf.pbtxt"]


def _example(name: str, hosts: int, strategy: str) -> Any:
    """The example with ``hosts`` and ``strategy``, every vocabulary above 4096 rows cut to
    1001 + 2 (V mod 500) rows (odd: uneven over 2 hosts; at most a few MiB per host instead of
    GiB)."""
    config = read_source(EXAMPLES / name).message
    for table in config.table_descriptor:
        if table.vocabulary_size > 4096:
            table.vocabulary_size = 1001 + 2 * (table.vocabulary_size % 500)
    config.num_hosts = hosts
    config.sharding_strategy = getattr(ShardingStrategy, strategy)
    return config


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("strategy", ["MOD", "DIV_DEFAULT"])
@pytest.mark.parametrize("name", LEGACY_EXAMPLES)
def test_legacy_equals_each_ray_host(name: str, strategy: str) -> None:
    from tpuemb_cfg.simulate import Executor

    hosts = 2  # as the other Ray tests: their actors are reused
    config = _example(name, hosts, strategy)
    report = legacy_memory(config)
    assert report == legacy_memory(config, hosts=hosts, strategy=strategy)
    with Executor(config, backend="ray") as executor:
        held = executor.storage.nbytes()  # type: ignore[attr-defined]
    # The examples' optimizers are lazy: no pre-step copies.
    assert all(u.parts["snapshots"] == 0 for u in report.units)
    assert held == [u.total for u in report.units]
    assert held[0] > held[1]  # host 0 holds the odd row of every scaled table


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("strategy", ["MOD", "DIV_DEFAULT"])
def test_non_lazy_snapshots_equal_the_ray_hosts_after_a_step(strategy: str) -> None:
    from tpuemb_cfg.simulate import Executor

    config = _load(ADAM_AND_MOMENTUM_TABLES + f"""
mode: TRAINING num_hosts: 4 num_tensor_cores: 4 sharding_strategy: {strategy}
feature_descriptor {{ name: "x" input_shape: 8 }}
feature_descriptor {{ name: "y" table_id: 1 input_shape: 8 }}
""")
    report = legacy_memory(config)
    # a: 300 rows x 4, Adam (2 slots) non-lazy: 75 rows a host (1200 bytes); b: 50 rows x 2,
    # momentum (1 slot): 13/13/12/12 rows (104 or 96 bytes).
    assert [dict(u.parts) for u in report.units] == [
        {"tables": 1200 + b, "slots": 2400 + b, "snapshots": 1200} for b in (104, 104, 96, 96)]
    batch = [{"ids": np.array([0, 5, 5, 299, 7, 8, 1, 2]), "grad": np.ones((8, 4), np.float32)},
             {"ids": np.array([1, 2, 3, 49, 0, 0, 4, 4]), "grad": np.ones((8, 2), np.float32)}]
    with Executor(config, backend="ray", engine="numpy") as executor:
        storage: Any = executor.storage
        assert storage.nbytes() == [u.parts["tables"] + u.parts["slots"] for u in report.units]
        executor.step(batch, [0.01])
        assert storage.nbytes() == [u.total for u in report.units]


# --------------------------------------------------------------------------------- SparseCore


def _sparsecore(*, hbm: bool = False) -> SparseCoreConfig:
    adagrad = SparseCoreOptimizer("adagrad", group="adagrad")
    return SparseCoreConfig(
        api="jax", mode="jax",
        tables=(SparseCoreTable("u", 10, 5, adagrad, combiner="sum",
                                max_ids_per_partition=10, max_unique_ids_per_partition=10),
                SparseCoreTable("v", 3, 5, adagrad, combiner="sum",
                                max_ids_per_partition=10, max_unique_ids_per_partition=10)),
        features=(SparseCoreFeature("fu", "u", (16, 1), (16, 5)),
                  SparseCoreFeature("fv", "v", (8, 1), (8, 5))),
        topology=Topology(chips=2, sparse_cores_per_chip=2, hosts=1),
        stack_to_max_ids_per_partition=lambda name, samples: 10,
        stack_to_max_unique_ids_per_partition=lambda name, samples: 10,
    )


def test_sparsecore_hand_derived() -> None:
    config = _sparsecore()
    stacking = stack(config)
    (st,) = stacking.stacks
    # N = 4 SparseCores; both tables padded to 32 rows (8N) x 8 columns, v rotated by 2.
    assert [(t.name, t.padded_vocabulary_size, t.padded_dim, t.shard_rotation)
            for t in st.tables] == [("u", 32, 8, 0), ("v", 32, 8, 2)]
    report = sparsecore_memory(config, stacking)
    cores = report.breakdown[0]
    assert cores.level == "sparsecore" and len(cores.units) == 4
    # Per SparseCore: 64 / 4 = 16 rows x 8 x 4 x (1 + 1 Adagrad slot) = 1024 bytes allocated.
    # Real rows: u ids 0,4,8 | 1,5,9 | 2,6 | 3,7; v ids 2 | - | 0 | 1 (id x on (x + 2) mod 4).
    real = [(3 + 1) * 5 * 4, 3 * 5 * 4, (2 + 1) * 5 * 4, (2 + 1) * 5 * 4]
    # COO buffer: roundup8(10) x 2 x 4 = 128 entries a chip, 64 a SparseCore x 12 bytes, plus
    # max(4, 8) row pointers x 4. Activations: (16 // 4 + 8 // 4) samples x 8 x 4.
    assert [dict(u.parts) for u in cores.units] == [
        {"tables": r, "slots": r, "padding": 1024 - 2 * r, "buffers": 64 * 12 + 32,
         "activations": 192, "gradients": 192} for r in real]
    assert [u.total for u in cores.units] == [2208] * 4
    assert report.level == "chip"
    assert [dict(u.parts) for u in report.units] == [
        {"tables": 140, "slots": 140, "padding": 1768, "buffers": 1600, "activations": 384,
         "gradients": 384},
        {"tables": 120, "slots": 120, "padding": 1808, "buffers": 1600, "activations": 384,
         "gradients": 384}]
    # Each table: 32 / 4 rows x 8 x 4 x 2 x 2 SparseCores a chip.
    assert report.dominant == (("u", 1024), ("v", 1024))
    assert report.paths["u"] == 'tables["u"]'
    assert report.capacity_bytes is None and report.fits
    # The same table + slot bytes tpuemb inspect shows.
    summary = summarize_sparsecore(config, stacking)
    assert summary["bytes_per_chip"] == 140 + 140 + 1768 == 120 + 120 + 1808


def test_sparsecore_limits_and_hbm() -> None:
    config = _sparsecore()
    stacking = stack(config)
    name = stacking.stacks[0].name
    # max_ids 3: roundup8(3) x 2 x 4 = 64 entries a chip, 32 a SparseCore.
    report = sparsecore_memory(config, stacking, limits={name: (3, 3)}, hbm_bytes=4000)
    assert report.breakdown[0].units[0].parts["buffers"] == 32 * 12 + 32
    assert [u.total for u in report.units] == [2 * (2208 - 800 + 416)] * 2
    assert report.capacity_bytes == 4000 and report.fits
    over = sparsecore_memory(config, stacking, hbm_bytes=4415)
    (finding,) = memory_findings(over)
    assert finding.rule == "PLAN002" and finding.field_path == 'tables["u"]'
    assert "chip 0 needs 4.3 KiB (4416 bytes:" in finding.message
    assert "of HBM (2 of 2 chips over)" in finding.message
    assert finding.hint is not None and "use more chips" in finding.hint
    with pytest.raises(UsageError, match="'nope', which is not a stacked table"):
        sparsecore_memory(config, stacking, limits={"nope": (1, 1)})


def test_sparsecore_examples_agree_with_inspect(tmp_path: Path) -> None:
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec

    spec = load_sparsecore_spec(EXAMPLES / "sparsecore" / "v6e_dcnv2.py")
    config = spec.config
    stacking = stack(config)
    report = sparsecore_memory(config, stacking, host_memory_bytes=1 << 30)
    summary = summarize_sparsecore(config, stacking)
    for unit in report.units:
        assert unit.parts["tables"] + unit.parts["slots"] + unit.parts["padding"] == summary[
            "bytes_per_chip"]
    assert report.capacity_bytes == summary["hbm_bytes_per_chip"]
    # TensorFlow's initialize_tables_on_host: every host builds the full tables.
    host = report.breakdown[1]
    assert host.level == "host" and len(host.units) == config.topology.hosts
    assert host.units[0].parts == {"host_tables": sum(4 * t.vocabulary_size * t.dim
                                                      for t in config.tables)}
    rules = [f.rule for f in memory_findings(report)]
    assert rules == ["PLAN003"]
    assert memory_findings(report)[0].field_path == (
        "sparse_core_config.initialize_tables_on_host")
    assert report.to_json()["breakdown"][1]["units"][0]["total"] == host.units[0].total
