"""Which ``max_ids_per_partition`` / ``max_unique_ids_per_partition`` a stacked table needs, from a
sample of ids run through the exact preprocessing (docs/plan/load-and-limits.md).

Per stacked table and step, the preprocessing's statistics (after merging repeats within a
sample, before dropping; ``sparsecore.results.PreprocessedStack``) give the most ids and distinct
ids any SparseCore sends to one partition; their maxima over the sample are the *observed*
limits, exact. The *suggested* limit is the chosen quantile q of the per-step maxima (default
q = 1: the sample's maximum) times a headroom h (default 1.2), rounded up to a multiple of 8:

    suggested = 8 ceil(h x quantile_q(per-step maxima) / 8)    (at least 8)

Why 1.2 and 8: a sample is a few steps out of millions; its largest step underestimates the
largest training step (the per-step maxima keep a slowly growing tail: on the v5p example with
Zipf(1) ids the 99th percentile of 100 steps is 3-12 % below their maximum), and id traffic
drifts between days. 20 % above the sample's maximum covers that tail and a moderate drift
without making the buffers (linear in the limit) much larger; multiples of 8 are what the COO
buffer rounds every partition's run up to anyway (``roundup8``), so a limit between two
multiples of 8 buys nothing.

The drops at the current and at the suggested limits are what the preprocessing drops when it
runs every batch with ``allow_id_dropping=True`` at those limits (and the buffer they imply): the
ids per table whose ``dropped`` flag is set, so the prediction is the exact preprocessing's
count, not a model of it. TensorFlow-mode stackings fail a step on an exceeded limit whatever
``allow_id_dropping`` says (``sparsecore.tf_preprocess``): the limits only decide whether the step
fails (the buffer alone drops), so each step runs once without limits and a stack whose
statistics exceed a limit set fails the step there. Such a step counts in the stack's
``failed_steps`` (and once in the report's), the stack's ids of that step count as dropped, and
the SparseCores that received too many (TensorFlow's error names them: ``Sparse core P gets
...``) are listed.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.sparsecore_defaults import DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.planner.load import Batch, JsonRecord, LoadReport, StepCounts
from tpuemb_cfg.rules.plan import (
    LimitDrops,
    LoadImbalance,
    PlanFact,
    SuggestedDrops,
    plan_findings,
)
from tpuemb_cfg.sparsecore.advice import LimitAdvice, limit_advice
from tpuemb_cfg.sparsecore.preprocessing import (
    SparseCoreBufferError,
    SparseCoreLimitError,
    buffer_sizes,
    preprocess,
)
from tpuemb_cfg.sparsecore.tf_preprocess import TensorFlowLimitError, preprocess_tensorflow

if TYPE_CHECKING:
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig
    from tpuemb_cfg.sparsecore.results import PreprocessedBatch
    from tpuemb_cfg.sparsecore.stacking import Stack, Stacking

__all__ = [
    "LimitOptions", "LimitSet", "LimitsReport", "StackLimits", "TableDrops", "findings",
    "limits", "spans", "suggest_limit",
]


@dataclass(frozen=True)
class LimitOptions:
    """``quantile`` of the per-step maxima and ``headroom`` factor of the suggestion, the
    ``multiple`` it is rounded up to; ``max_ids_per_chip_per_sample`` for TensorFlow-mode
    stackings (TensorFlow's device buffer); ``suggest``: run the second pass at the suggested
    limits."""

    quantile: float = 1.0
    headroom: float = 1.2
    multiple: int = 8
    max_ids_per_chip_per_sample: int = DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE
    suggest: bool = True
    exact_steps: int = 8192
    #: the chips of one host (jax-tpu-embedding's ``local_device_count``), whose batch each step
    #: is, when one host of a multi-host slice is planned; None: the whole slice
    local_devices: int | None = None
    #: which host that is (reported; the preprocessing of a host depends only on its devices)
    host_index: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.quantile <= 1.0:
            raise ValueError(f"the quantile must be in (0, 1], got {self.quantile}")
        if not self.headroom >= 1.0:
            raise ValueError(f"the headroom must be at least 1, got {self.headroom}")
        if self.multiple < 1:
            raise ValueError(f"the multiple must be at least 1, got {self.multiple}")


def suggest_limit(observed: int, *, headroom: float = 1.2, multiple: int = 8) -> int:
    """``multiple x ceil(headroom x observed / multiple)``, at least ``multiple``."""
    raw = math.ceil(round(headroom * observed, 9))
    return max(multiple, -(-raw // multiple) * multiple)


@dataclass(frozen=True)
class TableDrops:
    """One table's ids over the sample and the ones the preprocessing dropped."""

    table: str
    ids: int
    dropped: int

    @property
    def share(self) -> float:
        return self.dropped / self.ids if self.ids else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "ids": self.ids, "dropped": self.dropped,
                "share": self.share}


