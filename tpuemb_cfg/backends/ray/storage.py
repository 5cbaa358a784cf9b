"""The Ray backend: each host's rows in its own Ray actor, steps bit-identical to one machine.

``Executor(prepared, placement=Placement("ray"))`` keeps its tables and slots in a
:class:`RayStorage` (opened by :data:`RAY`, ``storage.BACKENDS["ray"]``): one Ray actor per host
(``num_hosts``, or ``shards`` for experiments), each running a ``host.Shard`` that allocates
only the rows ``sharding_strategy`` gives its host (spec section 8). The step logic does not
change (it reaches the tables only through the ``Storage`` interface); per step only touched
rows travel:

- **one call per host per phase**: the executor asks for every table's rows at once
  (``prefetch``) and the storage queues every table's updates (``update``) until the first
  norm is read (``flush``, also made by ``commit`` and by any read); each phase sends every
  host one Ray call holding all its tables' work (``host.call_many``), hosts in parallel, then
  collects the replies. A step costs two calls per host however many tables it has (the
  executor's ``discard`` puts back the later tables when an earlier one's update overflows,
  as one table at a time would have left them);
- **forward**: ``prefetch`` splits each table's sorted unique ids by host, each host returns its
  rows, the driver puts them back in id order (and keeps them for the pre-update read of the
  same rows, so they are not fetched twice); each host keeps the row numbers and values it
  read, under a key;
- **update**: the driver de-duplicates, combines, back-propagates and sums duplicates exactly as
  on one machine, then sends each host the per-row gradients of its rows (with the key of the
  rows it kept, when they are the rows read: the row numbers do not travel again, and the undo
  log takes the kept values instead of reading the rows again) and the per-row pipeline
  (``pipeline.RowPipeline``, as a ``host.PipelineRef``); the host runs it on its own arrays.
  Non-lazy optimizers step every row: each host receives its touched rows and steps the others
  with a zero gradient, which is what the local executor computes for them;
- **calls**: the hosts on the driver's node take their calls over a direct link (``link``: a
  Unix socket served by a thread of the actor, one frame each way per phase) instead of Ray's
  task calls, which cost the driver about a millisecond each; ``TPUEMB_RAY_LINK=0`` turns it
  off. The other hosts take theirs as Ray calls;
- **transport**: the hosts on the driver's machine exchange the step's rows through a
  shared-memory ``host.Arena`` (a file of ``/dev/shm`` both map, unlinked once mapped): the
  driver writes row numbers, positions and gradient rows there, each host writes the rows it
  reads straight at their positions in the step's block, and the Ray calls carry only a few
  numbers. The other hosts (another machine, or ``TPUEMB_RAY_SHARED_MEMORY=0``) get arrays
  through Ray's object store. Every call pickles its small arguments into one (``call``):
  Ray's per-argument handling costs more than the pickling;
- **all or nothing**: every host logs the rows it changes; when one host fails the driver
  rolls every other host back (``Shard.abort``) before raising, and ``commit`` (the end of the
  step, carried by each host's next call) drops the logs. An actor that dies raises
  :class:`ShardLost`, naming the host and the phase; the storage then refuses every call;
- **no hang**: every wait on the hosts (``_wait``) ends at Ray's report of a failure, at the
  first poll that finds a host's node dead in the cluster's node table, or at a deadline
  derived from the work waited for (``deadlines``), whichever comes first.

Whole tables never gather on the driver: ``arrays()`` and a non-lazy table's pre-step copy are
:class:`ShardedArray` objects - array-likes held by the shards that ``np.asarray`` fetches and
``npzio.write_npz`` streams into a file one block of rows at a time.

The hosts' update reports each of its rows' squared change (8 bytes a row), and the driver adds
them in global row order (``numerics.total``), so the update norm has the local backend's bits.
The connection to Ray, and the actors kept between storages, are ``connection``'s.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpuemb_cfg.base import numerics
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.errors import parameter as arg
from tpuemb_cfg.model.layout import HostRows, TableLayout

from ...executor.engines import Engine
from ...executor.initial import called_tables
from ...executor.partial import expand_partial
from ...executor.pipeline import RowPipeline
from ...executor.plan import Plan
from ...executor.state import check_given, slot_key, table_key
from ...executor.storage import RowUpdate, StorageRequest
from .calls import NODE_ID_CHARS, PARALLEL_BYTES, WHOLE_METHODS, Submitted
from .connection import (
    actor_env,
    connect,
    import_ray,
    keep_actors,
    ray_session,
)
from .deadlines import deadline_scale
from .describe import RayTools
from .errors import PHASES, HeadLost, NoAnswer, NodeLost, ShardLost
from .host import (
    Arena,
    PipelineRef,
    shard_bytes,
)
from .link import Link
from .options import RayOptions
from .placement import reservation
from .runtime_env import check_runtime_env
from .session import PLACEMENT_ENV, PLACEMENT_TIMEOUT, Lifecycle
from .transport import BLOCK_BYTES, SHM_DIR, ShardedArray

__all__ = ["BLOCK_BYTES", "LINK_ENV", "NODE_ID_CHARS", "PARALLEL_BYTES", "PHASES",
           "PLACEMENT_ENV", "PLACEMENT_TIMEOUT", "RAY", "SHARED_MEMORY_ENV", "SHM_DIR",
           "WHOLE_METHODS", "ActorOptions", "HeadLost", "NoAnswer", "NodeLost", "RayBackend",
           "RayOptions", "RayStorage", "ShardLost", "ShardedArray", "Submitted"]

F32 = np.float32
#: The variable that turns the use of shared memory (``transport.SHM_DIR``) off ("0").
SHARED_MEMORY_ENV = "TPUEMB_RAY_SHARED_MEMORY"
#: The variable that turns the direct links of the hosts on the driver's node off ("0").
LINK_ENV = "TPUEMB_RAY_LINK"


def _enabled(variable: str) -> bool:
    """Whether the environment leaves the feature ``variable`` turns off on (not "0")."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "no", "off", "false")


