"""Synchronous replicas over the executor: hand-traced token and accumulator stories.

Every expected count below is traced by hand from the rules of accumulator.md section 4 and the
time model of docs/multiworker.md (fixed delays, deliveries in (tick, worker) order, the chief
updates as soon as every table holds R gradients, workers restart after the chief):

- a worker's first gradient carries the initial global step 0;
- after a delivery the worker dequeues a token (its next local step) or waits for one;
- init tokens (-1: R of them) hold step 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.executor.plan import build_plan
from tpuemb_cfg.session import prepare
from tpuemb_cfg.sim.multiworker import DelayModel, chief_config, for_chief
from tpuemb_cfg.simulate import MultiWorkerRun, SyntheticRun

DATA = Path(__file__).parent / "data" / "multiworker"
TINY = DATA / "tiny.pbtxt"
TWO = DATA / "two_tables.pbtxt"


def run_workers(config: Path = TINY, steps: int = 3, **options: object) -> dict:
    """Run ``MultiWorkerRun(config, **options)`` for ``steps`` gradients per worker; its summary."""
    simulation = MultiWorkerRun(config, **options)  # type: ignore[arg-type]
    simulation.run(steps)
    return simulation.summary()


def test_backup_workers_three_of_two() -> None:
    # N = 3, R = 2, init tokens [0, 0], every gradient takes one tick.
    # t1: w0 accepted (1), token 0; w1 accepted (2), token 0 -> update 1 (w0, w1), tokens
    #     [1, 1, 1]; w2 (local 0 < 1) dropped, token 1. w0 restarts with local 0, w1 with 0.
    # t2: w0 and w1 (local 0) dropped, tokens 1 and 1; w2 (local 1) accepted (1), waits.
    # t3: w0 (local 1) accepted (2), waits -> update 2 (w2, w0), tokens [2, 2, 2] serve w2, w0;
    #     w1 (local 1 < 2) dropped, token 2.
    # t4: w2 (local 2) accepted (1), no token left: waits; the chief holds 1 of 2.
    summary = run_workers(workers=3, replicas_to_aggregate=2, steps=3)
    assert summary["mode"] == "sync_replicas"
    assert summary["global_step"] == 2
    assert summary["ticks"] == 4
    assert summary["gradients"] == {
        "computed": 9, "accepted": 5, "applied": 4, "dropped_stale": 4, "pending": 1,
    }
    assert summary["staleness_histogram"] == {"0": 5, "1": 4}
    table = summary["tables"]["t"]
    assert (table["received"], table["accepted"], table["dropped_stale"]) == (9, 5, 4)
    assert (table["applied"], table["pending"], table["updates"]) == (4, 1, 2)
    assert table["averaged_per_update"] == [2, 2]
    per_worker = [(w["computed"], w["applied"], w["dropped_stale"], w["pending"])
                  for w in summary["per_worker"]]
    assert per_worker == [(3, 2, 1, 0), (3, 1, 2, 0), (3, 1, 1, 1)]
    assert [w["staleness_histogram"] for w in summary["per_worker"]] == [
        {"0": 2, "1": 1}, {"0": 1, "1": 2}, {"0": 2, "1": 1},
    ]
    assert summary["waiting_for_token"] == [2]
    assert summary["chief_short"] == {"t": 1}
    assert summary["per_worker"][1]["tables"] == {
        "t": {"accepted": 1, "applied": 1, "dropped_stale": 2}}


def test_too_few_replicas_use_init_tokens() -> None:
    # N = 2, R = 3, init tokens [0, 0, 0].
    # t1: w0 accepted (1), token 0; w1 accepted (2), token 0.
    # t2: w0 accepted (3), token 0 -> update 1 averages 3 (w0 twice, w1), tokens [1, 1, 1];
    #     w1 (local 0) dropped, token 1. w0 restarts with local 0.
    # t3: w0 (local 0) dropped, token 1; w1 (local 1) accepted (1), token 1. Both done.
    summary = run_workers(workers=2, replicas_to_aggregate=3, steps=3)
    assert summary["global_step"] == 1
    assert summary["ticks"] == 3
    assert summary["tables"]["t"]["averaged_per_update"] == [3]
    assert summary["gradients"] == {
        "computed": 6, "accepted": 4, "applied": 3, "dropped_stale": 2, "pending": 1,
    }
    assert [(w["applied"], w["dropped_stale"], w["pending"]) for w in summary["per_worker"]] == [
        (2, 1, 0), (1, 1, 1)]
    assert summary["staleness_histogram"] == {"0": 4, "1": 2}
    assert summary["waiting_for_token"] == []
    assert summary["chief_short"] == {"t": 1}


def test_too_few_tokens_is_tensorflows_error() -> None:
    with pytest.raises(UsageError, match=r"Too few tokens to finish the first step: 1 \(given\) "
                                         r"vs 2 \(needed\).*init_tokens 2"):
        MultiWorkerRun(TINY, workers=1, replicas_to_aggregate=3, init_tokens=1)
    # Exactly R - N tokens finish the first step: N + (R - N) gradients.
    summary = run_workers(workers=1, replicas_to_aggregate=3, init_tokens=2, steps=3)
    assert summary["global_step"] == 1
    assert summary["tables"]["t"]["averaged_per_update"] == [3]


def test_init_tokens_zero_wastes_nothing_when_n_equals_r() -> None:
    # Without init tokens every worker waits for the chief's fresh tokens: no gradient is stale.
    summary = run_workers(workers=2, init_tokens=0, steps=4)
    assert summary["global_step"] == 4
    assert summary["gradients"]["dropped_stale"] == 0
    assert summary["tables"]["t"]["averaged_per_update"] == [2, 2, 2, 2]
    # TensorFlow's default (R init tokens holding step 0): each worker's second gradient carries
    # step 0 and arrives after update 1.
    default = run_workers(workers=2, steps=4)
    assert [w["dropped_stale"] for w in default["per_worker"]] == [1, 1]


@pytest.mark.parametrize("mode", [{"init_tokens": 0}, {"max_staleness": 0}])
def test_one_worker_is_the_plain_synthetic_run(mode: dict) -> None:
    # One worker, always fresh, a per-row MEAN of one gradient: the same bytes as the
    # single-worker run (same data stream, same learning rates per global step).
    plain = SyntheticRun(TWO, seed=3)
    plain.run(5)
    simulation = MultiWorkerRun(TWO, workers=1, seed=3, **mode)
    simulation.run(5)
    expected, got = plain.executor.state_arrays(), simulation.executor.state_arrays()
    assert sorted(expected) == sorted(got)
    for key in expected:
        assert np.array_equal(expected[key], got[key]), key
    assert simulation.loss == [entry["loss"] for entry in plain.history]


def test_chief_plan_is_the_plan_of_the_chief_config(tmp_path: Path) -> None:
    # The chief's plan is derived from the prepared plan, not rebuilt: it must equal the plan
    # of the chief's configuration (accumulation status and pipelining cleared).
    path = tmp_path / "c.pbtxt"
    path.write_text(TINY.read_text().replace("ENABLED", "DISABLED")
                    + "pipeline_execution_with_tensor_core: true\n")
    prepared = prepare(path, combiners="sum")
    assert prepared.plan.pipelined and not prepared.plan.tables[0].accumulate
    chief = for_chief(prepared)
    assert chief.plan == build_plan(chief_config(prepared.config), "sum")
    assert chief.config == chief_config(prepared.config)
    assert (chief.path, chief.diagnostics) == (prepared.path, prepared.diagnostics)


def _delta(options: dict) -> np.ndarray:
    simulation = MultiWorkerRun(TINY, seed=5, **options)
    before = simulation.executor.state_arrays()["table/t"].copy()
    simulation.run(1)
    return simulation.executor.state_arrays()["table/t"] - before


def test_chief_applies_the_per_row_mean() -> None:
    # SGD, lr 0.5, both workers read the initial table. Worker 0 alone gives -lr g0; DropStale
    # with staleness 1 applies g0 then g1 (SGD's change does not depend on the table), so
    # -lr (g0 + g1). Sync replicas average per row: rows both touched move by the half, rows one
    # worker touched by that worker's full step (a row's divisor is its own count).
    only0 = _delta({"workers": 1, "max_staleness": 0})
    both = _delta({"workers": 2, "max_staleness": 1})
    only1 = both - only0
    mean = _delta({"workers": 2, "init_tokens": 0})
    touched0 = np.any(only0 != 0, axis=1)
    touched1 = np.any(np.abs(only1) > 1e-7, axis=1)
    assert (touched0 & touched1).any() and (touched0 ^ touched1).any()  # the case is informative
    shared = touched0 & touched1
    np.testing.assert_allclose(mean[shared], both[shared] / 2, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(mean[touched0 & ~touched1], only0[touched0 & ~touched1],
                               rtol=1e-6)
    np.testing.assert_allclose(mean[touched1 & ~touched0], only1[touched1 & ~touched0],
                               rtol=1e-5, atol=1e-7)
    assert not mean[~touched0 & ~touched1].any()


def test_delays_are_seeded_and_deterministic() -> None:
    options = {"workers": 4, "replicas_to_aggregate": 3, "delay": "geometric:0.4"}
    first = run_workers(TWO, steps=6, seed=11, **options)
    again = run_workers(TWO, steps=6, seed=11, **options)
    other = run_workers(TWO, steps=6, seed=12, **options)
    assert first == again
    assert first != other
    # Every worker computed its gradients; nothing is lost from the books.
    grads = first["gradients"]
    assert grads["computed"] == 24
    assert grads["computed"] == grads["applied"] + grads["dropped_stale"] + grads["pending"]
    assert sum(first["staleness_histogram"].values()) == 24


def test_geometric_delays_follow_the_worker_generator() -> None:
    model = DelayModel.parse("geometric:0.25")
    draws = [model.draw(np.random.default_rng(0)) for _ in range(3)]
    assert draws == [int(np.random.default_rng(0).geometric(0.25)) - 1] * 3
    assert DelayModel.parse("geometric:1").draw(np.random.default_rng(1)) == 0
    assert str(DelayModel.parse("fixed:3")) == "fixed:3"
    for bad in ("fixed:-1", "fixed:x", "geometric:0", "geometric:1.5", "poisson:2"):
        with pytest.raises(UsageError, match="expected fixed:K"):
            DelayModel.parse(bad)


def test_inconsistent_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="give one of the two"):
        MultiWorkerRun(TINY, workers=2, replicas_to_aggregate=2, max_staleness=1)
    with pytest.raises(UsageError, match="^init_tokens applies to synchronous"):
        MultiWorkerRun(TINY, workers=2, max_staleness=1, init_tokens=3)
    inference = tmp_path / "inference.pbtxt"
    inference.write_text(TINY.read_text().replace("mode: TRAINING", "mode: INFERENCE"))
    with pytest.raises(UsageError, match="mode is INFERENCE"):
        MultiWorkerRun(inference, workers=2, validate_config=False)
