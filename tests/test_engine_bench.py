"""`tpuemb bench` and its library (issue 8, item 1), on small workloads so they stay fast."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tpuemb_cfg import bench
from tpuemb_cfg.cli import main

KEYS = {"sec_per_step", "update_sec_per_step", "naive_sec_per_step", "limit_sec_per_step",
        "update_limit_sec_per_step", "unique_ids", "peak_rss_bytes", "compile_sec",
        "kernels_compiled", "warm_start_sec", "engine", "step_check_max_abs_diff"}


@pytest.fixture
def without_yardsticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench.run`` without its two machine yardsticks, for the tests that check other
    figures: ``warm_start`` (a fresh Python process importing tpuemb, about a second) and
    ``copy_bandwidth`` (128 MB allocated and copied 7 times) give fixed positive numbers.
    ``test_bench_json`` runs both for real, on both engines, and checks what they give."""
    monkeypatch.setattr(bench, "warm_start", lambda engine="numba", optimizer="": 1.0)
    monkeypatch.setattr(bench, "copy_bandwidth", lambda *args, **kwargs: 1e9)


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
    bench.naive_step("adagrad", table, [acc], np.array([2, 0, 2]), np.ones((3, 1), np.float32))
    assert acc[:, 0].tolist() == pytest.approx([1.1, 0.1, 4.1, 0.1])
    assert table[:, 0].tolist() == pytest.approx(
        [-0.01 / np.sqrt(1.1), 0.0, -0.02 / np.sqrt(4.1), 0.0], rel=1e-6
    )


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_bench_json(engine: str) -> None:
    if engine == "numba":
        pytest.importorskip("numba")
    result = CliRunner().invoke(main, [
        "bench", "--vocab", "2000", "--dim", "8", "--ids", "600", "--steps", "2",
        "--engine", engine, "--json",
    ])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert KEYS <= set(report)
    assert report["engine"] == engine
    assert report["unique_ids"] == np.unique(bench.zipf_ids(2000, 600, 1.05, 0)).shape[0]
    # The update: 2 * unique * 32 bytes * (table + accumulator) + 600 gradient rows of 32 bytes;
    # the whole step also writes 600 activation rows of 32 bytes.
    assert report["update_limit_bytes"] == 2 * report["unique_ids"] * 32 * 2 + 600 * 32
    assert report["limit_bytes"] == report["update_limit_bytes"] + 600 * 32
    assert report["state_bytes"] == 2000 * 8 * 4 * 2
    for key in ("sec_per_step", "update_sec_per_step", "naive_sec_per_step",
                "limit_sec_per_step", "warm_start_sec"):
        assert report[key] > 0
    # The timed step updated exactly the unique ids, as the naive NumPy step does (checked by
    # hand above), up to float32 rounding.
    assert report["step_check_max_abs_diff"] <= 1e-6


@pytest.mark.usefixtures("without_yardsticks")
@pytest.mark.parametrize("optimizer", sorted(bench.OPTIMIZERS))
def test_timed_step_is_the_naive_step(optimizer: str) -> None:
    """Every optimizer's timed step computes what the naive step computes, on the same rows."""
    result = bench.run(bench.Workload(vocab=500, dim=4, ids=300, optimizer=optimizer, steps=1),
                       engine="numpy")
    assert result.unique_ids == np.unique(bench.zipf_ids(500, 300, 1.05, 0)).shape[0]
    assert result.step_check_max_abs_diff <= 1e-6


def test_step_check_catches_a_wrong_update() -> None:
    """A timed step that updates the wrong rows, or the right rows wrongly, is reported."""
    ids = np.array([4, 1, 4, 2])
    grads = np.ones((4, 2), np.float32)

    def check(updates: int, rows: np.ndarray) -> tuple[int, float]:
        table, slots = np.zeros((6, 2), np.float32), [np.full((6, 2), 0.1, np.float32)]

        def update() -> np.ndarray:
            for _ in range(updates):
                bench.naive_step("adagrad", table, slots, ids, grads)
            return rows

        return bench._check_step("adagrad", table, slots, ids, grads, update)

    assert check(1, np.array([1, 2, 4])) == (3, 0.0)
    assert check(1, np.array([1, 2])) == (2, np.inf)
    assert check(2, np.array([1, 2, 4]))[1] > 1e-3
    assert check(0, np.array([1, 2, 4]))[1] > 1e-3


@pytest.mark.usefixtures("without_yardsticks")
def test_bench_text_multi_feature() -> None:
    result = CliRunner().invoke(main, [
        "bench", "--vocab", "3000", "--dim", "4", "--ids", "1000", "--steps", "1",
        "--engine", "numpy", "--optimizer", "ftrl", "--multi-feature",
    ])
    assert result.exit_code == 0, result.output
    assert "Executor.step (checks, forward, backward, update, report)" in result.output
    assert "naive NumPy update" in result.output
    assert "multi-feature step (3 tables, 8 features, mean)" in result.output


@pytest.mark.usefixtures("without_yardsticks")
def test_bench_rejects_bad_threads() -> None:
    pytest.importorskip("numba")
    result = CliRunner().invoke(main, [
        "bench", "--vocab", "100", "--dim", "2", "--ids", "10", "--steps", "1", "--threads", "999",
    ])
    assert result.exit_code == 2
    assert "--threads 999" in result.output
