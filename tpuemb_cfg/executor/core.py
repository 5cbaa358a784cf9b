"""The reference executor: one training step of every table, in float32 (spec ``optimizers.md``).

The public pair mirrors TensorFlow's TPU ops so a training loop ports line by line:

    activations, dedup = executor.recv_activations(batch)    # XlaRecvTPUEmbeddingActivations
    ...                                                      # the dense model, the loss
    executor.send_gradients(grads, learning_rates, dedup)    # XlaSendTPUEmbeddingGradients

``recv_activations`` does the forward pass (sections 3 and 7) and records, per table and per
TensorCore partial, the unique ids and gains the activations came from (``DeduplicationData``);
``send_gradients`` back-propagates through that record (section 4), groups contributions into
partials (section 5) and runs the per-row pipeline on each (section 6). ``step`` does both with
the gradients carried in the batch, which is what the replay contract needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError, UsageError
from .batch import CheckedFeature, FeatureInput, check_batch, check_gradient, check_learning_rates
from .batch import key as batch_key
from .engine import Engine, get_engine
from .optimizers import UpdateContext
from .plan import Plan, TablePlan, build_plan, refuse_invalid
from .state import initial_state as make_initial_state
from .state import slot_key, table_key

__all__ = ["DeduplicationData", "Executor", "Partial", "TableDeduplication", "TableReport"]

F32 = np.float32


@dataclass(frozen=True)
class Partial:
    """One partial gradient of a table (spec section 5): the rows it touches and how to sum.

    ``core`` is None for the single partial of accumulation ENABLED/UNSPECIFIED, else the
    TensorCore whose block of bags it covers. ``rows`` are its touched rows (sorted unique ids);
    ``inverse[j]`` is the position in ``rows`` of the j-th covered occurrence; ``occurrences``
    indexes the table's occurrence arrays (None: all of them, in order).
    """

    core: int | None
    rows: np.ndarray
    inverse: np.ndarray
    occurrences: np.ndarray | None


@dataclass(frozen=True)
class TableDeduplication:
    """What the activations of one table came from, per occurrence and per partial.

    Occurrences are the table's features in feature-index order, then bags, then positions (the
    spec's reference order). ``sample[j]`` is the row of occurrence j in the table's features'
    activation gradients stacked in that order; ``gains[j]`` is its combiner gain (spec 3.1).
    ``unique_ids``/``inverse`` are the table-wide de-duplication the forward pass gathered.
    """

    table: str
    features: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    ids: np.ndarray
    gains: np.ndarray
    sample: np.ndarray
    unique_ids: np.ndarray
    inverse: np.ndarray
    partials: tuple[Partial, ...]


@dataclass(frozen=True)
class DeduplicationData:
    """The de-duplication record of one step, keyed by table name; valid for that step only."""

    step: int
    tables: Mapping[str, TableDeduplication]
    batch_sizes: tuple[int, ...]
    token: object = field(repr=False, compare=False, default=None)


@dataclass
class TableReport:
    """Per-step numbers for one table: what the summary of a run shows.

    ``ids_per_host`` / ``unique_ids_per_host``: id occurrences and distinct ids of the step by
    the host that owns them (spec section 8). ``rows_touched``: distinct ids looked up;
    ``rows_updated``: rows the optimizer stepped (all rows for non-lazy Adam/Lion);
    ``update_norm``: Euclidean norm of the change of the table's parameters in the step;
    ``zero_denominator_bags``: per feature of the table, bags whose mean/sqrtn denominator was 0.
    """

    ids_per_host: np.ndarray
    unique_ids_per_host: np.ndarray
    rows_touched: int
    zero_denominator_bags: dict[int, int]
    rows_updated: int = 0
    update_norm: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready values (per-host counts as lists, feature indices as strings)."""
        return {
            "rows_touched": self.rows_touched,
            "rows_updated": self.rows_updated,
            "update_norm": self.update_norm,
            "ids_per_host": [int(v) for v in self.ids_per_host],
            "unique_ids_per_host": [int(v) for v in self.unique_ids_per_host],
            "zero_denominator_bags": {str(f): n for f, n in self.zero_denominator_bags.items()},
        }


