"""Stale-gradient dropping and synchronous replicas (spec: accumulator.md sections 3 and 4).

The expected sequences are worked out by hand from the spec's rules; each test says how.
"""

from __future__ import annotations

import numpy as np
import pytest

from tpuemb_cfg.sim.accumulators import IndexedSlices, WouldBlock
from tpuemb_cfg.sim.staleness import DropStaleGradient, StaleDecision, SyncReplicas

# ---------------------------------------------------------------------------------------------
# DropStaleGradient: the worked stories of spec section 3 (all workers compute at global step 0,
# then apply one after another)


@pytest.mark.parametrize(
    ("workers", "max_staleness", "outcome", "global_step", "stale_counter"),
    [
        (1, 0, [True], 1, 0),
        (1, -1, [False], 0, 1),
        (2, 0, [True, False], 1, 1),
        (2, 1, [True, True], 2, 0),
        (3, 1, [True, True, False], 2, 1),
        # beyond the spec's table, same rule: staleness seen = number of earlier applies
        (3, 0, [True, False, False], 1, 2),  # staleness 0, 1, 1
        (3, 2, [True, True, True], 3, 0),  # staleness 0, 1, 2
        (3, -1, [False, False, False], 0, 3),  # negative drops everything
    ],
)
def test_drop_stale_stories(workers: int, max_staleness: int, outcome: list[bool],
                            global_step: int, stale_counter: int) -> None:
    rule = DropStaleGradient(max_staleness)
    snapshots = [rule.global_step for _ in range(workers)]  # compute_gradients reads step 0
    assert snapshots == [0] * workers
    applied_calls: list[int] = []
    result = [rule.apply_gradients(step, lambda w=w: applied_calls.append(w))  # type: ignore[misc]
              for w, step in enumerate(snapshots)]
    assert result == outcome
    assert applied_calls == [w for w, ok in enumerate(outcome) if ok]  # whole step or nothing
    assert rule.global_step == global_step
    assert rule.stale_counter == stale_counter


def test_drop_stale_decisions_record_staleness() -> None:
    rule = DropStaleGradient(1)
    for _ in range(3):
        rule.apply_gradients(0)
    assert rule.decisions == [
        StaleDecision(local_step=0, global_step=0, staleness=0, applied=True),
        StaleDecision(local_step=0, global_step=1, staleness=1, applied=True),
        StaleDecision(local_step=0, global_step=2, staleness=2, applied=False),
    ]
    # TensorFlow's summary: stale_counter / (global_step + 1) = 1 / 3
    assert rule.staleness_percentage() == pytest.approx(1 / 3)


def test_should_apply_with_an_external_global_step() -> None:
    rule = DropStaleGradient(2)
    # staleness = global - local: 0, 2 accepted; 3 dropped; a future snapshot (-1) accepted
    assert [rule.should_apply(local, glob) for local, glob in
            [(5, 5), (3, 5), (2, 5), (6, 5)]] == [True, True, False, True]
    assert rule.stale_counter == 1
    assert rule.global_step == 0  # should_apply never advances the held step
    assert rule.staleness(2, 5) == 3
    assert rule.staleness_percentage(global_step=3) == 0.25


def test_drop_stale_interleaved_workers() -> None:
    # worker A reads 0, worker B reads 0, A applies (0 -> 1), A reads 1, B applies (staleness 1,
    # max 0: dropped), A applies (staleness 0: 1 -> 2), B reads 2 and applies (2 -> 3).
    rule = DropStaleGradient(0)
    a = rule.global_step
    b = rule.global_step
    assert rule.apply_gradients(a) is True
    a = rule.global_step
    assert rule.apply_gradients(b) is False
    assert rule.apply_gradients(a) is True
    b = rule.global_step
    assert rule.apply_gradients(b) is True
    assert (rule.global_step, rule.stale_counter) == (3, 1)


