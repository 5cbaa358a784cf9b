"""Several workers training one set of tables: synchronous replicas or stale-gradient dropping.

What ``tpuemb simulate --workers N`` runs (spec ``accumulator.md`` sections 3-5). The tables live in
one :class:`~tpuemb_cfg.executor.Executor` (the chief's state); N workers draw synthetic batches
and compute gradients against the tables as they are when they start; the gradients reach the
chief later, and the chief decides what to apply:

- **Synchronous replicas** (default; TensorFlow's ``SyncReplicasOptimizer``, modelled by
  :class:`~tpuemb_cfg.sim.staleness.SyncReplicas`): every table has a
  ``SparseConditionalAccumulator``. A worker's gradient carries its ``local_step`` (the token it
  last dequeued, or the initial global step); the accumulator drops it when ``local_step`` is
  behind the accumulator's clock. When every table holds R fresh gradients the chief takes them
  (per-row MEAN: a row is divided by the number of gradients that touched it), applies the result
  with the table's optimizer, advances the global step and enqueues ``max(N, R)`` tokens. A
  worker dequeues a token after each gradient and waits when the queue is empty.
- **DropStale** (``max_staleness`` set; TensorFlow's ``DropStaleGradientOptimizer``, modelled by
  :class:`~tpuemb_cfg.sim.staleness.DropStaleGradient`): a gradient computed at global step
  ``l`` and arriving at global step ``g`` is applied on its own when ``g - l <= max_staleness``
  (the global step advances), and dropped for every table otherwise.

Workers draw their batches from the synthetic workload (:class:`~.synthetic.SyntheticData`, the
same data, teacher and loss as the single-worker run; worker 0 uses the single-worker stream).

Time is counted in ticks. A worker that starts at tick ``t`` (reading the tables and drawing its
batch) delivers its gradient at tick ``t + 1 + d``, with the delay ``d`` drawn per gradient from
the worker's own seeded generator (``fixed:K``: always K; ``geometric:P``: failures before the
first success of a P-coin). Deliveries are handled one at a time in the order (tick, worker
index); after each one the chief updates as soon as it can, then every worker that may go on
starts its next gradient at the same tick, reading the tables as they are now. Each worker
computes ``steps`` gradients and stops, so a run always ends; a worker still waiting for a token
then, or a chief still short of gradients, is what TensorFlow would show as a hang, and the summary
says so.

The chief applies an aggregated gradient as one update of the table's per-row pipeline (clipping,
weight decay, optimizer), through ``Executor.step`` with a batch of one-id bags whose activation
gradients are the aggregated rows, so the update equals the one the executor would make for those
row gradients. TPU-loop settings do not apply to this aggregation: the chief's executor runs with
``gradient_accumulation_status`` cleared (every aggregated gradient is one update) and without
``pipeline_execution_with_tensor_core`` (staleness is what the workers model instead).

Everything random (data, delays) comes from generators seeded by ``seed``, one per worker, so the
run and its summary are the same bytes for the same options.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from tpuemb_cfg.base.errors import NumericalError, UsageError
from tpuemb_cfg.base.errors import parameter as arg

from ..executor import Executor, FeatureInput, Placement, RunOptions, memory
from ..executor.core import require_memory
from ..executor.memory import Estimate, RunShape, describe, step_ids
from ..executor.plan import Plan
from ..executor.prepared import Prepared
from ..executor.touched import TouchedRows, saved_state
from .accumulators import IndexedSlices, WouldBlock
from .options import MAX_WORKERS, DelayModel, SyntheticOptions, WorkerOptions
from .staleness import DropStaleGradient, SyncReplicas
from .synthetic import SyntheticData, learning_rate_summary

__all__ = ["MAX_WORKERS", "DelayModel", "MultiWorkerRun", "chief_config", "for_chief",
           "run_estimate"]

#: Bytes the record of one gradient keeps, and more per table (an upper bound of what was
#: measured: 200-800 bytes and 20-600 bytes a table, DropStale and sync replicas).
GRADIENT_BYTES = 1200
TABLE_GRADIENT_BYTES = 800

F32 = np.float32
_DELAY_STREAM = 0xDE1A

RowGradients = dict[str, tuple[np.ndarray, np.ndarray]]


@dataclass
class _Gradient:
    """One worker's gradient on its way to the chief."""

    worker: int
    read_step: int
    local_step: int
    rows: RowGradients