# ------------------------------------------------------------------------------------------------
# The storage


@dataclass(frozen=True)
class ActorOptions:
    """The host actors of a :class:`RayStorage`.

    ``shards``: the number of actors (default ``num_hosts``). ``max_memory``: each actor's limit
    in bytes; a host whose reservation (its estimate, ``host.shard_bytes``, and its process,
    ``placement.PROCESS_BYTES``) exceeds it is refused before anything is allocated, and so
    are hosts the cluster's nodes cannot place (``placement.plan_hosts``; checked either
    way). ``address``: as for :func:`connect` (used only when this process is not connected
    yet; the storage then owns the connection and ``close`` ends it). ``threads``: numba
    threads per actor (default: the cores of its machine divided among the actors on it).
    ``placement``: where new actors go - ``driver`` (the default): on the driver's Ray node
    while it has the memory they reserve (Ray's soft node affinity), so that the step's rows
    travel through shared memory instead of the object store, and on the other nodes after;
    ``spread``: over the nodes (Ray's ``SPREAD``), for tables that need every node's memory
    anyway. None: the environment's ``TPUEMB_RAY_PLACEMENT``, else ``driver``.
    ``runtime_env``: Ray's ``runtime_env`` of the actors (``pip``, ``env_vars``,
    ``working_dir`` ...; checked before anything starts); ``ship``: whether the driver adds its
    own ``tpuemb_cfg`` to it (``py_modules``), so that nodes without tpuemb run the actors -
    not done on a local instance this process started, whose workers import what it imports
    (``runtime_env.actor_runtime_env`` says how the two merge).
    ``deadline_scale``: the factor of every deadline the storage waits for its hosts with
    (``deadlines``; None: the environment's ``TPUEMB_RAY_DEADLINE_SCALE``, else 1).
    """

    shards: int | None = None
    max_memory: int | None = None
    address: str | None = None
    threads: int | None = None
    placement: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    ship: bool = True
    deadline_scale: float | None = None


