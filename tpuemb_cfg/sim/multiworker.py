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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from .. import units
from ..errors import NumericalError, UsageError
from ..errors import parameter as arg
from ..executor import Executor, FeatureInput, Placement, RunOptions
from ..executor.memory import Estimate
from ..executor.plan import Plan
from ..executor.prepared import Prepared
from ..executor.touched import TouchedRows, saved_state
from ..executor.workload import IdDistribution, SequenceLengths
from .accumulators import IndexedSlices, WouldBlock
from .schedules import Schedule
from .staleness import DropStaleGradient, SyncReplicas
from .synthetic import SyntheticData, learning_rate_summary

__all__ = ["MAX_WORKERS", "DelayModel", "MultiWorkerRun", "chief_config", "for_chief",
           "run_estimate"]

#: Bytes the record of one gradient keeps, and more per table (an upper bound of what was
#: measured: 200-800 bytes and 20-600 bytes a table, DropStale and sync replicas).
GRADIENT_BYTES = 1200
TABLE_GRADIENT_BYTES = 800

#: The most workers a run simulates. Every worker's gradients are computed in turn on this CPU
#: and held until the chief applies them, so time and memory grow with N x steps; aggregation
#: and staleness patterns show with a handful of workers.
MAX_WORKERS = 1024

F32 = np.float32
_DELAY_STREAM = 0xDE1A

