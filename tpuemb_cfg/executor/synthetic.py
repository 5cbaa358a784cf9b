"""A self-contained training run on synthetic data: what `tpuemb simulate` does without --batches.

Data: every step, each feature gets ``num_tensor_cores * prod(input_shape)`` bags (the global
batch); a bag of a 1-D feature holds 1 to 4 ids, a bag of a multi-dimensional feature one id.
Ids follow a Zipf law (rank r has probability proportional to (r + 1)^-1.1, inverse-CDF sampled
from the continuous power law) and ranks are scattered over the vocabulary by a fixed bijection,
so popular ids land on every host.

Loss: a regression of every activation onto a fixed "teacher" activation, computed with the
same combiner from a teacher row ``y(i) = sin(i * freq + phase) / sqrt(D)`` that exists for
every id without being stored:

    loss = sum over features f of  1 / (2 B_f) * sum over bags b of |A_fb - Y_fb|^2
    dA_f = (A_f - Y_f) / B_f

so the loss falls as the looked-up rows move towards their teachers.

Learning rates (K dynamic tags): a tag that a table's learning rate uses gets ``learning_rate``,
bias-corrected (``lr * sqrt(1 - beta2^n) / (1 - beta1^n)``, n = step + 1, spec section 9) when
the first table using it is Adam; a tag only step counters use, or the learning rate of a
``frequency_estimator`` table, gets the global step count (step + 1: steps done, this one
included).

Everything is drawn from generators seeded by ``seed``; the run's state (tables, slots, step,
generator state, per-step history) round-trips through ``checkpoint_arrays`` so an interrupted
and resumed run ends with the same bytes as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import UsageError
from . import kernels
from .batch import FeatureInput
from .core import Executor
from .plan import TablePlan

__all__ = ["SyntheticRun"]

F32 = np.float32
_ZIPF_EXPONENT = 1.1
_SCATTER = 2654435761  # a prime: rank -> id is a bijection when it shares no factor with V


class SyntheticRun:
    """A seeded synthetic training run over ``config`` (see the module docstring)."""

    def __init__(
        self,
        config: Any,
        *,
        seed: int = 0,
        combiners: str | Sequence[str] | Mapping[int, str] | None = None,
        learning_rate: float = 0.1,
        max_memory: int | None = None,
        validate_config: bool = True,
        engine: str = "numpy",
    ) -> None:
        self.seed = int(seed)
        self.learning_rate = float(learning_rate)
        self.executor = Executor(
            config, combiners=combiners, seed=seed, max_memory=max_memory,
            validate_config=validate_config, engine=engine,
        )
        self.plan = self.executor.plan
        self.rng = np.random.default_rng([self.seed & 0xFFFFFFFF, 0x5EED])
        self._teachers: list[tuple[np.ndarray, np.ndarray]] = []
        for table in self.plan.tables:
            teacher_rng = np.random.default_rng([self.seed & 0xFFFFFFFF, 0x7EAC, table.index])
            freq = teacher_rng.uniform(0.5, 3.0, table.dimension).astype(F32)
            phase = teacher_rng.uniform(0.0, 2 * np.pi, table.dimension).astype(F32)
            self._teachers.append((freq, phase))
        combiner_names = [f.combiner for f in self.plan.features]
        self.fingerprint = hashlib.sha256(
            self.executor.config.SerializeToString(deterministic=True)
            + json.dumps([self.seed, self.learning_rate, combiner_names]).encode()
        ).hexdigest()
        self.history: list[dict[str, Any]] = []

    @property
    def step(self) -> int:
        return self.executor.step_index

    # ----------------------------------------------------------------------------------------

    def _ids(self, table: TablePlan, count: int) -> np.ndarray:
        vocab = table.vocabulary
        u = self.rng.random(count)
        a = 1.0 - _ZIPF_EXPONENT
        x = (1.0 + u * ((vocab + 1.0) ** a - 1.0)) ** (1.0 / a)
        rank = np.minimum(np.floor(x).astype(np.int64) - 1, vocab - 1)
        multiplier = _SCATTER % vocab if math.gcd(_SCATTER, vocab) == 1 else 1
        return (rank * multiplier + table.index) % vocab

    def next_batch(self) -> list[FeatureInput]:
        """The next step's ids, one ``FeatureInput`` per feature, from the run's generator."""
        batch = []
        for feature in self.plan.features:
            table = self.plan.tables[feature.table]
            bags = self.plan.num_cores * int(np.prod(feature.input_shape))
            if len(feature.input_shape) == 1:
                lengths = self.rng.integers(1, 5, bags)
            else:
                lengths = np.ones(bags, dtype=np.int64)
            row_splits = np.zeros(bags + 1, dtype=np.int64)
            np.cumsum(lengths, out=row_splits[1:])
            batch.append(FeatureInput(self._ids(table, int(row_splits[-1])), row_splits))
        return batch

    def _teacher_rows(self, table: TablePlan, ids: np.ndarray) -> np.ndarray:
        freq, phase = self._teachers[table.index]
        angle = ids.astype(F32)[:, None] * freq[None, :] + phase[None, :]
        return (np.sin(angle) / F32(np.sqrt(table.dimension))).astype(F32)

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
        return rates

    def run_step(self) -> dict[str, Any]:
        """One step: draw a batch, forward, loss and its gradient, update; returns the record."""
        batch = self.next_batch()
        activations, dedup = self.executor.recv_activations(batch)
        grads: list[np.ndarray] = []
        loss = 0.0
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
            teacher = kernels.combine(
                self._teacher_rows(table, item.ids), record.gains[start:stop], item.row_splits
            )
            error = activation - teacher
            bags = max(activation.shape[0], 1)
            loss += float(np.sum(error.astype(np.float64) ** 2)) / (2.0 * bags)
            grads.append((error / F32(bags)).astype(F32))
        step = self.step
        self.executor.send_gradients(grads, self.learning_rates(step), dedup)
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
        out["run/rng"] = _text(json.dumps(self.rng.bit_generator.state, sort_keys=True))
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
        self.rng.bit_generator.state = rng_state
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
