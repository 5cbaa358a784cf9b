"""A self-contained training run on synthetic data: what `tpuemb simulate` does without --batches.

:class:`SyntheticData` is the workload, shared by this single-worker run and the multi-worker run
(:mod:`.multiworker`); :class:`SyntheticRun` steps one executor through it.

Data: every step, each feature gets ``num_tensor_cores * prod(input_shape)`` bags (the global
batch); the number of ids of each bag follows the configuration and ``--bag-sizes``
(:mod:`tpuemb_cfg.executor.bags`: a compiled spec's input shapes and sequence lengths; for a plain
configuration 1 to 4 ids per bag of a 1-D feature and one id per position of a longer one).
Ids follow a Zipf law (rank r has probability proportional to (r + 1)^-1.1, inverse-CDF sampled
from the continuous power law) and ranks are scattered over the vocabulary by a fixed bijection,
so popular ids land on every host.

Loss: a regression of every activation onto a fixed "teacher" activation, computed with the
same combiner from a teacher row ``y(i)``, a rank-4 mix of fixed rows with weights hashed from
(seed, table, i), that exists for every id without being stored (``kernels``):

    loss = sum over features f of  1 / (2 B_f) * sum over bags b of |A_fb - Y_fb|^2
    dA_f = (A_f - Y_f) / B_f

so the loss falls as the looked-up rows move towards their teachers.

Learning rates (K dynamic tags): a tag that a table's learning rate uses gets ``learning_rate``,
bias-corrected (``lr * sqrt(1 - beta2^n) / (1 - beta1^n)``, n = step + 1, spec section 9) when
the first table using it is Adam; a tag only step counters use, or the learning rate of a
``frequency_estimator`` table, gets the global step count (step + 1: steps done, this one
included). A compiled spec's tags (``Plan.tag_rates``: its schedules and learning-rate
callables) get the spec's value at the step instead, as TensorFlow sends it (``executor.rates``;
no bias correction added), unless ``learning_rate`` is given: then it replaces them. A tag with
a simulation spec's schedule (:mod:`.schedules`) gets that schedule's value (no bias correction
added). Each step's values are in the run's history and summary (``learning_rates``).

Everything is drawn from generators seeded by ``seed``; the run's state (tables, slots, step,
generator state, per-step history) round-trips through ``checkpoint_arrays`` so an interrupted
and resumed run ends with the same bytes as an uninterrupted one. The ids, the teacher, the
loss and its gradients come from compiled kernels when numba can be imported, whatever the
executor's engine (``kernels``: one definition of the numbers, NumPy without numba).
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import InputError, NumericalError, UsageError
from tpuemb_cfg.base.errors import parameter as arg

from ..algorithms.adam import bias_corrected_rate
from ..executor import Executor, FeatureInput, Placement, RunOptions, memory
from ..executor.bags import bag_lengths
from ..executor.core import damaged_checkpoint, require_memory
from ..executor.counter import stream_key
from ..executor.memory import Estimate, RunShape, describe, reduce_hint
from ..executor.nonfinite import NonFinite
from ..executor.plan import Plan, TablePlan
from ..executor.prepared import Prepared
from ..executor.rates import spec_learning_rates
from ..executor.touched import TouchedRows, saved_state
from ..executor.workload import (
    IdDistribution,
    SequenceLengths,
    parse_ids,
    parse_sequence_lengths,
)
from . import kernels
from .history import LIMIT, History
from .options import SyntheticOptions
from .schedules import Schedule, check_schedule_tags

#: The value of dynamic tags nobody gives another (``--learning-rate``'s default).
DEFAULT_LEARNING_RATE = 0.1

__all__ = ["BatchCallback", "SyntheticData", "SyntheticRun", "batch_arrays", "run_estimate"]

F32 = np.float32
_ZIPF_EXPONENT = kernels.ZIPF_EXPONENT
_SCATTER = 2654435761  # a prime: rank -> id is a bijection when it shares no factor with V
_DATA_STREAM = 0x5EED
_TEACHER_STREAM = 0x7EAC


class SyntheticData:
    """The synthetic workload of ``plan``: seeded batches, the teacher, the loss, learning rates.

    ``schedules`` replace the default value of their tags; a schedule of a tag the plan lacks
    raises ``UsageError`` (``schedules_source``, the spec file, names where it came from).
    ``ids``: how ids fall over a table's rows (``zipf:S`` or ``uniform``; default ``zipf:1.1``)
    and ``sequence_lengths``: how many positions of a sequence feature each sample fills
    (``full``, ``fixed:N``, ``uniform[:LO[:HI]]``, ``geometric:MEAN``): strings in the grammar
    of ``executor.workload`` or its objects.
    """

    def __init__(
        self,
        plan: Plan,
        *,
        seed: int = 0,
        learning_rate: float | None = None,
        schedules: Sequence[Schedule] = (),
        schedules_source: str | None = None,
        ids: str | IdDistribution | None = None,
        sequence_lengths: str | SequenceLengths | None = None,
    ) -> None:
        check_schedule_tags(schedules, plan.num_learning_rates, schedules_source)
        self.plan = plan
        self.ids = parse_ids(ids, "ids")
        self.sequence_lengths = parse_sequence_lengths(sequence_lengths, "sequence_lengths")
        self.seed = units.seed_argument(seed)
        # None: the spec's learning-rate callables where the plan has them, else 0.1.
        self.learning_rate = DEFAULT_LEARNING_RATE if learning_rate is None else float(
            learning_rate)
        self.tag_rates = plan.tag_rates if learning_rate is None else ()
        self.schedules = tuple(schedules)
        self._last_rates: tuple[int, np.ndarray] | None = None  # (step, values) last computed
        self.rng = self.stream(0)
        # The teacher's hash streams: apart from the initial tables' (``stream_key(seed, t)``).
        self._teachers = [
            stream_key(self.seed, (_TEACHER_STREAM << 32) + table.index) for table in plan.tables
        ]
        self._buffers: dict[int, np.ndarray] = {}  # ``loss_gradients(reuse=True)``'s arrays
        self._bases = [
            kernels.teacher_basis(key, table.dimension)
            for key, table in zip(self._teachers, plan.tables, strict=True)
        ]

    @classmethod
    def of(cls, plan: Plan, seed: int, data: SyntheticOptions) -> SyntheticData:
        """The workload of ``plan`` that ``data`` describes, seeded by ``seed``."""
        return cls(plan, seed=seed, learning_rate=data.learning_rate, schedules=data.schedules,
                   schedules_source=data.schedules_source, ids=data.ids,
                   sequence_lengths=data.sequence_lengths)

    def stream(self, index: int) -> np.random.Generator:
        """A fresh data generator: stream 0 is the run's own (``self.rng``, worker 0's), stream
        ``i`` that of worker ``i`` of a multi-worker run."""
        if index == 0:
            return np.random.default_rng([self.seed, _DATA_STREAM])
        return np.random.default_rng([self.seed, _DATA_STREAM, index])

    def _ids(self, rng: np.random.Generator, table: TablePlan, count: int) -> np.ndarray:
        vocab = table.vocabulary
        if self.ids.kind == "uniform":
            return kernels.uniform_ids(rng.random(count), vocab)
        multiplier = _SCATTER % vocab if math.gcd(_SCATTER, vocab) == 1 else 1
        return kernels.zipf_ids(rng.random(count), vocab, multiplier, table.index % vocab,
                                self.ids.exponent)

    def next_batch(self, rng: np.random.Generator | None = None) -> list[FeatureInput]:
        """The next step's ids, one ``FeatureInput`` per feature, drawn from ``rng`` (default:
        the run's own generator, ``self.rng``)."""
        rng = self.rng if rng is None else rng
        batch = []
        for feature in self.plan.features:
            table = self.plan.tables[feature.table]
            bags = self.plan.num_cores * int(np.prod(feature.input_shape))
            lengths = bag_lengths(rng, feature, bags)
            if len(feature.input_shape) > 1:  # positions: each sample fills its first l
                samples = self.plan.num_cores * feature.input_shape[0]
                positions = bags // max(samples, 1)
                filled = self.sequence_lengths.draw(rng, samples, positions)
                if filled is not None:
                    lengths = lengths.reshape(samples, positions)
                    lengths[np.arange(positions)[None, :] >= filled[:, None]] = 0
                    lengths = lengths.reshape(-1)
            row_splits = np.zeros(bags + 1, dtype=np.int64)
            np.cumsum(lengths, out=row_splits[1:])
            batch.append(FeatureInput(self._ids(rng, table, int(row_splits[-1])), row_splits))
        return batch

    def batch_bytes(self) -> int:
        """The expected bytes of one step's arrays in a batches file (:func:`batch_arrays`):
        per feature its ids and row splits (int64) and gradients (float32), the learning
        rates, and the ``.npy`` and zip headers of each array (about 250 bytes)."""
        total = 4 * self.plan.num_learning_rates + 250
        for feature in self.plan.features:
            bags = self.plan.num_cores * int(np.prod(feature.input_shape))
            dim = self.plan.tables[feature.table].dimension
            ids = memory.feature_ids(self.plan, feature, self.sequence_lengths)
            total += int(8 * ids + 8 * (bags + 1) + 4 * bags * dim) + 3 * 250
        return total

    def teacher_rows(self, table: TablePlan, ids: np.ndarray) -> np.ndarray:
        """The teacher rows of ``ids`` in ``table`` (float32 [len(ids), D], ``kernels``)."""
        return kernels.teacher_rows(self._teachers[table.index], self._bases[table.index], ids)

    def loss_gradients(self, batch: Sequence[FeatureInput], activations: Sequence[np.ndarray],
                       dedup: Any, reuse: bool = False) -> tuple[float, list[np.ndarray]]:
        """The regression loss of one step and its activation gradients, one per feature.

        ``activations`` and ``dedup`` are what ``Executor.recv_activations(batch)`` returned; the
        teacher activations use the same combiner gains as the forward pass. ``reuse``: write
        the gradients into the arrays the previous call with ``reuse`` returned (the caller is
        done with them): fresh arrays of hundreds of MB a step would be new memory for the
        operating system to map and clear every step.
        """
        loss = 0.0
        grads: list[np.ndarray] = []
        offsets: dict[int, int] = {}  # first occurrence of each feature in its table's record
        for table in self.plan.tables:
            start = 0
            for f in table.features:
                offsets[f] = start
                start += int(batch[f].ids.shape[0])
        for feature, item, activation in zip(self.plan.features, batch, activations, strict=True):
            table = self.plan.tables[feature.table]
            record = dedup.tables[table.name]
            start = offsets[feature.index]
            stop = start + int(item.ids.shape[0])
            squares, grad = kernels.loss_gradients(
                activation, self._teachers[table.index], self._bases[table.index], item.ids,
                record.gains[start:stop], item.row_splits,
                out=self._buffers.get(feature.index) if reuse else None,
            )
            if reuse:
                self._buffers[feature.index] = grad
            loss += squares / (2.0 * max(activation.shape[0], 1))
            grads.append(grad)
        return loss, grads

    def rate_source(self, tag: int, step: int) -> tuple[str, str]:
        """Where the value of dynamic tag ``tag`` at ``step`` comes from, for messages: its
        description and what sets it (``schedules``, ``spec``: the compiled spec's callable, or
        ``learning_rate``)."""
        for schedule in self.schedules:
            if schedule.tag == tag:
                return (f"the schedule of tag {tag} gives {float(schedule(step)):.6g} at step "
                        f"{step} ({schedule.describe()})", "schedules")
        for rate in self.tag_rates:
            if rate.tag == tag:
                sent = (f" gives {float(self._last_rates[1][tag]):.6g} at step {step}"
                        if self._last_rates is not None and self._last_rates[0] == step else "")
                return (f"the spec's learning rate of tag {tag}{sent} ({rate.describe()})",
                        "spec")
        return (f"the run sends learning_rate={self.learning_rate:.6g} on every dynamic tag "
                "(bias-corrected for Adam)", "learning_rate")

    def tag_source(self, tag: int) -> str:
        """Where the values of tag ``tag`` come from, in words (the summary's ``source``)."""
        for schedule in self.schedules:
            if schedule.tag == tag:
                return f"the simulation spec's schedule ({schedule.describe()})"
        for rate in self.tag_rates:
            if rate.tag == tag:
                return f"the spec: {rate.describe()}"
        first = next((t for t in self.plan.tables if t.lr_tag == tag), None)
        meaning = "global_step" if first is None else first.optimizer.algorithm.learning_rate
        if meaning == "global_step":
            return "the global step count (step + 1)"
        if meaning == "bias_corrected":
            return f"learning_rate={self.learning_rate:g}, bias-corrected for Adam"
        return f"learning_rate={self.learning_rate:g}"

    def rate_descriptions(self) -> list[str]:
        """One line per tag whose value is not the run's ``learning_rate``: ``tag 0:
        <schedule>`` (a simulation spec's schedule, else the compiled spec's callable)."""
        lines = {schedule.tag: schedule.describe() for schedule in self.schedules}
        for rate in self.tag_rates:
            lines.setdefault(rate.tag, f"tag {rate.tag}: {rate.describe()}")
        return [lines[tag] for tag in sorted(lines)]

    def require_finite(self, step: int, loss: float, activations: Sequence[np.ndarray],
                       first: NonFinite | None = None) -> None:
        """Raise ``NumericalError`` when a step's ``loss`` is not finite: some feature's
        activations overflowed float32 (the rows they combine grew too large; the teacher is
        bounded, so a finite activation gives a finite loss and gradient). The error names the
        feature, its table and the cause, instead of leaving the gradient check to blame a key
        of a batches file this run never read: ``first``, the run's first non-finite value
        (``Executor.nonfinite``: an update's, or a loaded state's), when there is one, else the
        learning rate that fed the rows."""
        if math.isfinite(loss):
            return
        if first is not None:
            feature = next((f for f, a in zip(self.plan.features, activations, strict=True)
                            if not np.isfinite(a).all()), self.plan.features[0])
            raise NumericalError(
                f"step {step}: the activations of feature {feature.index} ({feature.name!r}) are "
                f"not finite: they read a non-finite row - {first.message}",
                parameter=first.parameter, value=first.rate, table=first.table)
        for feature, activation in zip(self.plan.features, activations, strict=True):
            bad = np.argwhere(~np.isfinite(activation))
            if not bad.size:
                continue
            table = self.plan.tables[feature.table]
            cause, parameter = (
                self.rate_source(table.lr_tag, step) if table.lr_tag is not None
                else (f"the configuration's constant learning rate "
                      f"{float(table.lr_constant or 0):.6g}", None))
            bag, column = (int(i) for i in bad[0])
            raise NumericalError(
                f"step {step}: the activations of feature {feature.index} ({feature.name!r}, "
                f"table {table.name!r}) left float32's range ({activation[bag, column]} in bag "
                f"{bag}, column {column}): the table's rows grew too large to combine; "
                f"{cause} - lower the learning rate",
                parameter=parameter, table=table.name)
        raise NumericalError(f"step {step}: the loss is {loss} although every activation is "
                             "finite; lower the learning rate")

    def blame(self, error: NumericalError, step: int) -> NumericalError:
        """``error`` (an update left float32's range) completed with the learning rate's source
        when the step's learning-rate list fed it."""
        if error.parameter != "learning_rates" or error.table is None:
            return error
        table = next(t for t in self.plan.tables if t.name == error.table)
        assert table.lr_tag is not None
        cause, parameter = self.rate_source(table.lr_tag, step)
        return NumericalError(f"{error}; {cause}", parameter=parameter, value=error.value,
                              table=error.table)

    def learning_rates(self, step: int) -> np.ndarray:
        """The K dynamic values of ``step`` (see the module docstring)."""
        rates = np.zeros(self.plan.num_learning_rates, dtype=F32)
        assigned: set[int] = set()
        for table in self.plan.tables:
            if table.lr_tag is None or table.lr_tag in assigned:
                continue
            assigned.add(table.lr_tag)
            meaning = table.optimizer.algorithm.learning_rate
            if meaning == "global_step":
                rates[table.lr_tag] = F32(step + 1)  # the global step count
            elif meaning == "bias_corrected":
                rates[table.lr_tag] = F32(bias_corrected_rate(
                    self.learning_rate, float(table.hyper.beta1), float(table.hyper.beta2),
                    step))
            else:
                rates[table.lr_tag] = F32(self.learning_rate)
        for tag in range(self.plan.num_learning_rates):
            if tag not in assigned:
                rates[tag] = F32(step + 1)  # a step counter (the table's step inputs)
        if self.tag_rates:  # a compiled spec: what TensorFlow would send (executor.rates)
            rates = spec_learning_rates(self.plan, step)
        for schedule in self.schedules:
            rates[schedule.tag] = schedule(step)
        self._last_rates = (step, rates)
        return rates