class RayStorage(Lifecycle):
    """Every table and slot of ``plan``, each host's rows in its own Ray actor (a ``Storage``).

    ``given``: initial arrays by state-file key (checked like ``executor.initial.initial_state``: an
    unknown key, a wrong dtype - ``strict``: anything but float32 - or a wrong shape raises
    ``InputError`` naming ``source``); the hosts initialise the others from ``seed``.
    ``actors``: the number, memory limit, cluster and threads of the host actors
    (:class:`ActorOptions`; None: every default). The hosts on the driver's machine
    exchange a step's rows through a shared-memory ``host.Arena`` instead of Ray's object
    store where ``/dev/shm`` exists, unless the environment sets
    ``TPUEMB_RAY_SHARED_MEMORY=0``; the results are the same either way.
    """

    def __init__(
        self,
        plan: Plan,
        engine: Engine,
        *,
        given: Mapping[str, Any] | None = None,
        seed: int = 0,
        source: str | None = None,
        strict: bool = False,
        actors: ActorOptions | None = None,
    ) -> None:
        actors = actors or ActorOptions()
        shards, max_memory = actors.shards, actors.max_memory
        self.plan = plan
        self.engine = engine
        self.hosts = int(shards if shards is not None else plan.num_hosts)
        if self.hosts < 1:
            raise UsageError(f"{arg('shards')} {self.hosts}: a table needs at least one host")
        self._tables = {t.name: t for t in plan.tables}
        self.layouts = {t.name: TableLayout(t.vocabulary, self.hosts, plan.mod_sharding)
                        for t in plan.tables}
        given = dict(given or {})
        check_given(plan, given, source, strict)
        self.estimates = [shard_bytes(plan, h, self.hosts) for h in range(self.hosts)]
        #: What each host's actor reserves: its estimate and its process (``placement``).
        self.reservations = [reservation(e) for e in self.estimates]
        if max_memory is not None:
            self._check_limit(max_memory, "the memory limit of one actor",
                              f"raise {arg('max_memory')}")
        #: Payload bytes sent to (column 0) and received from (column 1) each host so far.
        self.traffic = np.zeros((self.hosts, 2), dtype=np.int64)
        self._actors: list[Any] = []
        self._reserved: list[int] = []
        self._broken: ShardLost | None = None
        self._dead: set[int] = set()  # hosts whose actor is lost (never kept for reuse)
        self._senders: ThreadPoolExecutor | None = None
        self._open = False  # a step's updates are under way (not committed)
        self._step = 0  # the number of the open (or last) step, as the hosts log it
        self._unconfirmed: set[int] = set()  # hosts not yet told the last step is complete
        self._version = 0
        # Per table: (the rows read, what the next gathers of the same array return).
        self._cache: dict[str, tuple[np.ndarray, list[np.ndarray]]] = {}
        # Queued pre-step copies and updates (``update``, ``flush``), and what the last flush
        # measured of the changes: (kind, table) -> (version or step, the hosts' results).
        self._ops: list[tuple[Any, ...]] = []
        self._flushing = False
        self._measured: dict[tuple[str, str], tuple[int, list[Any]]] = {}
        #: Ray calls made to each host so far (a batch of calls to one host is one).
        self.calls = np.zeros(self.hosts, dtype=np.int64)
        self._splits: dict[str, tuple[np.ndarray, list[HostRows]]] = {}
        self._pipelined = plan.pipelined and plan.mode == "TRAINING"  # as the executor's
        # Per table, the sums of squares of its updates of the open step (one per update).
        self._sumsq: dict[str, list[float]] = {}  # per table, each update's squared norm
        self._want_shared = _enabled(SHARED_MEMORY_ENV) and os.path.isdir(SHM_DIR)
        self._local_hosts: list[int] = []  # hosts on the driver's machine (by Ray node id)
        self._want_links = _enabled(LINK_ENV)
        #: The hosts on the driver's node called over a direct link (``link.Link``), not Ray.
        self.links: dict[int, Link] = {}
        #: The hosts that map the arena (a subset of the local hosts, once it exists).
        self.shared: set[int] = set()
        self._arena: Arena | None = None
        self._reads = 0  # the key of the last rows read through the arena
        self._kept: dict[str, tuple[np.ndarray, int]] = {}  # table: (rows, key) the hosts keep
        self._updated: set[str] = set()  # optimizers updated so far (``HostCalls._work``)
        self._scale = deadline_scale(actors.deadline_scale)  # of every wait (``_wait``)
        self._nodes: list[str] = []  # per host, the Ray node id of its actor
        self._addresses: dict[str, str] = {}  # Ray node id: its address, for messages
        self._ray = import_ray()
        given_env = None if actors.runtime_env is None else check_runtime_env(actors.runtime_env)
        self._owns_session = connect(actors.address, runtime_env=given_env, ship=actors.ship)
        #: Whether the actors carry this tpuemb (``py_modules``); the env each actor is given.
        self.shipped, self._runtime_env = actor_env(self._ray, given_env, actors.ship)
        self._kind = json.dumps(self._runtime_env, sort_keys=True)  # actors reused only alike
        self._release = weakref.finalize(self, keep_actors, self._ray, self._actors, self._reserved,
                                         self._dead, self._kind)
        try:
            self._check_cluster()
            self._start(actors.threads, actors.placement)
            allocated = self._submit([(h, "allocate", (seed, frozenset(given)))
                                      for h in range(self.hosts)])
            self._ship(given, allocated)  # a host runs its calls in order: allocate first
        except BaseException:
            self._dead.update(range(len(self._actors)))  # half set up: none is kept
            self.close()
            raise

    # ------------------------------------------------------------------------------------------
    # The Storage interface

    def gather(self, table: str, rows: np.ndarray | None) -> np.ndarray:
        """Rows ``rows`` of ``table`` from their hosts, in id order; ``rows=None``: a pre-step
        copy of the whole table, kept by the hosts (a :class:`ShardedArray`; the copy is made
        with the next call to the hosts, before any later update)."""
        if rows is None:
            return self._snapshot(table)  # type: ignore[return-value]
        cached = self._cache.get(table)
        if cached is not None and cached[0] is rows:
            value = cached[1].pop(0)  # read already (``prefetch``, or the forward pass's)
            if not cached[1]:
                del self._cache[table]
            return value
        self._cache.pop(table, None)
        out = self._read([(table, rows)])[0]
        # A pipelined forward pass overwrites rows of what it read with older values: keep a
        # copy for the pre-update read; otherwise nobody writes into the rows read.
        self._cache[table] = (rows, [out.copy() if self._pipelined else out])
        return out

    def prefetch(self, requests: Sequence[tuple[str, np.ndarray]]) -> None:
        """Read the rows of several tables at once - ``(table, rows)``, rows sorted distinct
        ids - in one call per host (not one per table): the next two ``gather`` calls of each
        table with the same ``rows`` array (the forward pass's and the update's pre-step read)
        return them without a call."""
        wanted = [(table, rows) for table, rows in requests if rows is not None]
        for (table, rows), out in zip(wanted, self._read(wanted), strict=True):
            self._cache[table] = (rows, [out, out.copy() if self._pipelined else out])

    @property
    def queues_updates(self) -> bool:
        """``update`` queues; ``flush`` (made by any read) sends the queue."""
        return True

    def live(self) -> None:
        """The arrays live in the actors: none in this process."""
        return None

    def update(self, table: str, rows: np.ndarray | None, grad: np.ndarray, fn: RowUpdate) -> None:
        """Queue the update of ``rows`` of ``table`` with ``grad`` and ``fn``; every host of a
        non-lazy table steps (its untouched rows with a zero gradient). The queued updates of
        all tables go with the next call to the hosts (``flush``: one Ray call per host), which
        ``change_norm``, ``commit`` and every read make first. All hosts or none (``commit``)."""
        if self._broken is not None:
            raise self._broken
        self._cache.pop(table, None)
        if rows is None:
            self._kept.pop(table, None)
        if isinstance(fn, RowPipeline) and fn.table is self._tables[table]:
            fn = PipelineRef(fn.lr, fn.ctx)  # type: ignore[assignment]  # the shard rebuilds it
        if not self._open:
            self._open = True
            self._step += 1
        self._ops.append(("update", table, rows, grad, fn, self._step))

    def flush(self) -> None:
        """Send the queued pre-step copies and updates - every host's in one Ray call, hosts in
        parallel - with, after them, the change measurements their update norms need (a
        non-lazy table's per-row change against its copy; a lazy table updated several times:
        each row against its pre-step value), and wait for all. A host that fails rolls the
        open step back on every host (``_collect``)."""
        ops, self._ops = self._ops, []
        if not ops:
            return
        self._flushing = True
        try:
            self._send(ops)
        finally:
            self._flushing = False

    def _send(self, ops: list[tuple[Any, ...]]) -> None:
        arena: Arena | None = None
        if self._local_hosts:
            need = sum(self._placement_bytes(self._update_parts(op[1], op[2]), op[3].nbytes)
                       for op in ops if op[0] == "update" and op[2] is not None)
            if need:
                arena = self._arena_for(need)
        calls: list[tuple[int, str, tuple[Any, ...]]] = []
        changed: list[tuple[str, np.ndarray, int]] = []  # lazy updates: (table, rows, start)
        copies: dict[str, int] = {}  # the tables copied in this batch: their version
        updated: dict[str, int] = {}  # the tables updated in this batch: how many times
        step = self._step
        for op in ops:
            if op[0] == "snapshot":
                _, table, version = op
                copies[table] = version
                calls += [(h, "snapshot", (table, version)) for h in range(self.hosts)]
                continue
            _, table, rows, grad, fn, step = op
            updated[table] = updated.get(table, 0) + 1
            if rows is None:
                layout = self.layouts[table]
                calls += [(h, "update", (table, None, grad[layout.global_ids(h)], fn, step))
                          for h in range(self.hosts)]
                continue
            if self._tables[table].lazy:
                changed.append((table, rows, len(calls)))
            calls += (self._update_shared(arena, table, rows, grad, fn, step) if arena is not None
                      else self._update_calls(table, rows, grad, fn, step))
        measures: list[tuple[str, str, int, int]] = []  # (kind, table, version/step, start)
        for table, version in copies.items():
            if table in updated:
                measures.append(("copy", table, version, len(calls)))
                calls += [(h, "change_sumsq", (table, version)) for h in range(self.hosts)]
        for table, count in updated.items():
            if count > 1 and self._tables[table].lazy:
                measures.append(("rows", table, step, len(calls)))
                calls += [(h, "change_sumsq_rows", (table, step)) for h in range(self.hosts)]
        values = self._run(calls, lambda host: self._doing(host, calls))
        for table, rows, start in changed:
            # The hosts' per-row changes back in the order of ``rows`` (the calls follow the
            # hosts with rows, as ``_update_calls`` and ``_update_shared`` make them).
            parts = [p for p in self._split(table, rows) if p.count]
            ordered = np.zeros(rows.shape[0], dtype=np.float64)
            for part, change in zip(parts, values[start:start + len(parts)], strict=True):
                ordered[part.positions] = change
            self._sumsq.setdefault(table, []).append(numerics.total(ordered))
        for kind, table, key, start in measures:
            self._measured[kind, table] = (key, values[start:start + self.hosts])

    def discard(self, tables: Sequence[str]) -> None:
        """Put back, on every host, what the open step changed of ``tables`` (the executor's
        check of an earlier table's update failed: one table at a time, these would not have
        been updated); the step's other tables stay as they are, uncommitted."""
        self._settle()
        if not tables or not self._open:
            return
        for table in tables:
            self._cache.pop(table, None)
            self._kept.pop(table, None)
            self._sumsq.pop(table, None)
        self._run([(h, "undo_tables", (self._step, list(tables))) for h in range(self.hosts)],
                  "undoing the update of later tables")

    def commit(self) -> None:
        """Every host applied the step: they may drop its undo log. No message of its own: the
        confirmation rides on each host's next call (``Shard.call``), which runs first."""
        self._settle()
        if self._open:
            self._unconfirmed = set(range(self.hosts))
        self._open = False
        self._sumsq.clear()
        self._measured.clear()

    def _measure(self, kind: str, table: str, key: int, method: str) -> list[Any]:
        """The hosts' change measurement ``method`` of ``table`` (``key``: the copy's version or
        the step): what the last ``flush`` measured, else a call to every host now."""
        found = self._measured.pop((kind, table), None)
        if found is not None and found[0] == key:
            return list(found[1])
        return self._run([(h, method, (table, key)) for h in range(self.hosts)],
                         f"summing the change of table {table!r}")

    def change_norm(self, table: str, rows: np.ndarray | None, before: np.ndarray) -> float:
        """The update norm: the hosts' per-row squared changes (``before`` a pre-step
        ShardedArray for a whole table) added in global row order, as the local engines add
        them (``numerics.total``): the same bits as one process."""
        self._settle()
        layout = self.layouts[table]
        if rows is None:
            copy = before if isinstance(before, ShardedArray) else None
            if copy is None:
                raise TypeError("change_norm of a whole sharded table needs its pre-step copy")
            version = int(copy.key.rsplit("/", 1)[1])
            changes = self._measure("copy", table, version, "change_sumsq")
            ordered = np.zeros(layout.vocabulary, dtype=np.float64)
            for h, change in enumerate(changes):
                ordered[layout.global_ids(h)] = change
            return float(np.sqrt(numerics.total(ordered)))
        sums = self._sumsq.pop(table, [])
        if len(sums) == 1:
            return float(np.sqrt(sums[0]))
        # several partial updates: each row against its pre-step value
        found = self._measure("rows", table, self._step, "change_sumsq_rows")
        ordered = np.zeros(rows.shape[0], dtype=np.float64)
        for h, (local, change) in enumerate(found):
            ordered[np.searchsorted(rows, layout.global_of(h, local))] = change
        return float(np.sqrt(numerics.total(ordered)))

    def arrays(self) -> dict[str, Any]:
        """Every table and slot under its state-file key, as live ShardedArrays."""
        out: dict[str, Any] = {}
        for table in self.plan.tables:
            shape = (table.vocabulary, table.dimension)
            out[table_key(table.name)] = ShardedArray(self, table_key(table.name), table.name,
                                                      shape)
            for name in table.slot_names:
                key = slot_key(table.name, name)
                out[key] = ShardedArray(self, key, table.name, shape)
        return out

    def load(self, arrays: Mapping[str, Any]) -> None:
        """Replace every table and slot by ``arrays`` (checked state-file arrays)."""
        self.load_given(arrays, strict=False)

    def load_given(self, given: Mapping[str, Any], *, seed: int = 0, source: str | None = None,
                   strict: bool = True) -> None:
        """Replace every table and slot: the arrays ``given`` (checked as for the constructor),
        the defaults of ``seed`` for the others; a host's rows are sent a block at a time."""
        check_given(self.plan, given, source, strict)
        self._settle()
        self._cache.clear()
        self._kept.clear()
        missing = [key for key in self.arrays() if key not in given]
        self._ship(given, self._submit([(h, "put_defaults", (key, seed))
                                        for key in missing for h in range(self.hosts)]))


