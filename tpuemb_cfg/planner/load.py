"""The load of a sample of ids: ids and distinct ids per host (legacy, MOD vs DIV_DEFAULT) and per
SparseCore (after stacking and rotation), per step, streamed in memory independent of the
sample's length (docs/plan/load-and-limits.md states every definition).

**Units.** A *unit* is what serves lookups: a host of the legacy layout (spec section 8, the
host of a row from :func:`tpuemb_cfg.model.layout.host_of`), or a SparseCore partition (id ``x`` of
a table with rotation ``col_shift`` goes to partition ``(x + col_shift) mod N``, preprocessing's
step 2).

**Per step and unit**: ``ids`` = the ids of every feature whose row lives on the unit (a bag's
repeats counted, as they travel); ``unique`` = the distinct rows the unit gathers, summed over
tables (distinct per table: two features of one table looking up one row count it once, two
tables' rows are different rows).

**Distributions** over the steps: mean and max exact; p50/p99 by nearest rank (the smallest
count c with at least ceil(q n) of the n steps at or below c), exact for the first
``exact_steps`` steps; past them the counts go into a log-linear histogram (values below 256
exact, above in buckets of relative width 1/128) and the quantile is the upper end of its bucket:
at most 0.8 % above the true value, never below it.

**Imbalance** over the sample's totals L_u of U units, shares s_u = L_u / sum(L):
``max_over_mean`` = max(L) / mean(L); ``total_variation`` = 1/2 sum |s_u - 1/U|, in
[0, 1 - 1/U]: the fraction of all lookups that would have to move to balance the units exactly;
``step_max_over_mean`` = the mean over steps of that step's max/mean, what a synchronous step
waits for.

**Heavy hitters** per table: exact counts (one int64 per row) for the tables of at most
``exact_vocabulary`` rows, smallest first while their rows total at most ``exact_rows`` (the
counts are allocated and touched up front: their memory is the configuration's, never the
sample's); otherwise a Misra-Gries summary of ``heavy_counters`` counters merged batch by batch,
whose count c of an id satisfies c <= true <= c + (n - sum of counters) / (k + 1)
(:class:`HeavyId` gives both ends).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.model.layout import host_of

if TYPE_CHECKING:
    from tpuemb_cfg.executor.plan import Plan
    from tpuemb_cfg.sparsecore.stacking import Stacking

__all__ = [
    "STRATEGIES", "Batch", "Distribution", "FeatureIds", "HeavyId", "Imbalance", "LoadCounter",
    "LoadOptions", "LoadReport", "LoadTable", "StepCounts", "TableLoad", "UnitLoad",
    "host_counter", "host_load", "legacy_tables", "nearest_rank", "sparsecore_counter",
    "sparsecore_load", "sparsecore_tables",
]

IntArray = npt.NDArray[np.int64]
#: One feature's ids of one step: ``(values int64, row_splits int64, weights float32 | None)``.
FeatureIds = tuple[IntArray, IntArray, "npt.NDArray[np.float32] | None"]
#: One step: feature name -> its ids (legacy: ``"f0"``, ``"f1"``, ...; SparseCore: the names
#: of ``SparseCoreConfig.features``).
Batch = Mapping[str, FeatureIds]

Level = Literal["host", "sparsecore"]
#: The layout a report is for: ``"MOD"``, ``"DIV_DEFAULT"`` or ``"stacked"`` (SparseCore).
Strategy = str

_EXACT_BELOW = 256  # histogram: values below are their own bucket
_SUB = 128  # histogram: buckets per power of two above


@dataclass(frozen=True)
class LoadOptions:
    """How exact the streamed summaries are, and how much they report.

    ``exact_steps``: per-step counts kept exactly for the quantiles (then a histogram);
    ``exact_vocabulary``: tables up to this many rows count every id exactly (else Misra-Gries),
    ``exact_rows``: as long as those tables' rows total at most this many; ``heavy_counters``:
    Misra-Gries counters per other table; ``top``: tables and ids reported.
    """

    exact_steps: int = 8192
    exact_vocabulary: int = 1 << 20
    exact_rows: int = 1 << 23
    heavy_counters: int = 1024
    top: int = 10

    def __post_init__(self) -> None:
        for name in ("exact_steps", "exact_vocabulary", "exact_rows", "heavy_counters", "top"):
            if getattr(self, name) < 1:
                raise ValueError(f"LoadOptions.{name} must be at least 1, got "
                                 f"{getattr(self, name)}")


class JsonRecord:
    """A report record whose JSON form is its fields in order (``to_json``): a nested record
    by its own ``to_json``, a tuple or list as a list."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: _json_value(getattr(self, f.name))
                for f in fields(self)}  # type: ignore[arg-type]  # a dataclass's mixin


