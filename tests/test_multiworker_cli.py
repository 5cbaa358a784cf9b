"""`tpuemb simulate --workers N`: DropStale stories, determinism, summaries and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_simulate

DATA = Path(__file__).parent / "data" / "multiworker"
TINY = str(DATA / "tiny.pbtxt")
TWO = str(DATA / "two_tables.pbtxt")


def summary_of(tmp_path: Path, *arguments: str) -> dict:
    code, output = run_simulate(TINY, "--json", "-q", "--out-dir", str(tmp_path / "out"),
                                *arguments)
    assert code == 0, output
    return json.loads(output)


# accumulator.md section 3: all workers compute at global step 0, then apply one after another.
# (Its row S = -1 is tpuemb's library only: the CLI refuses a negative --max-staleness, see
# test_robustness_simulate.py.)
@pytest.mark.parametrize(
    ("workers", "max_staleness", "global_step", "stale_counter", "applied"),
    [
        (1, 0, 1, 0, [1]),
        (2, 0, 1, 1, [1, 0]),
        (2, 1, 2, 0, [1, 1]),
        (3, 1, 2, 1, [1, 1, 0]),
    ],
)
def test_drop_stale_table_of_the_spec(tmp_path: Path, workers: int, max_staleness: int,
                                      global_step: int, stale_counter: int,
                                      applied: list[int]) -> None:
    summary = summary_of(tmp_path, "--workers", str(workers), "--max-staleness",
                         str(max_staleness), "--steps", "1", "--delay", "fixed:2")
    assert summary["mode"] == "drop_stale"
    assert summary["global_step"] == global_step
    assert summary["stale_counter"] == stale_counter
    assert [w["applied"] for w in summary["per_worker"]] == applied
    assert [w["dropped_stale"] for w in summary["per_worker"]] == [1 - a for a in applied]
    # The staleness each worker saw is the number of updates before it: 0, 1, 2, ...
    expected = {}
    for w in range(workers):
        seen = min(w, global_step)
        expected[str(seen)] = expected.get(str(seen), 0) + 1
    assert summary["staleness_histogram"] == expected
    assert summary["ticks"] == 3  # one tick of computing plus the fixed delay of 2
    table = summary["tables"]["t"]
    assert table["updates"] == global_step
    assert table["dropped_stale"] == stale_counter
    assert table["averaged_per_update"] == [1] * global_step


def test_drop_stale_keeps_going(tmp_path: Path) -> None:
    # N = 2, S = 0, one tick per gradient: every tick w0 applies (staleness 0) and w1, which
    # read the same step, arrives one update late (staleness 1) and is dropped.
    summary = summary_of(tmp_path, "--workers", "2", "--max-staleness", "0", "--steps", "3")
    assert summary["global_step"] == 3
    assert summary["stale_counter"] == 3
    assert summary["staleness_percentage"] == pytest.approx(3 / 4)
    assert [(w["applied"], w["dropped_stale"]) for w in summary["per_worker"]] == [(3, 0), (0, 3)]
    assert summary["staleness_histogram"] == {"0": 3, "1": 3}
    # S = 1 with a delay of one tick: t2 both apply (0, 1 behind), restart at steps 1 and 2;
    # t4 both apply again (1 behind each).
    summary = summary_of(tmp_path, "--workers", "2", "--max-staleness", "1", "--steps", "2",
                         "--delay", "fixed:1")
    assert (summary["global_step"], summary["stale_counter"], summary["ticks"]) == (4, 0, 4)
    assert summary["staleness_histogram"] == {"0": 1, "1": 3}


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    outputs = []
    for seed in ("4", "4", "5"):
        code, output = run_simulate(TWO, "--workers", "3", "--replicas-to-aggregate", "2",
                                    "--delay", "geometric:0.5", "--steps", "4", "--seed", seed,
                                    "--json", "-q", "--out-dir", str(tmp_path / "out"))
        assert code == 0, output
        outputs.append((output, (tmp_path / "out" / "tables.npz").read_bytes(),
                        (tmp_path / "out" / "summary.json").read_text()))
    assert outputs[0] == outputs[1]
    assert outputs[0][0] != outputs[2][0] and outputs[0][1] != outputs[2][1]
    assert json.loads(outputs[0][2]) == json.loads(outputs[0][0])


def test_text_summary_names_every_count(tmp_path: Path) -> None:
    code, output = run_simulate(TINY, "--workers", "3", "--replicas-to-aggregate", "2",
                                "--steps", "3", "--out-dir", str(tmp_path / "out"))
    assert code == 0, output
    assert "sync replicas, R = 2 of N = 3" in output
    assert "global step 2 after 4 ticks" in output
    assert "9 computed, 4 applied, 4 dropped stale, 1 pending" in output
    assert "staleness (updates behind at arrival): 0: 5, 1: 4" in output
    assert "w2      3         1        1              1        0:2 1:1    waiting for a token" \
        in output
    assert "TensorFlow would hang here" in output


def test_too_few_tokens_exits_2(tmp_path: Path) -> None:
    code, output = run_simulate(TINY, "--workers", "2", "--replicas-to-aggregate", "4",
                                "--init-tokens", "1", "--out-dir", str(tmp_path / "out"))
    assert code == 2
    assert "Too few tokens to finish the first step: 1 (given) vs 2 (needed)" in output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("--workers", "2", "--batches", "b.npz", "--out", "o.npz"), "not to --batches replays"),
        (("--workers", "2", "--checkpoint-every", "2"), "--checkpoint-every cannot be combined"),
        (("--max-staleness", "1", "--replicas-to-aggregate", "2"), "give one of the two"),
        (("--workers", "2", "--delay", "uniform:3"), "expected fixed:K"),
    ],
)
def test_refusals(tmp_path: Path, arguments: tuple[str, ...], message: str) -> None:
    code, output = run_simulate(TINY, "--out-dir", str(tmp_path / "out"), *arguments)
    assert code == 2
    assert message in output