@dataclass(frozen=True)
class LimitSet:
    """A stack's limits, the COO buffer they imply (``theoretical_max`` = roundup8(max_ids) x
    S x N, ``coo_buffer_size_per_device`` what the preprocessing allocates) and the drops.
    TensorFlow mode: ``failed_steps`` the steps this stack's limits fail (its ids there count
    as dropped) and ``over_limit_sparse_cores`` the SparseCores (partitions) that received
    more than a limit from one SparseCore in them."""

    max_ids_per_partition: int
    max_unique_ids_per_partition: int
    theoretical_max_coo_buffer_size: int
    coo_buffer_size_per_device: int
    drops: tuple[TableDrops, ...]
    failed_steps: int = 0
    over_limit_sparse_cores: tuple[int, ...] = ()

    @property
    def dropped(self) -> int:
        return sum(d.dropped for d in self.drops)

    def to_json(self) -> dict[str, Any]:
        return {"max_ids_per_partition": self.max_ids_per_partition,
                "max_unique_ids_per_partition": self.max_unique_ids_per_partition,
                "theoretical_max_coo_buffer_size": self.theoretical_max_coo_buffer_size,
                "coo_buffer_size_per_device": self.coo_buffer_size_per_device,
                "dropped": self.dropped, "failed_steps": self.failed_steps,
                "over_limit_sparse_cores": list(self.over_limit_sparse_cores),
                "drops": [d.to_json() for d in self.drops]}


@dataclass(frozen=True)
class StackLimits(JsonRecord):
    """One stacked table: observed maxima over the sample (exact), the chosen quantile of the
    per-step maxima, the most buffer room a device needed, and the two limit sets."""

    stack: str
    tables: tuple[str, ...]
    observed_max_ids: int
    observed_max_unique_ids: int
    quantile_max_ids: int
    quantile_max_unique_ids: int
    required_buffer_size_per_device: int
    current: LimitSet
    suggested: LimitSet | None


@dataclass(frozen=True)
class LimitsReport(JsonRecord):
    """Every stacked table's limits over ``steps`` steps; ``failed_steps`` (TensorFlow mode):
    the steps some stack's current limits fail, each counted once, and ``ids_in_failed_steps``
    all the ids of those steps (TensorFlow loses the whole step)."""

    mode: str
    steps: int
    quantile: float
    headroom: float
    stacks: tuple[StackLimits, ...]
    failed_steps: int = 0
    ids_in_failed_steps: int = 0
    #: the chips whose batch a step is (all of the slice's, or one host's) and that host
    local_devices: int = 0
    host_index: int | None = None


# ---------------------------------------------------------------- running the preprocessing

Runner = Callable[[Batch, Mapping[str, tuple[int, int]]], "PreprocessedBatch"]