def test_drop_stale_rejects_non_integer_threshold() -> None:
    with pytest.raises(ValueError, match="max_staleness must be an integer scalar"):
        DropStaleGradient(1.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# SyncReplicas (spec section 4)


def test_init_tokens_rules() -> None:
    # R = 3 of N = 1: R - N = 2 tokens are needed to finish the first step
    sync = SyncReplicas(3, 1, dense={"w": [1]})
    assert sync.tokens_per_step == 3
    with pytest.raises(ValueError) as err:
        sync.init_tokens(1)
    assert str(err.value) == "Too few tokens to finish the first step: 1 (given) vs 2 (needed)"
    assert list(sync.tokens) == []
    assert sync.init_tokens(2) == 2
    assert list(sync.tokens) == [0, 0]

    default = SyncReplicas(2, 3, dense={"w": [1]}, global_step=7)
    assert default.tokens_per_step == 3
    assert default.init_tokens() == 2  # -1 means R tokens holding the global step
    assert list(default.tokens) == [7, 7]

    none = SyncReplicas(2, 2, dense={"w": [1]})
    assert none.init_tokens(0) == 0
    assert list(none.tokens) == []


def test_construction_errors() -> None:
    with pytest.raises(ValueError, match="Must supply at least one variable"):
        SyncReplicas(2)
    with pytest.raises(ValueError, match="declared both dense and sparse"):
        SyncReplicas(2, dense={"w": None}, sparse=["w"])
    with pytest.raises(ValueError, match="replicas_to_aggregate must be >= 1, got 0"):
        SyncReplicas(0, dense={"w": None})


def test_backup_worker_gradients_are_dropped() -> None:
    """R = 2 of N = 3, one dense variable; every step derived by hand.

    start: accumulator clock 0, tokens [0, 0].
    """
    sync = SyncReplicas(2, 3, dense={"w": [1]})
    sync.start()
    assert list(sync.tokens) == [0, 0]
    acc = sync.accumulators["w"]

    assert sync.replica_step(0, {"w": [1.0]}) == {"w": True}  # local 0, token 0
    assert sync.replica_step(1, {"w": [3.0]}) == {"w": True}  # local 0, token 0
    assert list(sync.tokens) == []
    assert sync.chief_step()["w"].tolist() == [2.0]  # (1 + 3) / 2; clock 1; 3 tokens of 1
    assert sync.global_step == 1 and acc.global_step == 1
    assert list(sync.tokens) == [1, 1, 1]

    # the backup replica 2 arrives late with local step 0: dropped, then takes token 1
    assert sync.replica_step(2, {"w": [100.0]}) == {"w": False}
    # replicas 0 and 1 hold init tokens (value 0): their next gradients are stale too
    assert sync.replica_step(0, {"w": [5.0]}) == {"w": False}
    assert sync.replica_step(1, {"w": [7.0]}) == {"w": False}
    assert sync.local_steps == [1, 1, 1]
    assert list(sync.tokens) == []

    with pytest.raises(WouldBlock, match="'w' has 0"):
        sync.chief_step()

    assert sync.replica_step(2, {"w": [10.0]}) == {"w": True}  # local 1; queue empty: waits
    assert sync.replica_step(0, {"w": [20.0]}) == {"w": True}  # waits
    assert sync.waiting == [2, 0]
    with pytest.raises(WouldBlock, match="replica 2 is still waiting for a token"):
        sync.replica_step(2, {"w": [1.0]})

    updates: list[dict[str, np.ndarray]] = []
    result = sync.chief_step(updates.append)
    assert result["w"].tolist() == [15.0]
    assert len(updates) == 1 and updates[0]["w"].tolist() == [15.0]
    # 3 tokens of 2: replicas 2 then 0 (waiting order) get one each, one stays
    assert sync.waiting == []
    assert sync.local_steps == [2, 1, 2]
    assert list(sync.tokens) == [2]

    assert sync.replica_step(1, {"w": [1.0]}) == {"w": False}  # local 1 < clock 2
    assert sync.replica_step(2, {"w": [4.0]}) == {"w": True}
    assert sync.num_dropped() == {"w": 4}

    tokens = [(e.replica, e.step) for e in sync.events if e.kind == "token"]
    assert tokens == [(0, 0), (1, 0), (2, 1), (0, 1), (1, 1), (2, 2), (0, 2), (1, 2)]


def test_more_than_r_gradients_are_averaged_when_they_arrive_before_the_take() -> None:
    sync = SyncReplicas(2, 3, dense={"w": []})
    sync.start()
    for replica, value in enumerate([1.0, 2.0, 6.0]):
        assert sync.replica_step(replica, {"w": value}) == {"w": True}
    assert float(sync.chief_step()["w"]) == 3.0  # (1 + 2 + 6) / 3


def test_fewer_replicas_than_required_contribute_several_gradients() -> None:
    # R = 2 of N = 1: the single replica applies twice for step 0 thanks to the 2 init tokens
    sync = SyncReplicas(2, 1, dense={"w": [2]})
    sync.start()
    assert sync.replica_step(0, {"w": [4.0, 0.0]}) == {"w": True}
    with pytest.raises(WouldBlock):
        sync.chief_step()
    assert sync.replica_step(0, {"w": [6.0, 2.0]}) == {"w": True}
    assert sync.chief_step()["w"].tolist() == [5.0, 1.0]
    assert list(sync.tokens) == [1, 1]  # max(N, R) = 2 tokens of the new step
    assert sync.replica_step(0, {"w": [0.0, 0.0]}) == {"w": False}  # still local 0
    assert sync.local_steps == [1]


def test_without_init_tokens_replicas_wait_for_the_chief() -> None:
    # R = N = 2 needs R - N = 0 init tokens: each replica waits after its first step until the
    # chief's update enqueues 2 tokens of step 1. While replica 1 is missing (dead, out of data)
    # the run hangs: replica 0 waits and the chief's take holds 1 of 2.
    sync = SyncReplicas(2, 2, dense={"w": []})
    sync.start(num_init_tokens=0)
    assert list(sync.tokens) == []
    sync.replica_step(0, {"w": 1.0})
    assert sync.waiting == [0]
    with pytest.raises(WouldBlock):
        sync.replica_step(0, {"w": 1.0})
    with pytest.raises(WouldBlock, match="'w' has 1"):
        sync.chief_step()
    sync.replica_step(1, {"w": 5.0})
    assert sync.waiting == [0, 1]
    assert float(sync.chief_step()["w"]) == 3.0
    assert sync.waiting == [] and sync.local_steps == [1, 1] and list(sync.tokens) == []


def test_sparse_variable_uses_per_row_mean() -> None:
    sync = SyncReplicas(2, 2, sparse=["emb"])
    sync.start()
    sync.replica_step(0, {"emb": IndexedSlices([1], [[2.0]])})
    sync.replica_step(1, {"emb": ([1, 3], [[4.0], [8.0]])})
    indices, values = sync.chief_step()["emb"]
    assert indices.tolist() == [1, 3]
    assert values.tolist() == [[3.0], [8.0]]  # row 1: (2 + 4) / 2; row 3: 8 / 1


def test_takes_fire_per_variable() -> None:
    # R = 2 of N = 2, variables a and b; replica 1 sends only a at first
    sync = SyncReplicas(2, 2, dense={"a": [], "b": []})
    sync.start()
    sync.replica_step(0, {"a": 1.0, "b": 10.0})
    sync.replica_step(1, {"a": 3.0})
    with pytest.raises(WouldBlock, match="'b' has 1"):
        sync.chief_step()
    # a's take fired: its clock moved on, b's did not
    assert sync.accumulators["a"].global_step == 1
    assert sync.accumulators["b"].global_step == 0
    assert sync.global_step == 0
    # replica 1 holds token 0: b at local 0 is still fresh, a at local 0 is now stale
    assert sync.replica_step(1, {"a": 50.0, "b": 30.0}) == {"a": False, "b": True}
    result = sync.chief_step()
    assert (float(result["a"]), float(result["b"])) == (2.0, 20.0)
    assert sync.global_step == 1
    assert [e.kind for e in sync.events].count("take") == 2


def test_replica_step_errors() -> None:
    sync = SyncReplicas(1, 2, dense={"w": [1]}, sparse=["emb"])
    sync.start()
    with pytest.raises(ValueError, match=r"replica 2 does not exist: replicas are 0\.\.1"):
        sync.replica_step(2, {"w": [1.0]})
    with pytest.raises(ValueError, match="unknown variable 'v'"):
        sync.replica_step(0, {"v": [1.0]})
    with pytest.raises(ValueError, match=r"Unknown grad type! variable 'w' takes dense"):
        sync.replica_step(0, {"w": IndexedSlices([0], [[1.0]])})
    with pytest.raises(ValueError, match=r"Unknown grad type! variable 'emb' takes sparse"):
        sync.replica_step(0, {"emb": np.ones((1, 1))})
    assert sync.accumulators["w"].num_accumulated() == 0
