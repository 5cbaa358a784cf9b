"""`tpuemb bench`, its library and the yardsticks of `benchmarks/anchor.py` (issue 8, item 1), on
small workloads so they stay fast. No test asserts a speed: the timed figures are only checked
to be there and positive; what is computed (ids, rows, bytes, results) is checked exactly."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from click.testing import CliRunner

from tpuemb_cfg.cli import main
from tpuemb_cfg.run import bench

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"sec_per_step", "update_sec_per_step", "unique_ids", "peak_rss_bytes", "compile_sec",
        "kernels_compiled", "engine", "state_bytes", "threads", "workload",
        "limit_sec_per_step", "update_limit_sec_per_step", "limit_bytes", "update_limit_bytes",
        "step_over_limit", "update_over_limit", "copy_bandwidth_bytes_per_sec",
        "copy_bandwidth_before_bytes_per_sec", "copy_bandwidth_after_bytes_per_sec",
        "load_before", "load_after"}
YARDSTICK_KEYS = {"naive_sec_per_step", "warm_start_sec", "step_check_max_abs_diff"}


def _anchor() -> ModuleType:
    """``benchmarks/anchor.py`` as a module (loaded once)."""
    if "anchor" not in sys.modules:
        spec = importlib.util.spec_from_file_location("anchor", ROOT / "benchmarks" / "anchor.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["anchor"] = module
        spec.loader.exec_module(module)
    return sys.modules["anchor"]


@pytest.fixture
def bandwidth(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench.copy_bandwidth`` (128 MB allocated and copied 7 times, twice a run) gives 1e9
    bytes a second, so the limits are bytes / 1e9 exactly."""
    monkeypatch.setattr(bench, "copy_bandwidth", lambda *args, **kwargs: 1e9)


@pytest.fixture
def anchor(monkeypatch: pytest.MonkeyPatch, bandwidth: None) -> ModuleType:
    """``benchmarks/anchor.py`` without its two machine yardsticks: ``warm_start`` (a fresh
    Python process importing tpuemb, about a second) and the copy bandwidth give fixed
    numbers."""
    module = _anchor()
    monkeypatch.setattr(module, "warm_start", lambda engine="numba", optimizer="": 1.0)
    return module


def test_traffic_limit_by_hand() -> None:
    """3 unique ids among 5 (one per bag), dimension 2 (rows of 8 bytes), one slot: the update
    reads and writes 3 rows of the table and 3 of the slot (2 * 3 * 8 * 2 = 96 bytes) and reads
    5 gradient rows (40); the step also writes 5 activation rows (40)."""
    assert bench.traffic_limit(3, 5, 2, 1) == bench.TrafficLimit(step_bytes=176, update_bytes=136)
    # SGD (no slot), the anchor's shape: 21,685 unique of 65,536 ids, 256-byte rows
    limit = bench.traffic_limit(21_685, 65_536, 64, 0)
    assert limit.update_bytes == 2 * 21_685 * 256 + 65_536 * 256
    assert limit.step_bytes == limit.update_bytes + 65_536 * 256


def test_zipf_ids_anchor_workload() -> None:
    """The issue's anchor: 65,536 Zipf(1.05) ids over 1,000,000 rows, about 21,822 unique."""
    ids = bench.zipf_ids(1_000_000, 65_536, 1.05, 0)
    assert ids.dtype == np.int64 and ids.shape == (65_536,)
    assert 0 <= ids.min() and ids.max() < 1_000_000
    assert 21_000 < np.unique(ids).shape[0] < 22_700
    np.testing.assert_array_equal(ids, bench.zipf_ids(1_000_000, 65_536, 1.05, 0))


def test_zipf_ids_follow_the_law() -> None:
    """Rank 1 has probability 1 / H(V, a); with V = 3, a = 1: 6/11, then 3/11 and 2/11."""
    ids = bench.zipf_ids(3, 200_000, 1.0, 5)
    counts = np.bincount(ids, minlength=3) / ids.shape[0]
    assert sorted(counts, reverse=True) == pytest.approx([6 / 11, 3 / 11, 2 / 11], abs=0.01)


def test_naive_step_adagrad_by_hand() -> None:
    """ids [2, 0, 2], rows of 1s: G_2 = 2, G_0 = 1; acc 0.1 + G^2; w -= 0.01 * G / sqrt(acc)."""
    table = np.zeros((4, 1), np.float32)
    acc = np.full((4, 1), 0.1, np.float32)
    _anchor().naive_step("adagrad", table, [acc], np.array([2, 0, 2]),
                         np.ones((3, 1), np.float32))
    assert acc[:, 0].tolist() == pytest.approx([1.1, 0.1, 4.1, 0.1])
    assert table[:, 0].tolist() == pytest.approx(
        [-0.01 / np.sqrt(1.1), 0.0, -0.02 / np.sqrt(4.1), 0.0], rel=1e-6
    )


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_bench_json(engine: str, bandwidth: None) -> None:
    if engine == "numba":
        pytest.importorskip("numba")
    result = CliRunner().invoke(main, [
        "bench", "--vocab", "2000", "--dim", "8", "--ids", "600", "--steps", "2",
        "--engine", engine, "--json",
    ])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert KEYS <= set(report) and not YARDSTICK_KEYS & set(report)
    assert report["engine"] == engine
    assert report["unique_ids"] == np.unique(bench.zipf_ids(2000, 600, 1.05, 0)).shape[0]
    assert report["state_bytes"] == 2000 * 8 * 4 * 2
    assert report["workload"] == {"vocab": 2000, "dim": 8, "ids": 600, "zipf": 1.05,
                                  "optimizer": "adagrad", "steps": 2, "seed": 0}
    assert report["sec_per_step"] > 0 and report["update_sec_per_step"] > 0
    # The limits (Adagrad: one slot) at the bandwidth fixed at 1e9 bytes a second
    limit = bench.traffic_limit(report["unique_ids"], 600, 8, 1)
    assert (report["limit_bytes"], report["update_limit_bytes"]) == (
        limit.step_bytes, limit.update_bytes)
    assert report["copy_bandwidth_bytes_per_sec"] == 1e9
    assert report["limit_sec_per_step"] == limit.step_bytes / 1e9
    assert report["update_limit_sec_per_step"] == limit.update_bytes / 1e9
    assert report["step_over_limit"] == report["sec_per_step"] / report["limit_sec_per_step"]
    assert report["load_before"] >= 0 and report["load_after"] >= 0


