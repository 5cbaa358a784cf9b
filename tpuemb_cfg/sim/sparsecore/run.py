"""A SparseCore training run: each step's preprocessing (limits, id dropping), then the update.

Per step (:meth:`SparseCoreRun.step`):

1. the batch (one ``FeatureInput`` per feature of the ``SparseCoreConfig``, the global batch)
   is checked and every id gets its gain over the whole row (``gains.row_gains``);
2. the host preprocessing decides which ids reach a SparseCore
   (``tpuemb_cfg.sparsecore.preprocess`` on the configuration's ``Stacking``: the
   per-partition limits with ``allow_id_dropping``, and the silent buffer overflow);
3. the executor runs the per-table legacy configuration (``legacy``) with the ``sum`` combiner
   on the kept ids, their gains as weights (``gains.kept_inputs``): forward, backward, one
   optimizer update per touched row.

With ``compare`` a second executor runs the same batches with nothing dropped (no limits), and
the run reports how far the two drift apart: per step the activations' largest and RMS
difference, at the end the Frobenius norm and the largest difference of every table and slot.
Replayed batches carry their activation gradients; a synthetic run draws the ids with the
existing generator (``sim.synthetic.SyntheticData``) and takes the gradients of its regression
loss against the teacher activations of the **whole** batch (what the model's labels are,
dropped ids included), so dropping shows up in the loss too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import InputError

from ...executor.batch import CheckedFeature, FeatureInput, check_batch
from ...executor.core import Executor, require_memory
from ...executor.engines import get_engine
from ...executor.engines.numpy import combine
from ...executor.memory import Estimate, library_estimate, reduce_hint
from ...executor.options import Placement, RunOptions
from ...sparsecore.advice import limit_advice
from ...sparsecore.preprocessing import preprocess
from ...sparsecore.tf_preprocess import TensorFlowLimitError, preprocess_tensorflow
from .gains import RowGains, kept_inputs, row_gains

if TYPE_CHECKING:
    from ...executor.prepared import Prepared
    from ...sparsecore.config import SparseCoreConfig
    from ...sparsecore.stacking import Stacking
    from ..synthetic import SyntheticData

__all__ = ["Drops", "Dropper", "SparseCoreRun", "SparseCoreSetup", "describe", "memory_estimate",
           "preprocess_dropper"]

F32 = np.float32


@dataclass(frozen=True)
class SparseCoreSetup:
    """A SparseCore configuration ready to run (``tpuemb_cfg.session.prepare_sparsecore``).

    ``prepared``: the per-table legacy configuration (``legacy``), planned with the ``sum``
    combiner for every feature, features in ``config.features`` order; ``combiners``: each
    feature's own combiner (its table's), which the gains apply; ``notes``: what the
    simulation leaves out (ignored clipping); ``path``: the spec file.
    """

    config: SparseCoreConfig
    stacking: Stacking
    prepared: Prepared
    combiners: tuple[str, ...]
    notes: tuple[str, ...] = ()
    path: str | None = None

    @property
    def allow_id_dropping(self) -> bool:
        return bool(self.config.allow_id_dropping)

    def table_of(self, feature: int) -> str:
        return self.config.features[feature].table


@dataclass(frozen=True)
class Drops:
    """Which input ids one step's preprocessing dropped: per feature index a bool mask over its
    ids (None: none), and per stack the preprocessing's own drop counter (jax-tpu-embedding's
    ``id_drop_counters``: a dropped merged entry counts its raw ids, a buffer overflow counts
    merged entries)."""

    dropped: tuple[np.ndarray | None, ...]
    counters: Mapping[str, int] = field(default_factory=dict)


#: ``dropper(step, checked_features) -> Drops``: the preprocessing of one step.
Dropper = Callable[[int, Sequence[CheckedFeature]], Drops]


def preprocess_dropper(setup: SparseCoreSetup, allow_id_dropping: bool) -> Dropper:
    """The exact host preprocessing of ``setup`` as a dropper, by the rules of the stacking's
    reference: jax-tpu-embedding's (``sparsecore.preprocess``: limits per partition, dropped
    with ``allow_id_dropping``, and the buffer overflow) or TensorFlow 2.21's
    (``sparsecore.tf_preprocess``: a limit exceeded fails the step whatever
    ``allow_id_dropping`` says; what does not fit the device buffer of
    ``max_ids_per_chip_per_sample`` x samples is dropped with it). The whole slice is on this
    host (local devices = global devices = the topology's chips). A step the reference fails
    or aborts is an ``InputError`` naming the step."""
    config = setup.config
    names = [f.name for f in config.features]
    devices = config.topology.devices
    if setup.stacking.mode == "tensorflow":
        def run(features: Any, weights: Any) -> Any:
            return preprocess_tensorflow(
                setup.stacking, features, weights, local_devices=devices, global_devices=devices,
                sparse_cores_per_device=config.topology.sparse_cores_per_device,
                allow_id_dropping=allow_id_dropping, has_leading_dimension=False,
                max_ids_per_chip_per_sample=config.max_ids_per_chip_per_sample)
    else:

        def run(features: Any, weights: Any) -> Any:
            return preprocess(
                setup.stacking, features, weights, local_devices=devices, global_devices=devices,
                sparse_cores_per_device=config.topology.sparse_cores_per_device,
                allow_id_dropping=allow_id_dropping, has_leading_dimension=False)

    def drop(step: int, checked: Sequence[CheckedFeature]) -> Drops:
        pairs = list(zip(names, checked, strict=True))
        try:
            batch = run({name: (c.ids, c.row_splits) for name, c in pairs},
                        {name: (c.weights, c.row_splits) for name, c in pairs})
        except TensorFlowLimitError as exc:
            raise InputError(f"step {step}: {_limit_failure(setup, exc)}") from None
        except (InputError, ValueError, NotImplementedError) as exc:
            raise InputError(f"step {step}: {exc}") from None
        masks: dict[str, np.ndarray] = {}
        for stack in batch.stacks.values():
            masks.update(stack.dropped)
        return Drops(tuple(masks.get(name) for name in names),
                     {name: int(stack.id_drop_count) for name, stack in batch.stacks.items()})

    return drop


def _limit_failure(setup: SparseCoreSetup, exc: TensorFlowLimitError) -> str:
    """TensorFlow's failure of a step over a limit, its fix in a setting the spec's API reads
    (``sparsecore.advice``: keras-rs on TensorFlow cannot set the limits at all)."""
    stack = setup.stacking.stack(str(exc.stack))
    pair = (stack.max_ids_per_partition, stack.max_unique_ids_per_partition)
    advice = limit_advice(setup.config, stack.name, tuple(t.name for t in stack.tables), pair)
    wanted = ((max(exc.observed, pair[0]), pair[1]) if exc.limit_name == "max_ids_per_partition"
              else (max(exc.observed, pair[0]), max(exc.observed, pair[1])))
    told = str(exc).rsplit(" - raise ", 1)[0]
    return f"{told} - {advice.limits(*wanted)}"


@dataclass
class _Drift:
    """The activation differences of one step between the run and its no-dropping twin."""

    max_abs: float = 0.0
    squares: float = 0.0
    count: int = 0

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        diff = a.astype(np.float64) - b.astype(np.float64)
        if diff.size:
            self.max_abs = max(self.max_abs, float(np.max(np.abs(diff))))
            self.squares += float(np.sum(diff * diff))
            self.count += int(diff.size)

    def as_dict(self) -> dict[str, float]:
        rms = (self.squares / self.count) ** 0.5 if self.count else 0.0
        return {"max_abs": self.max_abs, "rms": rms}


class SparseCoreRun:
    """Steps of ``setup`` with its limits and id dropping (module docstring).

    ``options``: ``RunOptions`` as for ``Executor`` (seed, engine, memory); the tables live in
    this process. ``allow_id_dropping``: None keeps the configuration's. ``compare``: run a
    twin without dropping and record the drift. ``dropper``: the preprocessing (default
    :func:`preprocess_dropper`); ``initial_state``: ``table/...``/``slot/...`` arrays.
    """

    def __init__(
        self,
        setup: SparseCoreSetup,
        options: RunOptions | None = None,
        *,
        allow_id_dropping: bool | None = None,
        compare: bool = False,
        dropper: Dropper | None = None,
        initial_state: Mapping[str, Any] | None = None,
        state_source: str | None = None,
    ) -> None:
        options = options if options is not None else RunOptions()
        if options.check_memory:  # both executors at once, before either allocates
            parts = memory_estimate(setup, options.engine)
            twin = parts.run if compare else 0
            require_memory(parts.total + twin, options.memory_limit, process=parts.process,
                           counted="tables, slots and a step's working arrays"
                           + (" of the run and of its twin without dropping" if compare else ""),
                           reduce=reduce_hint(parts), scale_out=False)
            options = replace(options, check_memory=False)
        self.setup = setup
        self.allow_id_dropping = (setup.allow_id_dropping if allow_id_dropping is None
                                  else bool(allow_id_dropping))
        self.dropper = (dropper if dropper is not None
                        else preprocess_dropper(setup, self.allow_id_dropping))
        self.executor = Executor(setup.prepared, options, Placement(),
                                 initial_state=initial_state, state_source=state_source)
        self.twin = (Executor(setup.prepared, options, Placement(), initial_state=initial_state,
                              state_source=state_source) if compare else None)
        self.plan = self.executor.plan
        self.step_reports: list[dict[str, Any]] = []
        self.drift: list[dict[str, float]] = []
        self.losses: list[float] = []

    @property
    def step_index(self) -> int:
        return self.executor.step_index

    def _inputs(self, batch: Sequence[FeatureInput | Mapping[str, Any]], source: str | None
                ) -> tuple[list[CheckedFeature], list[RowGains], Drops]:
        """The step's checked features, their gains and the preprocessing's drops (bool masks
        of the features' shapes)."""
        step = self.step_index
        checked = check_batch(batch, self.plan, step, source)
        gains = [row_gains(c, combiner)
                 for c, combiner in zip(checked, self.setup.combiners, strict=True)]
        drops = self.dropper(step, checked)
        if len(drops.dropped) != len(checked):
            raise InputError(f"step {step}: the preprocessing returned {len(drops.dropped)} "
                             f"drop mask(s) for {len(checked)} feature(s)")
        masks: list[np.ndarray | None] = []
        for f, (mask, feature) in enumerate(zip(drops.dropped, checked, strict=True)):
            if mask is not None and np.shape(mask) != feature.ids.shape:
                raise InputError(f"step {step}: the preprocessing returned a drop mask of shape "
                                 f"{np.shape(mask)} for feature {f}'s {feature.ids.shape[0]} "
                                 "id(s)")
            masks.append(None if mask is None else np.asarray(mask, dtype=bool))
        return checked, gains, Drops(tuple(masks), drops.counters)

    def replay_step(self, batch: Sequence[FeatureInput], learning_rates: Any = None, *,
                    source: str | None = None) -> list[np.ndarray]:
        """One recorded step (``FeatureInput.grad`` holds each feature's activation gradient);
        the activations of the kept ids."""
        checked, gains, drops = self._inputs(batch, source)
        grads = [item.grad for item in batch]
        report = self._report(checked, gains, drops)
        activations = self.executor.step(kept_inputs(checked, gains, drops.dropped, grads),
                                         learning_rates, source=source)
        self.step_reports.append(report)
        if self.twin is not None:
            full = self.twin.step(kept_inputs(checked, gains, [None] * len(checked), grads),
                                  learning_rates, source=source)
            self._record_drift(activations, full)
        return activations

    def synthetic_step(self, data: SyntheticData) -> list[np.ndarray]:
        """One step of ``data``'s next batch, trained toward the teacher activations of the
        whole batch (module docstring); the activations of the kept ids. The loss goes to
        :attr:`losses`."""
        step = self.step_index
        batch = data.next_batch()
        checked, gains, drops = self._inputs(batch, None)
        targets = [
            combine(data.teacher_rows(self.plan.tables[feature.table], c.ids), g.gains,
                    c.row_splits)
            for feature, c, g in zip(self.plan.features, checked, gains, strict=True)]
        rates = None
        if self.plan.num_learning_rates and not self.plan.tag_rates:
            rates = data.learning_rates(step)
        report = self._report(checked, gains, drops)
        activations, loss = self._train(self.executor, kept_inputs(checked, gains,
                                                                   drops.dropped),
                                        targets, rates)
        self.step_reports.append(report)
        self.losses.append(loss)
        if self.twin is not None:
            full, _ = self._train(self.twin, kept_inputs(checked, gains, [None] * len(checked)),
                                  targets, rates)
            self._record_drift(activations, full)
        return activations

    @staticmethod
    def _train(executor: Executor, batch: list[FeatureInput], targets: list[np.ndarray],
               rates: Any) -> tuple[list[np.ndarray], float]:
        """Forward, the loss ``sum_f 1/(2 B_f) |A_f - Y_f|^2`` and its gradients, update."""
        activations, dedup = executor.recv_activations(batch)
        grads: list[np.ndarray] = []
        loss = 0.0
        for activation, target in zip(activations, targets, strict=True):
            bags = max(activation.shape[0], 1)
            diff = (activation - target).astype(F32)
            loss += float(np.sum(diff.astype(np.float64) ** 2)) / (2.0 * bags)
            grads.append((diff / F32(bags)).astype(F32))
        executor.send_gradients(grads, rates, dedup)
        return activations, loss

    def _record_drift(self, dropped: Sequence[np.ndarray], full: Sequence[np.ndarray]) -> None:
        drift = _Drift()
        for a, b in zip(dropped, full, strict=True):
            drift.add(a, b)
        self.drift.append({"step": self.step_index - 1, **drift.as_dict()})

    def _report(self, checked: Sequence[CheckedFeature], gains: Sequence[RowGains],
                drops: Drops) -> dict[str, Any]:
        """One step's ids and dropped ids per table and per stack."""
        tables: dict[str, dict[str, int]] = {}
        for f, (c, g) in enumerate(zip(checked, gains, strict=True)):
            mask = drops.dropped[f]
            entry = tables.setdefault(self.setup.table_of(f),
                                      {"ids": 0, "dropped": 0, "zero_denominator_bags": 0})
            entry["ids"] += int(c.ids.shape[0])
            entry["dropped"] += int(mask.sum()) if mask is not None else 0
            entry["zero_denominator_bags"] += g.zero_denominator_bags
        stacks: dict[str, dict[str, int]] = {}
        for stack in self.setup.stacking.stacks:
            ids = sum(tables.get(t.name, {}).get("ids", 0) for t in stack.tables)
            dropped = sum(tables.get(t.name, {}).get("dropped", 0) for t in stack.tables)
            stacks[stack.name] = {"ids": ids, "dropped": dropped,
                                  "id_drop_counter": int(drops.counters.get(stack.name, 0))}
        return {"step": self.step_index, "tables": tables, "stacks": stacks}

    def summary(self) -> dict[str, Any]:
        """The run's numbers: per table and stack the ids, the dropped ids and their share,
        in total and per step; with ``compare`` the drift (:meth:`drift_summary`)."""
        stacking = self.setup.stacking
        out: dict[str, Any] = {
            "api": self.setup.config.api,
            "steps": len(self.step_reports),
            "allow_id_dropping": self.allow_id_dropping,
            "topology": self.setup.config.topology.as_json(),
            "stacks": [{"name": s.name, "tables": [t.name for t in s.tables],
                        "max_ids_per_partition": s.max_ids_per_partition,
                        "max_unique_ids_per_partition": s.max_unique_ids_per_partition}
                       for s in stacking.stacks],
            "drops": {"tables": _totals(self.step_reports, "tables"),
                      "stacks": _totals(self.step_reports, "stacks")},
            "per_step": self.step_reports,
            "notes": list(self.setup.notes),
        }
        ids = sum(t["ids"] for t in out["drops"]["tables"].values())
        dropped = sum(t["dropped"] for t in out["drops"]["tables"].values())
        out["drops"]["total"] = {"ids": ids, "dropped": dropped, "share": _share(dropped, ids)}
        # the slice's ids of each step (every host's, before any drop)
        out["ids_per_step"] = [sum(t["ids"] for t in r["tables"].values())
                               for r in self.step_reports]
        if self.losses:
            out["loss"] = self.losses
        if self.twin is not None:
            out["compare"] = self.drift_summary()
        return out

    def drift_summary(self) -> dict[str, Any]:
        """Per table the Frobenius norm and the largest absolute difference between the run's
        final table (and each slot) and its no-dropping twin's, and per step the activations'
        largest and RMS difference. ``ValueError`` without ``compare``."""
        if self.twin is None:
            raise ValueError("drift_summary needs a run made with compare=True")
        mine, theirs = self.executor.state_arrays(), self.twin.state_arrays()
        tables: dict[str, Any] = {}
        for table in self.plan.tables:
            entry = {"table": _difference(mine[f"table/{table.name}"],
                                          theirs[f"table/{table.name}"]),
                     "slots": {slot: _difference(mine[f"slot/{table.name}/{slot}"],
                                                 theirs[f"slot/{table.name}/{slot}"])
                               for slot in table.slot_names}}
            tables[table.name] = entry
        return {"tables": tables, "activations": self.drift}


def _difference(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return {"frobenius": float(np.sqrt(np.sum(diff * diff))),
            "max_abs": float(np.max(np.abs(diff))) if diff.size else 0.0}


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _totals(reports: Sequence[Mapping[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """Per name, the steps' counts summed, the share of dropped ids and the per-step drops."""
    out: dict[str, dict[str, Any]] = {}
    for report in reports:
        for name, counts in report[kind].items():
            entry = out.setdefault(name, {"ids": 0, "dropped": 0, "dropped_per_step": []})
            entry["ids"] += counts["ids"]
            entry["dropped"] += counts["dropped"]
            entry["dropped_per_step"].append(counts["dropped"])
            for key in ("id_drop_counter", "zero_denominator_bags"):
                if key in counts:
                    entry[key] = entry.get(key, 0) + counts[key]
    for entry in out.values():
        entry["share"] = _share(entry["dropped"], entry["ids"])
    return out


def memory_estimate(setup: SparseCoreSetup, engine: Any = "numba") -> Estimate:
    """The memory one executor of ``setup`` needs (``executor.memory.library_estimate``: the
    process, the tables and slots, a step's working arrays); a run with ``compare`` holds a
    second ``run`` part for its twin."""
    return library_estimate(setup.prepared.plan, get_engine(engine).name)


def describe(setup: SparseCoreSetup, *, engine: Any = "numba",
             compare: bool = False) -> dict[str, Any]:
    """What a ``--dry-run`` shows of ``setup``: the topology, the stacks with their limits,
    the tables with their optimizer and combiner, the notes and the memory estimate (with
    ``compare``: the twin's too)."""
    parts = memory_estimate(setup, engine)
    config = setup.config
    combiners = {t.name: t.combiner for t in config.tables}
    return {
        "api": config.api,
        "topology": config.topology.as_json(),
        "slice": config.topology.describe(),
        "stacks": [{"name": s.name, "tables": [t.name for t in s.tables],
                    "max_ids_per_partition": s.max_ids_per_partition,
                    "max_unique_ids_per_partition": s.max_unique_ids_per_partition}
                   for s in setup.stacking.stacks],
        "tables": [{"name": t.name, "vocabulary": t.vocabulary, "dimension": t.dimension,
                    "optimizer": t.optimizer.name, "combiner": combiners.get(t.name, "?")}
                   for t in setup.prepared.plan.tables],
        "notes": list(setup.notes),
        "memory": {"estimate": parts.as_dict(),
                   "total_bytes": parts.total + (parts.run if compare else 0),
                   "executors": 2 if compare else 1},
    }