RowGradients = dict[str, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class DelayModel:
    """How many ticks a gradient takes beyond the one tick of computing it.

    ``fixed:K``: always ``K`` (an integer >= 0). ``geometric:P``: the number of failures before
    the first success of a coin with success probability ``0 < P <= 1`` (mean ``(1 - P) / P``).
    """

    kind: Literal["fixed", "geometric"]
    value: float

    @classmethod
    def parse(cls, text: str) -> DelayModel:
        """``fixed:K`` or ``geometric:P``; raise ``UsageError`` otherwise."""
        kind, _, number = text.strip().partition(":")
        try:
            if kind == "fixed":
                ticks = int(number)
                if ticks >= 0:
                    return cls("fixed", ticks)
            elif kind == "geometric":
                p = float(number)
                if 0 < p <= 1:
                    return cls("geometric", p)
        except ValueError:
            pass
        raise UsageError(
            f"{arg('delay')} {text!r}: expected fixed:K (K >= 0 whole ticks, e.g. fixed:2) or "
            "geometric:P (0 < P <= 1, e.g. geometric:0.5)"
        )

    def draw(self, rng: np.random.Generator) -> int:
        if self.kind == "fixed":
            return int(self.value)
        return int(rng.geometric(self.value)) - 1

    def __str__(self) -> str:
        return f"{self.kind}:{int(self.value) if self.kind == 'fixed' else self.value!r}"


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

    ``workers`` = N (at most :data:`MAX_WORKERS`); ``replicas_to_aggregate`` = R (default N)
    and ``init_tokens`` (default -1: R tokens; fewer than ``R - N`` raises ``UsageError`` "Too
    few tokens ...") for synchronous replicas; ``max_staleness`` selects DropStale mode instead
    (a negative one drops every gradient, as TensorFlow's rule does; ``tpuemb simulate`` refuses
    it). ``delay``: a
    :class:`DelayModel` or its text (default ``fixed:0``). ``config``: a ``Prepared``
    (``tpuemb_cfg.session``) or anything ``prepare`` takes; ``seed``, ``combiners``,
    ``learning_rate``, ``max_memory``, ``validate_config`` as for ``SyntheticRun``;
    ``schedules``: learning-rate schedules per tag (see ``tpuemb_cfg.sim.schedules``);
    ``engine``: the executor's engine (``numba``, the default, or ``numpy``); ``backend``,
    ``ray_address``, ``shards``: where the chief's tables live, as for ``Executor``; ``ids``,
    ``sequence_lengths``: the data, as for ``SyntheticData``.
    """

    def __init__(
        self,
        config: Any,
        *,
        workers: int = 1,
        replicas_to_aggregate: int | None = None,
        max_staleness: int | None = None,
        init_tokens: int = -1,
        delay: DelayModel | str | None = None,
        seed: int = 0,
        combiners: str | Sequence[str] | Mapping[int, str] | None = None,
        learning_rate: float | None = None,
        schedules: Sequence[Schedule] = (),
        max_memory: int | str | None = None,
        validate_config: bool = True,
        spec_path: str | None = None,
        engine: str = "numba",
        backend: str = "local",
        ray_address: str | None = None,
        shards: int | None = None,
        ids: str | IdDistribution | None = None,
        sequence_lengths: str | SequenceLengths | None = None,
    ) -> None:
        if workers < 1:
            raise UsageError(f"{arg('workers')} {workers}: expected at least 1 worker")
        if workers > MAX_WORKERS:
            raise UsageError(
                f"{arg('workers')} {workers}: at most {MAX_WORKERS} workers are simulated (each "
                "one's gradients are computed in turn on this CPU and held until applied, so time "
                f"and memory grow with N x steps); use {arg('workers')} {MAX_WORKERS} or fewer - "
                "the aggregation and staleness patterns show with a few workers"
            )
        if replicas_to_aggregate is not None and replicas_to_aggregate < 1:
            raise UsageError(
                f"{arg('replicas_to_aggregate')} {replicas_to_aggregate}: expected at least 1"
            )
        for name, value in (("replicas_to_aggregate", replicas_to_aggregate),
                            ("max_staleness", max_staleness), ("init_tokens", init_tokens)):
            if value is not None and not -units.MAX_INT64 - 1 <= value <= units.MAX_INT64:
                raise UsageError(f"{name}={value}: expected at most {units.MAX_INT64} (2^63 - 1: "
                                 "TensorFlow holds it in an int64)")
        if max_staleness is not None and replicas_to_aggregate is not None:
            raise UsageError(
                f"{arg('replicas_to_aggregate')} applies to synchronous replicas; "
                f"{arg('max_staleness')} selects DropStale mode, where every worker applies its "
                "own gradients - give one of the two"
            )
        if max_staleness is not None and init_tokens != -1:
            raise UsageError(f"{arg('init_tokens')} applies to synchronous replicas, not to "
                             f"DropStale mode ({arg('max_staleness')}); remove it")
        from ..session import prepare  # until the run takes only a Prepared

        prepared = prepare(config, combiners=combiners, check=validate_config)
        self.delay = DelayModel.parse(delay) if isinstance(delay, str) else (
            delay or DelayModel("fixed", 0))
        self.seed = units.seed_argument(seed)
        self.num_workers = int(workers)
        self.max_memory = None if backend == "ray" else units.size_argument(max_memory,
                                                                             "max_memory")
        self._tables_here = backend != "ray"
        self.max_staleness = max_staleness
        self.replicas_to_aggregate = (
            None if max_staleness is not None
            else int(replicas_to_aggregate or workers)
        )
        self.init_tokens = init_tokens
        self.executor = Executor(for_chief(prepared),
                                 RunOptions(seed=seed, engine=engine, max_memory=max_memory),
                                 Placement(backend, shards, ray_address))
        self.plan = self.executor.plan
        self.data = SyntheticData(self.plan, seed=seed, learning_rate=learning_rate,
                                  schedules=schedules, schedules_source=spec_path, ids=ids,
                                  sequence_lengths=sequence_lengths)
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
        if max_staleness is None:
            assert self.replicas_to_aggregate is not None
            self.sync = SyncReplicas(self.replicas_to_aggregate, self.num_workers,
                                     sparse=self.variables)
            self.sync.chief_init()
            try:
                self.sync.init_tokens(init_tokens)
            except ValueError as exc:
                needed = self.replicas_to_aggregate - self.num_workers
                raise UsageError(
                    f"{arg('init_tokens')} {init_tokens}: {exc}. With R = "
                    f"{self.replicas_to_aggregate} "
                    f"gradients per update and only N = {self.num_workers} workers, the workers "
                    f"need {needed} token(s) to compute the missing gradients of the first step; "
                    f"give {arg('init_tokens')} {needed} or more (or -1, TensorFlow's default of R)"
                ) from None
        else:
            self.rule = DropStaleGradient(max_staleness)
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
        return run_estimate(self.plan, steps, self.num_workers, self.replicas_to_aggregate,
                            engine=self.executor.engine.name, ids=self.data.ids,
                            sequence_lengths=self.data.sequence_lengths, tables=tables,
                            plot=plot, local=self._tables_here)

    def _require_memory(self, steps: int, *, tables: str = "all", plot: bool = False) -> None:
        """Refuse a run beyond the memory limit (``max_memory``) before its first gradient."""
        from ..executor.core import require_memory
        from ..executor.memory import describe

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
        self.data.require_finite(self.executor.step_index, loss, activations)
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
        return out


def run_estimate(plan: Plan, steps: int, workers: int, replicas_to_aggregate: int | None, *,
                 engine: str = "numba", ids: str | IdDistribution | None = None,
                 sequence_lengths: str | SequenceLengths | None = None, tables: str = "all",
                 plot: bool = False, local: bool = True) -> Estimate:
    """The peak resident memory of a run of ``workers`` workers computing ``steps`` gradients
    each on the chief's ``plan`` (:func:`for_chief`), in parts (``executor.memory``).

    As a synthetic run of ``workers x steps`` steps (``sim.synthetic.run_estimate``: the
    process, the tables and slots as far as those steps touch them, a step's working arrays for
    ``engine``, no pipelining: the chief clears it, the outputs) with, on top, in ``workers``:
    per table each worker's gradient in flight and the accumulators (``min(V, R u)`` rows; ``R``
    is ``replicas_to_aggregate``, 1 in DropStale mode), ``u`` distinct rows of a gradient, ``4 D
    + 16`` bytes a row (its values, its id and its place); and in ``history`` the record of
    every gradient and update (:data:`GRADIENT_BYTES` per gradient, :data:`TABLE_GRADIENT_BYTES`
    more per table: losses, events, decisions, the per-update figures and the summary made of
    them). ``local`` False (the Ray backend): the tables and their step live in the actors."""
    from ..executor import memory
    from ..executor.memory import RunShape, step_ids
    from ..executor.workload import parse_ids, parse_sequence_lengths

    gradients = workers * max(steps, 1)
    history = gradients * (GRADIENT_BYTES + TABLE_GRADIENT_BYTES * len(plan.tables))
    shape = RunShape(
        steps=gradients, engine=engine, ids=parse_ids(ids, "ids"),
        sequence_lengths=parse_sequence_lengths(sequence_lengths, "sequence_lengths"),
        tables=tables, plot=plot, history=history, lazy=local)
    parts = memory.estimate(plan, shape)
    aggregate = replicas_to_aggregate or 1
    held = 0
    for table in plan.tables:
        if not table.features:
            continue
        _, unique = step_ids(plan, table, shape)
        row = 4 * table.dimension + 16
        held += int(workers * unique * row + min(table.vocabulary, aggregate * unique) * row)
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
