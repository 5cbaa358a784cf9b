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
included). A tag with a schedule (:mod:`.schedules`) gets the schedule's value at the step
instead (no bias correction added).

Everything is drawn from generators seeded by ``seed``; the run's state (tables, slots, step,
generator state, per-step history) round-trips through ``checkpoint_arrays`` so an interrupted
and resumed run ends with the same bytes as an uninterrupted one. The ids, the teacher, the
loss and its gradients come from compiled kernels when numba can be imported, whatever the
executor's engine (``kernels``: one definition of the numbers, NumPy without numba).

Changed in issue 14: the teacher rows (rank 4, hashed, instead of ``sin(i * freq + phase)``),
the Zipf sampler's power (an exact tenth power) and the default initial tables (counter-based,
``executor.counter``), so synthetic runs differ from those of earlier releases; replays do not.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import UsageError
from ..executor import Executor, FeatureInput
from ..executor.bags import bag_lengths
from ..executor.counter import stream_key
from ..executor.plan import Plan, TablePlan
from . import kernels
from .schedules import Schedule, check_schedule_tags

__all__ = ["SyntheticData", "SyntheticRun"]

F32 = np.float32
_ZIPF_EXPONENT = kernels.ZIPF_EXPONENT
_SCATTER = 2654435761  # a prime: rank -> id is a bijection when it shares no factor with V
_DATA_STREAM = 0x5EED
_TEACHER_STREAM = 0x7EAC


class SyntheticData:
    """The synthetic workload of ``plan``: seeded batches, the teacher, the loss, learning rates.

    ``schedules`` replace the default value of their tags; a schedule of a tag the plan lacks
    raises ``UsageError`` (``schedules_source``, the spec file, names where it came from).
    """

    def __init__(
        self,
        plan: Plan,
        *,
        seed: int = 0,
        learning_rate: float = 0.1,
        schedules: Sequence[Schedule] = (),
        schedules_source: str | None = None,
    ) -> None:
        check_schedule_tags(schedules, plan.num_learning_rates, schedules_source)
        self.plan = plan
        self.seed = int(seed)
        self.learning_rate = float(learning_rate)
        self.schedules = tuple(schedules)
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

    def stream(self, index: int) -> np.random.Generator:
        """A fresh data generator: stream 0 is the run's own (``self.rng``, worker 0's), stream
        ``i`` that of worker ``i`` of a multi-worker run."""
        if index == 0:
            return np.random.default_rng([self.seed & 0xFFFFFFFF, _DATA_STREAM])
        return np.random.default_rng([self.seed & 0xFFFFFFFF, _DATA_STREAM, index])

    def _ids(self, rng: np.random.Generator, table: TablePlan, count: int) -> np.ndarray:
        vocab = table.vocabulary
        multiplier = _SCATTER % vocab if math.gcd(_SCATTER, vocab) == 1 else 1
        return kernels.zipf_ids(rng.random(count), vocab, multiplier, table.index % vocab)

    def next_batch(self, rng: np.random.Generator | None = None) -> list[FeatureInput]:
        """The next step's ids, one ``FeatureInput`` per feature, drawn from ``rng`` (default:
        the run's own generator, ``self.rng``)."""
        rng = self.rng if rng is None else rng
        batch = []
        for feature in self.plan.features:
            table = self.plan.tables[feature.table]
            bags = self.plan.num_cores * int(np.prod(feature.input_shape))
            lengths = bag_lengths(rng, feature, bags)
            row_splits = np.zeros(bags + 1, dtype=np.int64)
            np.cumsum(lengths, out=row_splits[1:])
            batch.append(FeatureInput(self._ids(rng, table, int(row_splits[-1])), row_splits))
        return batch

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

    def learning_rates(self, step: int) -> np.ndarray:
        """The K dynamic values of ``step`` (see the module docstring)."""
        rates = np.zeros(self.plan.num_learning_rates, dtype=F32)
        assigned: set[int] = set()
        for table in self.plan.tables:
            if table.lr_tag is None or table.lr_tag in assigned:
                continue
            assigned.add(table.lr_tag)
            if table.optimizer.name == "frequency_estimator":
                rates[table.lr_tag] = F32(step + 1)  # the global step count
            elif table.optimizer.name == "adam":
                n = step + 1
                beta1, beta2 = float(table.hyper.beta1), float(table.hyper.beta2)
                correction = math.sqrt(1.0 - beta2**n) / max(1.0 - beta1**n, 1e-12)
                rates[table.lr_tag] = F32(self.learning_rate * correction)
            else:
                rates[table.lr_tag] = F32(self.learning_rate)
        for tag in range(self.plan.num_learning_rates):
            if tag not in assigned:
                rates[tag] = F32(step + 1)  # a step counter (frequency_aware_adagrad)
        for schedule in self.schedules:
            rates[schedule.tag] = schedule(step)
        return rates