def _runner(stacking: Stacking, options: LimitOptions) -> Runner:
    """The exact preprocessing of a batch with dropping on, at given limits: a whole-slice batch
    (local = global devices, as ``tpuemb simulate`` runs it), or one host's
    (``options.local_devices`` of the global devices, as jax-tpu-embedding and TensorFlow
    preprocess on each host). The one place the limits pass calls the preprocessing."""
    chips = stacking.num_partitions
    local = chips if options.local_devices is None else options.local_devices
    cores = stacking.sparse_cores_per_partition

    def run(batch: Batch, limits: Mapping[str, tuple[int, int]]) -> PreprocessedBatch:
        features = {name: (ids[0], ids[1]) for name, ids in batch.items()}
        weights = {name: (ids[2], ids[1]) for name, ids in batch.items() if ids[2] is not None}
        if stacking.mode == "tensorflow":
            return preprocess_tensorflow(
                stacking, features, weights or None, local_devices=local, global_devices=chips,
                sparse_cores_per_device=cores, allow_id_dropping=True,
                has_leading_dimension=False, limits=limits,
                max_ids_per_chip_per_sample=options.max_ids_per_chip_per_sample)
        return preprocess(stacking, features, weights or None, local_devices=local,
                          global_devices=chips, sparse_cores_per_device=cores,
                          allow_id_dropping=True, has_leading_dimension=False, limits=limits,
                          csr=False)  # only the statistics and the ``dropped`` flags are read

    return run


def _import_numba_early() -> None:
    """Import numba (``base.jit``, what the compiled preprocessing's first call spends most of
    its start-up on) in a daemon thread, while the first batch is read: the import holds the
    GIL, Parquet's decoding does not. The preprocessing's own import then finds it loaded (or
    waits for it); an ImportError is left to that import, which warns and runs NumPy."""

    def load() -> None:
        with contextlib.suppress(ImportError):
            import tpuemb_cfg.base.jit  # noqa: F401

    if "numba" not in sys.modules:
        threading.Thread(target=load, name="tpuemb-import-numba", daemon=True).start()


class _DropCounter:
    """Ids and dropped ids per table at one limit set; the steps each stack fails and the
    SparseCores it overfills there (TensorFlow mode). State: a few integers per table and stack
    and at most the partitions per stack, whatever the sample's length."""

    def __init__(self, stacking: Stacking) -> None:
        self.table_of = {f.name: f.table for f in stacking.features}
        self.stack_of = {f.name: f.stack for f in stacking.features}
        self.ids: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.over: dict[str, set[int]] = {}
        self.failed_steps = 0
        self.ids_in_failed_steps = 0
        #: per stack (theoretical maximum, allocated) COO buffer, as the preprocessing sized it
        self.buffers: dict[str, tuple[int, int]] = {}

    def _lost(self, batch: Batch, step: _Step) -> dict[str, tuple[int, int]]:
        """Per feature of the stacking: (its ids, the ones lost) in this step."""
        result, failing = step.result, step.failing
        out = {}
        for name, (values, _, _) in batch.items():
            if name not in self.table_of:
                continue
            n = int(np.asarray(values).shape[0])
            if self.stack_of[name] in failing:  # the step fails: the stack's ids are lost
                lost = n
            elif result is None:
                lost = 0
            else:
                mask = result.stacks[self.stack_of[name]].dropped.get(name)
                lost = int(np.count_nonzero(mask)) if mask is not None else 0
            out[name] = (n, lost)
        return out

    def add(self, batch: Batch, step: _Step, *, instead_of: _Step | None = None) -> None:
        """Count one step; ``instead_of``: the same step as already counted (its ids and its
        drops there), whose drops this outcome replaces."""
        lost = self._lost(batch, step)
        before = self._lost(batch, instead_of) if instead_of is not None else {}
        total = 0
        for name, (n, dropped) in lost.items():
            table = self.table_of[name]
            total += n
            if instead_of is None:
                self.ids[table] = self.ids.get(table, 0) + n
            self.dropped[table] = (self.dropped.get(table, 0) + dropped
                                   - before.get(name, (0, 0))[1])
        for stack, cores in step.failing.items():
            self.failed[stack] = self.failed.get(stack, 0) + 1
            self.over.setdefault(stack, set()).update(cores)
        if step.failing:
            self.failed_steps += 1
            self.ids_in_failed_steps += total
        if step.result is not None and not self.buffers:
            self.buffers = {name: (s.theoretical_max_coo_buffer_size,
                                   s.coo_buffer_size_per_device)
                            for name, s in step.result.stacks.items()}

    def copy(self, stacking: Stacking, *, drops: bool) -> _DropCounter:
        """A counter of ``stacking`` with this one's ids and buffers (and drops: ``drops``),
        no failed step."""
        out = _DropCounter(stacking)
        out.ids = dict(self.ids)
        out.dropped = dict(self.dropped) if drops else dict.fromkeys(self.ids, 0)
        out.buffers = dict(self.buffers)
        return out

    def drops(self, stack: Stack) -> tuple[TableDrops, ...]:
        return tuple(TableDrops(t.name, self.ids.get(t.name, 0), self.dropped.get(t.name, 0))
                     for t in stack.tables)