class Executor:
    """The CPU reference of one ``TPUEmbeddingConfiguration``'s embedding layer.

    ``config``: anything ``tpuemb_cfg.as_config`` takes. ``combiners``: one name for every
    feature, a list with one per feature, or ``{feature_index: name}`` (default ``mean``).
    ``initial_state``: ``table/NAME`` and ``slot/NAME/SLOT`` arrays; missing entries get the
    defaults of spec section 11 from ``seed``. ``max_memory``: refuse (``UsageError``) when the
    tables and slots would need more bytes. A configuration the validator reports errors for
    (unless ``validate_config`` is false: the caller validated it already), or a table whose
    optimizer cannot be simulated, raises ``InputError``. ``state_source``/``strict``: for
    file-backed callers, the file named in errors about ``initial_state`` and exact dtypes.
    ``engine``: ``numpy`` (the readable reference) or ``numba`` (compiled kernels, the same
    results to float32 rounding; see ``tpuemb_cfg.executor.engine``).
    """

    def __init__(
        self,
        config: Any,
        *,
        combiners: str | Sequence[str] | Mapping[int, str] | None = None,
        initial_state: Mapping[str, Any] | None = None,
        seed: int = 0,
        max_memory: int | None = None,
        state_source: str | None = None,
        strict: bool = False,
        validate_config: bool = True,
        engine: str | Engine = "numpy",
    ) -> None:
        from .. import as_config

        self.kernels = get_engine(engine)

        message = as_config(config)
        if validate_config:
            refuse_invalid(message)
        self.config = message
        self.plan: Plan = build_plan(message, combiners)
        needed = self.plan.memory_estimate()
        if max_memory is not None and needed > max_memory:
            raise UsageError(memory_message(needed, max_memory))
        self.tables, self.slots = make_initial_state(
            self.plan, initial_state, seed, state_source, strict
        )
        self.step_index = 0
        self.last_report: dict[str, TableReport] = {}
        self._pipelined = self.plan.pipelined and self.plan.mode == "TRAINING"
        # Pipelining: per table, the rows the last update changed and their values before it
        # (None rows: the whole table), so the forward pass can read one update back.
        self._undo: dict[str, tuple[np.ndarray | None, np.ndarray]] = {}
        self._pending: DeduplicationData | None = None

    # ----------------------------------------------------------------------------------------
    # State

    @property
    def num_features(self) -> int:
        return len(self.plan.features)

    @property
    def num_learning_rates(self) -> int:
        """K: the length of the learning-rate list every step takes (spec section 9)."""
        return self.plan.num_learning_rates

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every table and slot under its state-file key (the live arrays, not copies)."""
        out: dict[str, np.ndarray] = {}
        for table in self.plan.tables:
            out[table_key(table.name)] = self.tables[table.name]
            for name, array in zip(table.slot_names, self.slots[table.name], strict=True):
                out[slot_key(table.name, name)] = array
        return out

    def checkpoint_arrays(self) -> dict[str, np.ndarray]:
        """The full executor state: tables, slots, step number and pipelining buffers."""
        out = dict(self.state_arrays())
        out["executor/step"] = np.array(self.step_index, dtype=np.int64)
        for name, (rows, values) in self._undo.items():
            out[f"executor/undo/{name}/values"] = values
            if rows is not None:
                out[f"executor/undo/{name}/rows"] = rows
        return out

    def restore_checkpoint(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Load what ``checkpoint_arrays`` returned (from the same configuration)."""
        self.tables, self.slots = make_initial_state(
            self.plan,
            {k: v for k, v in arrays.items() if k.startswith(("table/", "slot/"))},
            0, None, True,
        )
        self.step_index = int(arrays["executor/step"])
        self._undo = {}
        for table in self.plan.tables:
            values = arrays.get(f"executor/undo/{table.name}/values")
            if values is not None:
                rows = arrays.get(f"executor/undo/{table.name}/rows")
                self._undo[table.name] = (
                    None if rows is None else np.array(rows, dtype=np.int64),
                    np.array(values, dtype=F32),
                )
        self._pending = None

    # ----------------------------------------------------------------------------------------
    # The op pair

    def recv_activations(
        self, batch: Sequence[FeatureInput | Mapping[str, Any]]
    ) -> tuple[list[np.ndarray], DeduplicationData]:
        """Forward pass of one step: one float32 [batch, dim] activation array per feature.

        ``batch`` holds one ``FeatureInput`` (or mapping with ``ids``, ``row_splits``,
        ``weights``) per feature in index order. Raises ``InputError`` naming the offending
        ``s{step}/f{f}/...`` key; the executor's state is unchanged then.
        """
        checked = check_batch(batch, self.plan, self.step_index)
        return self._forward(checked)

    def send_gradients(
        self,
        gradients: Sequence[Any],
        learning_rates: Sequence[float] | np.ndarray | None,
        deduplication_data: DeduplicationData,
    ) -> None:
        """Back-propagate ``gradients`` (one [batch, dim] array per feature) and update.

        ``learning_rates`` holds exactly K values (K = ``num_learning_rates``; None when K = 0);
        ``deduplication_data`` must be the one ``recv_activations`` returned for this step.
        Everything is checked before any table changes.
        """
        dedup = self._claim(deduplication_data)
        rates = check_learning_rates(learning_rates, self.plan, self.step_index)
        grads = self._check_gradients(gradients, dedup)
        self._backward(dedup, grads, rates)

    def step(
        self,
        batch: Sequence[FeatureInput | Mapping[str, Any]],
        learning_rates: Sequence[float] | np.ndarray | None = None,
        *,
        source: str | None = None,
        strict: bool = False,
    ) -> list[np.ndarray]:
        """One whole step (forward, backward, update) with the gradients carried in ``batch``.

        Returns the activations. ``source``/``strict`` are for file-backed callers: errors then
        name the file, and dtypes must be exactly the contract's.
        """
        checked = check_batch(batch, self.plan, self.step_index, source, strict)
        rates = check_learning_rates(learning_rates, self.plan, self.step_index, source, strict)
        grads: list[np.ndarray] | None = None
        if self.plan.updates:
            grads = [
                check_gradient(
                    _grad_of(item), self.plan, feature, c.batch, self.step_index, source, strict
                )
                for item, feature, c in zip(batch, self.plan.features, checked, strict=True)
            ]
        activations, dedup = self._forward(checked, source)
        self._pending = None
        self._backward(dedup, grads, rates)
        return activations

    # ----------------------------------------------------------------------------------------
    # Forward

    def _snapshot_rows(self, table: TablePlan, rows: np.ndarray) -> np.ndarray:
        """The parameters the forward pass reads for ``rows`` (spec section 7)."""
        values = self.kernels.gather(self.tables[table.name], rows)
        undo = self._undo.get(table.name) if self._pipelined else None
        if undo is not None:
            undo_rows, undo_values = undo
            if undo_rows is None:
                values = self.kernels.gather(undo_values, rows)
            elif undo_rows.size:
                position = np.minimum(np.searchsorted(undo_rows, rows), undo_rows.size - 1)
                hit = undo_rows[position] == rows
                values[hit] = undo_values[position[hit]]
        if table.quantization is not None:
            lower, upper, buckets = table.quantization
            values = self.kernels.quantize(values, lower, upper, buckets)
        return values

    def _forward(
        self, checked: list[CheckedFeature], source: str | None = None
    ) -> tuple[list[np.ndarray], DeduplicationData]:
        plan = self.plan
        step = self.step_index
        activations: list[np.ndarray] = [np.zeros((0, 0), dtype=F32)] * len(checked)
        tables: dict[str, TableDeduplication] = {}
        reports: dict[str, TableReport] = {}
        for table in plan.tables:
            feats = [checked[f] for f in table.features]
            gains_list: list[np.ndarray] = []
            samples: list[np.ndarray] = []
            cores: list[np.ndarray] = []
            zero_bags: dict[int, int] = {}
            offset = 0
            for f, c in zip(table.features, feats, strict=True):
                scale, zero = self.kernels.bag_scales(
                    c.weights, c.row_splits, plan.features[f].combiner
                )
                bag = self.kernels.bag_of_occurrence(c.row_splits)
                gains_list.append(c.weights * scale[bag])
                samples.append(bag + offset)
                zero_bags[f] = int(zero.sum())
                if plan.updates and not table.accumulate:
                    if c.batch % plan.num_cores:
                        raise InputError(
                            f"feature {f} ({plan.features[f].name!r}) has {c.batch} bags, not "
                            f"divisible by num_tensor_cores = {plan.num_cores}: with gradient "
                            f"accumulation DISABLED on table {table.name!r} each core owns an "
                            "equal contiguous block of bags",
                            path=source, key=batch_key(step, f, "row_splits"),
                        )
                    cores.append(bag // max(c.batch // plan.num_cores, 1))
                offset += c.batch
            ids = np.concatenate([c.ids for c in feats]) if feats else np.zeros(0, np.int64)
            gains = np.concatenate(gains_list) if feats else np.zeros(0, F32)
            sample = np.concatenate(samples) if feats else np.zeros(0, np.int64)
            unique, inverse = self.kernels.deduplicate(ids)
            rows = self._snapshot_rows(table, unique)
            start = 0
            for f, c, g in zip(table.features, feats, gains_list, strict=True):
                stop = start + c.ids.shape[0]
                activations[f] = self.kernels.gather_combine(
                    rows, inverse[start:stop], g, c.row_splits
                )
                start = stop
            partials: list[Partial] = []
            if plan.updates:
                if table.accumulate:
                    partials.append(Partial(None, unique, inverse, None))
                else:
                    core_of = np.concatenate(cores) if cores else np.zeros(0, np.int64)
                    for core in range(plan.num_cores):
                        covered = np.flatnonzero(core_of == core)
                        core_rows, core_inverse = self.kernels.deduplicate(ids[covered])
                        partials.append(Partial(core, core_rows, core_inverse, covered))
            tables[table.name] = TableDeduplication(
                table=table.name,
                features=table.features,
                batch_sizes=tuple(c.batch for c in feats),
                ids=ids,
                gains=gains,
                sample=sample,
                unique_ids=unique,
                inverse=inverse,
                partials=tuple(partials),
            )
            hosts = self.kernels.host_of(
                ids, table.vocabulary, plan.num_hosts, plan.mod_sharding
            )
            unique_hosts = self.kernels.host_of(
                unique, table.vocabulary, plan.num_hosts, plan.mod_sharding
            )
            reports[table.name] = TableReport(
                ids_per_host=np.bincount(hosts, minlength=plan.num_hosts),
                unique_ids_per_host=np.bincount(unique_hosts, minlength=plan.num_hosts),
                rows_touched=int(unique.shape[0]),
                zero_denominator_bags=zero_bags,
            )
        dedup = DeduplicationData(
            step=step,
            tables=tables,
            batch_sizes=tuple(c.batch for c in checked),
            token=object(),
        )
        self._pending = dedup
        self.last_report = reports
        return activations, dedup

    # ----------------------------------------------------------------------------------------
    # Backward and update

    def _claim(self, dedup: DeduplicationData) -> DeduplicationData:
        if not isinstance(dedup, DeduplicationData):
            raise InputError(
                "deduplication_data must be the DeduplicationData recv_activations returned, "
                f"found {type(dedup).__name__}"
            )
        pending = self._pending
        if pending is None or dedup.token is not pending.token:
            raise InputError(
                f"deduplication_data comes from step {dedup.step}, but the executor expects "
                f"the one recv_activations returned for step {self.step_index}; call "
                "recv_activations and send_gradients once each per step, in that order"
            )
        return dedup

    def _check_gradients(self, gradients: Sequence[Any], dedup: DeduplicationData) -> list[Any]:
        if not self.plan.updates and gradients is None:
            return []
        items = list(gradients)
        if len(items) != self.num_features:
            raise InputError(
                f"{len(items)} gradient array(s) given, expected one per feature "
                f"({self.num_features}), the same length as the activations",
                key=batch_key(self.step_index, min(len(items), self.num_features), "grad"),
            )
        return [
            check_gradient(g, self.plan, feature, batch, self.step_index)
            for g, feature, batch in zip(items, self.plan.features, dedup.batch_sizes, strict=True)
        ]

    def _backward(
        self,
        dedup: DeduplicationData,
        grads: list[np.ndarray] | None,
        rates: np.ndarray,
    ) -> None:
        self._pending = None
        if self.plan.updates and grads is not None:
            dynamic = tuple(float(r) for r in rates)
            for table in self.plan.tables:
                record = dedup.tables[table.name]
                stacked = [grads[f] for f in table.features]
                d_activations = (
                    stacked[0] if len(stacked) == 1  # a lone feature's gradient: no copy
                    else np.concatenate(stacked) if stacked
                    else np.zeros((0, table.dimension), dtype=F32)
                )
                self._update_table(table, record, d_activations, rates, dynamic)
        self.step_index += 1

    def _learning_rate(self, table: TablePlan, rates: np.ndarray) -> np.float32:
        if table.lr_constant is not None:
            return table.lr_constant
        assert table.lr_tag is not None
        return F32(rates[table.lr_tag])

    def _update_table(
        self,
        table: TablePlan,
        record: TableDeduplication,
        d_activations: np.ndarray,
        rates: np.ndarray,
        dynamic: tuple[float, ...],
    ) -> None:
        params = self.tables[table.name]
        lr = self._learning_rate(table, rates)
        if table.lazy:
            if len(record.partials) == 1:
                changed: np.ndarray | None = record.partials[0].rows
            else:
                changed = np.unique(np.concatenate([p.rows for p in record.partials]))
            assert changed is not None
            before = self.kernels.gather(params, changed)
        else:
            changed = None
            before = params.copy()
        for partial in record.partials:
            # Spec section 4: sum gains[j] * dA[sample[j]] per row over the covered occurrences.
            covered = partial.occurrences
            grad = self.kernels.backprop_sum(
                d_activations,
                record.sample if covered is None else record.sample[covered],
                record.gains if covered is None else record.gains[covered],
                partial.inverse,
                partial.rows.shape[0],
            )
            if table.lazy:
                self._apply(table, partial.rows, grad, lr, dynamic)
            else:
                full = np.zeros((table.vocabulary, table.dimension), dtype=F32)
                self.kernels.scatter(full, partial.rows, grad)
                self._apply(table, None, full, lr, dynamic)
        report = self.last_report.get(table.name)
        if report is not None:
            report.rows_updated = table.vocabulary if changed is None else int(changed.shape[0])
            report.update_norm = self.kernels.change_norm(params, changed, before)
        if self._pipelined:
            self._undo[table.name] = (changed, before)

    def _apply(
        self,
        table: TablePlan,
        rows: np.ndarray | None,
        grad: np.ndarray,
        lr: np.float32,
        dynamic: tuple[float, ...],
    ) -> None:
        """The per-row pipeline of spec section 6 on ``rows`` (None: every row)."""
        params = self.tables[table.name]
        slots = self.slots[table.name]
        if rows is not None and self.kernels.update_rows(table, params, slots, rows, grad, lr):
            return  # the engine ran 6.1-6.4 fused, in place
        if rows is None:
            w = params
            state = tuple(slots)
        else:
            w = self.kernels.gather(params, rows)
            state = tuple(self.kernels.gather(s, rows) for s in slots)
        if table.clip_gradients is not None:  # 6.1
            grad = self.kernels.clip(grad, *table.clip_gradients)
        if table.weight_decay != 0:  # 6.2
            decay = table.weight_decay * lr if table.decay_by_lr else table.weight_decay
            w = w - decay * w
        context = UpdateContext(step=self.step_index, dynamic_inputs=dynamic, rows=rows)
        w, state = table.optimizer.update(w, state, grad, lr, table.hyper, context)  # 6.3
        if table.clip_weights is not None:  # 6.4
            w = self.kernels.clip(w, *table.clip_weights)
        if rows is None:
            params[...] = w
            for slot, value in zip(slots, state, strict=True):
                slot[...] = value
        else:
            self.kernels.scatter(params, rows, w)
            for slot, value in zip(slots, state, strict=True):
                self.kernels.scatter(slot, rows, value)


def _grad_of(item: FeatureInput | Mapping[str, Any]) -> Any:
    if isinstance(item, Mapping):
        return item.get("grad")
    return item.grad


def memory_message(needed: int, limit: int) -> str:
    """The refusal when the state would not fit under ``limit`` bytes."""
    return (
        f"the simulation needs about {format_bytes(needed)} (estimate: tables, slots and a "
        f"step's working arrays), more than the memory limit of {format_bytes(limit)}; raise "
        "--max-memory (e.g. --max-memory 16G), or reduce vocabulary_size/dimension"
    )


def format_bytes(count: int) -> str:
    """``1.5 GiB``-style rendering."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"  # pragma: no cover