def _json_value(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    return value


@dataclass(frozen=True)
class LoadTable:
    """A table as the load counters see it: its rows, the batch keys that look it up, and its
    rotation (SparseCore ``col_shift``; 0 for legacy tables)."""

    name: str
    vocabulary: int
    features: tuple[str, ...]
    col_shift: int = 0


@dataclass(frozen=True)
class Distribution(JsonRecord):
    """Per-step counts of one unit over the sample (``exact``: p50/p99 are exact)."""

    mean: float
    p50: int
    p99: int
    max: int
    steps: int
    exact: bool


@dataclass(frozen=True)
class UnitLoad(JsonRecord):
    """One host or SparseCore: per-step ids and distinct rows, its total and its share."""

    index: int
    ids: Distribution
    unique: Distribution
    total_ids: int
    share: float


@dataclass(frozen=True)
class Imbalance(JsonRecord):
    """Imbalance of the units' total ids (module docstring)."""

    max_over_mean: float
    total_variation: float
    step_max_over_mean: float
    hottest: int


@dataclass(frozen=True)
class TableLoad(JsonRecord):
    """A table's part in the hottest unit: its ids there, their share of that unit's ids, and
    the table's own max/mean over the units."""

    table: str
    ids_on_hottest: int
    share_of_hottest: float
    total_ids: int
    max_over_mean: float


@dataclass(frozen=True)
class HeavyId(JsonRecord):
    """A frequent id: ``count <= true count <= count_upper`` (equal when counted exactly), and
    the unit holding it under the report's layout."""

    table: str
    id: int
    count: int
    count_upper: int
    unit: int

    @property
    def exact(self) -> bool:
        return self.count == self.count_upper


@dataclass(frozen=True)
class LoadReport(JsonRecord):
    """The load of one layout: ``level`` ``"host"`` (``strategy`` MOD / DIV_DEFAULT) or
    ``"sparsecore"`` (``strategy`` ``"stacked"``)."""

    level: Level
    strategy: Strategy
    steps: int
    total_ids: int
    units: tuple[UnitLoad, ...]
    imbalance: Imbalance
    top_tables: tuple[TableLoad, ...]
    top_ids: tuple[HeavyId, ...]


# ---------------------------------------------------------------- tables of a configuration


def legacy_tables(plan: Plan) -> tuple[LoadTable, ...]:
    """The tables of an executor plan with their replay-contract feature keys ``"f{index}"``."""
    return tuple(LoadTable(t.name, t.vocabulary, tuple(f"f{i}" for i in t.features))
                 for t in plan.tables)


def sparsecore_tables(stacking: Stacking) -> tuple[LoadTable, ...]:
    """Every stacked table's tables with their features and rotation (``shard_rotation``, the
    ``col_shift`` of its features)."""
    out = []
    for stack in stacking.stacks:
        for table in stack.tables:
            names = tuple(f.name for f in stacking.features if f.table == table.name)
            out.append(LoadTable(table.name, table.vocabulary_size, names,
                                 table.shard_rotation))
    return tuple(out)


# ---------------------------------------------------------------- quantiles


def nearest_rank(sorted_values: npt.NDArray[np.int64], q: float) -> int:
    """The nearest-rank quantile of sorted values: the ceil(q n)-th smallest (the first for
    q = 0)."""
    n = int(sorted_values.shape[0])
    if n == 0:
        return 0
    k = max(1, int(np.ceil(q * n - 1e-9)))
    return int(sorted_values[min(k, n) - 1])


def _bucket(values: IntArray) -> IntArray:
    """Log-linear bucket of each count: the value itself below 256; above, 128 buckets per power
    of two (bucket width <= value / 128)."""
    values = np.asarray(values, dtype=np.int64)
    out = values.copy()
    big = values >= _EXACT_BELOW
    if big.any():
        v = values[big]
        exponent = np.frexp(v.astype(np.float64))[1].astype(np.int64) - 1  # floor(log2 v)
        shift = exponent - 7
        mantissa = v >> shift
        out[big] = _EXACT_BELOW + (exponent - 8) * _SUB + (mantissa - _SUB)
    return out


def _bucket_upper(index: int) -> int:
    """The largest count in bucket ``index``."""
    if index < _EXACT_BELOW:
        return index
    exponent, mantissa = divmod(index - _EXACT_BELOW, _SUB)
    shift = exponent + 1
    return ((mantissa + _SUB + 1) << shift) - 1


class StepCounts:
    """Per-step counts of U units: exact rows (int32: a step holds fewer than 2^31 ids) for the
    first ``capacity`` steps, allocated and touched up front, then one histogram row per unit;
    sum and max always exact. Memory: 4 x capacity x U bytes plus the histogram (at most
    ~4,500 int64 buckets per unit for counts below 2^40), whatever the number of steps."""

    def __init__(self, units: int, capacity: int) -> None:
        self.units = units
        self.capacity = capacity
        self.steps = 0
        self.total = np.zeros(units, np.int64)
        self.max = np.zeros(units, np.int64)
        self._rows = np.empty((capacity, units), np.int32)
        self._rows.fill(0)
        self._hist: npt.NDArray[np.int64] | None = None

    def add(self, counts: IntArray) -> None:
        if int(counts.max(initial=0)) >= 1 << 31:
            raise ValueError(f"a step sends {int(counts.max())} ids to one unit, more than the "
                             "2^31 - 1 a step can hold; split the sample's batches")
        self.total += counts
        np.maximum(self.max, counts, out=self.max)
        if self._hist is None and self.steps < self.capacity:
            self._rows[self.steps] = counts
        else:
            if self._hist is None:
                self._hist = np.zeros((self.units, 0), np.int64)
                self._fold(self._rows[:self.steps].astype(np.int64))
                self._rows = np.zeros((0, self.units), np.int32)
            self._fold(counts[None, :])
        self.steps += 1

    def _fold(self, rows: IntArray) -> None:
        assert self._hist is not None
        buckets = _bucket(rows)
        width = int(buckets.max(initial=0)) + 1
        if width > self._hist.shape[1]:
            grown = np.zeros((self.units, width), np.int64)
            grown[:, :self._hist.shape[1]] = self._hist
            self._hist = grown
        for u in range(self.units):
            self._hist[u] += np.bincount(buckets[:, u], minlength=self._hist.shape[1])

    @property
    def exact(self) -> bool:
        return self._hist is None

    def quantile(self, unit: int, q: float) -> int:
        if self._hist is None:
            return nearest_rank(np.sort(self._rows[:self.steps, unit].astype(np.int64)), q)
        cumulative = np.cumsum(self._hist[unit])
        k = max(1, int(np.ceil(q * self.steps - 1e-9)))
        index = int(np.searchsorted(cumulative, min(k, self.steps)))
        return min(_bucket_upper(index), int(self.max[unit]))

    def steps_above(self, ceiling: IntArray) -> IntArray | None:
        """The steps whose count exceeds ``ceiling`` in some unit (``ceiling`` one value per
        unit), in order; None when that is not known: past ``capacity`` steps only the
        histogram is kept, so None as soon as some unit's maximum exceeds its ceiling."""
        if self._hist is None:
            out: IntArray = np.flatnonzero((self._rows[:self.steps] > ceiling).any(axis=1))
            return out
        return None if bool((self.max > ceiling).any()) else np.zeros(0, np.int64)

    def distribution(self, unit: int) -> Distribution:
        steps = max(self.steps, 1)
        return Distribution(float(self.total[unit]) / steps, self.quantile(unit, 0.5),
                            self.quantile(unit, 0.99), int(self.max[unit]), self.steps,
                            self.exact)


# ---------------------------------------------------------------- heavy hitters


class _Heavy:
    """One table's id counts: exact (a dense array) or a Misra-Gries summary (mergeable: each
    batch's counts are added, then every counter is lowered by the (k+1)-th largest and the
    non-positive ones leave; each lowering removes k + 1 counted ids, so an id loses at most
    (n - sum of counters) / (k + 1))."""

    def __init__(self, vocabulary: int, exact: bool, counters: int) -> None:
        self.exact = exact
        self.k = counters
        self.n = 0
        self.dense = np.empty(vocabulary if exact else 0, np.int64)
        self.dense.fill(0)  # touched now: the memory is the table's, not the sample's
        self.keys = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)

    def add(self, ids: IntArray, counts: IntArray) -> None:
        self.n += int(counts.sum())
        if self.exact:
            self.dense[ids] += counts
            return
        # ``ids`` (the step's distinct ids, ascending) and the k counters (ascending) merged by
        # a binary search of the counters in the step's ids: no sort of the step's ids again
        summed = counts.astype(np.int64)  # a copy: the caller's counts stay
        uniq = ids
        if self.keys.shape[0]:
            at = np.minimum(np.searchsorted(ids, self.keys), max(ids.shape[0] - 1, 0))
            hit = (ids[at] == self.keys) if ids.shape[0] else np.zeros(self.keys.shape, bool)
            summed[at[hit]] += self.counts[hit]
            uniq = np.concatenate([ids, self.keys[~hit]])
            summed = np.concatenate([summed, self.counts[~hit]])
        if uniq.shape[0] > self.k:
            cut = np.partition(summed, uniq.shape[0] - self.k - 1)[uniq.shape[0] - self.k - 1]
            summed -= cut
            keep = summed > 0
            uniq, summed = uniq[keep], summed[keep]
        order = np.argsort(uniq, kind="stable")  # at most k + (the step's distinct ids if none cut)
        self.keys, self.counts = uniq[order], summed[order]

    def _top_exact(self, top: int) -> IntArray:
        """The ``top`` most counted ids (ties: smaller id first; ids never seen left out), by
        a partition of the whole table (working memory: the table's rows, whatever the
        sample's length)."""
        rows = self.dense.shape[0]
        if rows > top:
            threshold = int(np.partition(self.dense, rows - top)[rows - top])
        else:
            threshold = int(self.dense.min(initial=0))
        threshold = max(threshold, 1)
        above = np.flatnonzero(self.dense > threshold)
        tied = np.flatnonzero(self.dense == threshold)[:top - above.shape[0]]
        chosen = np.concatenate([above, tied])
        order = np.lexsort((chosen, -self.dense[chosen]))
        out: IntArray = chosen[order][:top]
        return out

    def top(self, top: int) -> list[tuple[int, int, int]]:
        """Up to ``top`` (id, count, count_upper), most frequent first, ties by id."""
        if self.exact:
            ids = self._top_exact(top)
            return [(int(i), int(self.dense[i]), int(self.dense[i])) for i in ids]
        slack = (self.n - int(self.counts.sum())) // (self.k + 1)
        order = np.lexsort((self.keys, -self.counts))[:top]
        return [(int(self.keys[i]), int(self.counts[i]), int(self.counts[i]) + slack)
                for i in order]