class SyntheticRun:
    """A seeded synthetic training run of ``prepared`` (see the module docstring).

    ``prepared``: the configuration (``executor.prepared.Prepared``: nothing parsed, validated
    or planned again); ``options`` (``RunOptions``: seed, engine, memory limit) and
    ``placement`` (``Placement``: where the tables live; the run's numbers do not depend on it,
    so a checkpoint resumes on either backend) as for ``Executor``; ``data``
    (``SyntheticOptions``): the learning rate, the schedules per tag (they enter the run's
    fingerprint, so ``restore`` refuses a checkpoint written with other schedules), the id
    distribution and the sequence lengths. ``touched`` keeps the rows the run's updates touched
    (``saved_state("touched")``). ``tpuemb_cfg.simulate.SyntheticRun`` takes any configuration
    and keyword arguments.
    """

    def __init__(self, prepared: Prepared, options: RunOptions | None = None,
                 placement: Placement | None = None, *,
                 data: SyntheticOptions | None = None,
                 initial_state: Mapping[str, Any] | None = None,
                 state_source: str | None = None) -> None:
        options, placement = options or RunOptions(), placement or Placement()
        data = data or SyntheticOptions()
        ids, sequence_lengths = data.id_distribution, data.lengths
        # The executor refuses tables and a step it cannot hold before it allocates them;
        # ``run`` checks the whole run (the history, the process, the outputs) before it starts.
        # ``initial_state``: tables and slots to start from (``--init``: an .npz or a
        # TensorFlow checkpoint's embedding), as a replay's.
        self.executor = Executor(prepared, options, placement, initial_state=initial_state,
                                 state_source=state_source)
        self.plan = self.executor.plan
        self.data = SyntheticData.of(self.plan, options.seed, data)
        self.seed = self.data.seed
        self.touched = TouchedRows(self.plan)
        # The run's own memory check (``run``) counts the history too; with the Ray backend the
        # tables live in the actors and this process holds the history only.
        self._tables_here = self.executor.tables_in_process
        self.max_memory = options.memory_limit if self._tables_here else None
        # A custom combiner's name carries hash(fn) as TensorFlow's does, which changes from
        # process to process: it counts as "custom" so that --resume in a new process works.
        combiner_names = ["custom" if f.custom is not None else f.combiner
                          for f in self.plan.features]
        # Bag sizes other than a plain configuration's change the data: they join the names.
        combiner_names += [
            f"{f.index}:{f.bag_sizes}:{f.ids_per_bag}" for f in self.plan.features
            if f.bag_sizes != "auto" or f.ids_per_bag != (1 if len(f.input_shape) > 1 else None)
        ]
        self.fingerprint = hashlib.sha256(
            self.executor.config.SerializeToString(deterministic=True)
            + json.dumps([self.seed, self.data.learning_rate, combiner_names]).encode()
        ).hexdigest()
        if self.data.schedules:
            described = json.dumps([s.describe() for s in self.data.schedules])
            self.fingerprint = hashlib.sha256(
                (self.fingerprint + described).encode()).hexdigest()
        if self.data.tag_rates:  # the spec's learning rates (descriptions: stable names)
            described = json.dumps([r.describe() for r in self.data.tag_rates])
            self.fingerprint = hashlib.sha256(
                (self.fingerprint + " spec rates " + described).encode()).hexdigest()
        if not (ids.default and sequence_lengths.default):  # other data: another run
            self.fingerprint = hashlib.sha256(
                f"{self.fingerprint} ids={ids} sequence_lengths={sequence_lengths}".encode()
            ).hexdigest()
        #: The per-step records, in bounded memory (``history.History``).
        self.history = History()

    @property
    def step(self) -> int:
        return self.executor.step_index

    def run_step(self, on_batch: BatchCallback | None = None) -> dict[str, Any]:
        """One step: draw a batch, forward, loss and its gradient, update; returns the record.

        ``on_batch(step, arrays)``: called after the update with the step's replay-contract
        arrays (:func:`batch_arrays`: ids, row splits, the gradients the loss gave and the
        learning rates sent), which replay to the same tables bit for bit; the gradients are
        reused by the next step, so write or copy them before returning.
        """
        batch = self.data.next_batch()
        activations, dedup = self.executor.recv_activations(batch)
        # The executor is done with the gradients when send_gradients returns: reuse them.
        loss, grads = self.data.loss_gradients(batch, activations, dedup, reuse=True)
        step = self.step
        self.data.require_finite(step, loss, activations, self.executor.nonfinite)
        rates = self.data.learning_rates(step)
        try:
            self.executor.send_gradients(grads, rates, dedup)
        except NumericalError as exc:
            raise self.data.blame(exc, step) from None
        self.touched.add(dedup)
        if on_batch is not None:
            on_batch(step, batch_arrays(step, batch, grads, rates))
        entry: dict[str, Any] = {"step": step, "loss": loss, "tables": {}}
        if len(rates):
            entry["learning_rates"] = [float(r) for r in rates]
        for name, report in self.executor.last_report.items():
            entry["tables"][name] = report.as_dict()
        self.history.append(entry)
        return entry

    def run(
        self,
        steps: int,
        *,
        checkpoint_every: int | None = None,
        checkpoint: Callable[[], None] | None = None,
        progress: Callable[[int], None] | None = None,
        on_batch: BatchCallback | None = None,
        tables: str = "all",
        plot: bool = False,
    ) -> None:
        """Step until ``steps`` steps are done, calling ``checkpoint`` every ``checkpoint_every``
        steps, ``progress(step)`` after each and ``on_batch`` with each step's arrays
        (:meth:`run_step`).

        Refuses (``UsageError``) before the first step when the run's peak memory
        (:meth:`memory_estimate`: the tables, a step, the history of ``steps`` steps and what
        ``tables`` - the caller's ``saved_state(tables)`` at the end - and ``plot`` add) would
        exceed the memory limit (``max_memory``; default 80% of the memory available).
        """
        steps = operator.index(steps)
        parts = self.memory_estimate(steps, tables=tables,
                                     checkpoints=bool(checkpoint_every), plot=plot)
        if not self._tables_here:
            counted = f"the history of {steps:,} steps in this process"
        else:
            counted = (f"tables, slots, a step's working arrays and the history of {steps:,} "
                       f"steps: {describe(parts)}")
        reduce = reduce_hint(parts, steps=steps, tables=tables, updates=self.plan.updates)
        require_memory(parts.total, self.max_memory, counted=counted, reduce=reduce,
                       process=parts.process)
        while self.step < steps:
            if on_batch is not None:
                self.run_step(on_batch)
            else:
                self.run_step()
            if progress is not None:
                progress(self.step)
            if checkpoint_every and checkpoint is not None and self.step % checkpoint_every == 0:
                checkpoint()

    # ----------------------------------------------------------------------------------------

    def memory_estimate(self, steps: int, *, tables: str = "all", checkpoints: bool = False,
                        plot: bool = False) -> Estimate:
        """The peak resident memory of this run to ``steps`` steps, in parts
        (:func:`run_estimate` with this run's engine, data and backend)."""
        data = SyntheticOptions(ids=self.data.ids, sequence_lengths=self.data.sequence_lengths)
        return run_estimate(self.plan, steps, engine=self.executor.engine.name, data=data,
                            tables=tables, checkpoints=checkpoints, plot=plot,
                            local=self._tables_here)

    def saved_state(self, which: str = "all") -> dict[str, Any]:
        """What ``tables.npz`` holds for ``which`` (``executor.touched.saved_state``): ``all``,
        every table and slot; ``touched``, the rows the run's updates touched in the partial
        format (the other rows are the seed's defaults, so with the seed it is the whole
        state, and ``--init``/``initial_state`` read it); ``none``, nothing."""
        return saved_state(self.executor, self.touched, which)

    def checkpoint_arrays(self) -> dict[str, np.ndarray]:
        """The full state: executor state, generator state, history, the touched rows and a
        fingerprint."""
        out = self.executor.checkpoint_arrays()
        out.update(self.touched.arrays())
        out["run/fingerprint"] = _text(self.fingerprint)
        out["run/rng"] = _text(json.dumps(self.data.rng.bit_generator.state, sort_keys=True))
        out["run/history"] = _text(json.dumps(self.history.to_json()))
        return out

    def restore(self, arrays: Mapping[str, np.ndarray], source: str) -> None:
        """Continue from ``checkpoint_arrays`` output (read from the file ``source``).

        Refuses a checkpoint of another run (``UsageError``) and, before anything changes, a
        damaged one (``InputError`` naming ``source`` and the key): a missing or non-scalar
        step, a step below 0 or other than the history's length, a generator state NumPy
        cannot take, a history that is not one record per step of this run's tables and hosts.
        """
        if not any(key in arrays for key in ("run/fingerprint", "executor/step")):
            raise InputError("not a tpuemb simulate checkpoint: it holds neither run/fingerprint "
                             "nor executor/step; give the checkpoint.npz a run with "
                             f"{arg('checkpoint_every')} wrote", path=source)
        fingerprint = _checkpoint_text(arrays, "run/fingerprint", source)
        if fingerprint != self.fingerprint:
            raise UsageError(
                f"{source} was written by a run with another configuration, seed, combiners "
                "or learning rate; resume with the same options, or start afresh without --resume"
            )
        rng_state = _checkpoint_json(arrays, "run/rng", source)
        probe = np.random.default_rng()
        try:
            probe.bit_generator.state = rng_state
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            raise damaged_checkpoint(source, "run/rng", f"not a state of the run's generator "
                                     f"({exc})") from None
        history = _checkpoint_json(arrays, "run/history", source)
        step = self.executor.checkpoint_step(arrays, source)
        problem = _history_problem(history, step, self.plan)
        if problem is not None:
            raise damaged_checkpoint(source, "run/history", problem)
        self.touched.restore(arrays, source)
        self.executor.restore_checkpoint(arrays, source)
        self.data.rng.bit_generator.state = rng_state
        self.history = History.from_json(history, self.history.limit)

    def summary(self) -> dict[str, Any]:
        """Per-run numbers: the loss and, per table, every report, as lists with one entry per
        step (``ids_per_host``/``unique_ids_per_host``: one list per step, one count per host).
        A run longer than ``history.LIMIT`` steps lists the steps of ``recorded_steps`` (evenly
        spaced, the first and the last included; ``history.History``)."""
        tables: dict[str, Any] = {}
        for table in self.plan.tables:
            per_step = [entry["tables"][table.name] for entry in self.history]
            tables[table.name] = {
                "optimizer": table.optimizer.name,
                **{
                    name: [e[name] for e in per_step]
                    for name in (
                        "rows_touched", "rows_updated", "update_norm", "ids_per_host",
                        "unique_ids_per_host", "zero_denominator_bags",
                    )
                },
            }
        out: dict[str, Any] = {
            "steps": len(self.history),
            "seed": self.seed,
            "loss": [entry["loss"] for entry in self.history],
            "tables": tables,
        }
        if self.history.thinned:  # a long run: the lists hold these steps' values
            out["recorded_steps"] = self.history.recorded_steps()
        if self.plan.num_learning_rates:
            out["learning_rates"] = learning_rate_summary(self.data, self.history)
        if self.executor.nonfinite is not None:  # the first NaN or infinity, with its cause
            out["nonfinite"] = self.executor.nonfinite.as_dict()
        return out


