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

import contextlib
import json
import os
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import numerics
from ...errors import TpuembError, UsageError
from ...errors import parameter as arg
from ...executor.engines import Engine
from ...executor.initial import called_tables
from ...executor.partial import expand_partial
from ...executor.pipeline import RowPipeline
from ...executor.plan import Plan
from ...executor.state import check_given, slot_key, table_key
from ...executor.storage import RowUpdate, StorageRequest
from ...layout import HostRows, TableLayout
from .connection import (
    actor_env,
    connect,
    disconnect,
    drop_idle,
    first_line,
    head_address,
    head_unreachable,
    idle_reservations,
    import_ray,
    keep_actors,
    session_token,
    start_failure,
    take_actor,
)
from .deadlines import DEADLINE_SCALE_ENV, POLL_SECONDS, Work, deadline_scale, seconds
from .host import (
    STALL_ENV,
    Arena,
    PipelineRef,
    Place,
    Positions,
    Shard,
    call,
    call_many,
    fitting_hosts,
    shard_bytes,
)
from .link import HostRaised, Link, LinkError
from .placement import PROCESS_BYTES, cluster_nodes, plan_hosts, reservation
from .runtime_env import check_runtime_env

__all__ = ["RAY", "ActorOptions", "RayBackend", "RayStorage", "ShardLost", "ShardedArray"]

F32 = np.float32
#: The directory of shared-memory files, and the variable that turns their use off ("0").
SHM_DIR = "/dev/shm"
SHARED_MEMORY_ENV = "TPUEMB_RAY_SHARED_MEMORY"
#: The variable that turns the direct links of the hosts on the driver's node off ("0").
LINK_ENV = "TPUEMB_RAY_LINK"
#: The variable that chooses where new host actors go (``ActorOptions.placement``).
PLACEMENT_ENV = "TPUEMB_RAY_PLACEMENT"
#: Bytes of one block of rows streamed from the shards (a file write, a fetch, a load).
BLOCK_BYTES = 32 << 20
#: Array bytes of one batch of calls above which each host's calls are sent by a thread.
PARALLEL_BYTES = 1 << 20
#: A submitted call: (host, the Ray reference of its reply, its position in a batch's replies
#: or None for a call of its own).
Submitted = tuple[int, Any, int | None]
#: Characters of a Ray node id (hex) a message shows: enough to tell the nodes of a cluster
#: apart (``ray list nodes`` shows them whole).
NODE_ID_CHARS = 8
#: Seconds to wait for the cluster to place an actor before saying it cannot.
PLACEMENT_TIMEOUT = 120.0

#: What each phase of a run is called in a ``ShardLost`` line. The storage knows ``start``
#: (actors, set-up, the rows of given arrays or a checkpoint resumed), ``step`` (the reads of
#: a step), ``update`` and ``read`` (whole arrays read out); the command that writes a file
#: names a ``read`` by what it writes (``checkpoint``, ``output``: ``ShardLost.in_phase``).
PHASES = {"start": "the start", "step": "a step's reads", "update": "a step's update",
          "read": "a read of the state", "checkpoint": "a checkpoint write",
          "output": "the output write"}


class ShardLost(TpuembError):
    """A host's actor died, failed or did not answer within its deadline; the open step was
    rolled back on every other host.

    ``host`` is the host that failed, ``phase`` the phase of the run it failed in (a key of
    :data:`PHASES`); ``str()`` is one line: ``head`` (who), the phase, ``tail`` (what it was
    doing, the cause, what was rolled back), then what the command adds (``with_resume_hint``:
    the last checkpoint and how to resume).
    """

    def __init__(self, head: str, tail: str, host: int, phase: str = "step") -> None:
        self.head, self.tail, self.host, self.phase = head, tail, host, phase
        self.message = f"{head} during {PHASES.get(phase, phase)}, {tail}"
        super().__init__(self.message)

    def in_phase(self, phase: str) -> ShardLost:
        """The same error, said to have happened in ``phase``."""
        return ShardLost(self.head, self.tail, self.host, phase)

    def with_resume_hint(self, hint: str) -> ShardLost:
        """The same error with ``hint`` (the last checkpoint and how to resume) appended."""
        return ShardLost(self.head, f"{self.tail}; {hint}", self.host, self.phase)


class NodeLost(Exception):
    """The cluster counts the Ray node of a host waited for as dead."""

    def __init__(self) -> None:
        super().__init__("its node is dead: the cluster stopped hearing from it")


class HeadLost(Exception):
    """The head of the cluster (its GCS) does not answer: the run cannot go on."""

    def __init__(self, address: str, why: str) -> None:
        super().__init__(why)
        self.address = address


class NoAnswer(Exception):
    """A host did not answer within the deadline of the work waited for."""

    def __init__(self, limit: float) -> None:
        super().__init__(f"no answer within {limit:.0f} s")
        self.limit = limit


#: Calls that go over every row of the host (its whole share counts as touched: ``_work``).
WHOLE_METHODS = frozenset({"allocate", "put_defaults", "snapshot", "change_sumsq", "abort",
                           "undo_tables"})
#: The phase of a run a batch of calls belongs to, by the first of its methods found here.
_PHASE_OF_METHOD = {
    "update": "update", "update_kept": "update", "update_shared": "update",
    "snapshot": "update", "change_sumsq": "update", "change_sumsq_rows": "update",
    "undo_tables": "update", "gather": "step", "gather_shared": "step",
    "setup": "start", "allocate": "start", "put": "start", "put_defaults": "start",
    "read": "read", "nbytes": "read",
}