# ------------------------------------------------------------------------------------------------
# The backend


@dataclass(frozen=True)
class RayBackend(RayTools):
    """Opens a :class:`RayStorage` (``storage.BACKENDS["ray"]``): the placement's options
    (:class:`~tpuemb_cfg.backends.ray.options.RayOptions`: ``shards``, ``ray_address``,
    ``runtime_env`` and ``ship``); ``max_memory`` is each host actor's limit, its process
    included (the nodes' available memory is checked either way), always checked
    (``check_memory=False`` is refused). Its own error: :class:`ShardLost`."""

    name: str = "ray"

    @property
    def in_process(self) -> bool:
        return False

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        return (ShardLost,)

    def settings(self, given: Mapping[str, Any]) -> RayOptions:
        return RayOptions.of(given, self.name)

    def session(self, options: object | None) -> AbstractContextManager[None]:
        """Connected to Ray for a command (``connection.ray_session``: a local instance
        started and stopped, or the cluster at ``ray_address``/``RAY_ADDRESS`` joined and
        left)."""
        found = self._options(options)
        return ray_session(found.ray_address, runtime_env=found.runtime_env, ship=found.ship)

    def _options(self, options: object | None) -> RayOptions:
        if options is None:
            return RayOptions()
        if not isinstance(options, RayOptions):
            raise UsageError(f"{type(options).__name__}: options of another backend, not used "
                             f"by backend={self.name!r}; give RayOptions")
        return options

    def open(self, request: StorageRequest) -> RayStorage:
        options, plan = request.options, request.plan
        found = self._options(request.backend_options)
        if not options.check_memory:
            raise UsageError("check_memory=False: not used by backend='ray', which always "
                             "checks each host actor's memory (it would be ignored); remove it")
        # A table whose spec initializer is a Python callable: called once, then given.
        given = called_tables(plan, request.given, request.source)
        if given is not None:  # partial tables: whole arrays read block by block
            given = expand_partial(plan, given, options.seed, request.source, request.strict)
        return RayStorage(
            plan, request.engine, given=given, seed=options.seed, source=request.source,
            strict=request.strict,
            actors=ActorOptions(shards=found.shards, max_memory=options.memory_limit,
                                address=found.ray_address, runtime_env=found.runtime_env,
                                ship=found.ship),
        )


RAY = RayBackend()