def learning_rate_summary(data: SyntheticData, history: Iterable[Mapping[str, Any]]
                          ) -> list[dict[str, Any]]:
    """Per dynamic tag: who reads it, where its values come from and its value at every step
    of ``history`` (None for a step recorded without them: a checkpoint of an older release)."""
    out = []
    for tag in range(data.plan.num_learning_rates):
        out.append({
            "tag": tag,
            "used_by": list(data.plan.tag_users.get(tag, ())),
            "source": data.tag_source(tag),
            "per_step": [entry["learning_rates"][tag] if "learning_rates" in entry else None
                         for entry in history],
        })
    return out


def run_estimate(plan: Plan, steps: int, *, engine: str = "numba",
                 data: SyntheticOptions | None = None, tables: str = "all",
                 checkpoints: bool = False, plot: bool = False, local: bool = True) -> Estimate:
    """The peak resident memory of a synthetic run of ``plan`` to ``steps`` steps, in parts
    (``executor.memory``): the process (its libraries; ``plot``: matplotlib), the tables and
    slots as far as the run touches them (all of them when ``tables`` - what is written at the
    end - is ``all`` or there are ``checkpoints``), a step's working arrays for ``engine`` (the
    engine in use: ``numba`` or ``numpy``) and the ``data`` (its ids and sequence lengths), the
    pipelining buffers and the history (:func:`history_bytes`). ``local`` False (the Ray
    backend): the tables live in the actors, and only the process and the history count."""
    history = history_bytes(plan, steps)
    data = data or SyntheticOptions()
    shape = RunShape(
        steps=max(steps, 1), engine=engine, ids=data.id_distribution,
        sequence_lengths=data.lengths, tables=tables, checkpoints=checkpoints, plot=plot,
        history=history, lazy=local)
    parts = memory.estimate(plan, shape)
    if not local:
        return Estimate(0, 0, 0, parts.process, 0, history, 0, parts.whole_state)
    return parts