@dataclass(frozen=True)
class _Step:
    """One step at a limit set: the preprocessing's result (its statistics need no limit) and
    the stacks whose limits fail the step (TensorFlow mode), each with the SparseCores that
    received more than a limit from one SparseCore."""

    result: PreprocessedBatch | None
    failing: Mapping[str, tuple[int, ...]]


#: Limits no step reaches: the run that gives TensorFlow's statistics without failing.
_UNLIMITED = 1 << 30


def _run(run: Runner, stacking: Stacking, batch: Batch, limits: Mapping[str, tuple[int, int]],
         step: int) -> _Step:
    """One step at ``limits``. TensorFlow mode: the limits decide only whether the step fails
    (nothing is dropped by limit), so the step runs without them and every stack whose
    statistics exceed its limits fails it: ``SortListOfSparseCoreCooTensors``' own check, per
    partition, on the same counts."""
    try:
        if stacking.mode != "tensorflow":
            return _Step(run(batch, limits), {})
        result = run(batch, {name: (_UNLIMITED, _UNLIMITED) for name in limits})
    except (SparseCoreLimitError, TensorFlowLimitError) as exc:  # a limit no statistic shows
        return _Step(None, {str(exc.stack): (int(getattr(exc, "partition", 0)),)})
    except (ValueError, NotImplementedError) as exc:
        raise InputError(f"step {step} of the sample: {exc}") from None
    failing: dict[str, tuple[int, ...]] = {}
    for name, (ids, unique) in limits.items():
        s = result.stacks[name]
        over = ((np.asarray(s.max_ids_per_partition) > ids)
                | (np.asarray(s.max_unique_ids_per_partition) > unique))
        if over.any():
            failing[name] = tuple(int(p) for p in np.flatnonzero(over.any(axis=0)))
    return _Step(result, failing)


#: The per-step statistics pass 1 keeps per stack (``StepCounts`` columns): the most ids and
#: distinct ids one SparseCore sends a partition, the most buffer room one device and one
#: SparseCore need.
_IDS, _UNIQUE, _DEVICE_ROOM, _CORE_ROOM = range(4)


def _statistics(result: PreprocessedBatch, cores: int) -> dict[str, np.ndarray]:
    """Per stack, the four statistics of one step (:data:`_IDS` ...)."""
    out = {}
    for name, s in result.stacks.items():
        room = np.asarray(s.required_buffer_size_per_sc, np.int64).reshape(-1, cores)
        out[name] = np.array([int(s.max_ids_per_partition.max(initial=0)),
                              int(s.max_unique_ids_per_partition.max(initial=0)),
                              int(room.sum(axis=1).max(initial=0)),
                              int(room.max(initial=0))], np.int64)
    return out


