"""Several workers training one set of tables: synchronous replicas or stale-gradient dropping.

What ``tpuemb simulate --workers N`` runs (spec ``accumulator.md`` sections 3-5). The tables live in
one :class:`~tpuemb_cfg.executor.Executor` (the chief's state); N workers draw synthetic batches
and compute gradients against the tables as they are when they start; the gradients reach the
chief later, and the chief decides what to apply:

- **Synchronous replicas** (default; TensorFlow's ``SyncReplicasOptimizer``, modelled by
  :class:`~tpuemb_cfg.workers.SyncReplicas`): every table has a ``SparseConditionalAccumulator``.
  A worker's gradient carries its ``local_step`` (the token it last dequeued, or the initial
  global step); the accumulator drops it when ``local_step`` is behind the accumulator's clock.
  When every table holds R fresh gradients the chief takes them (per-row MEAN: a row is divided by
  the number of gradients that touched it), applies the result with the table's optimizer,
  advances the global step and enqueues ``max(N, R)`` tokens. A worker dequeues a token after
  each gradient and waits when the queue is empty.
- **DropStale** (``max_staleness`` set; TensorFlow's ``DropStaleGradientOptimizer``, modelled by
  :class:`~tpuemb_cfg.workers.DropStaleGradient`): a gradient computed at global step ``l`` and
  arriving at global step ``g`` is applied on its own when ``g - l <= max_staleness`` (the global
  step advances), and dropped for every table otherwise.

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
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .errors import UsageError
from .executor import kernels
from .executor.batch import FeatureInput
from .executor.plan import refuse_invalid
from .io import as_config
from .simspec import Schedule, ScheduledRun
from .workers import DropStaleGradient, IndexedSlices, SyncReplicas, WouldBlock

__all__ = ["DelayModel", "MultiWorkerRun", "simulate_workers", "summary_text"]

F32 = np.float32
_DATA_STREAM = 0x5EED  # the synthetic run's own stream; worker 0 keeps it
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
            f"--delay {text!r}: expected fixed:K (K >= 0 whole ticks, e.g. fixed:2) or "
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
class _TableStats:
    received: int = 0
    accepted: int = 0
    dropped_stale: int = 0
    applied: int = 0
    averaged_per_update: list[int] = field(default_factory=list)
    rows_updated: list[int] = field(default_factory=list)
    update_norm: list[float] = field(default_factory=list)


@dataclass
class _WorkerStats:
    computed: int = 0
    accepted: int = 0
    dropped_stale: int = 0
    applied: int = 0
    staleness: Counter[int] = field(default_factory=Counter)
    tables: dict[str, Counter[str]] = field(default_factory=dict)


class MultiWorkerRun:
    """N workers on synthetic data, aggregated by synchronous replicas or by DropStale.

    ``workers`` = N; ``replicas_to_aggregate`` = R (default N) and ``init_tokens`` (default -1:
    R tokens; fewer than ``R - N`` raises ``UsageError`` "Too few tokens ...") for synchronous
    replicas; ``max_staleness`` selects DropStale mode instead. ``delay``: a
    :class:`DelayModel` or its text (default ``fixed:0``). ``seed``, ``combiners``,
    ``learning_rate``, ``max_memory``, ``validate_config`` as for ``SyntheticRun``;
    ``schedules``: learning-rate schedules per tag (see ``tpuemb_cfg.simspec``); ``engine``:
    the executor's engine (``numpy`` or ``numba``).
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
        learning_rate: float = 0.1,
        schedules: Sequence[Schedule] = (),
        max_memory: int | None = None,
        validate_config: bool = True,
        spec_path: str | None = None,
        engine: str = "numpy",
    ) -> None:
        if workers < 1:
            raise UsageError(f"--workers {workers}: expected at least 1 worker")
        if replicas_to_aggregate is not None and replicas_to_aggregate < 1:
            raise UsageError(
                f"--replicas-to-aggregate {replicas_to_aggregate}: expected at least 1"
            )
        if max_staleness is not None and replicas_to_aggregate is not None:
            raise UsageError(
                "--replicas-to-aggregate applies to synchronous replicas; --max-staleness "
                "selects DropStale mode, where every worker applies its own gradients - give "
                "one of the two"
            )
        if max_staleness is not None and init_tokens != -1:
            raise UsageError("--init-tokens applies to synchronous replicas, not to DropStale "
                             "mode (--max-staleness); remove it")
        message = as_config(config)
        if validate_config:
            refuse_invalid(message)
        self.delay = DelayModel.parse(delay) if isinstance(delay, str) else (
            delay or DelayModel("fixed", 0))
        self.seed = int(seed)
        self.num_workers = int(workers)
        self.max_staleness = max_staleness
        self.replicas_to_aggregate = (
            None if max_staleness is not None
            else int(replicas_to_aggregate or workers)
        )
        self.init_tokens = init_tokens
        self.data = ScheduledRun(
            chief_config(message), seed=seed, combiners=combiners, learning_rate=learning_rate,
            max_memory=max_memory, validate_config=False, schedules=schedules,
            spec_path=spec_path, engine=engine,
        )
        self.executor = self.data.executor
        self.plan = self.executor.plan
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
                    f"--init-tokens {init_tokens}: {exc}. With R = {self.replicas_to_aggregate} "
                    f"gradients per update and only N = {self.num_workers} workers, the workers "
                    f"need {needed} token(s) to compute the missing gradients of the first step; "
                    f"give --init-tokens {needed} or more (or -1, TensorFlow's default of R)"
                ) from None
        else:
            self.rule = DropStaleGradient(max_staleness)
        self._data_rngs = [self.data.rng] + [
            np.random.default_rng([self.seed & 0xFFFFFFFF, _DATA_STREAM, w])
            for w in range(1, self.num_workers)
        ]
        self._delay_rngs = [
            np.random.default_rng([self.seed & 0xFFFFFFFF, _DELAY_STREAM, w])
            for w in range(self.num_workers)
        ]
        self.tables = {t.name: _TableStats() for t in self.plan.tables}
        self.workers = [_WorkerStats() for _ in range(self.num_workers)]
        self.staleness: Counter[int] = Counter()
        self.loss: list[float] = []
        self.tick = 0
        self.steps = 0
        self._pending: dict[str, list[int]] = {name: [] for name in self.variables}
        self._flight: list[tuple[int, int, _Gradient]] = []

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

    def run(self, steps: int, progress: Callable[[int], None] | None = None) -> None:
        """Let every worker compute ``steps`` gradients; ``progress(n)`` after each delivery."""
        if steps < 1:
            raise UsageError(f"--steps {steps}: expected at least 1")
        self.steps = int(steps)
        for worker in range(self.num_workers):
            self._start(worker)
        delivered = 0
        while self._flight:
            self.tick, worker, gradient = heapq.heappop(self._flight)
            if self.sync is not None:
                self._deliver_sync(gradient)
            else:
                self._deliver_drop_stale(gradient)
            delivered += 1
            if progress is not None:
                progress(delivered)

    # ----------------------------------------------------------------------------------------
    # Workers

    def _start(self, worker: int) -> None:
        """Worker ``worker`` reads the tables now, computes a gradient and sends it off."""
        stats = self.workers[worker]
        if stats.computed >= self.steps:
            return
        stats.computed += 1
        self.data.rng = self._data_rngs[worker]
        batch = self.data.next_batch()
        activations, dedup = self.executor.recv_activations(batch)
        loss, grads = self._loss_gradients(batch, activations, dedup)
        self.loss.append(loss)
        rows: RowGradients = {}
        for table in self.plan.tables:
            if not table.features:
                continue
            record = dedup.tables[table.name]
            d_activations = np.concatenate([grads[f] for f in table.features])
            rows[table.name] = (record.unique_ids, self.executor.kernels.backprop_sum(
                d_activations, record.sample, record.gains, record.inverse,
                record.unique_ids.shape[0]))
        read_step = self.global_step
        local_step = self.sync.local_steps[worker] if self.sync is not None else read_step
        arrival = self.tick + 1 + self.delay.draw(self._delay_rngs[worker])
        heapq.heappush(self._flight, (arrival, worker, _Gradient(worker, read_step, local_step,
                                                                 rows)))

    def _loss_gradients(self, batch: list[FeatureInput], activations: list[np.ndarray],
                        dedup: Any) -> tuple[float, list[np.ndarray]]:
        """The synthetic run's regression loss and its activation gradients (``synthetic.py``)."""
        loss = 0.0
        grads: list[np.ndarray] = []
        offsets: dict[int, int] = {}
        for table in self.plan.tables:
            start = 0
            for f in table.features:
                offsets[f] = start
                start += int(batch[f].ids.shape[0])
        for feature, item, activation in zip(self.plan.features, batch, activations,
                                             strict=True):
            table = self.plan.tables[feature.table]
            record = dedup.tables[table.name]
            start = offsets[feature.index]
            stop = start + int(item.ids.shape[0])
            teacher = kernels.combine(
                self.data._teacher_rows(table, item.ids), record.gains[start:stop],
                item.row_splits,
            )
            error = activation - teacher
            bags = max(activation.shape[0], 1)
            loss += float(np.sum(error.astype(np.float64) ** 2)) / (2.0 * bags)
            grads.append((error / F32(bags)).astype(F32))
        return loss, grads

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
        self.executor.step(batch, self.data.learning_rates(step))
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
        out["learning_rate_schedules"] = [s.describe() for s in self.data.schedules]
        out.update({
            "ticks": self.tick,
            "global_step": self.global_step,
            "gradients": {
                "computed": computed,
                "accepted": sum(w.accepted for w in self.workers),
                "applied": sum(w.applied for w in self.workers),
                "dropped_stale": sum(w.dropped_stale for w in self.workers),
                "pending": sum(w.accepted - w.applied for w in self.workers),
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
                "pending": stats.accepted - stats.applied,
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
                "pending": worker.accepted - worker.applied,
                "waiting_for_token": index in waiting,
                "staleness_histogram": _histogram(worker.staleness),
                "tables": {
                    name: {"accepted": counts["accepted"], "applied": counts["applied"],
                           "dropped_stale": counts["dropped_stale"]}
                    for name, counts in sorted(worker.tables.items())
                },
            })
        return out


def _histogram(counts: Counter[int]) -> dict[str, int]:
    return {str(k): counts[k] for k in sorted(counts)}


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


# --------------------------------------------------------------------------------------------
# The command's back end


def summary_text(summary: Mapping[str, Any]) -> str:
    """The human summary of :meth:`MultiWorkerRun.summary` (plus ``config``/``out_dir`` keys)."""
    if summary["mode"] == "sync_replicas":
        tokens = summary["init_tokens"]
        how = (f"sync replicas, R = {summary['replicas_to_aggregate']} of N = "
               f"{summary['workers']}, init tokens {'R' if tokens == -1 else tokens}")
    else:
        how = f"DropStale, max staleness {summary['max_staleness']}, N = {summary['workers']}"
    grads = summary["gradients"]
    lines = [
        f"tpuemb simulate: {summary['workers']} worker(s) x {summary['steps_per_worker']} "
        f"gradients on {summary.get('config', '<config>')} ({how}, delay {summary['delay']}, "
        f"seed {summary['seed']})",
        f"global step {summary['global_step']} after {summary['ticks']} ticks; gradients: "
        f"{grads['computed']} computed, {grads['applied']} applied, {grads['dropped_stale']} "
        f"dropped stale, {grads['pending']} pending",
        "staleness (updates behind at arrival): " + ", ".join(
            f"{k}: {v}" for k, v in summary["staleness_histogram"].items()),
    ]
    if summary["mode"] == "drop_stale":
        lines.append(f"stale_counter {summary['stale_counter']} (staleness percentage "
                     f"{summary['staleness_percentage']:.3f})")
    for line in summary.get("learning_rate_schedules", []):
        lines.append(f"learning rate {line}")
    loss = summary["loss"]
    if loss:
        lines.append(f"loss: {loss[0]:.4f} (first gradient) -> {loss[-1]:.4f} (last)")
    rows: list[tuple[str, ...]] = [(
        "table", "optimizer", "received", "applied", "dropped stale", "pending", "updates",
        "averaged/update", "update norm first -> last")]
    for name, table in summary["tables"].items():
        averaged = table["averaged_per_update"]
        norms = table["update_norm"]
        rows.append((
            name, table["optimizer"], str(table["received"]), str(table["applied"]),
            str(table["dropped_stale"]), str(table["pending"]), str(table["updates"]),
            f"{sum(averaged) / len(averaged):.2f}" if averaged else "-",
            f"{norms[0]:.4g} -> {norms[-1]:.4g}" if norms else "-",
        ))
    lines.extend(_table(rows))
    rows = [("worker", "computed", "applied", "dropped stale", "pending", "staleness", "at end")]
    for worker in summary["per_worker"]:
        rows.append((
            f"w{worker['worker']}", str(worker["computed"]), str(worker["applied"]),
            str(worker["dropped_stale"]), str(worker["pending"]),
            " ".join(f"{k}:{v}" for k, v in worker["staleness_histogram"].items()) or "-",
            "waiting for a token" if worker["waiting_for_token"] else "done",
        ))
    lines.extend(_table(rows))
    if summary["waiting_for_token"] or summary["chief_short"]:
        short = ", ".join(f"{name!r} holds {count}" for name, count in
                          summary["chief_short"].items())
        lines.append(
            "at the end: "
            + (f"worker(s) {', '.join(f'w{w}' for w in summary['waiting_for_token'])} wait for "
               "a token" if summary["waiting_for_token"] else "no worker waits")
            + (f"; the chief waits for {summary['replicas_to_aggregate']} gradients per table "
               f"({short})" if short else "")
            + " - TensorFlow would hang here"
        )
    if "out_dir" in summary:
        lines.append(f"tables and slots written to {os.path.join(summary['out_dir'], 'tables.npz')}"
                     f"; summary in {os.path.join(summary['out_dir'], 'summary.json')}")
    return "\n".join(lines)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def simulate_workers(
    config: Any,
    *,
    config_label: str,
    steps: int,
    out_dir: Path,
    as_json: bool,
    quiet: bool,
    combiner_args: Sequence[str] = (),
    **options: Any,
) -> dict[str, Any]:
    """``tpuemb simulate --workers N ...``: run, write ``tables.npz`` and ``summary.json`` to
    ``out_dir``, print the summary (text, or JSON with ``as_json``); return the summary.

    ``config``: a path (validated with line numbers) or a message; ``combiner_args``: the
    ``--combiner`` values; ``options``: the other keyword arguments of :class:`MultiWorkerRun`.
    """
    import click

    from .executor.plan import build_plan, parse_combiners
    from .io import atomic_write_text
    from .npzio import atomic_write_npz

    refuse_invalid(config)
    message = as_config(config)
    combiners = parse_combiners(list(combiner_args), len(build_plan(message).features))
    run = MultiWorkerRun(message, validate_config=False, combiners=combiners, **options)
    total = run.num_workers * steps
    if not quiet and sys.stderr.isatty():
        with click.progressbar(length=total, label="simulating", file=sys.stderr,
                               show_pos=True) as bar:
            run.run(steps, progress=lambda _n: bar.update(1))
    else:
        run.run(steps)
    summary = run.summary()
    summary["config"] = config_label
    summary["out_dir"] = str(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_npz(out_dir / "tables.npz", run.executor.state_arrays())
    text = json.dumps(summary, indent=2)
    atomic_write_text(out_dir / "summary.json", text + "\n")
    click.echo(text if as_json else summary_text(summary))
    return summary