# ---------------------------------------------------------------- the counter

#: For one table: the unit of each of an array of its ids.
UnitMap = Callable[[IntArray], IntArray]


@dataclass
class _Layout:
    """The accumulators of one layout (one strategy)."""

    maps: tuple[UnitMap, ...]  # per table
    ids: StepCounts
    unique: StepCounts
    per_table: IntArray  # [tables, units] total ids
    ratio_sum: float = 0.0
    ratio_steps: int = 0


@dataclass
class LoadCounter:
    """Streaming load of one sample under one or more layouts: :meth:`update` per batch,
    :meth:`reports` at the end. Memory: O(units x exact_steps + tables x units + heavy-hitter
    state), whatever the sample's length."""

    level: Level
    tables: tuple[LoadTable, ...]
    units: int
    layouts: Mapping[Strategy, Sequence[UnitMap]]
    options: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        self._state = {
            name: _Layout(tuple(maps), StepCounts(self.units, self.options.exact_steps),
                          StepCounts(self.units, self.options.exact_steps),
                          np.zeros((len(self.tables), self.units), np.int64))
            for name, maps in self.layouts.items()}
        self._heavy = [_Heavy(t.vocabulary, exact, self.options.heavy_counters)
                       for t, exact in zip(self.tables, self._exact_tables(), strict=True)]
        self._known = {f for t in self.tables for f in t.features}
        self.steps = 0

    def _exact_tables(self) -> list[bool]:
        """Which tables count their ids exactly: at most ``exact_vocabulary`` rows, smallest
        first (ties in order) while the rows total at most ``exact_rows``."""
        exact = [False] * len(self.tables)
        budget = self.options.exact_rows
        for t in sorted(range(len(self.tables)), key=lambda i: self.tables[i].vocabulary):
            rows = self.tables[t].vocabulary
            if rows > self.options.exact_vocabulary or rows > budget:
                break
            exact[t] = True
            budget -= rows
        return exact

    def update(self, batch: Batch) -> None:
        """Count one step's batch (every feature of the tables must be present)."""
        unknown = sorted(set(batch) - self._known)
        if unknown:
            raise InputError(f"the batch of step {self.steps} has feature(s) {unknown} the "
                             f"configuration does not have; expected "
                             f"{sorted(self._known)}")
        step = {name: (np.zeros(self.units, np.int64), np.zeros(self.units, np.int64))
                for name in self._state}
        for t, table in enumerate(self.tables):
            uniq, counts = self._table_ids(table, batch)
            self._heavy[t].add(uniq, counts)
            for name, layout in self._state.items():
                unit = layout.maps[t](uniq)
                per_unit = np.bincount(unit, weights=counts, minlength=self.units)
                per_unit = per_unit.astype(np.int64)
                step[name][0][:] += per_unit
                step[name][1][:] += np.bincount(unit, minlength=self.units)
                layout.per_table[t] += per_unit
        for name, layout in self._state.items():
            ids, unique = step[name]
            layout.ids.add(ids)
            layout.unique.add(unique)
            mean = ids.sum() / self.units
            if mean > 0:
                layout.ratio_sum += float(ids.max() / mean)
                layout.ratio_steps += 1
        self.steps += 1

    def _table_ids(self, table: LoadTable, batch: Batch) -> tuple[IntArray, IntArray]:
        """The table's distinct ids this step and how often each occurs (all its features)."""
        parts = []
        for name in table.features:
            if name not in batch:
                raise InputError(f"the batch of step {self.steps} has no feature {name!r} "
                                 f"(table {table.name!r}); every configured feature needs "
                                 "its ids in every step")
            parts.append(np.asarray(batch[name][0], dtype=np.int64))
        values = parts[0] if len(parts) == 1 else np.concatenate(parts or [np.zeros(0, np.int64)])
        if values.size == 0:
            return values, values
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= table.vocabulary:
            bad = low if low < 0 else high
            raise InputError(f"step {self.steps}, table {table.name!r}: id {bad} is outside "
                             f"[0, {table.vocabulary}); the sample's ids must be rows of the "
                             "configured table - check the feature order or the vocabulary")
        if table.vocabulary <= values.size:  # a scan of V rows costs about a sort of V ids
            dense = np.bincount(values, minlength=table.vocabulary)
            uniq = np.flatnonzero(dense)
            return uniq, dense[uniq]
        # ids below 2^31 (the vocabulary checked above) sorted as int32: the same ids, half the
        # bytes to sort
        narrow = values.astype(np.int32) if table.vocabulary <= 1 << 31 else values
        uniq, counts = np.unique(narrow, return_counts=True)
        return uniq.astype(np.int64), counts.astype(np.int64)

    def reports(self) -> dict[Strategy, LoadReport]:
        """One :class:`LoadReport` per layout."""
        return {name: self._report(name, layout) for name, layout in self._state.items()}

    def _report(self, name: Strategy, layout: _Layout) -> LoadReport:
        totals = layout.ids.total
        grand = int(totals.sum())
        shares = totals / grand if grand else np.zeros(self.units)
        units = tuple(UnitLoad(u, layout.ids.distribution(u), layout.unique.distribution(u),
                               int(totals[u]), float(shares[u])) for u in range(self.units))
        hottest = int(np.argmax(totals))
        mean = grand / self.units
        imbalance = Imbalance(
            float(totals[hottest] / mean) if grand else 0.0,
            float(0.5 * np.abs(shares - 1.0 / self.units).sum()) if grand else 0.0,
            layout.ratio_sum / layout.ratio_steps if layout.ratio_steps else 0.0, hottest)
        return LoadReport(self.level, name, self.steps, grand, units, imbalance,
                          self._top_tables(layout, hottest), self._top_ids(layout))

    def _top_tables(self, layout: _Layout, hottest: int) -> tuple[TableLoad, ...]:
        on_hottest = layout.per_table[:, hottest]
        hot_total = int(on_hottest.sum())
        order = np.lexsort((np.arange(len(self.tables)), -on_hottest))[:self.options.top]
        out = []
        for t in order:
            row = layout.per_table[t]
            total = int(row.sum())
            out.append(TableLoad(
                self.tables[t].name, int(on_hottest[t]),
                float(on_hottest[t] / hot_total) if hot_total else 0.0, total,
                float(row.max() * self.units / total) if total else 0.0))
        return tuple(out)

    def _top_ids(self, layout: _Layout) -> tuple[HeavyId, ...]:
        found = []
        for t, heavy in enumerate(self._heavy):
            for ident, count, upper in heavy.top(self.options.top):
                unit = int(layout.maps[t](np.array([ident], np.int64))[0])
                found.append(HeavyId(self.tables[t].name, ident, count, upper, unit))
        found.sort(key=lambda h: (-h.count, h.table, h.id))
        return tuple(found[:self.options.top])