def limits(stacking: Stacking, batches: Callable[[], Iterable[Batch]] | Iterable[Batch], *,
           options: LimitOptions | None = None) -> LimitsReport:
    """Observed maxima, suggested limits and drops at the current and suggested limits.

    ``batches``: the sample's batches, read once, and again for the steps whose statistics
    exceed the suggested limits when ``options.suggest`` (:func:`_suggested_drops`; the
    suggested limits are known after one pass): a callable giving a fresh iterable, or an
    iterable that starts over when iterated again (a list, ``planner.inputs.Sample``); a
    one-shot iterator is refused then.

    Memory: O(stacks x (exact_steps + partitions) + tables) for the state, plus one step's
    batch and preprocessing, whatever the sample's length.
    """
    options = options or LimitOptions()
    start: Callable[[], Iterable[Batch]]
    if callable(batches):
        start = batches
    else:
        if options.suggest and iter(batches) is batches:
            raise ValueError("the limits need the sample twice (the suggested limits are known "
                             "after one pass) but got a one-shot iterator: pass a list, an "
                             "iterable that starts over, or a callable returning a fresh "
                             "iterable (or LimitOptions(suggest=False) for one pass)")
        iterable = batches

        def start() -> Iterable[Batch]:
            return iterable
    run = _runner(stacking, options)
    names = [s.name for s in stacking.stacks]
    current = {s.name: (s.max_ids_per_partition, s.max_unique_ids_per_partition)
               for s in stacking.stacks}
    per_step = {name: StepCounts(4, options.exact_steps) for name in names}
    drops_now = _DropCounter(stacking)
    # TensorFlow mode: the drops of the limit-free run, which is every limit set's run
    free = _DropCounter(stacking) if stacking.mode == "tensorflow" else None
    steps = 0
    if stacking.mode != "tensorflow":
        _import_numba_early()
    for batch in start():
        outcome = _run(run, stacking, batch, current, steps)
        drops_now.add(batch, outcome)
        result = outcome.result
        if result is None:  # a limit failed the step before any statistics: run without them
            result = run(batch, {n: (_UNLIMITED, _UNLIMITED) for n in names})
        if free is not None:
            free.add(batch, _Step(result, {}))
        for name, row in _statistics(result, stacking.sparse_cores_per_partition).items():
            per_step[name].add(row)
        steps += 1
    if steps == 0:
        raise InputError("the sample has no batches: the limits need at least one step")
    suggested: dict[str, tuple[int, int]] = {}
    for name in names:
        q_ids = per_step[name].quantile(_IDS, options.quantile)
        q_unique = per_step[name].quantile(_UNIQUE, options.quantile)
        ids = suggest_limit(q_ids, headroom=options.headroom, multiple=options.multiple)
        unique = suggest_limit(q_unique, headroom=options.headroom, multiple=options.multiple)
        suggested[name] = (ids, min(unique, ids))
    drops_then = (_suggested_drops(stacking, start, options, suggested, per_step,
                                   free or drops_now) if options.suggest else None)
    out = []
    for stack in stacking.stacks:
        counts = per_step[stack.name]
        out.append(StackLimits(
            stack.name, tuple(t.name for t in stack.tables), int(counts.max[_IDS]),
            int(counts.max[_UNIQUE]), counts.quantile(_IDS, options.quantile),
            counts.quantile(_UNIQUE, options.quantile), int(counts.max[_DEVICE_ROOM]),
            _limit_set(stack, current[stack.name], drops_now),
            _limit_set(stack, suggested[stack.name], drops_then)
            if drops_then else None))
    return LimitsReport(stacking.mode, steps, options.quantile, options.headroom, tuple(out),
                        drops_now.failed_steps, drops_now.ids_in_failed_steps,
                        options.local_devices or stacking.num_partitions, options.host_index)