#: ``on_batch(step, arrays)``: a step's replay-contract arrays (``batch_arrays``).
BatchCallback = Callable[[int, dict[str, np.ndarray]], None]


def batch_arrays(step: int, batch: Sequence[FeatureInput], grads: Sequence[np.ndarray],
                 rates: np.ndarray) -> dict[str, np.ndarray]:
    """One step of a ``B.npz`` (the replay contract): per feature f ``s{step}/f{f}/ids``,
    ``row_splits`` and ``grad`` (the gradients sent, not copied), and ``s{step}/learning_rates``
    when there are dynamic tags. Weights are 1 (absent)."""
    out: dict[str, np.ndarray] = {}
    for f, (item, grad) in enumerate(zip(batch, grads, strict=True)):
        out[f"s{step}/f{f}/ids"] = np.asarray(item.ids, dtype=np.int64)
        out[f"s{step}/f{f}/row_splits"] = np.asarray(item.row_splits, dtype=np.int64)
        out[f"s{step}/f{f}/grad"] = grad
    if len(rates):
        out[f"s{step}/learning_rates"] = np.asarray(rates, dtype=F32)
    return out


def history_bytes(plan: Plan, steps: int) -> int:
    """An upper bound of the bytes the history of ``steps`` steps takes in this process (the
    records it keeps: at most ``history.LIMIT`` and the last, however many steps): the
    Python records of every step kept (per table a dict of six figures, two lists of one count per
    host, a dict of one count per feature; the K learning rates), the summary's lists of them,
    and the largest text made of them at once (``summary.json``, or a checkpoint's JSON with its
    two byte copies).

    Measured (tracemalloc) on configurations of 1 to 8 tables, 1 to 64 hosts and 1 to 16
    features, the records, the summary and its text take 30-65% of this bound
    (tests/test_run_safety.py checks the bound).
    """
    hosts = plan.num_hosts
    per_step = 600 + 40 * len(plan.tables)
    if plan.num_learning_rates:  # the record's list of rates, the summary's, their text
        per_step += 60 + 200 * plan.num_learning_rates
    for table in plan.tables:
        features = len(table.features)
        per_step += 792 + 80 * hosts + 122 * features  # the record
        per_step += 56  # the summary's lists
        per_step += 3 * (150 + 32 * hosts + 40 * features)  # the text
    return min(steps, LIMIT + 1) * per_step