class SyntheticRun:
    """A seeded synthetic training run over ``config`` (see the module docstring).

    ``config``: a ``Prepared`` (``tpuemb_cfg.prepare``: nothing parsed, validated or planned
    again) or anything ``prepare`` takes, as for ``Executor``; ``schedules``: learning-rate
    schedules per tag (``spec_path`` names their spec file in errors). The schedules enter the
    run's fingerprint, so ``restore`` refuses a checkpoint written with other schedules.
    ``backend``, ``ray_address``, ``shards``: where the tables live, as for ``Executor`` (the
    run's numbers do not depend on it, so a checkpoint resumes on either backend).
    """

    def __init__(
        self,
        config: Any,
        *,
        seed: int = 0,
        combiners: str | Sequence[str] | Mapping[int, str] | None = None,
        learning_rate: float = 0.1,
        schedules: Sequence[Schedule] = (),
        spec_path: str | None = None,
        max_memory: int | None = None,
        validate_config: bool = True,
        engine: str = "numba",
        backend: str = "local",
        ray_address: str | None = None,
        shards: int | None = None,
    ) -> None:
        self.executor = Executor(
            config, combiners=combiners, seed=seed, max_memory=max_memory,
            validate_config=validate_config, engine=engine, backend=backend,
            ray_address=ray_address, shards=shards,
        )
        self.plan = self.executor.plan
        self.data = SyntheticData(self.plan, seed=seed, learning_rate=learning_rate,
                                  schedules=schedules, schedules_source=spec_path)
        self.seed = self.data.seed
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
        self.history: list[dict[str, Any]] = []

    @property
    def step(self) -> int:
        return self.executor.step_index

    def run_step(self) -> dict[str, Any]:
        """One step: draw a batch, forward, loss and its gradient, update; returns the record."""
        batch = self.data.next_batch()
        activations, dedup = self.executor.recv_activations(batch)
        # The executor is done with the gradients when send_gradients returns: reuse them.
        loss, grads = self.data.loss_gradients(batch, activations, dedup, reuse=True)
        step = self.step
        self.executor.send_gradients(grads, self.data.learning_rates(step), dedup)
        entry: dict[str, Any] = {"step": step, "loss": loss, "tables": {}}
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
    ) -> None:
        """Step until ``steps`` steps are done, calling ``checkpoint`` every ``checkpoint_every``
        steps and ``progress(step)`` after each."""
        while self.step < steps:
            self.run_step()
            if progress is not None:
                progress(self.step)
            if checkpoint_every and checkpoint is not None and self.step % checkpoint_every == 0:
                checkpoint()

    # ----------------------------------------------------------------------------------------

    def checkpoint_arrays(self) -> dict[str, np.ndarray]:
        """The full state: executor state, generator state, history and a fingerprint."""
        out = self.executor.checkpoint_arrays()
        out["run/fingerprint"] = _text(self.fingerprint)
        out["run/rng"] = _text(json.dumps(self.data.rng.bit_generator.state, sort_keys=True))
        out["run/history"] = _text(json.dumps(self.history))
        return out

    def restore(self, arrays: Mapping[str, np.ndarray], source: str) -> None:
        """Continue from ``checkpoint_arrays`` output; refuse one from another run."""
        try:
            fingerprint = _untext(arrays["run/fingerprint"])
            rng_state = json.loads(_untext(arrays["run/rng"]))
            history = json.loads(_untext(arrays["run/history"]))
        except (KeyError, ValueError) as exc:
            raise UsageError(f"{source}: not a tpuemb simulate checkpoint ({exc})") from None
        if fingerprint != self.fingerprint:
            raise UsageError(
                f"{source} was written by a run with another configuration, seed, combiners "
                "or learning rate; resume with the same options, or start afresh without --resume"
            )
        self.executor.restore_checkpoint(arrays)
        self.data.rng.bit_generator.state = rng_state
        self.history = history

    def summary(self) -> dict[str, Any]:
        """Per-run numbers: the loss and, per table, every report, as lists with one entry per
        step (``ids_per_host``/``unique_ids_per_host``: one list per step, one count per host)."""
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
        return {
            "steps": len(self.history),
            "seed": self.seed,
            "loss": [entry["loss"] for entry in self.history],
            "tables": tables,
        }


def _text(value: str) -> np.ndarray:
    return np.frombuffer(value.encode("utf-8"), dtype=np.uint8).copy()


def _untext(array: np.ndarray) -> str:
    return np.asarray(array, dtype=np.uint8).tobytes().decode("utf-8")