# ---------------------------------------------------------------- the two levels

STRATEGIES = ("MOD", "DIV_DEFAULT")


def host_counter(tables: Sequence[LoadTable], *, hosts: int,
                 strategies: Sequence[str] = STRATEGIES,
                 options: LoadOptions | None = None) -> LoadCounter:
    """A counter of ids per host under each sharding strategy (``"MOD"``, ``"DIV_DEFAULT"``),
    hosts from :func:`tpuemb_cfg.model.layout.host_of`."""
    if hosts < 1:
        raise ValueError(f"the load per host needs at least 1 host, got {hosts}")
    layouts: dict[str, list[UnitMap]] = {}
    for strategy in strategies:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown sharding strategy {strategy!r}: expected one of "
                             f"{', '.join(STRATEGIES)}")
        mod = strategy == "MOD"
        layouts[strategy] = [_host_map(t.vocabulary, hosts, mod) for t in tables]
    return LoadCounter("host", tuple(tables), hosts, layouts, options or LoadOptions())


def _host_map(vocabulary: int, hosts: int, mod: bool) -> UnitMap:
    return lambda ids: host_of(ids, vocabulary, hosts, mod)


def _partition_map(shift: int, n: int) -> UnitMap:
    """Preprocessing's step 2: id x of a table rotated by ``shift`` goes to partition
    (x + shift) mod N."""
    return lambda ids: (ids + shift) % n


def sparsecore_counter(stacking: Stacking, *, options: LoadOptions | None = None) -> LoadCounter:
    """A counter of ids per SparseCore partition of a stacking (all stacks together)."""
    tables = sparsecore_tables(stacking)
    n = stacking.num_sparse_cores
    maps = [_partition_map(t.col_shift, n) for t in tables]
    return LoadCounter("sparsecore", tables, n, {"stacked": maps}, options or LoadOptions())


def host_load(tables: Sequence[LoadTable], batches: Iterable[Batch], *, hosts: int,
              strategies: Sequence[str] = STRATEGIES,
              options: LoadOptions | None = None) -> dict[str, LoadReport]:
    """The load per host of a stream of batches under each strategy."""
    counter = host_counter(tables, hosts=hosts, strategies=strategies, options=options)
    for batch in batches:
        counter.update(batch)
    return counter.reports()


def sparsecore_load(stacking: Stacking, batches: Iterable[Batch], *,
                    options: LoadOptions | None = None) -> LoadReport:
    """The load per SparseCore of a stream of batches after stacking and rotation."""
    counter = sparsecore_counter(stacking, options=options)
    for batch in batches:
        counter.update(batch)
    return counter.reports()["stacked"]