def _checkpoint_text(arrays: Mapping[str, Any], key: str, source: str) -> str:
    """The text ``checkpoint_arrays`` stored under ``key`` (UTF-8 bytes as uint8)."""
    if key not in arrays:
        raise damaged_checkpoint(source, key, "missing")
    array = np.asarray(arrays[key])
    if array.dtype != np.uint8 or array.ndim != 1:
        raise damaged_checkpoint(source, key, f"{array.dtype} of shape {array.shape} found, "
                                 "expected the uint8 text tpuemb writes")
    try:
        return array.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise damaged_checkpoint(source, key, f"not UTF-8 text ({exc.reason} at byte "
                                 f"{exc.start})") from None


def _checkpoint_json(arrays: Mapping[str, Any], key: str, source: str) -> Any:
    """The JSON value ``checkpoint_arrays`` stored under ``key``."""
    try:
        return json.loads(_checkpoint_text(arrays, key, source))
    except json.JSONDecodeError as exc:
        raise damaged_checkpoint(source, key, f"not JSON ({exc.msg} at character "
                                 f"{exc.pos})") from None


_RECORD_FIELDS = ("rows_touched", "rows_updated", "update_norm", "ids_per_host",
                  "unique_ids_per_host", "zero_denominator_bags")


def _thinned_steps(history: Mapping[str, Any], steps: int) -> list[int] | str:
    """The steps whose records a thinned history of ``steps`` steps holds (the multiples of
    its stride and the last), or what is wrong with it."""
    stride = history.get("stride")
    if set(history) != {"stride", "steps", "records"} or type(stride) is not int or (
            stride < 2 or stride & (stride - 1)) or history.get("steps") != steps:
        return (f"expected stride (a power of 2), steps ({steps}, the step of executor/step) "
                "and records")
    expected = list(range(0, steps, stride))
    if steps and expected[-1] != steps - 1:
        expected.append(steps - 1)
    return expected


