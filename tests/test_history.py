"""A synthetic run's history in bounded memory (issue 33's round-two leftover).

The history of a run kept one Python record per step (about 7 KB for the quickstart
configuration): 10,000 steps took 65 MB more. It now keeps at most ``LIMIT`` records and the
last, thinned to every stride-th step as the run grows; short runs keep every record, so their
summary is what it was.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpuemb_cfg.formats.io import load
from tpuemb_cfg.sim.history import LIMIT, History
from tpuemb_cfg.sim.synthetic import history_bytes
from tpuemb_cfg.simulate import SyntheticRun

TINY = (Path(__file__).parent / "data" / "multiworker" / "tiny.pbtxt").read_text()


def record(step: int) -> dict[str, int]:
    return {"step": step}


@pytest.mark.parametrize("steps", [1_000, 10_000, 100_000])
def test_the_records_kept_stay_bounded_as_steps_grow(steps: int) -> None:
    history = History(limit=64)
    for step in range(steps):
        history.append(record(step))
    assert len(history) == steps
    assert len(history.kept) <= 64
    recorded = history.recorded_steps()
    assert len(recorded) <= 65
    # Evenly spaced from step 0 (a power-of-two stride), and the last step always there.
    stride = history.stride
    assert stride & (stride - 1) == 0 and steps // stride <= 64
    assert recorded[:-1] == list(range(0, steps, stride))[:len(recorded) - 1]
    assert recorded[0] == 0 and recorded[-1] == steps - 1
    assert history[-1] == record(steps - 1)


def test_a_run_shorter_than_the_limit_keeps_every_step() -> None:
    history = History(limit=64)
    for step in range(64):
        history.append(record(step))
    assert not history.thinned and history.recorded_steps() == list(range(64))
    assert history.to_json() == [record(s) for s in range(64)]  # the format of old checkpoints


def test_the_memory_estimate_of_the_history_is_flat() -> None:
    plan = SyntheticRun(load(TINY.encode(), "text"), engine="numpy").plan
    assert history_bytes(plan, 10) * (LIMIT + 1) == history_bytes(plan, 10**6) * 10
    assert history_bytes(plan, 10**9) == history_bytes(plan, LIMIT + 1)


def run(steps: int, limit: int, resume_at: int | None = None) -> SyntheticRun:
    synthetic = SyntheticRun(load(TINY.encode(), "text"), engine="numpy", seed=3)
    synthetic.history = History(limit=limit)
    if resume_at is None:
        synthetic.run(steps)
        return synthetic
    synthetic.run(resume_at)
    arrays = {k: np.array(v) for k, v in synthetic.checkpoint_arrays().items()}
    again = SyntheticRun(load(TINY.encode(), "text"), engine="numpy", seed=3)
    again.history = History(limit=limit)
    again.restore(arrays, "checkpoint.npz")
    again.run(steps)  # up to step ``steps`` in all
    return again


def test_a_long_runs_summary_lists_its_recorded_steps() -> None:
    whole = run(21, limit=4)
    summary = whole.summary()
    assert summary["steps"] == 21
    assert summary["recorded_steps"] == [0, 8, 16, 20]
    assert len(summary["loss"]) == 4
    # The values listed are those of the steps named: a run that keeps every record agrees.
    every = run(21, limit=64).summary()
    assert "recorded_steps" not in every and len(every["loss"]) == 21
    assert summary["loss"] == [every["loss"][s] for s in (0, 8, 16, 20)]
    for name, table in summary["tables"].items():
        assert table["update_norm"] == [every["tables"][name]["update_norm"][s]
                                        for s in (0, 8, 16, 20)]


def test_a_thinned_history_survives_a_checkpoint() -> None:
    assert run(21, limit=4, resume_at=13).summary() == run(21, limit=4).summary()
