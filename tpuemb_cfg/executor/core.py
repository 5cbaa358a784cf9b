"""The reference executor: one training step of every table, in float32 (spec ``optimizers.md``).

The public pair mirrors TensorFlow's TPU ops so a training loop ports line by line:

    activations, dedup = executor.recv_activations(batch)    # XlaRecvTPUEmbeddingActivations
    ...                                                      # the dense model, the loss
    executor.send_gradients(grads, learning_rates, dedup)    # XlaSendTPUEmbeddingGradients

``recv_activations`` does the forward pass (sections 3 and 7) and records, per table and per
TensorCore partial, the unique ids and gains the activations came from (``DeduplicationData``);
``send_gradients`` back-propagates through that record (section 4), groups contributions into
partials (section 5) and runs the per-row pipeline on each (section 6, ``pipeline``). ``step``
does both with the gradients carried in the batch, which is what the replay contract needs.

The executor reaches its tables and slots only through a ``Storage`` (``storage``): row gathers,
row updates, the update norm and whole-state export and import.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

import numpy as np

from tpuemb_cfg.base.errors import InputError, NumericalError, UsageError

from .batch import (
    CheckedFeature,
    FeatureInput,
    check_batch,
    check_finite,
    check_gradient,
    check_learning_rates,
)
from .batch import key as batch_key
from .checkpoint import CHECKPOINT_REMEDY, checked_checkpoint, checkpoint_step, damaged_checkpoint
from .custom import combine_custom, note_fallback
from .engines import Engine, get_engine
from .fused import TableInput, backprop_tables, forward_backprop, stacked, table_input, update_table
from .kept import KeptRows
from .memory import require_memory
from .nonfinite import NonFinite, loaded, warn
from .optimizers import UpdateContext
from .options import Placement, RunOptions
from .pipeline import RowPipeline
from .plan import Plan, TablePlan
from .prepared import Prepared
from .rates import spec_learning_rates
from .records import DeduplicationData, Partial, TableDeduplication, TableReport, table_report
from .route import StepRoute, step_route
from .storage import Storage, StorageRequest, choose_backend, rows_of

__all__ = ["CHECKPOINT_REMEDY", "CheckedStep", "DeduplicationData", "Executor", "Partial",
           "StepRoute", "TableDeduplication", "TableReport", "check_batch", "damaged_checkpoint",
           "require_memory"]

F32 = np.float32
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _one_at_a_time(method: Callable[Concatenate[Executor, _P], _R]
                   ) -> Callable[Concatenate[Executor, _P], _R]:
    """``method`` under the executor's lock: calls from several threads run one after another."""

    @functools.wraps(method)
    def locked(self: Executor, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class CheckedStep(NamedTuple):
    """The inputs of one step, checked (``Executor.check_step``): its number, the checked
    features, the float32 [K] learning rates (None: a compiled spec's callables give them when
    the step runs) and the gradients (None when the mode does not update)."""

    step: int
    features: list[CheckedFeature]
    rates: np.ndarray | None
    grads: list[np.ndarray] | None


class Executor:
    """The CPU reference of one ``TPUEmbeddingConfiguration``'s embedding layer.

    ``prepared``: the configuration parsed, validated and planned once (a ``Prepared``,
    ``tpuemb_cfg.session.prepare``; combiners are part of it); ``tpuemb_cfg.simulate.Executor``
    takes a path, bytes, a message or a compiled spec instead. ``options``: a ``RunOptions``
    (``executor.options``: the seed of the default rows, the engine, ``max_memory`` and
    ``check_memory``, ``report``); ``placement``: a ``Placement`` (where the tables live: the
    backend, by name from ``storage.BACKENDS`` - ``local``, the default, or ``ray``: the tables
    in Ray actors, one per host, each holding only its rows (spec section 8), the same results
    bit for bit - and its options record, ``storage.placement(backend, **settings)``).
    ``initial_state``: ``table/NAME`` and ``slot/NAME/SLOT`` arrays; missing entries
    get the defaults of spec section 11 from the seed; ``state_source``/``strict``: for
    file-backed callers, the file named in errors about ``initial_state`` and exact dtypes.

    ``max_memory``: the local backend refuses (``UsageError``, naming a limit that would do)
    tables, slots and a step's working arrays (``memory.memory_estimate``) that would need more
    bytes; by default (None) the limit is 80% of the memory available
    (``limits.default_memory_limit``), so a configuration too large for the machine is refused
    instead of failing with ``MemoryError`` halfway; with the Ray backend it is each actor's
    limit. ``self.engine`` is the engine in use. ``close()`` (or ``with``) releases the storage
    (the Ray backend's actors).

    An update that leaves a table's parameters infinite or NaN keeps TensorFlow's result (NaN
    and infinities included): ``nonfinite`` records the first such value with its cause (the
    operation, the table, row and step; ``nonfinite.NonFinite``), said once as a
    ``NonFiniteWarning``. With ``RunOptions(strict_finite=True)`` it raises ``NumericalError``
    instead, naming the same cause (and the learning rate's source when an overflowing rate is
    the cause; the tables then hold the values of the failed step: restore a checkpoint).

    **Threads.** One step at a time: ``step``, ``recv_activations``, ``send_gradients``,
    ``apply_row_gradients``, ``checkpoint_arrays`` and ``restore_checkpoint`` hold the executor's
    lock, so steps of several threads run one after the other (unserialized, the compiled steps
    of two threads updated the same rows at once and lost updates). A ``recv_activations`` /
    ``send_gradients`` pair belongs to one step: interleaved pairs of two threads are refused.
    For parallel work give each thread its own executor.
    """

    def __init__(
        self,
        prepared: Prepared,
        options: RunOptions | None = None,
        placement: Placement | None = None,
        *,
        initial_state: Mapping[str, Any] | None = None,
        state_source: str | None = None,
        strict: bool = False,
    ) -> None:
        if not hasattr(prepared, "plan") or not hasattr(prepared, "config"):
            raise TypeError(
                f"prepared: a Prepared configuration expected (tpuemb_cfg.session.prepare), "
                f"found {type(prepared).__name__}; tpuemb_cfg.simulate.Executor takes a path, "
                "bytes, a message or a compiled spec")
        options = options if options is not None else RunOptions()
        placement = placement if placement is not None else Placement()
        self.engine: Engine = get_engine(options.engine)
        self.prepared: Prepared = prepared
        self.config = prepared.config
        self.plan: Plan = prepared.plan
        note_fallback(self.plan, self.engine)  # custom callables run on the NumPy path
        self.strict_finite = bool(options.strict_finite)
        #: The first non-finite value of the run with its cause (None: every value finite).
        self.nonfinite: NonFinite | None = None
        if initial_state is not None:  # before a backend starts anything
            self._check_loaded(initial_state, state_source)
        backend = choose_backend(placement.backend)
        self.placement = placement
        self.storage: Storage = backend.open(StorageRequest(
            self.plan, self.engine, initial_state, state_source, strict, options,
            placement.options))
        #: Whether the tables are this process's memory (the backend's ``in_process``): a
        #: caller's own memory check counts them then.
        self.tables_in_process = bool(backend.in_process)
        # The storage's arrays when they live in this process (the compiled step's in-place
        # reads and updates), else None.
        self._live = self.storage.live()
        self.step_index = 0
        self.report = bool(options.report)
        # Per table, the slots (and for the compiled route, the parameters) of the rows its
        # update changes, before it: what a non-finite result is replayed from.
        self._kept = KeptRows(self.storage, self.engine, self._rate_source)
        # One step at a time: two threads stepping one executor would interleave the reads and
        # in-place writes of the same rows and lose updates (see the class docstring).
        self._lock = threading.RLock()
        self.last_report: dict[str, TableReport] = {}
        #: The K learning rates the last step used (given, or the spec's callables' values).
        self.last_learning_rates = np.zeros(0, dtype=F32)
        self._spec_rates = False  # whether this step's rates are the spec callables' values
        # Per feature of a fused table, its empty bags: gradient rows no bag reads.
        self._empty_bags: dict[int, np.ndarray] = {}
        self._pipelined = self.plan.pipelined and self.plan.mode == "TRAINING"
        # Pipelining: per table, the rows the last update changed and their values before it
        # (None rows: the whole table), so the forward pass can read one update back.
        self._undo: dict[str, tuple[np.ndarray | None, np.ndarray]] = {}
        self._pending: DeduplicationData | None = None
        # The step route of every table, chosen once (``StepRoute``): the compiled step (the
        # numba engine, on live arrays of a storage in this process) or the engine's functions.
        self._fused: Any = self.engine.fused if self._live is not None else None
        self._routes = {table.name: self._route(table) for table in self.plan.tables}
        # Per feature: whether the gradient check looks for NaN and infinities (the compiled
        # back-propagation of its table looks itself).
        self._finite = [not self._routes[self.plan.tables[f.table].name].backward
                        for f in self.plan.features]
        # ``step`` overlaps forward and back-propagation (``fused.forward_backprop``, which
        # computes a ``LocalStorage``'s pending rows) when the compiled step does every table
        # (with one thread the two run one after the other on that route);
        # ``overlapped_steps`` counts those steps.
        self._overlap = self._live is not None and all(
            route.backward for route in self._routes.values())
        self.overlapped_steps = 0

    def _route(self, table: TablePlan) -> StepRoute:
        """How ``table`` steps (``route.step_route``), chosen once."""
        return step_route(self.plan, table, compiled=self._fused is not None)

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
        """Every table and slot under its state-file key (the live arrays of a local storage,
        not copies; with the Ray backend, live ``ShardedArray`` views that ``np.asarray``
        fetches and ``npzio`` streams into a file host by host)."""
        return self.storage.arrays()

    def close(self) -> None:
        """Release the storage (the Ray backend's actors); a local storage has nothing to do."""
        self.storage.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @_one_at_a_time
    def checkpoint_arrays(self) -> dict[str, np.ndarray]:
        """The full executor state: tables, slots, step number and pipelining buffers."""
        out = dict(self.state_arrays())
        out["executor/step"] = np.array(self.step_index, dtype=np.int64)
        for name, (rows, values) in self._undo.items():
            out[f"executor/undo/{name}/values"] = values
            if rows is not None:
                out[f"executor/undo/{name}/rows"] = rows
        return out

    @_one_at_a_time
    def restore_checkpoint(self, arrays: Mapping[str, np.ndarray], source: str | None = None
                           ) -> None:
        """Load what ``checkpoint_arrays`` returned (from the same configuration).

        Everything is checked before anything changes: the step (a non-negative integer
        scalar), every table and slot (present, float32, of the table's shape) and the
        pipelining buffers; a damaged checkpoint raises ``InputError`` naming ``source`` (the
        file) and the key.
        """
        step, undo = checked_checkpoint(self.plan, arrays, source)
        given = {k: v for k, v in arrays.items() if k.startswith(("table/", "slot/"))}
        self._check_loaded(given, source, step)
        self.storage.load_given(given, source=source)  # checked, then loaded
        self.step_index = step
        self._undo = undo
        self._pending = None

    # ----------------------------------------------------------------------------------------
    # The op pair

    @_one_at_a_time
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

    @_one_at_a_time
    def send_gradients(
        self,
        gradients: Sequence[Any],
        learning_rates: Sequence[float] | np.ndarray | None,
        deduplication_data: DeduplicationData,
    ) -> None:
        """Back-propagate ``gradients`` (one [batch, dim] array per feature) and update.

        ``learning_rates`` holds exactly K values (K = ``num_learning_rates``; None when K = 0);
        None for a compiled spec's configuration: its learning-rate callables give the values
        of this step (``executor.rates``; ``last_learning_rates`` shows them).
        ``deduplication_data`` must be the one ``recv_activations`` returned for this step.
        Everything is checked before any table changes.
        """
        dedup = self._claim(deduplication_data)
        rates = self._rates(learning_rates)
        grads = self._check_gradients(gradients, dedup)
        self._backward(dedup, grads, rates)

    @_one_at_a_time
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
        return self.run_checked_step(
            self.check_step(batch, learning_rates, self.step_index, source=source, strict=strict),
            source)

    def check_step(
        self,
        batch: Sequence[FeatureInput | Mapping[str, Any]],
        learning_rates: Sequence[float] | np.ndarray | None,
        step: int,
        *,
        source: str | None = None,
        strict: bool = False,
        finite: bool = False,
    ) -> CheckedStep:
        """Check the inputs of step ``step`` (the batch, the learning rates, the gradients
        ``batch`` carries), as ``step`` does, without running it: ``InputError`` naming the
        key of the first problem. ``finite``: look for NaN and infinities in every gradient now
        (else the compiled back-propagation looks at its own tables' when it reads them). A
        compiled spec's learning-rate callables run for the executor's current step only."""
        checked = check_batch(batch, self.plan, step, source, strict)
        rates: np.ndarray | None = None
        if learning_rates is not None or not self.plan.tag_rates or step == self.step_index:
            rates = self._rates(learning_rates, source, strict, step)
        grads: list[np.ndarray] | None = None
        if self.plan.updates:
            grads = [
                check_gradient(
                    _grad_of(item), self.plan, feature, c.batch, step, source, strict,
                    finite=finite or self._finite[feature.index],
                )
                for item, feature, c in zip(batch, self.plan.features, checked, strict=True)
            ]
        return CheckedStep(step, checked, rates, grads)

    @_one_at_a_time
    def run_checked_step(self, checked: CheckedStep, source: str | None = None
                         ) -> list[np.ndarray]:
        """Run a step ``check_step`` checked (for the executor's current step); return the
        activations. ``source``: the file errors name."""
        if checked.step != self.step_index:
            raise UsageError(f"the checked inputs are those of step {checked.step}; the "
                             f"executor is at step {self.step_index}")
        rates = checked.rates
        if rates is None:
            rates = self._rates(None)
        grads = checked.grads
        previous = self.last_report
        try:
            computed = None
            if grads is not None and self._overlap:
                activations, dedup, computed = self._forward_backprop(checked.features, grads,
                                                                      source)
            else:
                activations, dedup = self._forward(checked.features, source)
            self._pending = None
            self._backward(dedup, grads, rates, source, computed)
        except InputError:
            self.last_report = previous  # a refused step leaves no trace
            raise
        return activations

    def _rates(self, learning_rates: Sequence[float] | np.ndarray | None,
               source: str | None = None, strict: bool = False, step: int | None = None
               ) -> np.ndarray:
        """The float32 [K] learning rates of step ``step`` (default: this one):
        ``learning_rates`` checked, or (None) the values of a compiled spec's learning-rate
        callables at this step (``executor.rates``; a callable that fails raises
        ``InputError`` before any table changes)."""
        step = self.step_index if step is None else step
        self._spec_rates = learning_rates is None and bool(self.plan.tag_rates)
        if self._spec_rates:
            return spec_learning_rates(self.plan, step)
        return check_learning_rates(learning_rates, self.plan, step, source, strict)

    # ----------------------------------------------------------------------------------------
    # Forward

    def _snapshot_rows(self, table: TablePlan, rows: np.ndarray) -> np.ndarray:
        """The parameters the forward pass reads for ``rows`` (spec section 7)."""
        values = self.storage.gather(table.name, rows)
        undo = self._undo.get(table.name) if self._pipelined else None
        if undo is not None:
            undo_rows, undo_values = undo
            if undo_rows is None:
                values = rows_of(undo_values, rows, self.engine)
            elif undo_rows.size:
                position = np.minimum(np.searchsorted(undo_rows, rows), undo_rows.size - 1)
                hit = undo_rows[position] == rows
                values[hit] = undo_values[position[hit]]
        if table.quantization is not None:
            lower, upper, buckets = table.quantization
            values = self.engine.quantize(values, lower, upper, buckets)
        return values

    def checkpoint_step(self, arrays: Mapping[str, Any], source: str | None = None) -> int:
        """The step number of a checkpoint (``checkpoint.checkpoint_step``)."""
        return checkpoint_step(arrays, source)

    def _table_input(
        self, table: TablePlan, checked: list[CheckedFeature], source: str | None
    ) -> TableInput:
        """The occurrences of ``table`` in a step (``fused.table_input``) and, for a table the
        compiled back-propagation runs, its features' empty bags."""
        return table_input(self.plan, self.engine, table, checked, self.step_index, source,
                           self._empty_bags if self._routes[table.name].backward else None)

    def _record(self, table: TablePlan, given: TableInput, unique: np.ndarray, inverse: np.ndarray,
                partials: tuple[Partial, ...], compiled: bool) -> TableDeduplication:
        return TableDeduplication(table.name, table.features, tuple(c.batch for c in given.feats),
                                  given.ids, given.gains, given.sample, unique, inverse, partials,
                                  compiled)

    def _forward(
        self, checked: list[CheckedFeature], source: str | None = None
    ) -> tuple[list[np.ndarray], DeduplicationData]:
        plan = self.plan
        activations: list[np.ndarray] = [np.zeros((0, 0), dtype=F32)] * len(checked)
        tables: dict[str, TableDeduplication] = {}
        inputs = [self._table_input(table, checked, source) for table in plan.tables]
        routes = [self._fused if self._routes[table.name].forward else None
                  for table in plan.tables]
        found = [
            fused.deduplicate(given.ids) if fused is not None
            else self.engine.deduplicate(given.ids)
            for given, fused in zip(inputs, routes, strict=True)
        ]
        # A remote storage reads every table's rows in one call per host (a local one: nothing).
        self.storage.prefetch([(table.name, unique) for table, (unique, _), fused
                      in zip(plan.tables, found, routes, strict=True) if fused is None])
        for table, given, fused, (unique, inverse) in zip(plan.tables, inputs, routes, found,
                                                          strict=True):
            ids = given.ids
            if fused is not None:
                # Rows read straight from the live table: no gathered copy (spec section 3).
                assert self._live is not None  # the compiled route runs on live arrays
                rows, _ = self._live.local(table.name, unique)
            else:
                rows = self._snapshot_rows(table, unique)
            start = 0
            for f, c, g in zip(table.features, given.feats, given.gains_list, strict=True):
                stop = start + c.ids.shape[0]
                if fused is not None:
                    # By id: the same rows and sums as by ``inverse``, which ran the pass and
                    # back-propagation after it 2-3x slower (numba_step.lookup).
                    activations[f] = fused.lookup(rows, c.ids, None, g, c.row_splits)
                else:
                    activations[f] = self.engine.gather_combine(
                        rows, inverse[start:stop], g, c.row_splits
                    )
                    if plan.features[f].custom is not None:  # the callable, checked against it
                        activations[f] = combine_custom(
                            plan.features[f].custom, rows, inverse[start:stop], c.weights,
                            c.row_splits, activations[f], self.step_index,
                        )
                start = stop
            partials: list[Partial] = []
            if plan.updates:
                if table.accumulate:
                    partials.append(Partial(None, unique, inverse, None))
                else:
                    core_of = (np.concatenate(given.cores) if given.cores
                               else np.zeros(0, np.int64))
                    for core in range(plan.num_cores):
                        covered = np.flatnonzero(core_of == core)
                        core_rows, core_inverse = self.engine.deduplicate(ids[covered])
                        partials.append(Partial(core, core_rows, core_inverse, covered))
            tables[table.name] = self._record(table, given, unique, inverse, tuple(partials),
                                              fused is not None)
        return activations, self._recorded(checked, tables, inputs)

    def _forward_backprop(
        self, checked: list[CheckedFeature], grads: list[np.ndarray], source: str | None
    ) -> tuple[list[np.ndarray], DeduplicationData, tuple[list[Any], bool]]:
        """The forward pass and the compiled back-propagation of every table at once
        (``fused.forward_backprop``): the activations, the record and what ``_backward``
        updates from."""
        inputs = [self._table_input(table, checked, source) for table in self.plan.tables]
        assert self._live is not None  # the overlap runs on live local arrays
        found, records, computed, finite = forward_backprop(
            self._fused, self._live, self.plan.tables, inputs, grads, self._empty_bags,
            lambda t, g, u, i: self._record(t, g, u, i, (Partial(None, u, i, None),), True),
        )
        self.overlapped_steps += 1
        tables = {record.table: record for record in records}
        return ([found[f] for f in range(len(checked))],
                self._recorded(checked, tables, inputs), (computed, finite))

    def _recorded(
        self, checked: list[CheckedFeature], tables: dict[str, TableDeduplication],
        inputs: list[TableInput],
    ) -> DeduplicationData:
        """The step's record, pending for ``send_gradients``, and its report (``last_report``)."""
        dedup = DeduplicationData(step=self.step_index, tables=tables,
                                  batch_sizes=tuple(c.batch for c in checked), token=object())
        self._pending = dedup
        self.last_report = {
            table.name: table_report(self.plan, self.engine, table, tables[table.name],
                                     given.zero_bags)
            for table, given in zip(self.plan.tables, inputs, strict=True)
        } if self.report else {}
        return dedup

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
            check_gradient(g, self.plan, feature, batch, self.step_index,
                           finite=self._finite[feature.index])
            for g, feature, batch in zip(items, self.plan.features, dedup.batch_sizes, strict=True)
        ]

    def _backward(
        self,
        dedup: DeduplicationData,
        grads: list[np.ndarray] | None,
        rates: np.ndarray,
        source: str | None = None,
        backprop: tuple[list[Any], bool] | None = None,
    ) -> None:
        """``backprop``: what ``_forward_backprop`` computed for every table already."""
        self._pending = None
        if self.plan.updates and grads is not None:
            dynamic = tuple(float(r) for r in rates)
            # The compiled back-propagation of every fused table first (tables on several
            # threads): it checks the gradients it reads, and a refused step must change no
            # table (spec section 1).
            fused = [
                table for table in self.plan.tables
                if dedup.tables[table.name].compiled and self._routes[table.name].backward
            ]
            computed, finite = backprop if backprop is not None else backprop_tables(
                self._fused, fused, [dedup.tables[t.name] for t in fused], grads,
                self._empty_bags,
            )
            if not finite:
                for feature in self.plan.features:  # the first NaN or infinity, in feature order
                    if not self._finite[feature.index]:
                        check_finite(grads[feature.index], self.step_index, feature.index,
                                     source)
            fused_grads = {table.name: grad for table, grad in zip(fused, computed, strict=True)}
            # A storage that queues updates (``flush``: the Ray backend's, one call per host for
            # every table) gets every table's first, then the norms are read.
            deferred = self.storage.queues_updates
            finishing: list[tuple[TablePlan, np.ndarray | None, np.ndarray]] = []
            for table in self.plan.tables:
                record = dedup.tables[table.name]
                if table.name in fused_grads:
                    assert self._live is not None  # fused tables run on live arrays
                    squared, kept = update_table(
                        self._fused, self._live, table, record, fused_grads[table.name],
                        self._learning_rate(table, rates), UpdateContext(self.step_index, dynamic),
                    )
                    if kept is not None and not math.isfinite(squared):
                        self._kept.put(table, kept[0], kept[1:])
                    report = self.last_report.get(table.name)
                    if report is not None:
                        report.rows_updated = record.unique_ids.size if table.lazy else (
                            table.vocabulary
                        )
                        report.update_norm = float(np.sqrt(squared))
                    self._check_finite(table, record.unique_ids if table.lazy else None,
                                       squared, rates, (record, grads),
                                       self._kept.take_params(table))
                    continue
                # A non-finite result is reported by _check_finite, naming its cause, not by
                # NumPy.
                with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                    changed, before = self._update_table(table, record, stacked(table, grads),
                                                         rates, dynamic)
                    if deferred:
                        finishing.append((table, changed, before))
                    else:
                        self._finish_table(table, changed, before, rates, (record, grads))
            for index, (table, changed, before) in enumerate(finishing):
                try:
                    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                        self._finish_table(table, changed, before, rates,
                                           (dedup.tables[table.name], grads))
                except NumericalError:
                    # One table at a time would not have updated the later tables: undo them.
                    self.storage.discard(
                        [t.name for t, _, _ in finishing[index + 1:]])
                    raise
            self.storage.commit()
        self.last_learning_rates = rates
        self.step_index += 1

    def _check_finite(self, table: TablePlan, rows: np.ndarray | None, norm: float,
                      rates: np.ndarray, source: tuple[TableDeduplication, list[np.ndarray]],
                      before: np.ndarray | None) -> None:
        """After ``table``'s update: when ``norm`` (the update norm, or its square) is not
        finite, the update left parameters NaN or infinite (a step that stays finite pays
        nothing). The first one (``KeptRows.first_nonfinite``: its cause) is kept in
        ``self.nonfinite`` and said as a warning, or (``strict_finite``) raised as
        ``NumericalError``; a storage that can undo a step does not commit it then. Later
        ones are not diagnosed again."""
        if math.isfinite(norm) or (self.nonfinite is not None and not self.strict_finite):
            self._kept.drop(table)
            return
        values = np.asarray(self.storage.gather(table.name, rows))
        if np.isfinite(values).all():  # only the float32 difference overflowed
            self._kept.drop(table)
            return
        event = self._kept.first_nonfinite(self.step_index, table, rows, values,
                                           self._learning_rate(table, rates), rates, source,
                                           before)
        if self.strict_finite:
            raise NumericalError(
                event.message,
                parameter=event.parameter, value=event.rate, table=table.name)
        self.nonfinite = event
        warn(event)

    def _rate_source(self, table: TablePlan) -> tuple[str, str | None]:
        """Where ``table``'s learning rate comes from, in words, and the library parameter that
        set it (None: the configuration)."""
        if table.lr_constant is not None:
            return "the configuration's constant learning rate", None
        if self._spec_rates and table.lr_tag is not None:
            return (f"dynamic tag {table.lr_tag} of this step, from the spec's "
                    f"{self.plan.tag_rates[table.lr_tag].describe()}"), "spec"
        return (f"learning_rates[{table.lr_tag}], dynamic tag {table.lr_tag} of this step",
                "learning_rates")

    def _check_loaded(self, arrays: Mapping[str, Any], source: str | None,
                      step: int = 0) -> None:
        """A state loaded to start from (``initial_state``, a checkpoint): its first NaN or
        infinity (``nonfinite.loaded``) is said (``NonFiniteWarning``, kept in ``nonfinite``)
        or, ``strict_finite``, refused (``InputError`` naming the file, the key and the row)."""
        event = loaded(self.plan, arrays, source, step, strict=self.strict_finite)
        if event is not None and self.nonfinite is None:
            self.nonfinite = event
            warn(event)

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
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """Update ``table``'s rows from the step's gradients; return the rows changed (None:
        every row) and their values before (``_finish_table`` reads the update norm)."""
        lr = self._learning_rate(table, rates)
        changed: np.ndarray | None = None
        if table.lazy:
            if len(record.partials) == 1:
                changed = record.partials[0].rows
            else:
                changed = np.unique(np.concatenate([p.rows for p in record.partials]))
        before = self.storage.gather(table.name, changed)
        self._kept.keep(table, changed)
        for partial in record.partials:
            # Spec section 4: sum gains[j] * dA[sample[j]] per row over the covered occurrences.
            covered = partial.occurrences
            grad = self.engine.backprop_sum(
                d_activations,
                record.sample if covered is None else record.sample[covered],
                record.gains if covered is None else record.gains[covered],
                partial.inverse,
                partial.rows.shape[0],
            )
            self._update_rows(table, partial.rows, grad, lr, dynamic)
        return changed, before

    def _finish_table(self, table: TablePlan, changed: np.ndarray | None, before: np.ndarray,
                      rates: np.ndarray, source: tuple[TableDeduplication, list[np.ndarray]]
                      ) -> None:
        """After ``_update_table``: the report's rows and update norm, the finiteness check and
        the pipelining buffer of ``table``."""
        report = self.last_report.get(table.name)
        if report is not None:
            report.rows_updated = table.vocabulary if changed is None else int(changed.shape[0])
            report.update_norm = self.storage.change_norm(table.name, changed, before)
        self._check_finite(
            table, changed,
            report.update_norm if report is not None
            else self.storage.change_norm(table.name, changed, before),
            rates, source, before,
        )
        if self._pipelined:
            self._undo[table.name] = (changed, before)

    def _update_rows(
        self,
        table: TablePlan,
        rows: np.ndarray,
        grad: np.ndarray,
        lr: np.float32,
        dynamic: tuple[float, ...],
    ) -> None:
        """The per-row pipeline of spec section 6 for one partial: on ``rows`` (lazy), or on
        every row with ``grad`` for ``rows`` and zero for the others (non-lazy Adam/Lion; the
        pipeline densifies where the rows live, so no [V, D] gradient is built here)."""
        fn = RowPipeline(table, lr, UpdateContext(self.step_index, dynamic), self.engine)
        self.storage.update(table.name, rows, grad, fn)

    # ----------------------------------------------------------------------------------------
    # Row updates on their own

    @_one_at_a_time
    def apply_row_gradients(
        self,
        table: str,
        rows: Any,
        grad: Any,
        learning_rates: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        """Run the per-row pipeline of spec section 6 on ``rows`` of ``table`` with ``grad``.

        ``rows``: distinct ids in increasing order; ``grad``: float32 [len(rows), dim], already
        de-duplicated and summed per row (what back-propagation and the duplicate sum of spec
        sections 4-5 give for one partial). Gradient clipping, weight decay, the optimizer and
        weight clipping run as in a step (a non-lazy optimizer steps every row, the others
        ``rows``); ``learning_rates`` as for ``send_gradients``. The step number, the report and
        the pipelining buffers do not change: this is one partial's update, not a step. Raises
        ``InputError`` for an unknown table, bad rows or a gradient of the wrong shape.
        """
        plan = self._table_plan(table)
        ids = np.asarray(rows)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise InputError(
                f"rows of table {table!r}: expected a 1-D array of integer ids, found "
                f"dtype {ids.dtype} and shape {ids.shape}"
            )
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (ids[0] < 0 or ids[-1] >= plan.vocabulary or (ids[1:] <= ids[:-1]).any()):
            raise InputError(
                f"rows of table {table!r} must be distinct ids in increasing order within "
                f"[0, {plan.vocabulary}) (vocabulary_size); sort them with np.unique"
            )
        values = np.asarray(grad, dtype=F32)
        if values.shape != (ids.shape[0], plan.dimension):
            raise InputError(
                f"gradient of table {table!r}: shape {values.shape} found, expected "
                f"{(ids.shape[0], plan.dimension)} ([len(rows), dimension])"
            )
        if not self.plan.updates:
            raise UsageError(
                f"the configuration's mode is {self.plan.mode}: its tables never change"
            )
        rates = self._rates(learning_rates)
        dynamic = tuple(float(r) for r in rates)
        self._update_rows(plan, ids, values, self._learning_rate(plan, rates), dynamic)
        self.storage.commit()

    def _table_plan(self, name: str) -> TablePlan:
        for table in self.plan.tables:
            if table.name == name:
                return table
        names = ", ".join(repr(t.name) for t in self.plan.tables)
        raise InputError(f"no table {name!r}; the configuration's tables are {names}")


def _grad_of(item: FeatureInput | Mapping[str, Any]) -> Any:
    if isinstance(item, Mapping):
        return item.get("grad")
    return item.grad
