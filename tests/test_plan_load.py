"""tpuemb plan's load and limits (tpuemb_cfg.planner.load, .limits): hand-computed loads under MOD
and DIV_DEFAULT, exact quantiles and heavy hitters, and the limits against an independent count
and against ``tpuemb simulate``'s drops."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
from tpuemb_cfg.planner.limits import LimitOptions, findings, limits, suggest_limit
from tpuemb_cfg.planner.load import (
    LoadOptions,
    LoadTable,
    StepCounts,
    host_load,
    legacy_tables,
    nearest_rank,
    sparsecore_load,
)
from tpuemb_cfg.sparsecore.config import SparseCoreConfig
from tpuemb_cfg.sparsecore.feed import stack
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking
from tpuemb_cfg.sparsecore.topology import Topology

_ROOT = Path(__file__).resolve().parents[1]


def _bags(*ids: int) -> tuple[np.ndarray, np.ndarray, None]:
    """One id per bag."""
    values = np.array(ids, np.int64)
    return values, np.arange(values.shape[0] + 1, dtype=np.int64), None


# ---------------------------------------------------------------- (a) MOD vs DIV_DEFAULT by hand
#
# Table a: V = 8 over N = 3 hosts: q = 2, r = 2. MOD: host = id mod 3. DIV_DEFAULT: the first
# r = 2 hosts hold q + 1 = 3 rows: host 0 ids 0-2, host 1 ids 3-5, host 2 ids 6-7.
# Table b: V = 6 over 3 hosts: q = 2, r = 0. DIV_DEFAULT: host 0 ids 0-1, 1: 2-3, 2: 4-5.
#
# step 0: f0 (a) = [0, 0, 0, 1, 3, 6], f1 (b) = [0, 1, 1, 4]
# step 1: f0 (a) = [0, 0, 2, 2, 7],    f1 (b) = [0, 0, 5]
#
# MOD
#   step 0: a: ids 0,0,0,3,6 -> h0 (5), 1 -> h1 (1); distinct {0,3,6} h0, {1} h1
#           b: 0 -> h0 (1); 1,1,4 -> h1 (3); distinct {0} h0, {1,4} h1
#           ids [6, 4, 0], distinct [3+1, 1+2, 0] = [4, 3, 0]
#   step 1: a: 0,0 -> h0; 7 -> h1; 2,2 -> h2: [2, 1, 2]; distinct [1, 1, 1]
#           b: 0,0 -> h0; 5 -> h2: [2, 0, 1]; distinct [1, 0, 1]
#           ids [4, 1, 3], distinct [2, 1, 2]
#   totals [10, 5, 3] = 18, mean 6: max/mean = 10/6 = 5/3;
#   TVD = 1/2 (|10-6| + |5-6| + |3-6|) / 18 = 4/18 = 2/9
#   per-step max/mean: 6 / (10/3) = 9/5 and 4 / (8/3) = 3/2: mean 33/20
#   hottest host 0: table a 5 + 2 = 7, table b 1 + 2 = 3 (share 7/10);
#   table a's own totals [7, 2, 2] = 11: max/mean = 7 / (11/3) = 21/11
# DIV_DEFAULT
#   step 0: a: 0,0,0,1 -> h0 (4), 3 -> h1, 6 -> h2: [4, 1, 1]; distinct [2, 1, 1]
#           b: 0,1,1 -> h0 (3), 4 -> h2: [3, 0, 1]; distinct [2, 0, 1]
#           ids [7, 1, 2], distinct [4, 1, 2]
#   step 1: a: 0,0,2,2 -> h0, 7 -> h2: [4, 0, 1]; distinct [2, 0, 1]
#           b: 0,0 -> h0, 5 -> h2: [2, 0, 1]; distinct [1, 0, 1]
#           ids [6, 0, 2], distinct [3, 0, 2]
#   totals [13, 1, 4]: max/mean = 13/6; TVD = 1/2 (7 + 5 + 2) / 18 = 7/18
#   per-step: 7 / (10/3) = 21/10 and 6 / (8/3) = 9/4: mean 87/40
#   hottest host 0: a 8, b 5 (share 8/13)
# Heavy ids: a's 0 occurs 5 times, b's 0 3 times, then a's 2 and b's 1 twice (ties by table).

_TABLES = (LoadTable("a", 8, ("f0",)), LoadTable("b", 6, ("f1",)))
_SAMPLE = [{"f0": _bags(0, 0, 0, 1, 3, 6), "f1": _bags(0, 1, 1, 4)},
           {"f0": _bags(0, 0, 2, 2, 7), "f1": _bags(0, 0, 5)}]


def _close(value: float, exact: Fraction) -> bool:
    return value == pytest.approx(float(exact), abs=1e-12)


def test_mod_versus_div_default_by_hand() -> None:
    reports = host_load(_TABLES, _SAMPLE, hosts=3, options=LoadOptions(top=3))
    mod, div = reports["MOD"], reports["DIV_DEFAULT"]

    assert [u.total_ids for u in mod.units] == [10, 5, 3]
    assert _close(mod.imbalance.max_over_mean, Fraction(5, 3))
    assert _close(mod.imbalance.total_variation, Fraction(2, 9))
    assert _close(mod.imbalance.step_max_over_mean, Fraction(33, 20))
    assert mod.imbalance.hottest == 0
    host0 = mod.units[0]
    assert (host0.ids.mean, host0.ids.p50, host0.ids.p99, host0.ids.max) == (5.0, 4, 6, 6)
    assert (host0.unique.p50, host0.unique.max) == (2, 4)
    assert [u.unique.max for u in mod.units] == [4, 3, 2]
    a, b = mod.top_tables
    assert (a.table, a.ids_on_hottest, b.table, b.ids_on_hottest) == ("a", 7, "b", 3)
    assert _close(a.share_of_hottest, Fraction(7, 10))
    assert _close(a.max_over_mean, Fraction(21, 11))

    assert [u.total_ids for u in div.units] == [13, 1, 4]
    assert _close(div.imbalance.max_over_mean, Fraction(13, 6))
    assert _close(div.imbalance.total_variation, Fraction(7, 18))
    assert _close(div.imbalance.step_max_over_mean, Fraction(87, 40))
    assert [u.unique.max for u in div.units] == [4, 1, 2]
    assert [(t.table, t.ids_on_hottest) for t in div.top_tables] == [("a", 8), ("b", 5)]

    assert [(h.table, h.id, h.count, h.exact) for h in mod.top_ids] == [
        ("a", 0, 5, True), ("b", 0, 3, True), ("a", 2, 2, True)]
    assert [h.unit for h in mod.top_ids] == [0, 0, 2]  # a's 2 is on host 2 under MOD
    assert [h.unit for h in div.top_ids] == [0, 0, 0]
    assert json.loads(json.dumps(mod.to_json()))["imbalance"]["hottest"] == 0


def test_bad_batches_are_refused() -> None:
    with pytest.raises(InputError, match=r"id 8 is outside \[0, 8\)"):
        host_load(_TABLES, [{"f0": _bags(8), "f1": _bags(0)}], hosts=2)
    with pytest.raises(InputError, match="no feature 'f1'"):
        host_load(_TABLES, [{"f0": _bags(1)}], hosts=2)
    with pytest.raises(InputError, match="'f9'"):
        host_load(_TABLES, [{"f0": _bags(1), "f1": _bags(0), "f9": _bags(0)}], hosts=2)


def test_legacy_tables_follow_the_replay_contract() -> None:
    """quickstart: user <- f0, item <- f1 and f2, category <- f3; a row two features of one table
    look up is one distinct row (item: ids 7, 9 and 9, 11 -> 4 ids, 3 distinct)."""
    from tpuemb_cfg.session import prepare

    tables = legacy_tables(prepare(str(_ROOT / "examples" / "quickstart.pbtxt")).plan)
    assert [(t.name, t.vocabulary, t.features) for t in tables] == [
        ("user", 20000, ("f0",)), ("item", 50000, ("f1", "f2")), ("category", 1000, ("f3",))]
    batch = {"f0": _bags(0), "f1": _bags(7, 9), "f2": _bags(9, 11), "f3": _bags(5)}
    (host,) = host_load(tables, [batch], hosts=1, strategies=("MOD",))["MOD"].units
    assert (host.ids.max, host.unique.max) == (6, 5)  # user 1 + item 4 + category 1; 1 + 3 + 1


# ---------------------------------------------------------------- (c) exactness


def test_nearest_rank_quantiles() -> None:
    values = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], np.int64)
    # ceil(0.5 * 10) = 5th smallest; ceil(0.99 * 10) = 10th; ceil(0.1 * 10) = 1st
    assert (nearest_rank(values, 0.5), nearest_rank(values, 0.99),
            nearest_rank(values, 0.1)) == (5, 10, 1)


def test_step_counts_exact_then_bounded() -> None:
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 100_000, 500)
    exact = StepCounts(1, 1000)
    sketch = StepCounts(1, 100)  # histogram after 100 steps
    for c in counts:
        exact.add(np.array([c]))
        sketch.add(np.array([c]))
    ordered = np.sort(counts)
    for q in (0.5, 0.9, 0.99):
        true = int(ordered[int(np.ceil(q * 500)) - 1])
        assert exact.exact and exact.quantile(0, q) == true
        approx = sketch.quantile(0, q)
        assert not sketch.exact
        assert true <= approx <= true * (1 + 1 / 128)
    assert sketch.distribution(0).max == int(counts.max())
    assert sketch.distribution(0).mean == pytest.approx(float(counts.mean()))


def test_heavy_hitters_exact_and_misra_gries() -> None:
    """Zipf ids of one table counted exactly (vocabulary below the threshold) and by a
    Misra-Gries summary of 16 counters (above): every reported count brackets the truth, and
    the ids more frequent than n / 17 are all found."""
    rng = np.random.default_rng(11)
    batches = [{"f0": _bags(*np.minimum(rng.zipf(1.3, 400) - 1, 4999))} for _ in range(10)]
    table = (LoadTable("t", 5000, ("f0",)),)
    truth = np.bincount(np.concatenate([b["f0"][0] for b in batches]), minlength=5000)
    exact = host_load(table, batches, hosts=2, options=LoadOptions(top=5))["MOD"]
    top5 = np.lexsort((np.arange(5000), -truth))[:5]
    assert [(h.id, h.count, h.exact) for h in exact.top_ids] == [
        (int(i), int(truth[i]), True) for i in top5]
    summary = host_load(table, batches, hosts=2, options=LoadOptions(
        top=5, exact_vocabulary=100, heavy_counters=16))["MOD"]
    for h in summary.top_ids:
        assert h.count <= truth[h.id] <= h.count_upper
    frequent = set(np.flatnonzero(truth > truth.sum() / 17).tolist())
    assert frequent <= {h.id for h in summary.top_ids} | set(top5[len(summary.top_ids):])
    assert summary.top_ids[0].id == exact.top_ids[0].id


# ---------------------------------------------------------------- limits

def _stacking() -> Stacking:
    """One stack of two tables over N = 4 SparseCores (1 chip x 4): table u (V = 64, rows
    0..63 of the stack's shard, rotation 0) and v (V = 32, after u, rotation 1)."""
    u = StackedTable("u", 64, 8, 64, 8, 0, 0)
    v = StackedTable("v", 32, 8, 32, 8, 16, 1)
    stack = Stack("uv", (u, v), "g", "sum", 16, 6, 4)
    features = (FeatureSlot("fu", "u", "uv", 0, 0, 0, 8),
                FeatureSlot("fv", "v", "uv", 8, 64, 1, 8))
    return Stacking("jax", 1, 4, (stack,), features)


def _zipf_batches(steps: int, seed: int) -> list[dict[str, tuple[np.ndarray, np.ndarray, None]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        batch = {}
        for name, vocab in (("fu", 64), ("fv", 32)):
            lengths = rng.integers(1, 4, 8)
            splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            values = np.minimum(rng.zipf(1.4, int(splits[-1])) - 1, vocab - 1).astype(np.int64)
            batch[name] = (values, splits, None)
        out.append(batch)
    return out


def _independent_maxima(stacking: Stacking, batch: dict[str, Any]) -> tuple[int, int]:
    """Steps 1, 2 and 4-5 of the preprocessing written again as loops: SparseCore c takes rows
    2c, 2c + 1 of each feature (8 rows over 4 SparseCores); an entry is a distinct (partition,
    embedding id, sample); the most entries and distinct embedding ids per (SparseCore,
    partition)."""
    n = stacking.num_sparse_cores
    entries: dict[tuple[int, int], set[tuple[int, int]]] = {}
    for slot in stacking.features:
        values, splits, _ = batch[slot.name]
        for row in range(8):
            core, sample = row // 2, row % 2 + slot.row_offset // 4
            for x in values[splits[row]:splits[row + 1]]:
                partition = (int(x) + slot.col_shift) % n
                column = int(x) // n + slot.col_offset // n
                entries.setdefault((core, partition), set()).add((column, sample))
    most = max(len(e) for e in entries.values())
    distinct = max(len({c for c, _ in e}) for e in entries.values())
    return most, distinct


def test_limits_observed_suggested_and_drops() -> None:
    stacking = _stacking()
    batches = _zipf_batches(6, seed=3)
    report = limits(stacking, batches)
    (stack,) = report.stacks
    maxima = [_independent_maxima(stacking, b) for b in batches]
    assert stack.observed_max_ids == max(m for m, _ in maxima)
    assert stack.observed_max_unique_ids == max(d for _, d in maxima)
    assert stack.suggested is not None
    assert stack.suggested.max_ids_per_partition == suggest_limit(stack.observed_max_ids)
    # the sample exceeds the stack's limits (6, 4): ids are dropped now, none at the suggestion
    assert stack.current.dropped > 0
    assert stack.suggested.dropped == 0
    assert sum(d.ids for d in stack.current.drops) == sum(
        b[f][0].shape[0] for b in batches for f in ("fu", "fv"))
    # buffers: roundup8(limit) x 4 SparseCores per device x N = 4
    assert stack.current.theoretical_max_coo_buffer_size == 8 * 4 * 4
    assert stack.suggested.coo_buffer_size_per_device == \
        -(-stack.suggested.max_ids_per_partition // 8) * 8 * 16
    diagnostics = findings(report, _config_stub())
    assert [d.rule for d in diagnostics] == ["PLAN010"]
    # a stack of two tables: the limits are auto_stack_tables' callables (SC003), not u's field
    assert diagnostics[0].field_path == "stack_to_max_ids_per_partition"
    assert str(stack.suggested.max_ids_per_partition) in (diagnostics[0].hint or "")


def test_limits_take_the_sample_twice() -> None:
    """A one-shot iterator cannot give the second pass; one pass needs none."""
    batches = _zipf_batches(2, seed=4)
    with pytest.raises(ValueError, match="one-shot iterator"):
        limits(_stacking(), iter(batches))
    once = limits(_stacking(), iter(batches), options=LimitOptions(suggest=False))
    again = limits(_stacking(), lambda: iter(batches))
    assert once.stacks[0].suggested is None
    assert once.stacks[0].current == again.stacks[0].current


def _config_stub() -> SparseCoreConfig:

    return SparseCoreConfig("jax", "jax", (), (), Topology(1, 4))


@pytest.mark.parametrize(("observed", "expected"), [(0, 8), (1, 8), (20, 24), (40, 48), (47, 64)])
def test_suggest_limit(observed: int, expected: int) -> None:
    # 1.2 x 20 = 24 -> 24; 1.2 x 40 = 48 -> 48; 1.2 x 47 = 56.4 -> 57 -> 64
    assert suggest_limit(observed) == expected
    assert LimitOptions().headroom == 1.2


def test_sparsecore_load_partitions() -> None:
    """Ids of u go to partition x mod 4, of v to (x + 1) mod 4."""
    stacking = _stacking()
    batch = {"fu": _bags(0, 0, 1, 5, 0, 0, 0, 0), "fv": _bags(3, 3, 0, 0, 0, 0, 0, 0)}
    report = sparsecore_load(stacking, [batch])
    # u: 0 (six times) -> p0; 1 and 5 -> p1.  v: 3 (twice) -> (3 + 1) mod 4 = p0;
    # 0 (six times) -> p1.  p0: 6 + 2 = 8 ids, p1: 2 + 6 = 8
    assert [u.total_ids for u in report.units] == [8, 8, 0, 0]
    assert [u.unique.max for u in report.units] == [2, 3, 0, 0]  # p0: u0, v3; p1: u1, u5, v0


# ---------------------------------------------------------------- (b) against tpuemb simulate

_SIMULATE_SPEC = _ROOT / "examples" / "sparsecore" / "simulate_jax_limits.py"


def _simulate_batches(config: Any, steps: int) -> list[dict[str, Any]]:
    """Zipf(1.2) ids, 1 to 3 per sample, over each feature's 128 samples."""
    rng = np.random.default_rng(2024)
    vocabulary = {t.name: t.vocabulary_size for t in config.tables}
    out = []
    for _ in range(steps):
        batch = {}
        for feature in config.features:
            lengths = rng.integers(1, 4, 128)
            splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            v = vocabulary[feature.table]
            ids = np.minimum(rng.zipf(1.2, int(splits[-1])) - 1, v - 1).astype(np.int64)
            batch[feature.name] = (ids, splits, None)
        out.append(batch)
    return out


def _simulated_drops(spec: Path, config: Any, batches: list[dict[str, Any]],
                     tmp_path: Path) -> dict[str, Any]:
    """``tpuemb simulate SPEC --batches B.npz --allow-id-dropping --json``: its drops per table."""
    arrays: dict[str, np.ndarray] = {}
    for s, batch in enumerate(batches):
        for f, feature in enumerate(config.features):
            ids, splits, _ = batch[feature.name]
            arrays[f"s{s}/f{f}/ids"] = ids
            arrays[f"s{s}/f{f}/row_splits"] = splits
            arrays[f"s{s}/f{f}/grad"] = np.full((128, 16), 0.01, np.float32)
    path = tmp_path / f"{spec.stem}.npz"
    np.savez(path, **arrays)  # type: ignore[arg-type]
    result = run_cli("simulate", str(spec), "--batches", str(path), "--out",
                     str(tmp_path / "o.npz"), "--allow-id-dropping", "--json",
                     "--engine", "numpy")
    assert result.exit_code == 0, result.output
    tables: dict[str, Any] = json.loads(result.output)["drops"]["tables"]
    return tables


def _spec_with(pair: tuple[int, int], tmp_path: Path) -> Path:
    """A copy of the example spec whose stack limits are ``pair``."""
    before, ids, unique = _SIMULATE_SPEC.read_text(encoding="utf-8").split("return 32")
    spec = tmp_path / f"limits_{pair[0]}_{pair[1]}.py"
    spec.write_text(f"{before}return {pair[0]}{ids}return {pair[1]}{unique}", encoding="utf-8")
    return spec


@pytest.mark.parametrize("pair", [None, (24, 12)])
def test_predicted_drops_equal_simulate(pair: tuple[int, int] | None, tmp_path: Path) -> None:
    """The drops ``limits`` predicts per table at the spec's limits (40 / 40 for the stack
    item_user; and at 24 / 12, where the distinct-id limit drops too) and at its suggested limits
    equal what ``tpuemb simulate --allow-id-dropping`` drops per table on the same batches (the
    limits written into a copy of the spec)."""
    config = load_sparsecore_spec(str(_SIMULATE_SPEC)).config
    stacking = stack(config)
    spec = _SIMULATE_SPEC
    if pair is not None:
        stacking = replace(stacking, stacks=tuple(
            replace(s, max_ids_per_partition=pair[0], max_unique_ids_per_partition=pair[1])
            for s in stacking.stacks))
        spec = _spec_with(pair, tmp_path)
    batches = _simulate_batches(config, 4)
    report = limits(stacking, batches, options=LimitOptions(headroom=1.0))
    (predicted,) = report.stacks
    assert predicted.current.dropped > 0
    simulated = _simulated_drops(spec, config, batches, tmp_path)
    for table in predicted.current.drops:
        assert (table.ids, table.dropped) == (simulated[table.table]["ids"],
                                               simulated[table.table]["dropped"])
    if pair is None:  # the suggestion (the sample's maxima rounded up to 8) drops nothing here
        assert predicted.suggested is not None
        suggested = (predicted.suggested.max_ids_per_partition,
                     predicted.suggested.max_unique_ids_per_partition)
        simulated = _simulated_drops(_spec_with(suggested, tmp_path), config, batches, tmp_path)
        for table in predicted.suggested.drops:
            assert (table.ids, table.dropped) == (simulated[table.table]["ids"], 0)
            assert table.dropped == 0