@dataclass
class _Outcomes:
    """What became of gradients at the chief: accepted (and of those, applied) or dropped."""

    accepted: int = 0
    dropped_stale: int = 0
    applied: int = 0

    @property
    def pending(self) -> int:
        """Accepted but not yet applied (waiting in an accumulator)."""
        return self.accepted - self.applied


@dataclass
class _TableStats(_Outcomes):
    """One table's gradients as the chief received them, and each update it applied."""

    received: int = 0
    averaged_per_update: list[int] = field(default_factory=list)
    rows_updated: list[int] = field(default_factory=list)
    update_norm: list[float] = field(default_factory=list)


@dataclass
class _WorkerStats(_Outcomes):
    """One worker's gradients (whole: every table accepted, or every one dropped), their
    staleness and the outcome per table."""

    computed: int = 0
    staleness: Counter[int] = field(default_factory=Counter)
    tables: dict[str, Counter[str]] = field(default_factory=dict)


class MultiWorkerRun:
    """N workers on synthetic data, aggregated by synchronous replicas or by DropStale.

    ``prepared``: the configuration (``executor.prepared.Prepared``); the chief's executor runs
    :func:`for_chief` of it. ``options`` (``RunOptions``: seed, engine, memory limit) and
    ``placement`` (``Placement``: where the chief's tables live) as for ``Executor``; ``data``:
    the synthetic workload (``SyntheticOptions``: learning rate, schedules, ids, sequence
    lengths); ``workers``: N, the aggregation mode and the delays (``WorkerOptions``; too few
    ``init_tokens`` for R > N raises ``UsageError`` "Too few tokens ...").
    ``tpuemb_cfg.simulate.MultiWorkerRun`` takes any configuration and keyword arguments.
    """

    def __init__(self, prepared: Prepared, options: RunOptions | None = None,
                 placement: Placement | None = None, *,
                 data: SyntheticOptions | None = None,
                 workers: WorkerOptions | None = None) -> None:
        options, placement = options or RunOptions(), placement or Placement()
        data, workers = data or SyntheticOptions(), workers or WorkerOptions()
        self.worker_options = workers
        self.delay = workers.delay_model
        self.seed = options.seed
        self.num_workers = int(workers.workers)
        self.max_staleness = workers.max_staleness
        self.replicas_to_aggregate = workers.replicas
        self.init_tokens = workers.init_tokens
        self.executor = Executor(for_chief(prepared), options, placement)
        self._tables_here = self.executor.tables_in_process
        self.max_memory = options.memory_limit if self._tables_here else None
        self.plan = self.executor.plan
        self.data = SyntheticData.of(self.plan, options.seed, data)
        self.touched = TouchedRows(self.plan)  # the rows the chief's updates touched
        if not self.plan.updates:
            raise UsageError(
                f"the configuration's mode is {self.plan.mode}: nothing is trained, so there is "
                "nothing for several workers to aggregate; use mode TRAINING"
            )
        self.variables = [t.name for t in self.plan.tables if t.features]
        if not self.variables:
            raise UsageError("no table is looked up by any feature: nothing to train")
        self.sync: SyncReplicas | None = None
        self.rule: DropStaleGradient | None = None
        if self.max_staleness is None:
            assert self.replicas_to_aggregate is not None
            self.sync = SyncReplicas(self.replicas_to_aggregate, self.num_workers,
                                     sparse=self.variables)
            self.sync.chief_init()
            try:
                self.sync.init_tokens(self.init_tokens)
            except ValueError as exc:
                needed = self.replicas_to_aggregate - self.num_workers
                raise UsageError(
                    f"{arg('init_tokens')} {self.init_tokens}: {exc}. With R = "
                    f"{self.replicas_to_aggregate} "
                    f"gradients per update and only N = {self.num_workers} workers, the workers "
                    f"need {needed} token(s) to compute the missing gradients of the first step; "
                    f"give {arg('init_tokens')} {needed} or more (or -1, TensorFlow's default of R)"
                ) from None
        else:
            self.rule = DropStaleGradient(self.max_staleness)
        self._data_rngs = [self.data.rng] + [
            self.data.stream(w) for w in range(1, self.num_workers)
        ]
        self._delay_rngs = [
            np.random.default_rng([self.seed, _DELAY_STREAM, w])
            for w in range(self.num_workers)
        ]
        self.tables = {t.name: _TableStats() for t in self.plan.tables}
        self.workers = [_WorkerStats() for _ in range(self.num_workers)]
        self.staleness: Counter[int] = Counter()
        self.loss: list[float] = []
        self._rates: list[dict[str, list[float]]] = []  # the learning rates of every update
        self.tick = 0
        self.steps = 0
        self._pending: dict[str, list[int]] = {name: [] for name in self.variables}
        self._flight: list[tuple[int, int, _Gradient]] = []
        self._progress: Callable[[int], None] | None = None
        self._events = 0

    # ----------------------------------------------------------------------------------------

    @property
    def mode(self) -> Literal["sync_replicas", "drop_stale"]:
        return "sync_replicas" if self.sync is not None else "drop_stale"

    @property
    def global_step(self) -> int:
        """Updates the chief has applied."""
        if self.sync is not None:
            return self.sync.global_step
        assert self.rule is not None
        return self.rule.global_step

    def run(self, steps: int, progress: Callable[[int], None] | None = None, *,
            tables: str = "all", plot: bool = False) -> None:
        """Let every worker compute ``steps`` gradients; ``progress(n)`` after each of the
        ``2 x N x steps`` events (a gradient computed, a gradient delivered; ``n`` counts them),
        so that the N first gradients, computed before anything arrives, show progress too.
        Refuses (``UsageError``) a run whose :meth:`memory_estimate` (``tables``: what the
        caller writes at the end, ``plot``: matplotlib loaded) exceeds the memory limit."""
        if steps < 1:
            raise UsageError(f"{arg('steps')} {steps}: expected at least 1")
        self._require_memory(steps, tables=tables, plot=plot)
        self.steps = int(steps)
        self._progress = progress
        try:
            for worker in range(self.num_workers):
                self._start(worker)
            while self._flight:
                self.tick, worker, gradient = heapq.heappop(self._flight)
                if self.sync is not None:
                    self._deliver_sync(gradient)
                else:
                    self._deliver_drop_stale(gradient)
                self._advance()
        finally:
            self._progress = None

    def memory_estimate(self, steps: int, *, tables: str = "all",
                        plot: bool = False) -> Estimate:
        """The peak resident memory of this run to ``steps`` gradients per worker, in parts
        (:func:`run_estimate` with this run's workers, mode, engine, data and backend)."""
        data = SyntheticOptions(ids=self.data.ids, sequence_lengths=self.data.sequence_lengths)
        return run_estimate(self.plan, steps, self.worker_options,
                            engine=self.executor.engine.name, data=data, tables=tables,
                            plot=plot, local=self._tables_here)

    def _require_memory(self, steps: int, *, tables: str = "all", plot: bool = False) -> None:
        """Refuse a run beyond the memory limit (``max_memory``) before its first gradient."""
        parts = self.memory_estimate(steps, tables=tables, plot=plot)
        require_memory(
            parts.total, self.max_memory,
            counted=f"tables, slots, a step, {self.num_workers} gradient(s) in flight, the "
                    f"accumulators and the record of {self.num_workers} x {steps:,} gradients: "
                    f"{describe(parts)}",
            reduce="run fewer steps or workers, or reduce vocabulary_size/dimension",
            process=parts.process)

    def _advance(self) -> None:
        self._events += 1
        if self._progress is not None:
            self._progress(self._events)

    # ----------------------------------------------------------------------------------------
    # Workers

    def _start(self, worker: int) -> None:
        """Worker ``worker`` reads the tables now, computes a gradient and sends it off."""
        stats = self.workers[worker]
        if stats.computed >= self.steps:
            return
        stats.computed += 1
        batch = self.data.next_batch(self._data_rngs[worker])
        activations, dedup = self.executor.recv_activations(batch)
        loss, grads = self.data.loss_gradients(batch, activations, dedup)
        self.data.require_finite(self.executor.step_index, loss, activations,
                                self.executor.nonfinite)
        self.loss.append(loss)
        rows: RowGradients = {}
        for table in self.plan.tables:
            if not table.features:
                continue
            record = dedup.tables[table.name]
            d_activations = np.concatenate([grads[f] for f in table.features])
            rows[table.name] = (record.unique_ids, self.executor.engine.backprop_sum(
                d_activations, record.sample, record.gains, record.inverse,
                record.unique_ids.shape[0]))
        read_step = self.global_step
        local_step = self.sync.local_steps[worker] if self.sync is not None else read_step
        arrival = self.tick + 1 + self.delay.draw(self._delay_rngs[worker])
        heapq.heappush(self._flight, (arrival, worker, _Gradient(worker, read_step, local_step,
                                                                 rows)))
        self._advance()

    # ----------------------------------------------------------------------------------------
    # The chief

    def _record_arrival(self, gradient: _Gradient, accepted: Mapping[str, bool],
                        staleness: int) -> None:
        stats = self.workers[gradient.worker]
        self.staleness[staleness] += 1
        stats.staleness[staleness] += 1
        for name, ok in accepted.items():
            table = self.tables[name]
            table.received += 1
            per = stats.tables.setdefault(name, Counter())
            if ok:
                table.accepted += 1
                per["accepted"] += 1
            else:
                table.dropped_stale += 1
                per["dropped_stale"] += 1
        if all(accepted.values()):
            stats.accepted += 1
        elif not any(accepted.values()):
            stats.dropped_stale += 1

    def _deliver_sync(self, gradient: _Gradient) -> None:
        sync = self.sync
        assert sync is not None
        staleness = sync.global_step - gradient.local_step
        waiting_before = set(sync.waiting)
        accepted = sync.replica_step(gradient.worker, {
            name: IndexedSlices(rows, values) for name, (rows, values) in gradient.rows.items()
        })
        self._record_arrival(gradient, accepted, staleness)
        for name, ok in accepted.items():
            if ok:
                self._pending[name].append(gradient.worker)
        try:
            sync.chief_step(self._apply)
        except WouldBlock:
            pass
        waiting_now = set(sync.waiting)
        resumed = (waiting_before - waiting_now) | (
            set() if gradient.worker in waiting_now else {gradient.worker})
        for worker in sorted(resumed):
            self._start(worker)

    def _deliver_drop_stale(self, gradient: _Gradient) -> None:
        rule = self.rule
        assert rule is not None
        staleness = rule.global_step - gradient.local_step

        def apply() -> None:
            for name in gradient.rows:
                self._pending[name] = [gradient.worker]
            self._apply(gradient.rows)

        applied = rule.apply_gradients(gradient.local_step, apply)
        self._record_arrival(gradient, dict.fromkeys(gradient.rows, applied), staleness)
        self._start(gradient.worker)

    def _apply(self, aggregated: Mapping[str, Any]) -> None:
        """Apply one aggregated gradient per table as one executor update.

        Each table's rows become one-id bags of weight 1 on its first feature (gain 1 under every
        combiner) whose activation gradients are the aggregated rows; its other features get no
        bag. Back-propagation then hands the optimizer exactly the aggregated row gradients.
        """
        batch: list[FeatureInput] = []
        for feature in self.plan.features:
            table = self.plan.tables[feature.table]
            if feature.index == table.features[0] and table.name in aggregated:
                rows, values = aggregated[table.name][:2]
                batch.append(FeatureInput(
                    np.asarray(rows, np.int64), np.arange(len(rows) + 1, dtype=np.int64),
                    None, np.asarray(values, F32)))
            else:
                batch.append(FeatureInput(np.zeros(0, np.int64), np.zeros(1, np.int64), None,
                                          np.zeros((0, table.dimension), F32)))
        step = self.executor.step_index
        rates = self.data.learning_rates(step)
        try:
            self.executor.step(batch, rates)
        except NumericalError as exc:
            raise self.data.blame(exc, step) from None
        self._rates.append({"learning_rates": [float(r) for r in rates]})
        for name in aggregated:
            self.touched.add_rows(name, np.asarray(aggregated[name][0], np.int64))
        for name in aggregated:
            stats = self.tables[name]
            contributors = self._pending[name]
            stats.applied += len(contributors)
            stats.averaged_per_update.append(len(contributors))
            for worker in contributors:
                self.workers[worker].tables.setdefault(name, Counter())["applied"] += 1
                if name == self.variables[0]:  # every table gets the same gradients
                    self.workers[worker].applied += 1
            report = self.executor.last_report[name]
            stats.rows_updated.append(int(report.rows_updated))
            stats.update_norm.append(float(report.update_norm))
            self._pending[name] = []

    # ----------------------------------------------------------------------------------------
    # Results

    def saved_state(self, which: str = "all") -> dict[str, Any]:
        """The chief's tables as ``tables.npz`` holds them for ``which`` (``all``, ``touched``
        or ``none``: ``executor.touched.saved_state``)."""
        return saved_state(self.executor, self.touched, which)

    def summary(self) -> dict[str, Any]:
        """Every count of the run as plain JSON values (see docs/multiworker.md)."""
        waiting = self.sync.waiting if self.sync is not None else []
        short = {}
        if self.sync is not None:
            short = {name: acc.num_accumulated()
                     for name, acc in self.sync.accumulators.items() if acc.num_accumulated()}
        computed = sum(w.computed for w in self.workers)
        out: dict[str, Any] = {
            "mode": self.mode,
            "workers": self.num_workers,
            "steps_per_worker": self.steps,
            "seed": self.seed,
            "delay": str(self.delay),
        }
        if self.sync is not None:
            out["replicas_to_aggregate"] = self.replicas_to_aggregate
            out["init_tokens"] = self.init_tokens
        else:
            assert self.rule is not None
            out["max_staleness"] = self.max_staleness
            out["stale_counter"] = self.rule.stale_counter
            out["staleness_percentage"] = self.rule.staleness_percentage()
        out["learning_rate_schedules"] = self.data.rate_descriptions()
        if self.plan.num_learning_rates:  # per tag, its value at every update of the chief
            out["learning_rates"] = learning_rate_summary(self.data, self._rates)
        out.update({
            "ticks": self.tick,
            "global_step": self.global_step,
            "gradients": {
                "computed": computed,
                "accepted": sum(w.accepted for w in self.workers),
                "applied": sum(w.applied for w in self.workers),
                "dropped_stale": sum(w.dropped_stale for w in self.workers),
                "pending": sum(w.pending for w in self.workers),
            },
            "staleness_histogram": _histogram(self.staleness),
            "waiting_for_token": waiting,
            "chief_short": short,
            "loss": self.loss,
            "tables": {},
            "per_worker": [],
        })
        for table in self.plan.tables:
            stats = self.tables[table.name]
            out["tables"][table.name] = {
                "optimizer": table.optimizer.name,
                "received": stats.received,
                "accepted": stats.accepted,
                "dropped_stale": stats.dropped_stale,
                "applied": stats.applied,
                "pending": stats.pending,
                "updates": len(stats.averaged_per_update),
                "averaged_per_update": stats.averaged_per_update,
                "rows_updated": stats.rows_updated,
                "update_norm": stats.update_norm,
            }
        for index, worker in enumerate(self.workers):
            out["per_worker"].append({
                "worker": index,
                "computed": worker.computed,
                "accepted": worker.accepted,
                "applied": worker.applied,
                "dropped_stale": worker.dropped_stale,
                "pending": worker.pending,
                "waiting_for_token": index in waiting,
                "staleness_histogram": _histogram(worker.staleness),
                "tables": {
                    name: {"accepted": counts["accepted"], "applied": counts["applied"],
                           "dropped_stale": counts["dropped_stale"]}
                    for name, counts in sorted(worker.tables.items())
                },
            })
        if self.executor.nonfinite is not None:  # the first NaN or infinity, with its cause
            out["nonfinite"] = self.executor.nonfinite.as_dict()
        return out