def _suggested_drops(stacking: Stacking, start: Callable[[], Iterable[Batch]],
                     options: LimitOptions, suggested: Mapping[str, tuple[int, int]],
                     per_step: Mapping[str, StepCounts], first: _DropCounter) -> _DropCounter:
    """The drops at the suggested limits, preprocessing again only the steps that can drop
    differently from what pass 1 already knows (docs/plan/load-and-limits.md, "Once per
    variant").

    A step whose statistics are within a stack's limits loses nothing to them, and one whose
    SparseCores each need at most their share of the COO buffer (``coo_buffer_size_per_device
    / S``) loses nothing to the buffer either: at the suggested limits such a step drops no id
    (jax-tpu-embedding's rules; TensorFlow's run is the limit-free one at every limit set, so
    there it drops what pass 1's run dropped, ``first``). Pass 1's per-step statistics are
    exact, so only the steps above the suggested limits (or buffer) run again, with the
    sample read again only if there is one; past ``exact_steps`` steps only their maxima are
    kept, and when those exceed a limit every later step runs again.
    """
    adjusted = _without_stale_buffers(stacking, suggested)
    jax = stacking.mode != "tensorflow"
    out = first.copy(adjusted, drops=not jax)
    ceilings = {}
    for stack in adjusted.stacks:
        ids, unique = suggested[stack.name]
        room = _UNLIMITED
        if jax:
            try:
                theoretical, size = buffer_sizes(
                    stack, global_devices=adjusted.num_partitions,
                    sparse_cores_per_device=adjusted.sparse_cores_per_partition,
                    max_ids_per_partition=ids)
            except ValueError as exc:  # as the preprocessing would refuse the first step
                raise InputError(f"step 0 of the sample: {exc}") from None
            out.buffers[stack.name] = (theoretical, size)
            room = size // adjusted.sparse_cores_per_partition
        ceilings[stack.name] = np.array([ids, unique, _UNLIMITED, room], np.int64)
    again: set[int] = set()
    every = False  # past exact_steps: which steps exceed is not known, so all of them run
    for name, counts in per_step.items():
        above = counts.steps_above(ceilings[name])
        if above is None:
            every = True
        else:
            again.update(int(k) for k in above)
    if not again and not every:
        return out
    run = _runner(adjusted, options)
    nothing = _Step(None, {})  # a jax-tpu-embedding step within the limits: no drop
    for step, batch in enumerate(start()):
        if every or step in again:
            outcome = _run(run, adjusted, batch, suggested, step)
            out.add(batch, outcome, instead_of=nothing if jax else _Step(outcome.result, {}))
    return out


def _without_stale_buffers(stacking: Stacking,
                           suggested: Mapping[str, tuple[int, int]]) -> Stacking:
    """The stacking with every ``suggested_coo_buffer_size_per_device`` above the theoretical
    maximum of the suggested ``max_ids_per_partition`` removed (jax-tpu-embedding refuses such a
    buffer: the maximum, which is then the size, is what the suggestion implies)."""
    stacks = []
    for stack in stacking.stacks:
        if stack.suggested_coo_buffer_size_per_device is not None:
            try:
                buffer_sizes(stack, global_devices=stacking.num_partitions,
                             sparse_cores_per_device=stacking.sparse_cores_per_partition,
                             max_ids_per_partition=suggested[stack.name][0])
            except SparseCoreBufferError as exc:
                if exc.size > exc.theoretical_max:
                    stack = replace(stack, suggested_coo_buffer_size_per_device=None)
        stacks.append(stack)
    return replace(stacking, stacks=tuple(stacks))


def _limit_set(stack: Stack, pair: tuple[int, int], counter: _DropCounter) -> LimitSet:
    """The limit set ``pair`` with the buffers the preprocessing sized for it (jax-tpu-embedding:
    ``preprocessing.buffer_sizes``; TensorFlow: ``max_ids_per_chip_per_sample`` x samples) and the
    drops counted at it."""
    theoretical, size = counter.buffers.get(stack.name, (0, 0))
    return LimitSet(pair[0], pair[1], theoretical, size, counter.drops(stack),
                    counter.failed.get(stack.name, 0),
                    tuple(sorted(counter.over.get(stack.name, ()))))


