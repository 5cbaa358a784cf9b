"""Where the tables and slots live: the one interface the executor's step reaches them through.

The step logic (``core``) never indexes a table or slot array itself. It reads parameter rows
for the forward pass and for the report, hands each partial's row update to the storage, and
exports or imports whole states for checkpoints; nothing else. So a second implementation - the
Ray-sharded one of ``tpuemb_cfg.backends.ray``, keeping each host's rows in its own actor - plugs
in without touching the step. The interface (:class:`Storage`):

``gather(table, rows) -> ndarray``
    a new float32 ``[len(rows), D]`` array of the parameter rows ``rows`` (sorted distinct int64
    ids) of table ``table``; ``rows=None``: a copy of the whole table (a remote storage may
    keep that copy where the rows live and return an array-like standing for it, which
    ``np.asarray`` fetches and :func:`rows_of` reads rows of). Reads only.
``update(table, rows, grad, fn)``
    run ``fn(params, slots, rows, grad)`` where the rows live: ``params`` and ``slots`` are the
    arrays holding them (a shard may pass its local arrays and local row numbers with the
    matching rows of ``grad``), and ``fn`` updates ``params[rows]`` and each ``slot[rows]`` in
    place (the per-row pipeline of spec section 6, ``pipeline.RowPipeline``). For a non-lazy
    optimizer ``fn`` steps every row of the arrays it is given, those not in ``rows`` with a zero
    gradient (so a shard holding none of the touched rows is still called); ``rows=None``: every
    row, ``grad`` [V, D]. ``fn``
    (a ``pipeline.RowPipeline``) holds only plain values - the table's plan, the rate, the step
    context, the engine - so it can be shipped to a remote shard (with cloudpickle, as Ray does).
``change_norm(table, rows, before) -> float``
    the Euclidean norm (float64) of ``params[rows] - before``, ``before`` being what
    ``gather(table, rows)`` returned before the updates (the report's ``update_norm``; a shard
    returns its sum of squares and the caller adds them).
``commit()``
    the step's updates are final (called once after a step's last ``update``): a storage that
    can roll a step back (the Ray one, when a host fails mid-step) forgets how.
``arrays() -> dict``
    every table and slot under its state-file key (``table/NAME``, ``slot/NAME/SLOT``): the live
    arrays for a local storage, live array-likes a file writer streams for a remote one
    (checkpoint export).
``load(arrays)``
    replace every table and slot by ``arrays`` (state-file keys, checked by
    ``initial.initial_state``; checkpoint import).
``close()``
    release what the storage holds outside this process (nothing for a local one).

The calls beyond those seven, which a storage in this process has trivially (``LocalStorage``;
``BasicStorage`` adds them to a user's factory's ``RowStorage``):

``load_given(given, *, source=None)``
    replace every table and slot by given state-file arrays (a checkpoint's), checked exactly
    (``InputError`` naming ``source``), where the rows live; a local storage checks them here
    and calls ``load``.
``prefetch([(table, rows), ...])``
    the step reads every table's rows at once; the next ``gather`` calls of those arrays return
    them (a remote storage: one call per host; a local one: nothing).
``queues_updates``
    whether ``update`` only queues: the executor then updates every table before reading the
    first ``change_norm`` (which sends the queue), and when that table's check raises
    ``NumericalError`` it has the storage put back the step's later tables (``discard``), which
    one table at a time would not have touched. ``flush()`` sends the queue. A local storage
    queues nothing (False; ``flush`` and ``discard`` do nothing).
``live()``
    the arrays when they live in this process (:class:`LiveArrays`: ``local``,
    ``live_params``; the compiled step reads and updates them in place), else None.

:class:`LocalStorage` keeps NumPy arrays in this process and runs the engine's kernels on them.
The Ray storage queues and prefetches: a step is one call per host for the reads and one for
the updates.

**Backends.** The executor opens its storage through a :class:`Backend` chosen by name in
:data:`BACKENDS` (``name -> "module:attribute"``, imported when chosen, so the executor imports
no backend): ``local`` (``executor.local``) and ``ray`` (``tpuemb_cfg.backends.ray.storage``).
:func:`register_backend` adds one. A backend is a descriptor: its name, whether its tables are
in this process, its own errors, its options record made from named settings
(:func:`placement` makes a ``Placement`` so, the settings it would ignore refused), the session
a command runs in, and ``open(request)``, which gets a :class:`StorageRequest` (the plan, the
engine, the initial arrays, the run options and the placement's options record).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from tpuemb_cfg.base.errors import UsageError

from .engines import Engine
from .initial import initial_state as make_initial_state
from .options import Placement, RunOptions
from .plan import Plan
from .state import Pending, slot_key, table_key

__all__ = [
    "BACKENDS", "Backend", "BasicStorage", "LiveArrays", "LocalStorage", "RowStorage",
    "RowUpdate", "Storage", "StorageRequest", "backend_options", "choose_backend", "load_checked",
    "placement", "refuse_settings", "register_backend", "rows_of",
]

#: ``fn(params, slots, rows, grad)``: update ``rows`` (None: every row) of the arrays in place.
RowUpdate = Callable[[np.ndarray, tuple[np.ndarray, ...], np.ndarray | None, np.ndarray], None]


class LiveArrays(Protocol):
    """The arrays of a storage that live in this process (``LocalStorage``): what the compiled
    step reads and updates in place (``LocalStorage.local``, ``LocalStorage.live_params``)."""

    def local(
        self, table: str, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]: ...

    def live_params(
        self, table: str, ids: np.ndarray, missing: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> np.ndarray: ...


class RowStorage(Protocol):
    """The seven calls a storage made by a user's factory (``custom_backend``) offers; the
    executor reaches it through :class:`BasicStorage`, which adds the rest of :class:`Storage`."""

    def gather(self, table: str, rows: np.ndarray | None) -> np.ndarray: ...

    def update(
        self, table: str, rows: np.ndarray | None, grad: np.ndarray, fn: RowUpdate
    ) -> None: ...

    def change_norm(self, table: str, rows: np.ndarray | None, before: np.ndarray) -> float: ...

    def commit(self) -> None: ...

    def arrays(self) -> dict[str, np.ndarray]: ...

    def load(self, arrays: Mapping[str, np.ndarray]) -> None: ...

    def close(self) -> None: ...


class Storage(RowStorage, Protocol):
    """The tables and slots of one executor: every call the executor makes on them (see the
    module docstring for the contract). The calls beyond :class:`RowStorage` are trivial for a
    storage in this process (``LocalStorage``, ``BasicStorage``)."""

    def load_given(self, given: Mapping[str, Any], *, source: str | None = None) -> None: ...

    def prefetch(self, requests: Sequence[tuple[str, np.ndarray]]) -> None: ...

    @property
    def queues_updates(self) -> bool: ...

    def flush(self) -> None: ...

    def discard(self, tables: Sequence[str]) -> None: ...

    def live(self) -> LiveArrays | None: ...


@dataclass(frozen=True)
class StorageRequest:
    """What a backend opens a storage from: the ``plan``, the ``engine``, the ``given`` initial
    arrays by state-file key (tables with a callable initializer already called; the others
    default from ``options.seed``), ``source``/``strict`` for errors about them and their
    dtypes, the run ``options`` (the memory limit) and ``backend_options`` (the placement's
    options record, the backend's own: None for its defaults)."""

    plan: Plan
    engine: Engine
    given: Mapping[str, Any] | None
    source: str | None
    strict: bool
    options: RunOptions
    backend_options: object | None = None


def refuse_settings(backend: str, names: Sequence[str]) -> None:
    """``UsageError`` when ``names`` (settings given) is not empty: ``backend`` does not use
    them (a setting silently ignored would mislead)."""
    wrong = list(names)
    if wrong:
        raise UsageError(f"{'= and '.join(wrong)}= not used by backend={backend!r} (it would "
                         f"be ignored); remove {'it' if len(wrong) == 1 else 'them'}")


class Backend(Protocol):
    """A storage backend: everything the executor and the run layer know of it.

    ``name``: its name (a key of :data:`BACKENDS`); ``in_process``: whether its tables are
    this process's memory (a caller's own memory check then counts them); ``errors``: its own
    errors a command reports as one line (the Ray backend's lost host); ``settings(given)``:
    its options record of the named settings ``given`` (only those given, not None), the
    settings it does not use refused (``refuse_settings``); ``session(options)``: a context a
    command runs in (the Ray backend's connection to the cluster; nothing for a local one);
    ``open(request)``: the storage of ``request``.
    """

    @property
    def name(self) -> str: ...

    @property
    def in_process(self) -> bool: ...

    @property
    def errors(self) -> tuple[type[Exception], ...]: ...

    def settings(self, given: Mapping[str, Any]) -> object | None: ...

    def session(self, options: object | None) -> AbstractContextManager[None]: ...

    def open(self, request: StorageRequest) -> Storage: ...

    # What a run asks besides the storage (``executor.hooks.RunHooks``: the local answers).
    @property
    def options(self) -> tuple[str, ...]: ...

    def runtime_env(self, text: str | None) -> dict[str, Any] | None: ...

    def read_state(self) -> Callable[..., Any]: ...

    def plan(self, plan: Any, placement: Any, limit: int | None,
             machine_memory: Callable[[], int | None],
             say: Callable[[Any], str] = str) -> dict[str, Any] | None: ...

    def plan_lines(self, shown: Mapping[str, Any]) -> list[str]: ...

    def lost(self, hint: str | Callable[[], str]) -> AbstractContextManager[None]: ...

    def phase(self, name: str) -> AbstractContextManager[None]: ...


#: The storage backends by name: ``"module:attribute"`` of a :class:`Backend`, imported when
#: chosen (``choose_backend``).
BACKENDS: dict[str, str] = {
    "local": "tpuemb_cfg.executor.local:LOCAL",
    "ray": "tpuemb_cfg.backends.ray.storage:RAY",
}


def register_backend(name: str, target: str) -> None:
    """Make ``name`` choose the backend at ``target`` (``"module:attribute"``)."""
    if ":" not in target:
        raise ValueError(f"backend {name!r}: expected 'module:attribute', found {target!r}")
    BACKENDS[name] = target


def choose_backend(backend: str | object) -> Backend:
    """The :class:`Backend` named ``backend`` (imported now), or ``backend`` itself;
    ``UsageError`` for a name not in :data:`BACKENDS`."""
    if not isinstance(backend, str):
        return cast(Backend, backend)
    target = BACKENDS.get(backend)
    if target is None:
        raise UsageError(f"unknown backend {backend!r}; expected "
                         + " or ".join(sorted(BACKENDS)))
    module, _, attribute = target.partition(":")
    found: Backend = getattr(importlib.import_module(module), attribute)
    return found


def backend_options() -> dict[str, str]:
    """Every option only one backend reads (``ray_address``, ...), with that backend's name."""
    owners: dict[str, str] = {}
    for name in BACKENDS:
        owners.update(dict.fromkeys(choose_backend(name).options, name))
    return owners


def placement(backend: str | object = "local", **settings: Any) -> Placement:
    """The :class:`Placement` of ``backend`` (a name of :data:`BACKENDS` or a :class:`Backend`)
    with its options record made by the backend from ``settings`` (a None value: not given;
    for the Ray backend ``shards``, ``ray_address``, ``runtime_env``, ``ship``): an unknown
    backend or a setting it would ignore raises ``UsageError``."""
    given = {name: value for name, value in settings.items() if value is not None}
    return Placement(backend, choose_backend(backend).settings(given))


def rows_of(whole: np.ndarray, rows: np.ndarray, engine: Engine) -> np.ndarray:
    """Rows ``rows`` of a whole-table copy ``gather(table, None)`` returned: through the engine
    for a local array, by the array-like's own ``take`` for a copy kept by a remote storage."""
    if isinstance(whole, np.ndarray):
        return engine.gather(whole, rows)
    taken: np.ndarray = whole.take(rows)
    return taken


class Unqueued:
    """The declared calls of a storage that neither batches reads nor queues updates: every
    read costs the same (nothing to prefetch) and every update is made when asked for."""

    def prefetch(self, requests: Sequence[tuple[str, np.ndarray]]) -> None:
        """Nothing to batch: each ``gather`` reads."""

    @property
    def queues_updates(self) -> bool:
        """Updates are made when asked for, one table at a time."""
        return False

    def flush(self) -> None:
        """Nothing is queued."""

    def discard(self, tables: Sequence[str]) -> None:
        """Nothing is queued (``queues_updates`` is False: never called)."""


class LocalStorage(Unqueued):
    """Every table and slot as a NumPy array of this process, worked on by ``engine``.

    ``arrays``: the state-file keys of ``initial.initial_state`` (the arrays are kept, not copied).
    Default rows still pending there (``initial_state(lazy=True)``) are computed when first
    read or written (a gather, an update, ``local``) or exported (``arrays``), so a run that
    touches a small part of a large table never computes the rest until it writes the table.
    """

    def __init__(self, plan: Plan, arrays: Mapping[str, np.ndarray], engine: Engine) -> None:
        self._plan = plan
        self._engine = engine
        self._lazy = {table.name: table.lazy for table in plan.tables}
        self._params: dict[str, np.ndarray] = {}
        self._slots: dict[str, tuple[np.ndarray, ...]] = {}
        self._pending: dict[str, Pending] = {}
        self.load(arrays)

    def _materialize(self, table: str, rows: np.ndarray | None) -> None:
        pending = self._pending.get(table)
        if pending is not None and pending.materialize(
            self._params[table], self._slots[table], rows
        ):
            del self._pending[table]

    def gather(self, table: str, rows: np.ndarray | None) -> np.ndarray:
        self._materialize(table, rows)
        params = self._params[table]
        return params.copy() if rows is None else self._engine.gather(params, rows)

    def update(
        self, table: str, rows: np.ndarray | None, grad: np.ndarray, fn: RowUpdate
    ) -> None:
        self._materialize(table, rows if self._lazy[table] else None)
        fn(self._params[table], self._slots[table], rows, grad)

    def change_norm(self, table: str, rows: np.ndarray | None, before: np.ndarray) -> float:
        return self._engine.change_norm(self._params[table], rows, before)

    def local(
        self, table: str, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """The live parameter and slot arrays of ``table``, with ``rows`` (sorted distinct ids;
        None: every row) holding their values (not part of ``Storage``): a storage in this
        process offers them so that compiled steps (the numba engine's forward pass and fused
        update) read and update the rows in place, without gathered copies."""
        self._materialize(table, rows)
        return self._params[table], self._slots[table]

    def live_params(
        self, table: str, ids: np.ndarray, missing: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """The live parameter array of ``table`` with the rows ``ids`` (any order, repeated)
        holding their values (not part of ``Storage``): what a forward pass reading rows by id,
        before any de-duplication, needs. ``missing(done, ids)``: the sorted distinct ids whose
        row is not done in the ``Pending.done`` bitmap (the compiled step's
        ``numba_step.missing_rows``); those are computed first."""
        pending = self._pending.get(table)
        if pending is not None:
            rows = missing(pending.done, ids)
            if rows.size:
                self._materialize(table, rows)
        return self._params[table]

    def commit(self) -> None:
        """Updates are made in place: nothing to finish."""

    def close(self) -> None:
        """Nothing is held outside this process."""

    def load_given(self, given: Mapping[str, Any], *, source: str | None = None) -> None:
        """Replace every table and slot by ``given``, checked exactly (``load_checked``)."""
        load_checked(self, self._plan, given, source)

    def live(self) -> LocalStorage:
        """The arrays live in this process: ``local`` and ``live_params``."""
        return self

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for table in self._plan.tables:
            self._materialize(table.name, None)
            out[table_key(table.name)] = self._params[table.name]
            for name, array in zip(table.slot_names, self._slots[table.name], strict=True):
                out[slot_key(table.name, name)] = array
        return out

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        self._pending = dict(getattr(arrays, "pending", {}))
        for table in self._plan.tables:
            self._params[table.name] = arrays[table_key(table.name)]
            self._slots[table.name] = tuple(
                arrays[slot_key(table.name, name)] for name in table.slot_names
            )


def load_checked(storage: RowStorage, plan: Plan, given: Mapping[str, Any],
                 source: str | None) -> None:
    """``storage.load`` of ``given`` (state-file arrays, every key present) checked exactly
    (float32 of the table's shape; ``InputError`` naming ``source``): a storage in this
    process's ``load_given``."""
    storage.load(make_initial_state(plan, given, 0, source, True))


class BasicStorage(Unqueued):
    """A :class:`Storage` of a :class:`RowStorage` (a user's factory's, ``custom_backend``):
    its seven calls, and the others as a storage in this process without live arrays has them
    (no batching, no queue; given arrays checked here)."""

    def __init__(self, inner: RowStorage, plan: Plan) -> None:
        #: The storage the factory made.
        self.inner = inner
        self._plan = plan

    def gather(self, table: str, rows: np.ndarray | None) -> np.ndarray:
        return self.inner.gather(table, rows)

    def update(
        self, table: str, rows: np.ndarray | None, grad: np.ndarray, fn: RowUpdate
    ) -> None:
        self.inner.update(table, rows, grad, fn)

    def change_norm(self, table: str, rows: np.ndarray | None, before: np.ndarray) -> float:
        return self.inner.change_norm(table, rows, before)

    def commit(self) -> None:
        self.inner.commit()

    def arrays(self) -> dict[str, np.ndarray]:
        return self.inner.arrays()

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.inner.load(arrays)

    def close(self) -> None:
        self.inner.close()

    def load_given(self, given: Mapping[str, Any], *, source: str | None = None) -> None:
        load_checked(self.inner, self._plan, given, source)

    def live(self) -> None:
        """No live arrays: the executor gathers copies."""
        return None