def run_estimate(plan: Plan, steps: int, workers: WorkerOptions, *, engine: str = "numba",
                 data: SyntheticOptions | None = None, tables: str = "all", plot: bool = False,
                 local: bool = True) -> Estimate:
    """The peak resident memory of a run of ``workers`` (its N workers and R replicas to
    aggregate) computing ``steps`` gradients each on the chief's ``plan`` (:func:`for_chief`), in
    parts (``executor.memory``).

    As a synthetic run of ``workers x steps`` steps (``sim.synthetic.run_estimate``: the
    process, the tables and slots as far as those steps touch them, a step's working arrays for
    ``engine`` and the ``data``, no pipelining: the chief clears it, the outputs) with, on top, in
    ``workers``:
    per table each worker's gradient in flight and the accumulators (``min(V, R u)`` rows; ``R``
    is ``replicas_to_aggregate``, 1 in DropStale mode), ``u`` distinct rows of a gradient, ``4 D
    + 16`` bytes a row (its values, its id and its place); and in ``history`` the record of
    every gradient and update (:data:`GRADIENT_BYTES` per gradient, :data:`TABLE_GRADIENT_BYTES`
    more per table: losses, events, decisions, the per-update figures and the summary made of
    them). ``local`` False (the Ray backend): the tables and their step live in the actors."""
    data = data or SyntheticOptions()
    count = workers.workers
    gradients = count * max(steps, 1)
    history = gradients * (GRADIENT_BYTES + TABLE_GRADIENT_BYTES * len(plan.tables))
    shape = RunShape(
        steps=gradients, engine=engine, ids=data.id_distribution,
        sequence_lengths=data.lengths, tables=tables, plot=plot, history=history, lazy=local)
    parts = memory.estimate(plan, shape)
    aggregate = workers.replicas or 1
    held = 0
    for table in plan.tables:
        if not table.features:
            continue
        _, unique = step_ids(plan, table, shape)
        row = 4 * table.dimension + 16
        held += int(count * unique * row + min(table.vocabulary, aggregate * unique) * row)
    if not local:
        return Estimate(0, 0, 0, parts.process, 0, history, 0, parts.whole_state, workers=held)
    return replace(parts, workers=held)


def _histogram(counts: Counter[int]) -> dict[str, int]:
    return {str(k): counts[k] for k in sorted(counts)}


def for_chief(prepared: Prepared) -> Prepared:
    """``prepared`` as the chief's executor runs it: :func:`chief_config` and its plan.

    The plan is derived, not rebuilt: clearing ``gradient_accumulation_status`` makes every
    table accumulate (UNSPECIFIED is not DISABLED) and clearing pipelining clears ``pipelined``;
    nothing else in the plan depends on the two fields.
    """
    plan: Plan = replace(
        prepared.plan, pipelined=False,
        tables=tuple(replace(table, accumulate=True) for table in prepared.plan.tables),
    )
    return replace(prepared, config=chief_config(prepared.config), plan=plan)


def chief_config(config: Any) -> Any:
    """A copy of ``config`` for the chief's executor: accumulation status and pipelining cleared.

    Both describe the TPU's own loop (partials within one step, one step of read-behind); in a
    multi-worker run every aggregated gradient is one update and staleness comes from the workers.
    """
    copy = type(config)()
    copy.CopyFrom(config)
    for table in copy.table_descriptor:
        table.optimization_parameters.ClearField("gradient_accumulation_status")
    copy.pipeline_execution_with_tensor_core = False
    return copy