# ---------------------------------------------------------------- findings for the gate


def findings(report: LimitsReport, config: SparseCoreConfig, *,
             load: LoadReport | None = None,
             imbalance_threshold: float = 1.5) -> list[Diagnostic]:
    """The gate's findings (:mod:`tpuemb_cfg.rules.plan` words them): PLAN010 (a stack drops
    ids at its current limits; the fix is the suggested pair), PLAN011 (it still drops at the
    suggested limits: the buffer, not the limit, is short), PLAN020 (the SparseCores' max/mean
    load above ``imbalance_threshold``)."""
    facts: list[PlanFact] = []
    for stack in report.stacks:
        advice = limit_advice(config, stack.stack, stack.tables,
                              (stack.current.max_ids_per_partition,
                               stack.current.max_unique_ids_per_partition))
        now = stack.current
        if now.dropped or now.failed_steps:
            worst = max(now.drops, key=lambda d: (d.share, d.table))
            fix = stack.suggested
            pair = ((fix.max_ids_per_partition, fix.max_unique_ids_per_partition) if fix else
                    (suggest_limit(stack.observed_max_ids, headroom=report.headroom),
                     min(suggest_limit(stack.observed_max_unique_ids, headroom=report.headroom),
                         suggest_limit(stack.observed_max_ids, headroom=report.headroom))))
            facts.append(LimitDrops(
                stack=stack.stack, dropped=now.dropped, total=sum(d.ids for d in now.drops),
                worst_table=worst.table, worst_share=worst.share,
                failed_steps=now.failed_steps, steps=report.steps,
                over_cores=spans(now.over_limit_sparse_cores),
                max_ids=now.max_ids_per_partition,
                max_unique_ids=now.max_unique_ids_per_partition,
                observed_ids=stack.observed_max_ids,
                observed_unique_ids=stack.observed_max_unique_ids,
                path=advice.path, hint=advice.limits(*pair)))
        later = stack.suggested
        if later is not None and later.dropped:
            facts.append(_still_dropping(report, stack, later, advice))
    if load is not None:
        top = load.top_tables[0].table if load.top_tables else None
        facts.append(LoadImbalance(
            level=load.level, hottest=load.imbalance.hottest, units=len(load.units),
            max_over_mean=load.imbalance.max_over_mean,
            total_variation=load.imbalance.total_variation, threshold=imbalance_threshold,
            top=top, strategy=load.strategy,
            path=f'tables["{top}"]' if config.api == "jax" and top else ""))
    return plan_findings(facts)


def _still_dropping(report: LimitsReport, stack: StackLimits, later: LimitSet,
                    advice: LimitAdvice) -> SuggestedDrops:
    """PLAN011's fact: the drops at the suggested limits, with both fixes (the sample's
    largest steps when a quantile below 1 left them over the limits, else the COO buffer)."""
    ids = suggest_limit(stack.observed_max_ids, headroom=report.headroom)
    unique = min(ids, suggest_limit(stack.observed_max_unique_ids, headroom=report.headroom))
    return SuggestedDrops(
        stack=stack.stack, dropped=later.dropped, failed_steps=later.failed_steps,
        max_ids=later.max_ids_per_partition, max_unique_ids=later.max_unique_ids_per_partition,
        quantile=report.quantile, observed_ids=stack.observed_max_ids,
        observed_unique_ids=stack.observed_max_unique_ids,
        buffer=later.coo_buffer_size_per_device,
        required_buffer=stack.required_buffer_size_per_device, path=advice.path,
        limits_hint=advice.limits(ids, unique),
        buffer_hint=advice.buffer(stack.required_buffer_size_per_device))


def spans(values: tuple[int, ...]) -> str:
    """``0-3, 7``: sorted integers as ranges."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"