def _phase_of(calls: Sequence[tuple[int, str, tuple[Any, ...]]]) -> str:
    """The phase of a run ``calls`` belong to (a key of ``PHASES``); ``step`` by default (the
    arena's set-up, made by a step's reads or update)."""
    found = {_PHASE_OF_METHOD.get(method) for _, method, _ in calls}
    return next((phase for phase in ("update", "step", "start", "read") if phase in found),
                "step")


def _count(local: Any) -> int:
    """The number of rows of a call's local rows (a slice of a range, or row numbers)."""
    if isinstance(local, slice):
        return max(0, int(local.stop or 0) - int(local.start or 0))
    return int(getattr(local, "shape", (0,))[0])


def _enabled(variable: str) -> bool:
    """Whether the environment leaves the feature ``variable`` turns off on (not "0")."""
    return os.environ.get(variable, "1").strip().lower() not in ("0", "no", "off", "false")


# ------------------------------------------------------------------------------------------------
# Whole arrays held by the shards


class ShardedArray:
    """A float32 ``[V, D]`` table, slot or pre-step copy held by the shards of a RayStorage.

    ``np.asarray(a)`` fetches it (a block of rows at a time); ``blocks()`` yields it in row
    order without ever holding more than a block, which is how ``npzio.write_npz`` writes it;
    ``take(rows)`` fetches some rows. A table or slot is a live view (it shows the state as it
    is when read, as a local storage's arrays do); a pre-step copy is valid until the next
    step's copy of the same table replaces it.
    """

    dtype = np.dtype(F32)
    ndim = 2

    def __init__(self, storage: RayStorage, key: str, table: str, shape: tuple[int, int]) -> None:
        self._storage = storage
        self.key = key
        self.table = table
        self.shape = shape

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * 4

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ShardedArray({self.key!r}, shape={self.shape}, dtype=float32)"

    def blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, block)`` pairs covering the array in order."""
        return self._storage.read_blocks(self.key, self.table)

    def npy_chunks(self) -> Iterator[np.ndarray]:
        """The blocks alone, in row order (the data of the array's ``.npy`` member)."""
        for _, block in self.blocks():
            yield block

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.empty(self.shape, dtype=F32)
        for start, block in self.blocks():
            out[start:start + block.shape[0]] = block
        return out if dtype is None else out.astype(dtype, copy=False)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The rows ``rows`` (sorted distinct ids), as a new [len(rows), D] array."""
        return self._storage.read_rows(self.key, self.table, rows)


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


class RayStorage:
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
    # Set-up

    def _check_limit(self, limit: int, what: str, fix: str) -> None:
        """Refuse a host whose actor (its rows and its process) needs more than ``limit``
        bytes (``max_memory``), naming the number of hosts that fits."""
        from ...units import format_size

        # What the actor holds, not what it reserves: the floor of a reservation
        # (``placement.ROWS_FLOOR``) is for reusing actors, not memory in use.
        needs = [e + PROCESS_BYTES for e in self.estimates]
        host = int(np.argmax(needs))
        if needs[host] <= limit:
            return
        fits = (fitting_hosts(self.plan, limit - PROCESS_BYTES, self.hosts)
                if limit > PROCESS_BYTES else None)
        if fits is not None:
            split = f"split the tables over more hosts ({arg('shards')} {fits} fits)"
        elif limit <= PROCESS_BYTES:
            split = "no number of hosts fits: a host's process alone needs more"
        else:
            split = "no number of hosts fits: a single row of a table is too large"
        raise UsageError(
            f"host {host} of {self.hosts} would need {format_size(needs[host])} "
            f"({format_size(self.estimates[host])} for its rows of every table and slot, with "
            f"a step's working arrays, and {format_size(PROCESS_BYTES)} for its process), more "
            f"than {what} ({format_size(limit)}); {split}, or {fix}"
        )

    def _check_cluster(self) -> None:
        """Refuse, before any actor starts, hosts the cluster cannot place (instead of waiting
        for Ray to place them): ``placement.plan_hosts`` packs the reservations of the
        hosts that need a new actor into the alive nodes' available memory and CPUs, and says
        which limit stops them - a node's, the cluster's total, or the packing."""
        found = plan_hosts(self.plan, self.hosts, cluster_nodes(self._ray),
                           idle=idle_reservations(session_token(self._ray), self._kind))
        if found.refusal is not None:
            raise UsageError(found.refusal)

    def _scheduling(self, placement: str | None) -> Any:
        """Ray's scheduling strategy for a new actor (``ActorOptions.placement``)."""
        choice = (placement or os.environ.get(PLACEMENT_ENV, "") or "driver").strip().lower()
        if choice == "spread":
            return "SPREAD"
        if choice != "driver":
            raise UsageError(f"actor placement {choice!r} ({PLACEMENT_ENV} or "
                             "ActorOptions.placement): expected 'driver' or 'spread'")
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = str(self._ray.get_runtime_context().get_node_id() or "")
        if not here:  # a driver outside the cluster (a Ray client): nowhere to prefer
            return "SPREAD"
        return NodeAffinitySchedulingStrategy(node_id=here, soft=True)

    def _start(self, threads: int | None, placement: str | None = None) -> None:
        """Take idle actors of this session or start new ones, and give each its host."""
        ray = self._ray
        token = session_token(ray)
        strategy = self._scheduling(placement)
        env = dict(self._runtime_env or {})
        # The tests' fault injection, passed on to new hosts (idle ones do not have it).
        stall = os.environ.get(STALL_ENV)
        if stall:
            env["env_vars"] = {**env.get("env_vars", {}), STALL_ENV: stall}
        options = {"runtime_env": env} if env else {}
        try:  # Ray refuses local paths in an actor's runtime_env (only a job's are uploaded)
            remote = ray.remote(max_restarts=0, max_task_retries=0, **options)(Shard)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{arg('runtime_env')} of the host actors: {first_line(exc)}"
                             ) from None
        taken = [None if stall else take_actor(token, self.reservations[host], self._kind)
                 for host in range(self.hosts)]
        if any(idle is None for idle in taken):
            drop_idle(ray, token)  # the idle actors left would hold memory the new ones need
        for host, idle in enumerate(taken):
            if idle is None:
                reserved = self.reservations[host]
                idle = (remote.options(memory=reserved, scheduling_strategy=strategy).remote(),
                        reserved)
            self._actors.append(idle[0])
            self._reserved.append(idle[1])
        where = [(h, actor.where.remote(), None) for h, actor in enumerate(self._actors)]
        # Placement may wait for resources (another run's actors going away): at least
        # PLACEMENT_TIMEOUT whatever the scale, more for many actors (``deadlines``).
        limit = max(PLACEMENT_TIMEOUT, seconds(Work(actors=self.hosts), self._scale))
        replies, failure = self._wait(where, limit)
        if failure is not None and isinstance(failure[1], NoAnswer):
            raise UsageError(
                f"the Ray cluster placed {len(replies)} of {self.hosts} host actors within "
                f"{limit:.0f} s; it lacks the CPUs or memory for the others "
                f"(ray status shows its resources), or use fewer {arg('shards')}"
            )
        if failure is not None:
            try:
                self._fail(*failure, "starting", "start", limit)
            except ShardLost as lost:  # a module missing on its node ...: the cause and the fix
                raise start_failure(ray, where[lost.host][1], lost.host, self.hosts,
                                    self.shipped) or lost from None
        places = [replies[ref] for _, ref, _ in where]
        self._nodes = [node for _, _, node in places]
        self._addresses = {str(n["NodeID"]): str(n.get("NodeManagerAddress", ""))
                           for n in ray.nodes()}
        per_machine: dict[str, int] = {}
        for name, _, _ in places:
            per_machine[name] = per_machine.get(name, 0) + 1
        engine = self.engine.name
        self._run([
            (h, "setup", (self.plan, h, self.hosts, engine,
                          threads or max(1, cpus // per_machine[name])))
            for h, (name, cpus, _) in enumerate(places)
        ], "starting")
        here = str(ray.get_runtime_context().get_node_id() or "")
        near = [h for h, (_, _, node) in enumerate(places) if here and node == here]
        if self._want_shared:
            self._local_hosts = near
        if self._want_links and near:
            self._link(near)

    def _link(self, hosts: list[int]) -> None:
        """Call ``hosts`` (on the driver's node) over direct links from now on (``link``): a
        host that cannot be reached that way keeps taking its calls through Ray."""
        token = os.urandom(16)
        addresses = self._run([(h, "listen", (token,)) for h in hosts], "starting")
        for host, address in zip(hosts, addresses, strict=True):
            try:
                self.links[host] = Link(address, token)
            except (OSError, LinkError):
                continue

    def close(self) -> None:
        """Release the actors (kept, emptied, for the next storage of this Ray session; also
        done when the storage is garbage-collected) and, when this storage connected to Ray,
        disconnect."""
        for link in self.links.values():
            link.close()
        self.links = {}
        self._release()
        self._drop_arena()
        if self._senders is not None:
            self._senders.shutdown(wait=False)
            self._senders = None
        if self._owns_session:
            self._owns_session = False
            disconnect()

    # ------------------------------------------------------------------------------------------
    # Calls to the hosts

    def _submit(self, calls: Sequence[tuple[int, str, tuple[Any, ...]]]) -> list[Submitted]:
        """Send ``calls`` ((host, method, args)); a host receives its calls in their order: a
        host on the driver's node all of them in one frame of its direct link (``link``), any
        other host its consecutive calls in one Ray call (``_send_ray``), so a batch of calls
        costs one call per host however many tables it covers. Queued updates (``update``) are
        sent first.

        Ray copies large array arguments into its object store as it sends them; with several
        hosts and more than ``PARALLEL_BYTES`` of arrays, each host's calls are sent from a thread
        of their own, so the copies run in parallel."""
        if self._broken is not None:
            raise self._broken
        if self._ops and not self._flushing:
            self.flush()
        refs: list[Submitted] = [(0, None, None)] * len(calls)
        by_host: dict[int, list[int]] = {}
        payload = 0
        for index, (host, _, args) in enumerate(calls):
            sent = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
            self.traffic[host, 0] += sent
            payload += sent
            by_host.setdefault(host, []).append(index)

        def send(host: int) -> None:
            committed = self._step if host in self._unconfirmed else None
            self._unconfirmed.discard(host)
            indices = by_host[host]
            link = self.links.get(host)
            if link is None:
                self._send_ray(host, committed, [(i, *calls[i][1:]) for i in indices], refs)
                return
            # every call of the batch in one frame, a ``put`` included
            reply = link.submit("run_batch", (committed, [calls[i][1:] for i in indices]))
            for position, index in enumerate(indices):
                refs[index] = (host, reply, position)
            self.calls[host] += 1

        if len(by_host) > 1 and payload > PARALLEL_BYTES:
            if self._senders is None:
                self._senders = ThreadPoolExecutor(min(self.hosts, os.cpu_count() or 1),
                                                   thread_name_prefix="tpuemb-ray")
            for future in [self._senders.submit(send, host) for host in by_host]:
                future.result()
        else:
            for host in by_host:
                send(host)
        return refs

    def _send_ray(self, host: int, committed: int | None,
                  calls: Sequence[tuple[int, str, tuple[Any, ...]]],
                  refs: list[Submitted]) -> None:
        """Send ``host`` its ``calls`` ((index in ``refs``, method, args)) through Ray: its
        consecutive calls in one Ray call (``host.call_many``), a ``put`` alone (its lists of
        blocks go as they are); each call's reply reference at its index of ``refs``."""
        actor = self._actors[host]
        start = 0
        while start < len(calls):
            stop = start + 1
            if calls[start][1] != "put":
                while stop < len(calls) and calls[stop][1] != "put":
                    stop += 1
            run = calls[start:stop]
            if len(run) == 1:
                index, method, args = run[0]
                refs[index] = (host, call(actor, committed, method, args), None)
            else:
                ref = call_many(actor, committed, [c[1:] for c in run])
                for position, (index, _, _) in enumerate(run):
                    refs[index] = (host, ref, position)
            self.calls[host] += 1
            committed = None
            start = stop

    def _collect(self, submitted: Sequence[Submitted], what: str | Callable[[int], str],
                 work: Work, phase: str = "step") -> list[Any]:
        """Every result, in order, waited for within the deadline of ``work`` (``_wait``); on a
        failure, roll the open step back on every other host and raise (``ShardLost`` for a
        lost or silent actor, the host's own error otherwise). ``what``: what the hosts were
        doing, for the error (a function of the host: what its calls were); ``phase``: the
        phase of the run (a key of ``PHASES``)."""
        # A smaller scale never shortens the start: a new actor's imports and first kernels
        # take what they take (a test's tiny scale is meant for the calls it stalls).
        limit = seconds(work, max(self._scale, 1.0) if phase == "start" else self._scale)
        replies, failure = self._wait(submitted, limit)
        if failure is not None:
            host, exc = failure
            if self._raised(exc):  # the storage lives on: the others' calls end first (arena)
                self._drain([s for s in submitted if s[1] not in replies and s[0] != host],
                            limit)
            self._fail(host, exc, what if isinstance(what, str) else what(host), phase, limit)
        results: list[Any] = []
        for host, reply, position in submitted:
            value = replies[reply] if position is None else replies[reply][position]
            if isinstance(value, np.ndarray):
                self.traffic[host, 1] += value.nbytes
            results.append(value)
        return results

    def _run(self, calls: Sequence[tuple[int, str, tuple[Any, ...]]],
             what: str | Callable[[int], str]) -> list[Any]:
        return self._collect(self._submit(calls), what, self._work(calls), _phase_of(calls))

    def _work(self, calls: Sequence[tuple[int, str, tuple[Any, ...]]]) -> Work:
        """What ``calls`` move and touch (``deadlines.Work``): the arrays sent, the rows read
        back, and on the busiest host those, or its whole share for a call over every row."""
        moved = 0
        touched: dict[int, int] = {}
        for host, method, args in calls:
            size = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
            if method in ("gather", "read"):
                table = args[0] if method == "gather" else str(args[0]).split("/")[1]
                size += _count(args[1]) * self._tables[table].dimension * 4
            moved += size
            whole = method in WHOLE_METHODS or (method == "update" and args[1] is None)
            touched[host] = touched.get(host, 0) + (self.estimates[host] if whole else size)
        return Work(moved=moved, touched=max(touched.values(), default=0))

    def _wait(self, submitted: Sequence[Submitted], limit: float
              ) -> tuple[dict[Any, Any], tuple[int, BaseException] | None]:
        """The replies of ``submitted`` (by reply object), or as soon as one fails, those so far
        and ``(host, error)``: Ray's error of a call; ``NodeLost`` when the cluster counts the
        node of a host waited for as dead (checked every ``POLL_SECONDS`` while the wait goes
        on: Ray's own report of a lost node can take many minutes when a reply was in
        transfer); ``NoAnswer`` when ``limit`` seconds pass first. Never waits longer.

        A reply is a Ray object reference, or any object with ``result(timeout)`` that raises
        ``TimeoutError`` while the reply has not come (``_poll``)."""
        end = time.monotonic() + limit
        host_of: dict[Any, int] = {}
        for host, reply, _ in submitted:
            host_of.setdefault(reply, host)
        pending = list(host_of)
        replies: dict[Any, Any] = {}
        while pending:
            done = self._poll(pending, max(0.0, min(POLL_SECONDS, end - time.monotonic())))
            for reply in pending:  # the first failure in the order of the calls
                if reply in done:
                    ok, value = done[reply]
                    if not ok:
                        return replies, (host_of[reply], value)
                    replies[reply] = value
            pending = [reply for reply in pending if reply not in done]
            if not pending:
                break
            lost = self._lost([host_of[reply] for reply in pending])
            if lost is not None:
                return replies, lost
            if time.monotonic() >= end:
                return replies, (host_of[pending[0]], NoAnswer(limit))
        return replies, None

    def _poll(self, pending: Sequence[Any], timeout: float) -> dict[Any, tuple[bool, Any]]:
        """The replies of ``pending`` that came within ``timeout`` seconds: ``(True, value)``
        or ``(False, error)``. Ray references are waited for together (``ray.wait``, which
        returns a failed call's reference too); any other reply by ``result(timeout)``."""
        ray = self._ray
        refs = [r for r in pending if isinstance(r, ray.ObjectRef)]
        others = [r for r in pending if not isinstance(r, ray.ObjectRef)]
        done: dict[Any, tuple[bool, Any]] = {}
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0 if others else timeout)
            try:
                done.update((ref, (True, value))
                            for ref, value in zip(ready, ray.get(ready), strict=True))
            except ray.exceptions.RayError:  # which one: each alone (ready: no wait)
                for ref in ready:
                    try:
                        done[ref] = (True, ray.get(ref))
                    except ray.exceptions.RayError as exc:
                        done[ref] = (False, exc)
        for reply in others:
            try:
                done[reply] = (True, reply.result(timeout / len(others)))
            except TimeoutError:
                continue
            except Exception as exc:  # noqa: BLE001 - the host's failure, reported by _fail
                done[reply] = (False, exc)
        return done

    def _drain(self, submitted: Sequence[Submitted], limit: float) -> None:
        """Wait, within ``limit`` seconds, for every call of ``submitted`` whose host answers
        (a host that fails or is lost is left out)."""
        end = time.monotonic() + limit
        while submitted:
            _, failed = self._wait(submitted, max(0.0, end - time.monotonic()))
            if failed is None:
                return
            submitted = [s for s in submitted if s[0] != failed[0]]

    def _raised(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a host's own error (the host lives on), not a lost host."""
        ray = self._ray
        if isinstance(exc, HostRaised):  # over a direct link
            return True
        return (isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None
                and not isinstance(exc.cause, ray.exceptions.RayError))

    def _lost(self, hosts: Sequence[int]) -> tuple[int, BaseException] | None:
        """The first of ``hosts`` whose Ray node the cluster counts as dead, with a
        ``NodeLost``; None when all are alive (or their nodes are not known yet)."""
        if not self._nodes:
            return None
        why = head_unreachable(self._ray)
        if why is not None:
            return hosts[0], HeadLost(head_address(self._ray), why)
        alive = {str(n["NodeID"]) for n in self._ray.nodes() if n.get("Alive")}
        for host in hosts:
            if self._nodes[host] not in alive:
                return host, NodeLost()
        return None

    def _node(self, host: int) -> str:
        """``, node ADDRESS id ID`` of the host's Ray node, when known (for messages): its
        address, and the start of its id (:data:`NODE_ID_CHARS`), which tells apart the
        nodes of one machine."""
        node = self._nodes[host] if host < len(self._nodes) else ""
        if not node:
            return ""
        address = self._addresses.get(node)
        short = node[:NODE_ID_CHARS]
        return f", node {address} id {short}" if address else f", node id {short}"

    def _fail(self, host: int, exc: BaseException, what: str, phase: str, limit: float) -> None:
        """Roll the open step back wherever it ran and raise: the host's own error when it
        raised one (the host lives on), else ``ShardLost`` (the actor died: Ray ended it, the
        machine went away or ran out of memory; or it did not answer within ``limit`` seconds,
        and is ended), after which the storage refuses every call. The roll-back on the other
        hosts is waited for within ``limit`` too."""
        ray = self._ray
        if isinstance(exc, HeadLost):  # nothing reaches the cluster: no kill, no roll-back
            self._broken = ShardLost(
                f"the Ray cluster's head {exc.address} (its GCS) stopped answering",
                f"while host {host} of {self.hosts} was {what} ({exc}); the run cannot go on "
                "without the head", host, phase)
            raise self._broken from None
        died = not self._raised(exc)
        rolled = ""
        self._kept.clear()
        if isinstance(exc, NoAnswer | NodeLost):  # it must never take a call again
            with contextlib.suppress(ray.exceptions.RayError, ValueError):
                ray.kill(self._actors[host], no_restart=True)
        if self._open:
            # Every host that answers is rolled back; the others are lost.
            self._drain([(h, self.links[h].submit("call_args", (None, "abort", self._step))
                          if h in self.links else call(a, None, "abort", (self._step,)), None)
                         for h, a in enumerate(self._actors) if not (died and h == host)], limit)
            self._open = False
            rolled = (f"; the open step was rolled back on every {'other ' if died else ''}host "
                      "(applied on none)")
        if not died:
            cause = exc.cause  # type: ignore[attr-defined]  # a RayTaskError (``_raised``)
            if isinstance(cause, TpuembError):
                raise cause
            raise ShardLost(f"host {host} of {self.hosts} failed", f"while {what}: "
                            f"{type(cause).__name__}: {first_line(cause)}{rolled}", host,
                            phase) from None
        self._dead.add(host)
        head = f"host {host} of {self.hosts} (its Ray actor{self._node(host)}) "
        if isinstance(exc, NoAnswer):
            head += f"did not answer within {limit:.0f} s"
            why = (f"the deadline of this work; {DEADLINE_SCALE_ENV}=2 doubles every "
                   "deadline")
        else:
            head += "died"
            why = (str(exc) if isinstance(exc, NodeLost)
                   else f"{type(exc).__name__}: {first_line(exc)}")
        self._broken = ShardLost(head, f"while {what} ({why}){rolled}; the run cannot go on "
                                 "without its rows", host, phase)
        raise self._broken from None

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

    def _settle(self) -> None:
        """Send the queued updates before anything reads the tables or the arena."""
        if self._ops:
            self.flush()

    def _read(self, requests: Sequence[tuple[str, np.ndarray]]) -> list[np.ndarray]:
        """The rows of every ``(table, rows)``, one call per host for all of them: the hosts on
        the driver's machine write theirs into one shared block of the arena per table (at the
        rows' positions), the others send theirs through Ray. Each host keeps what it read under
        the table's key, for the update of the same rows (``_kept_key``)."""
        self._settle()
        planned = [(table, rows, [p for p in self._split(table, rows) if p.count])
                   for table, rows in requests]
        arena: Arena | None = None
        if self._local_hosts and any(p.host in self._local_hosts
                                     for _, _, parts in planned for p in parts):
            arena = self._arena_for(sum(
                self._placement_bytes(parts, rows.shape[0] * self._tables[table].dimension * 4)
                for table, rows, parts in planned))
        calls: list[tuple[int, str, tuple[Any, ...]]] = []
        segments: list[tuple[str, np.ndarray, list[HostRows], Place | None, int]] = []
        for table, rows, parts in planned:
            dimension = self._tables[table].dimension
            self._reads += 1
            self._kept[table] = (rows, self._reads)
            out: Place | None = None
            if arena is not None and any(p.host in self.shared for p in parts):
                out = arena.alloc((rows.shape[0], dimension), F32)
                assert out is not None
            segments.append((table, rows, parts, out, len(calls)))
            for p in parts:
                if out is not None and arena is not None and p.host in self.shared:
                    local, positions = self._place_rows(arena, p)
                    calls.append((p.host, "gather_shared", (table, self._reads, local,
                                                            positions, out)))
                    self.traffic[p.host, 1] += p.count * dimension * 4
                else:
                    calls.append((p.host, "gather", (table, p.local, self._reads)))
        values = self._run(calls, lambda host: self._doing(host, calls))
        blocks: list[np.ndarray] = []
        for table, rows, parts, out, start in segments:
            found = values[start:start + len(parts)]
            if out is None or arena is None:
                blocks.append(self._assemble(table, rows.shape[0], parts, found))
            else:  # the arena is reused by the next call: a copy of the block
                blocks.append(np.array(self._assemble(table, rows.shape[0], parts, found,
                                                      arena.view(out))))
        return blocks

    def _doing(self, host: int, calls: Sequence[tuple[int, str, tuple[Any, ...]]]) -> str:
        """What ``host`` was doing in one batch of ``calls`` (for the error when it fails): the
        last of its calls, and the ones before it in the same Ray call."""
        verbs = {"gather": "reading rows of", "gather_shared": "reading rows of",
                 "update": "updating", "update_kept": "updating", "update_shared": "updating",
                 "snapshot": "copying", "change_sumsq": "summing the change of",
                 "change_sumsq_rows": "summing the change of"}
        done = [f"{verbs.get(method, method)} table {args[0]!r}"
                for h, method, args in calls if h == host]
        if not done:
            return "answering"
        earlier = list(dict.fromkeys(done[:-1]))
        return done[-1] + (f" (or, before it in the same call, {', '.join(earlier)})"
                           if earlier else "")

    def _split(self, table: str, rows: np.ndarray) -> list[HostRows]:
        """``layout.split(rows)``, remembered for the same array of the same table (the rows
        a step reads are the rows it updates)."""
        cached = self._splits.get(table)
        if cached is None or cached[0] is not rows:
            cached = (rows, self.layouts[table].split(rows))
            self._splits[table] = cached
        return cached[1]

    def _kept_key(self, table: str, rows: np.ndarray) -> int:
        """The key under which the hosts keep ``rows`` of ``table`` (the rows the step read, not
        changed since), else 0; either way the update about to be sent consumes them."""
        kept = self._kept.pop(table, None)
        return kept[1] if kept is not None and kept[0] is rows else 0

    # ------------------------------------------------------------------------------------------
    # The shared-memory arena of the hosts on the driver's machine

    def _drop_arena(self) -> None:
        if self._arena is not None:
            self._arena.close()
            self._arena = None
        self.shared = set()

    def _arena_for(self, nbytes: int) -> Arena | None:
        """The arena, emptied, with room for ``nbytes`` (placements included); a new one,
        mapped by the local hosts, when there is none or it is too small. None when no host
        could map it (the storage then stops trying)."""
        arena = self._arena
        if arena is not None and nbytes <= arena.size - Arena.HEADER:
            arena.reset()
            return arena
        size = max(nbytes + Arena.HEADER, 2 * arena.size if arena is not None else 0, 1 << 20)
        size = -(-size // (1 << 20)) << 20
        self._drop_arena()
        token = os.urandom(16)
        path = os.path.join(SHM_DIR, f"tpuemb-{os.getpid()}-{token[:6].hex()}")
        try:
            arena = Arena(path, size, create=True, token=token)
        except OSError:
            self._local_hosts = []
            return None
        try:
            mapped = self._run([(h, "attach", (path, size, token)) for h in self._local_hosts],
                               "mapping the shared-memory arena")
        finally:
            os.unlink(path)  # mapped where it is needed: nothing is left when a process dies
        self.shared = {h for h, ok in zip(self._local_hosts, mapped, strict=True) if ok}
        if not self.shared:
            arena.close()
            self._local_hosts = []
            return None
        self._local_hosts = sorted(self.shared)
        self._arena = arena
        return arena

    @staticmethod
    def _placement_bytes(parts: Sequence[HostRows], block: int) -> int:
        """Arena bytes of a [rows, D] block of ``block`` bytes and each part's row numbers and
        positions (with the alignment of every placement)."""
        ids = sum(p.count * 8 * (1 if isinstance(p.positions, slice) else 2) for p in parts)
        return block + ids + 64 * (2 * len(parts) + 1)

    def _place_rows(self, arena: Arena, part: HostRows) -> tuple[Place, Positions]:
        """Write a part's local row numbers (and positions, unless a slice) into the arena."""
        local = arena.alloc(part.local.shape, np.int64)
        assert local is not None
        arena.view(local)[...] = part.local
        sent = part.local.nbytes
        positions: Positions
        if isinstance(part.positions, slice):
            positions = (int(part.positions.start), int(part.positions.stop))
        else:
            place = arena.alloc(part.positions.shape, np.int64)
            assert place is not None
            arena.view(place)[...] = part.positions
            positions = place
            sent += part.positions.nbytes
        self.traffic[part.host, 0] += sent
        return local, positions

    def _update_parts(self, table: str, rows: np.ndarray) -> list[HostRows]:
        """The hosts an update of ``rows`` calls: those with rows, every host of a non-lazy
        table (those without touched rows step theirs with zero)."""
        lazy = self._tables[table].lazy
        return [p for p in self._split(table, rows) if p.count or not lazy]

    def _update_shared(self, arena: Arena, table: str, rows: np.ndarray, grad: np.ndarray,
                       fn: Any, step: int) -> list[tuple[int, str, tuple[Any, ...]]]:
        """The update calls with the local hosts reading their gradient rows from ``arena``
        (and the rows the step read, kept by them, unless these are others)."""
        place = arena.alloc(grad.shape, F32)
        assert place is not None
        arena.view(place)[...] = grad
        key = self._kept_key(table, rows)
        calls: list[tuple[int, str, tuple[Any, ...]]] = []
        for p in self._update_parts(table, rows):
            kept = key if p.count else 0  # a host without rows read kept none
            if p.host not in self.shared:
                calls.append(self._update_call(table, p, kept, grad, fn, step))
                continue
            local: Place | None = None
            positions: Positions | None = None
            if not kept:
                local, positions = self._place_rows(arena, p)
            self.traffic[p.host, 0] += p.count * grad.shape[1] * 4
            calls.append((p.host, "update_shared", (table, kept, local, positions, place, fn,
                                                    step)))
        return calls

    def _assemble(self, table: str, count: int, parts: Sequence[HostRows],
                  values: Sequence[np.ndarray | None], out: np.ndarray | None = None
                  ) -> np.ndarray:
        """The hosts' blocks of rows put back in the order of the ``count`` ids they came from,
        in ``out`` (default: a new array; a None block: the host wrote its rows there itself)
        (the engine's parallel scatter for a MOD layout's scattered positions)."""
        if out is None:
            out = np.empty((count, self._tables[table].dimension), dtype=F32)
        for part, block in zip(parts, values, strict=True):
            if block is None:
                continue
            if isinstance(part.positions, slice):
                out[part.positions] = block
            else:
                self.engine.scatter(out, part.positions, block)
        return out

    def _part(self, grad: np.ndarray, positions: slice | np.ndarray) -> np.ndarray:
        """The rows of ``grad`` at ``positions`` (the engine's parallel gather for indices)."""
        return grad[positions] if isinstance(positions, slice) else self.engine.gather(
            grad, positions)

    def _update_call(self, table: str, part: HostRows, key: int, grad: np.ndarray, fn: Any,
                     step: int) -> tuple[int, str, tuple[Any, ...]]:
        """The update of one host's part through Ray: its gradient rows, with its row numbers
        unless it keeps them as ``key`` from the step's read."""
        values = self._part(grad, part.positions)
        if key:
            return part.host, "update_kept", (table, key, values, fn, step)
        return part.host, "update", (table, part.local, values, fn, step)

    def _update_calls(self, table: str, rows: np.ndarray, grad: np.ndarray, fn: Any,
                      step: int) -> list[tuple[int, str, tuple[Any, ...]]]:
        key = self._kept_key(table, rows)
        key = key if self._tables[table].lazy else 0  # a non-lazy table's hosts step every row
        return [self._update_call(table, p, key if p.count else 0, grad, fn, step)
                for p in self._update_parts(table, rows)]

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

    # ------------------------------------------------------------------------------------------
    # Whole-table transfers

    def _ship(self, arrays: Mapping[str, Any], pending: list[Submitted]) -> None:
        """Send each host its rows of every array (float32 after casting), after the calls
        ``pending``, and wait for all: the rows of a block (``BLOCK_BYTES``) of the arrays go in
        one call per host, with about two blocks in flight. Each wait's deadline counts the
        bytes in flight, and the first one also the calls ``pending`` (an allocation, or
        defaults written, over each host's whole share)."""
        what = "receiving its rows"
        parts: dict[int, list[tuple[str, slice, np.ndarray]]] = {}
        size = 0
        in_flight = 0
        whole = max(self.estimates)  # ``pending``'s work, until it is waited for

        def wait() -> None:
            nonlocal pending, in_flight, whole
            self._collect(pending, what, Work(moved=in_flight, touched=in_flight + whole),
                          "start")
            pending, in_flight, whole = [], 0, 0

        def flush() -> None:
            nonlocal pending, size, in_flight
            pending += self._submit([(h, "put", (batch,)) for h, batch in parts.items()])
            parts.clear()
            in_flight += size
            size = 0
            if in_flight >= 2 * BLOCK_BYTES:
                wait()

        for key, array in arrays.items():
            table = key.split("/")[1]
            layout = self.layouts[table]
            for start, stop in self._block_ranges(table):
                block = np.asarray(array[start:stop], dtype=F32)
                for h, local, positions in layout.split_range(start, stop):
                    rows = np.ascontiguousarray(block[positions])
                    parts.setdefault(h, []).append((key, local, rows))
                    self.traffic[h, 0] += rows.nbytes
                size += block.nbytes
                if size >= BLOCK_BYTES:
                    flush()
        if parts:
            flush()
        wait()

    def _block_ranges(self, table: str) -> Iterator[tuple[int, int]]:
        plan = self._tables[table]
        step = max(1, BLOCK_BYTES // (plan.dimension * 4))
        for start in range(0, plan.vocabulary, step):
            yield start, min(start + step, plan.vocabulary)

    def read_blocks(self, key: str, table: str) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, rows)`` blocks of the table, slot or pre-step copy ``key``, in order;
        the next block's reads are in flight while one is handed out."""
        layout = self.layouts[table]
        dimension = self._tables[table].dimension
        ranges = list(self._block_ranges(table))

        def submit(start: int, stop: int) -> tuple[list[Any], list[Submitted]]:
            parts = layout.split_range(start, stop)
            return parts, self._submit([(h, "read", (key, local)) for h, local, _ in parts])

        pending = submit(*ranges[0]) if ranges else None
        for index, (start, stop) in enumerate(ranges):
            assert pending is not None
            parts, refs = pending
            pending = submit(*ranges[index + 1]) if index + 1 < len(ranges) else None
            block = np.empty((stop - start, dimension), dtype=F32)
            size = (stop - start) * dimension * 4
            values = self._collect(refs, f"sending its rows of {key}",
                                   Work(moved=size, touched=size), "read")
            for (_, _, positions), rows in zip(parts, values, strict=True):
                block[positions] = rows
            yield start, block

    def read_rows(self, key: str, table: str, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (sorted distinct ids) of a table, slot or pre-step copy ``key``."""
        parts = [p for p in self.layouts[table].split(rows) if p.count]
        values = self._run([(p.host, "read", (key, p.local)) for p in parts],
                           f"sending rows of {key}")
        return self._assemble(table, rows.shape[0], parts, values)

    def _snapshot(self, table: str) -> ShardedArray:
        """A pre-step copy of ``table``, made by the hosts with the next call to them (queued
        with the updates: before them on every host)."""
        if self._broken is not None:
            raise self._broken
        self._version += 1
        self._ops.append(("snapshot", table, self._version))
        plan = self._tables[table]
        return ShardedArray(self, f"before/{table}/{self._version}", table,
                            (plan.vocabulary, plan.dimension))

    def nbytes(self) -> list[int]:
        """Bytes each host's actor holds now (tables, slots, pre-step copies)."""
        return [int(n) for n in self._run([(h, "nbytes", ()) for h in range(self.hosts)],
                                          "counting its bytes")]

    def memory(self) -> list[dict[str, int]]:
        """Each host actor's process memory now (``host.Shard.memory``: ``rss``, ``uss``,
        ``pss`` and its arrays' ``rows`` bytes): what ``placement.PROCESS_BYTES`` is measured
        from."""
        return [dict(m) for m in self._run([(h, "memory", ()) for h in range(self.hosts)],
                                           "measuring its memory")]


# ------------------------------------------------------------------------------------------------
# The backend


@dataclass(frozen=True)
class RayBackend:
    """Opens a :class:`RayStorage` (``storage.BACKENDS["ray"]``): the placement's ``shards``,
    ``ray_address``, ``runtime_env`` and ``ship``; ``max_memory`` is each host actor's limit,
    its process included (the nodes' available memory is checked either way), always checked
    (``check_memory=False`` is refused)."""

    @property
    def in_process(self) -> bool:
        return False

    def open(self, request: StorageRequest) -> RayStorage:
        options, plan = request.options, request.plan
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
            actors=ActorOptions(shards=request.placement.shards, max_memory=options.memory_limit,
                                address=request.placement.ray_address,
                                runtime_env=request.placement.runtime_env,
                                ship=request.placement.ship),
        )


RAY = RayBackend()