def _history_problem(history: Any, steps: int, plan: Plan) -> str | None:
    """What is wrong with a checkpoint's history for a run of ``plan`` at step ``steps``: one
    record per step, as ``run_step`` makes them (None: nothing)."""
    expected: list[int] | str = list(range(steps))
    if isinstance(history, dict):  # a thinned history (``History.to_json``)
        expected = _thinned_steps(history, steps)
        if isinstance(expected, str):
            return expected
        history = history["records"]
    if not isinstance(history, list):
        return f"a JSON {type(history).__name__} found, expected a list of one record per step"
    if len(history) != len(expected):
        return (f"{len(history)} record(s) found for the {steps} step(s) of executor/step"
                + ("" if len(expected) == steps else f" ({len(expected)} kept)"))
    names = {table.name for table in plan.tables}
    for index, entry in enumerate(history):
        where = f"record {index}"
        if not isinstance(entry, dict) or set(entry) - {"learning_rates"} != {
                "step", "loss", "tables"}:
            return f"{where}: expected an object with step, loss and tables"
        rates = entry.get("learning_rates", [])
        if not (isinstance(rates, list) and len(rates) in (0, plan.num_learning_rates)
                and all(type(r) in (int, float) for r in rates)):
            return (f"{where}: learning_rates must be a list of {plan.num_learning_rates} "
                    "number(s), one per dynamic tag")
        if entry["step"] != expected[index] or type(entry["step"]) is not int:
            return f"{where}: step {entry['step']!r} found, expected {expected[index]}"
        if type(entry["loss"]) not in (int, float):
            return f"{where}: loss {entry['loss']!r} found, expected a number"
        tables = entry["tables"]
        if not isinstance(tables, dict) or set(tables) != names:
            return f"{where}: expected the tables {sorted(names)}"
        for name, figures in tables.items():
            problem = _figures_problem(figures, plan.num_hosts)
            if problem is not None:
                return f"{where}, table {name!r}: {problem}"
    return None


def _figures_problem(figures: Any, hosts: int) -> str | None:
    """What is wrong with one table's figures in a checkpoint's history record (None:
    nothing)."""
    if not isinstance(figures, dict) or set(figures) != set(_RECORD_FIELDS):
        return f"expected {', '.join(_RECORD_FIELDS)}"

    def count(value: Any) -> bool:
        return type(value) is int and value >= 0

    def counts(value: Any) -> bool:
        return isinstance(value, list) and len(value) == hosts and all(count(v) for v in value)

    bags = figures["zero_denominator_bags"]
    if not (count(figures["rows_touched"]) and count(figures["rows_updated"])
            and (figures["update_norm"] is None  # not finite (JSON has no NaN)
                 or type(figures["update_norm"]) in (int, float))
            and counts(figures["ids_per_host"]) and counts(figures["unique_ids_per_host"])
            and isinstance(bags, dict) and all(count(v) for v in bags.values())):
        return (f"counts must be whole numbers (0 or more), {hosts} per host list, the update "
                "norm a number")
    return None


def _text(value: str) -> np.ndarray:
    return np.frombuffer(value.encode("utf-8"), dtype=np.uint8).copy()