def test_bench_text(bandwidth: None) -> None:
    result = CliRunner().invoke(main, [
        "bench", "--vocab", "300", "--dim", "4", "--ids", "100", "--steps", "1",
        "--engine", "numpy", "--optimizer", "ftrl",
    ])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("tpuemb bench: ftrl, 300 x 4 float32 table, 100 ids per step")
    assert "Executor.step (checks, forward, backward, update, report)" in lines[1]
    assert "x its memory-traffic limit" in lines[1]
    assert "update alone" in lines[2] and "x its limit" in lines[2]
    assert "memory-traffic limit of the step" in lines[3]
    assert "at 1.0 GB/s copy bandwidth" in lines[3]
    assert "memory-traffic limit of the update" in lines[4]
    assert lines[5].startswith("  machine: copy bandwidth 1.0 GB/s before the steps, 1.0 after")
    assert "load" in lines[5]
    assert "peak RSS" in lines[6] and "first call" in lines[7]


@pytest.mark.parametrize("optimizer", sorted(bench.OPTIMIZERS))
def test_timed_update_is_the_naive_step(optimizer: str) -> None:
    """Every optimizer's timed update (``bench.Anchor.update``) computes what the naive step
    computes, on the same rows."""
    w = bench.Workload(vocab=500, dim=4, ids=300, optimizer=optimizer, steps=1)
    a = bench.anchor(w, "numpy")
    unique, diff = _anchor().check_step(optimizer, a.table, a.slots, a.ids, a.grads, a.update)
    assert unique == np.unique(bench.zipf_ids(500, 300, 1.05, 0)).shape[0]
    assert diff <= 1e-6


def test_step_check_catches_a_wrong_update() -> None:
    """A timed step that updates the wrong rows, or the right rows wrongly, is reported."""
    anchor = _anchor()
    ids = np.array([4, 1, 4, 2])
    grads = np.ones((4, 2), np.float32)

    def check(updates: int, rows: np.ndarray) -> tuple[int, float]:
        table, slots = np.zeros((6, 2), np.float32), [np.full((6, 2), 0.1, np.float32)]

        def update() -> np.ndarray:
            for _ in range(updates):
                anchor.naive_step("adagrad", table, slots, ids, grads)
            return rows

        result: tuple[int, float] = anchor.check_step("adagrad", table, slots, ids, grads, update)
        return result

    assert check(1, np.array([1, 2, 4])) == (3, 0.0)
    assert check(1, np.array([1, 2])) == (2, np.inf)
    assert check(2, np.array([1, 2, 4]))[1] > 1e-3
    assert check(0, np.array([1, 2, 4]))[1] > 1e-3


def test_anchor_yardsticks(anchor: ModuleType) -> None:
    """``benchmarks/anchor.py``: ``tpuemb bench``'s figures plus the yardsticks, on the same
    arrays: the limits' bytes, the step check, the multi-feature step's ids, and its report."""
    w = bench.Workload(vocab=3000, dim=8, ids=600, steps=1)
    report = anchor.run(w, engine="numpy", with_multi_feature=True)
    assert KEYS | YARDSTICK_KEYS <= set(report)
    unique = np.unique(bench.zipf_ids(3000, 600, 1.05, 0)).shape[0]
    assert report["unique_ids"] == unique
    # The update: 2 * unique * 32 bytes * (table + accumulator) + 600 gradient rows of 32 bytes;
    # the whole step also writes 600 activation rows of 32 bytes. Bandwidth fixed at 1e9 B/s.
    assert report["update_limit_bytes"] == 2 * unique * 32 * 2 + 600 * 32
    assert report["limit_bytes"] == report["update_limit_bytes"] + 600 * 32
    assert report["limit_sec_per_step"] == report["limit_bytes"] / 1e9
    assert report["copy_bandwidth_bytes_per_sec"] == 1e9
    assert report["warm_start_sec"] == 1.0
    assert report["step_check_max_abs_diff"] <= 1e-6
    # 8 features of max(600 // 84, 1) = 7 bags of 1 to 20 ids each
    assert 8 * 7 <= report["multi_feature"]["ids"] <= 8 * 7 * 20
    text = anchor.text(report)
    assert "naive NumPy update (np.unique + np.add.at)" in text
    assert "multi-feature step (3 tables, 8 features, mean)" in text


def test_anchor_main_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert _anchor().main(["--vocab", "2", "--multi-feature"]) == 2
    assert capsys.readouterr().err == (
        "error: --multi-feature needs --vocab 3 or more (three tables share it); got 2\n")


def test_bench_rejects_bad_threads() -> None:
    pytest.importorskip("numba")
    result = CliRunner().invoke(main, [
        "bench", "--vocab", "100", "--dim", "2", "--ids", "10", "--steps", "1", "--threads", "999",
    ])
    assert result.exit_code == 2
    assert "--threads 999" in result.output
