"""One host's rows of every table and slot, and the work done where they live.

A :class:`Shard` is what a Ray actor of the sharded storage (``storage``) runs; it is plain
Python and NumPy, so it also runs (and is tested) in this process. It holds, for every table,
the rows ``layout.TableLayout`` gives its host - float32 ``[rows, D]`` parameters and one
array per slot - and nothing else: it allocates only its rows, initialised by
``state.initial_table_rows`` / ``state.initial_slot_rows``, which depend only on the seed, the
table and the global id, so the sharded state is bit-identical to one machine's.

Per step the driver asks for rows by *local* row number (``gather``), sends the per-row
gradients of its rows (``update``, which runs the per-row pipeline ``fn`` of spec section 6 on
the shard's own arrays), and closes the step (``commit``). The rows a step reads are the rows
it updates: ``gather`` keeps their numbers and values under the driver's key, and
``update_kept`` refers to them (the values become the undo log's parameters); any other change
of the table drops what was kept. On the driver's machine the same calls go through a
shared-memory :class:`Arena` (``gather_shared``, ``update_shared``: the host reads row numbers
and gradient rows there and writes the rows it reads at their positions in the step's block).
A step is all or nothing: before
``update`` changes a row it keeps the row's values (parameters and slots) in an undo log, so
``abort`` puts back everything the open step changed on this shard; the driver calls it on
every shard when one shard fails, and ``commit`` drops the log once every shard has updated.

Whole-table reads never gather a table in one place: ``snapshot`` keeps a copy of this shard's
parameters where they are (the pre-step values of a non-lazy table: its update norm and the
forward pass of a pipelined step read them), and ``read`` returns one block of local rows of a
table, slot or snapshot at a time, for streaming into a file.
"""

from __future__ import annotations

import math
import mmap
import os
import pickle
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpuemb_cfg.model.layout import TableLayout

from ...executor import state
from ...executor.engines import get_engine
from ...executor.optimizers import UpdateContext
from ...executor.pipeline import RowPipeline
from ...executor.plan import Plan, TablePlan
from ...executor.state import slot_key, table_key
from ...executor.storage import RowUpdate
from .link import Listener, dumps

__all__ = ["STALL_ENV", "Arena", "PipelineRef", "Shard", "call", "call_many", "fitting_hosts",
           "process_memory", "shard_bytes", "shard_bytes_all"]

F32 = np.float32

Local = slice | np.ndarray

#: Where an array lies in an ``Arena``: (byte offset, shape, dtype name).
Place = tuple[int, tuple[int, ...], str]
#: Positions in a block of ids: a ``Place`` of int64 indices, or (start, stop) of a contiguous run.
Positions = tuple[int, tuple[int, ...], str] | tuple[int, int]

#: The fault-injection hook of the tests: ``HOST:METHOD:NTH[:MARK]`` makes host ``HOST``'s
#: ``NTH`` call (1-based) of ``METHOD`` stall for an hour, after writing its process id to the
#: file ``MARK``; a test then kills the host's node while it is inside that phase, or lets the
#: driver's deadline end the wait. The driver passes the variable on to the actors it starts
#: (while it is set, it starts new ones instead of reusing idle actors, which lack it).
STALL_ENV = "TPUEMB_RAY_TEST_STALL"


class Arena:
    """A file of ``/dev/shm`` mapped by the driver and the hosts on its machine: the step's
    arrays travel through it instead of through Ray's object store (one copy less each way, and
    no object-store calls). The driver creates it (``create=True``) and writes ``token`` at its
    start; a host maps it by ``path`` and checks the token (the same file, not a namesake of
    another machine or container); the driver then unlinks the path, so nothing is left behind
    whoever dies. Arrays are placed at 64-byte aligned offsets (``alloc``) by the driver, from
    ``HEADER`` on, and reused by the next operation once every host has answered."""

    HEADER = 64

    def __init__(self, path: str, size: int, create: bool = False, token: bytes = b"") -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                # Reserve the pages now: a full tmpfs then fails here (ENOSPC), not with SIGBUS
                # at the first write into the mapping.
                if hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(fd, 0, size)
                else:  # pragma: no cover - macOS has no /dev/shm to get here
                    os.ftruncate(fd, size)
            self._map: mmap.mmap | None = mmap.mmap(fd, size)
        except BaseException:
            if create:
                os.unlink(path)
            raise
        finally:
            os.close(fd)
        self.path = path
        self.size = size
        self.bytes = np.frombuffer(self._map, dtype=np.uint8)
        if create:
            self.bytes[:len(token)] = np.frombuffer(token, dtype=np.uint8)
        self._top = self.HEADER

    def token(self, length: int) -> bytes:
        return self.bytes[:length].tobytes()

    def view(self, place: Place) -> np.ndarray:
        """The array at ``place`` (a live view of the shared file)."""
        offset, shape, dtype = place
        count = math.prod(shape)
        assert self._map is not None, "the arena is closed"
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=offset).reshape(shape)

    def reset(self) -> None:
        """Every earlier placement is free again."""
        self._top = self.HEADER

    def alloc(self, shape: tuple[int, ...], dtype: type | np.dtype = F32) -> Place | None:
        """A new place for an array, or None when the arena is too small."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(int(n) for n in shape) * dtype.itemsize
        offset = self._top
        if offset + nbytes > self.size:
            return None
        self._top = offset + (nbytes + 63) // 64 * 64
        return offset, tuple(int(n) for n in shape), dtype.name

    def close(self) -> None:
        """Unmap (when no view of it is left; else when the last one goes)."""
        self.bytes = np.zeros(0, dtype=np.uint8)
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view is still alive: the mapping goes with it
                pass
            self._map = None


@dataclass(frozen=True)
class PipelineRef:
    """The table's own per-row pipeline (``pipeline.RowPipeline``) with this rate and step
    context, built where the rows live from the shard's plan and engine: what travels instead
    of the pipeline itself (whose engine holds compiled functions, slow to pickle)."""

    lr: np.float32
    ctx: UpdateContext


def shard_bytes(plan: Plan, host: int, hosts: int) -> int:
    """The estimated peak bytes of ``host`` among ``hosts``: its rows of every table and slot,
    plus for every non-lazy table (every row steps) its share of the working arrays: the dense
    gradient, the pre-step snapshot, the optimizer's new parameters and slots and the undo copy
    of the slots, i.e. ``rows * D * 4 * (3 + 2 * slots)``. Lazy tables' per-step blocks (the
    touched rows) are small next to the tables and not counted, as on one machine."""
    total = 0
    for table in plan.tables:
        rows = TableLayout(table.vocabulary, hosts, plan.mod_sharding).rows_of(host)
        total += rows * _row_bytes(table)
    return total


def _row_bytes(table: TablePlan) -> int:
    """Estimated bytes per row of ``table`` on its host (``shard_bytes``)."""
    slots = len(table.optimizer.slots)
    return table.dimension * 4 * (1 + slots + (0 if table.lazy else 3 + 2 * slots))


def shard_bytes_all(plan: Plan, hosts: int) -> list[int]:
    """``shard_bytes`` of every host of ``hosts``, in one pass over the tables: of a table of
    V rows, the first ``V mod hosts`` hosts hold ``V div hosts + 1`` rows and the others one
    fewer (spec section 8, either strategy) - what the placement tries for many numbers of
    hosts."""
    total = np.zeros(hosts, dtype=np.int64)
    for table in plan.tables:
        per_row = _row_bytes(table)
        whole, extra = divmod(table.vocabulary, hosts)
        total += whole * per_row
        total[:extra] += per_row
    return [int(t) for t in total]


def process_memory() -> dict[str, int]:
    """This process's resident memory in bytes, from ``/proc/self``: ``rss`` (every resident
    page it maps, shared libraries included), ``uss`` (the pages no other process shares: what
    ending it frees) and ``pss`` (shared pages divided among their users); empty where
    ``/proc`` lacks them (not Linux). What a host actor's process costs beyond its rows
    (``placement.PROCESS_BYTES``) was measured with it."""
    found: dict[str, int] = {}
    fields = {"Rss": "rss", "Pss": "pss", "Private_Clean": "uss", "Private_Dirty": "uss"}
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            for line in rollup:
                name, _, rest = line.partition(":")
                if name in fields:  # "Rss:     123456 kB"
                    key = fields[name]
                    found[key] = found.get(key, 0) + int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return found


class Shard:
    """Host ``host`` of ``hosts``: its rows of every table and slot of ``plan``.

    ``engine``: the engine name for gathers and the update norm (the per-row pipeline comes
    with each ``update``); ``threads``: numba threads for this process (None: numba's default).
    """

    def __init__(self) -> None:
        self.plan: Plan | None = None
        self._tables: dict[str, TablePlan] = {}
        self._params: dict[str, np.ndarray] = {}
        self._slots: dict[str, tuple[np.ndarray, ...]] = {}
        # Per update of an open step: (step, table, rows or None, parameters, slots) before it.
        self._undo: list[tuple[int, str, Local | None, np.ndarray, tuple[np.ndarray, ...]]] = []
        # Per table: (version, the parameters at snapshot time); and the tables unchanged since.
        self._before: dict[str, tuple[int, np.ndarray]] = {}
        self._unchanged: set[str] = set()
        self._arena: Arena | None = None
        # Per table: (key, local rows, positions, their parameters) of the last read of a step
        # (``gather`` with a key, ``gather_shared``): the update of the same rows refers to them
        # by the key instead of receiving them again, and logs the parameters read for ``abort``
        # instead of reading them again. Any other change of the table drops them.
        self._kept: dict[str, tuple[int, np.ndarray, Local | None, np.ndarray]] = {}
        # The direct link of a driver on this node (``listen``), and what keeps its thread's
        # calls apart from the Ray calls (``reset``) that may arrive when the driver is done.
        self._listener: Listener | None = None
        self._lock = threading.RLock()
        self._calls: dict[str, int] = {}  # calls per method, for the test hook (``STALL_ENV``)

    # ----------------------------------------------------------------------------------------
    # Set-up

    def where(self) -> tuple[str, int, str]:
        """(the host name this process runs on, its CPU count, its Ray node id), for thread
        placement and for finding the hosts that share the driver's machine."""
        node = ""
        try:
            import ray

            if ray.is_initialized():
                node = str(ray.get_runtime_context().get_node_id())
        except Exception:  # noqa: BLE001 - not in a Ray worker: no node id
            pass
        return os.uname().nodename, os.cpu_count() or 1, node

    def memory(self) -> dict[str, int]:
        """This actor's process memory (``process_memory``) and the bytes of its arrays
        (``rows``: tables, slots, pre-step copies)."""
        return {**process_memory(), "rows": self.nbytes()}

    def attach(self, path: str, size: int, token: bytes) -> bool:
        """Map the driver's ``Arena`` at ``path`` (replacing an earlier one); False when this
        process cannot open it or it is not the driver's file (another machine's ``/dev/shm``)."""
        self.detach()
        try:
            arena = Arena(path, size)
        except OSError:
            return False
        if arena.token(len(token)) != token:
            arena.close()
            return False
        self._arena = arena
        return True

    #: The methods a driver may call over the link (the others are set-up, made through Ray).
    LINKED = frozenset({"call_args", "run_batch"})

    def listen(self, token: bytes) -> str:
        """Serve this host's calls over a direct link (``link.Listener``: a Unix socket and a
        thread of this process) for a driver on this node that presents ``token``; its address.
        Replaces an earlier link. The driver sends every later call that way until it is done
        (``reset`` then closes the link)."""
        self._close_listener()
        self._listener = Listener(token, self._linked_call)
        return self._listener.address

    def _linked_call(self, method: str, args: Sequence[Any]) -> Any:
        if method not in self.LINKED:
            raise ValueError(f"{method!r} cannot be called over the link")
        with self._lock:
            return getattr(self, method)(*args)

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def detach(self) -> None:
        """Unmap the arena, if any."""
        if self._arena is not None:
            self._arena.close()
            self._arena = None

    def setup(self, plan: Plan, host: int, hosts: int, engine: str, threads: int | None) -> None:
        """Take the role of host ``host`` of ``hosts`` for ``plan``; drop any earlier state."""
        self.plan = plan
        self.host = host
        self.layouts = {t.name: TableLayout(t.vocabulary, hosts, plan.mod_sharding)
                        for t in plan.tables}
        self._tables = {t.name: t for t in plan.tables}
        self.engine = get_engine(engine)
        if threads is not None and self.engine.name == "numba":
            import numba

            most = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
            numba.set_num_threads(max(1, min(threads, most)))
        self.reset()

    def reset(self) -> None:
        """Drop every array and the link (the actor stays, for the next executor)."""
        with self._lock:
            self._close_listener()
            self._drop()

    def _drop(self) -> None:
        self._params.clear()
        self._slots.clear()
        self._undo.clear()
        self._before.clear()
        self._unchanged.clear()
        self._kept.clear()
        self.detach()

    def allocate(self, seed: int, given: frozenset[str] | set[str] = frozenset()) -> int:
        """Allocate this host's rows of every table and slot; return the bytes held.

        Keys in ``given`` are left uninitialised (the driver sends their rows with ``put``);
        the others get the defaults of spec section 11 for this host's global ids.
        """
        assert self.plan is not None
        for table in self.plan.tables:
            ids = self.layouts[table.name].global_ids(self.host)
            shape = (ids.shape[0], table.dimension)
            self._params[table.name] = (
                np.empty(shape, F32) if table_key(table.name) in given
                else state.initial_table_rows(table, seed, ids)
            )
            self._slots[table.name] = tuple(
                np.empty(shape, F32) if slot_key(table.name, name) in given
                else state.initial_slot_rows(table, index, ids)
                for index, name in enumerate(table.slot_names)
            )
        return self.nbytes()

    def nbytes(self) -> int:
        """Bytes of the arrays this shard holds (tables, slots, snapshots)."""
        held = [*self._params.values(), *(s for slots in self._slots.values() for s in slots)]
        held += [values for _, values in self._before.values()]
        return sum(int(a.nbytes) for a in held)

    def _array(self, key: str) -> np.ndarray:
        parts = key.split("/")
        if parts[0] == "table":
            return self._params[parts[1]]
        if parts[0] == "slot":
            names = self._tables[parts[1]].slot_names
            return self._slots[parts[1]][names.index(parts[2])]
        raise KeyError(key)

    def put(self, parts: list[tuple[str, Local, np.ndarray]]) -> None:
        """For each ``(key, local, values)``: write ``values`` into the rows ``local`` of the
        table or slot ``key`` (state-file key), casting to float32."""
        for key, local, values in parts:
            self._array(key)[local] = values
            self._kept.pop(key.split("/")[1], None)

    def put_defaults(self, key: str, seed: int) -> None:
        """Reset the table or slot ``key`` to its defaults (spec section 11) for this host."""
        parts = key.split("/")
        table = self._tables[parts[1]]
        self._kept.pop(table.name, None)
        ids = self.layouts[table.name].global_ids(self.host)
        if parts[0] == "table":
            self._params[table.name][...] = state.initial_table_rows(table, seed, ids)
        else:
            index = table.slot_names.index(parts[2])
            self._array(key)[...] = state.initial_slot_rows(table, index, ids)

    # ----------------------------------------------------------------------------------------
    # A step

    def call(self, message: bytes, *arrays: np.ndarray) -> Any:
        """``call_args`` of the pickled ``(committed, method, args)``, each ``None`` of ``args``
        at the positions listed in ``message`` being the next of ``arrays``: one argument for
        Ray to handle besides the arrays (which Ray passes through its object store without
        pickling them), which costs the driver a fraction of a millisecond per call less than
        one argument per value."""
        committed, method, args, holes = pickle.loads(message)
        if holes:
            args = list(args)
            for index, array in zip(holes, arrays, strict=True):
                args[index] = array
        return self.call_args(committed, method, *args)

    def call_batch(self, message: bytes, *arrays: np.ndarray) -> list[Any]:
        """Several calls in one message (``call_many``): the pickled ``(committed, calls)``,
        each call ``(method, args, holes)`` with the positions ``holes`` of its ``args``
        filled by the next of ``arrays``; run in order (after ``commit(committed)``), their
        results in a list. One Ray call per host and step phase instead of one per table: the
        driver's cost of a call (submitting it, handling its reply) is paid once per host."""
        committed, packed = pickle.loads(message)
        remaining = iter(arrays)
        calls: list[tuple[str, Sequence[Any]]] = []
        for method, args, holes in packed:
            if holes:
                args = list(args)
                for index in holes:
                    args[index] = next(remaining)
            calls.append((method, args))
        return self.run_batch(committed, calls)

    def run_batch(self, committed: int | None, calls: Sequence[tuple[str, Sequence[Any]]]
                  ) -> list[Any]:
        """Each ``(method, args)`` of ``calls`` in order, after ``commit(committed)``; their
        results in a list (a batch's calls as the link sends them, arrays in place)."""
        if committed is not None:
            self.commit(committed)
        return [self.call_args(None, method, *args) for method, args in calls]

    def call_args(self, committed: int | None, method: str, *args: Any) -> Any:
        """``method(*args)``, after ``commit(committed)`` when the driver has a step to
        confirm: the end of a step rides on the next call instead of a message of its own."""
        if committed is not None:
            self.commit(committed)
        # Ray hands arrays over read-only; numba compiles (and caches) kernels per argument type,
        # so writable copies reuse the kernels the driver's process compiled and cached instead
        # of compiling read-only variants in every new actor process.
        args = tuple(np.array(a) if isinstance(a, np.ndarray) and not a.flags.writeable else a
                     for a in args)
        if STALL_ENV in os.environ:
            self._stall(method)
        return getattr(self, method)(*args)

    def _stall(self, method: str) -> None:
        """The test hook (``STALL_ENV``): stall this call when it is the one named."""
        host, name, nth, *mark = os.environ[STALL_ENV].split(":", 3)
        count = self._calls[method] = self._calls.get(method, 0) + 1
        if getattr(self, "host", None) != int(host) or name != method or count != int(nth):
            return
        if mark:
            with open(mark[0], "w") as out:
                out.write(str(os.getpid()))
        time.sleep(3600)

    def gather(self, table: str, local: np.ndarray, key: int = 0) -> np.ndarray:
        """The parameter rows ``local`` of ``table`` (a new float32 [len(local), D] array);
        kept as ``key`` (unless 0) for the step's update of the same rows."""
        values = self.engine.gather(self._params[table], local)
        if key:
            self._kept[table] = (key, local, None, values)
        return values

    def _positions(self, positions: Positions) -> Local:
        if len(positions) == 2:
            return slice(int(positions[0]), int(positions[1]))
        assert self._arena is not None
        return self._arena.view(positions).copy()

    def gather_shared(self, table: str, key: int, local: Place, positions: Positions,
                      out: Place) -> None:
        """Write the parameter rows ``local`` (their numbers in the arena) of ``table`` at
        ``positions`` of the arena's [rows, D] block ``out``, and keep the row numbers and
        positions as ``key`` for the update of the same rows (``update_shared``)."""
        assert self._arena is not None
        rows = self._arena.view(local).copy()  # the arena is reused: keep our own copies
        where = self._positions(positions)
        block = self._arena.view(out)
        values = self.engine.gather(self._params[table], rows)
        self._kept[table] = (key, rows, where, values)
        if isinstance(where, slice):
            block[where] = values
        else:
            self.engine.scatter(block, where, values)

    def update_shared(self, table: str, key: int, local: Place | None,
                      positions: Positions | None, grad: Place, fn: RowUpdate | PipelineRef,
                      step: int = 0) -> np.ndarray | None:
        """``update`` with its gradient rows at ``positions`` of the arena's block ``grad``; row
        numbers and positions from the arena (``local``), or None: those ``gather_shared``
        kept as ``key`` (the rows the step read)."""
        assert self._arena is not None
        before = None
        if local is None:
            _, rows, where, before = self._take_kept(table, key)
        else:
            assert positions is not None
            rows, where = self._arena.view(local).copy(), self._positions(positions)
        if where is None:
            raise RuntimeError(f"the rows {key} of table {table!r} were not read through the "
                               "arena: their places in the step's block are unknown")
        values = self._arena.view(grad)
        part = values[where] if isinstance(where, slice) else self.engine.gather(values, where)
        return self.update(table, rows, part, fn, step, before=before)

    def update_kept(self, table: str, key: int, grad: np.ndarray, fn: RowUpdate | PipelineRef,
                    step: int = 0) -> np.ndarray | None:
        """``update`` of the rows the step read (``gather`` kept them as ``key``)."""
        _, rows, _, before = self._take_kept(table, key)
        return self.update(table, rows, grad, fn, step, before=before)

    def _take_kept(self, table: str, key: int) -> tuple[int, np.ndarray, Local | None,
                                                        np.ndarray]:
        kept = self._kept.pop(table, None)
        if kept is None or kept[0] != key:
            raise RuntimeError(f"the rows {key} of table {table!r} are not the last this host "
                               "read, or they changed since")
        return kept

    def update(self, table: str, local: np.ndarray | None, grad: np.ndarray,
               fn: RowUpdate | PipelineRef, step: int = 0,
               before: np.ndarray | None = None) -> np.ndarray | None:
        """Run ``fn`` (the per-row pipeline) on ``local`` rows of ``table`` with ``grad``,
        logging the rows' values first (as part of open step ``step``; ``before``: their
        parameters, when already read) so that ``abort`` can put them back. Returns per row of
        ``local`` the squared length of its parameters' change (``numerics.row_sumsq``: the
        driver adds the hosts' rows in global row order, as one process does), or None for a
        non-lazy table (its change is measured by ``change_sumsq``)."""
        self._kept.pop(table, None)
        if isinstance(fn, PipelineRef):
            fn = RowPipeline(self._tables[table], fn.lr, fn.ctx, self.engine)
        params, slots = self._params[table], self._slots[table]
        if self._tables[table].lazy and local is not None:
            if before is None:
                before = self.engine.gather(params, local)
            self._undo.append((step, table, local, before,
                               tuple(self.engine.gather(s, local) for s in slots)))
        else:  # every row steps: the whole shard is logged (the snapshot when it is current)
            snapshot = self._before.get(table)
            copy = (snapshot[1] if snapshot is not None and table in self._unchanged
                    else params.copy())
            self._undo.append((step, table, None, copy, tuple(s.copy() for s in slots)))
        self._unchanged.discard(table)
        plan = self._tables[table]
        if not plan.lazy or local is None:
            fn(params, slots, local, grad)
            return None
        rows = np.ascontiguousarray(local, dtype=np.int64)
        fused = self.engine.fused
        if (isinstance(fn, RowPipeline) and fn.table is plan and fused is not None
                and not plan.custom):
            # The compiled step's update: the same per-row pipeline, with the sum of squares
            # of the change from the same pass.
            return np.asarray(fused.update(plan, params, slots, rows,
                                           np.ascontiguousarray(grad, dtype=F32), fn.lr,
                                           fn.ctx))
        fn(params, slots, local, grad)
        return self.engine.change_rows(params, rows, self._undo[-1][3])

    def change_sumsq_rows(self, table: str, step: int) -> tuple[np.ndarray, np.ndarray]:
        """``(local rows, squared change)``: the rows of ``table`` on this shard that step
        ``step`` changed, sorted, and each one's squared change against its value before the
        step (its first undo entry): what several partial updates of one step (accumulation
        DISABLED) changed together."""
        entries = [(local, values) for s, name, local, values, _ in self._undo
                   if s == step and name == table and local is not None]
        if not entries:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        rows = np.concatenate([np.asarray(local, dtype=np.int64) for local, _ in entries])
        before = np.concatenate([values for _, values in entries])
        unique, first = np.unique(rows, return_index=True)  # the earliest entry of each row
        return unique, self.engine.change_rows(self._params[table], unique, before[first])

    def commit(self, step: int | None = None) -> None:
        """Steps up to ``step`` (None: all) are applied on every shard: forget their undo log."""
        self._undo = [e for e in self._undo if step is not None and e[0] > step]

    def undo_tables(self, step: int, tables: Sequence[str]) -> None:
        """Put back every row of ``tables`` that step ``step`` changed here (the latest change
        first), and forget those entries of the undo log; the other tables' stay."""
        names = set(tables)
        for table in names:
            self._kept.pop(table, None)
        entries = [e for e in self._undo if e[0] == step and e[1] in names]
        for entry in reversed(entries):
            self._restore(entry)
        self._undo = [e for e in self._undo if not (e[0] == step and e[1] in names)]

    def _restore(self, entry: tuple[int, str, Local | None, np.ndarray,
                                    tuple[np.ndarray, ...]]) -> None:
        _, table, local, values, slots = entry
        if local is None:
            self._params[table][...] = values
            for array, saved in zip(self._slots[table], slots, strict=True):
                array[...] = saved
        else:
            assert isinstance(local, np.ndarray)  # ``update`` logs row numbers, never a slice
            self.engine.scatter(self._params[table], local, values)
            for array, saved in zip(self._slots[table], slots, strict=True):
                self.engine.scatter(array, local, saved)

    def abort(self, step: int | None = None) -> None:
        """Another shard failed during step ``step`` (None: whatever is open): put back every
        row it changed here. Earlier steps were complete (their commit had not arrived yet)."""
        if step is not None:
            self.commit(step - 1)
        self._kept.clear()
        for entry in reversed(self._undo):
            self._restore(entry)
        self._undo.clear()

    # ----------------------------------------------------------------------------------------
    # Whole-table reads

    def snapshot(self, table: str, version: int) -> None:
        """Keep a copy of this shard's parameters of ``table`` as snapshot ``version``."""
        previous = self._before.get(table)
        if previous is not None and table in self._unchanged:
            self._before[table] = (version, previous[1])  # nothing changed since: share it
        else:
            self._before.pop(table, None)  # free the old copy before taking the new one
            self._before[table] = (version, self._params[table].copy())
        self._unchanged.add(table)

    def _snapshot(self, table: str, version: int) -> np.ndarray:
        current = self._before.get(table)
        if current is None or current[0] != version:
            raise ValueError(
                f"snapshot {version} of table {table!r} was replaced by a newer one; a whole-table "
                "copy of a sharded table is valid until the next step's copy"
            )
        return current[1]

    def change_sumsq(self, table: str, version: int) -> np.ndarray:
        """Per local row, the squared change of the parameters against snapshot ``version``
        (``numerics.row_sumsq``), a block of rows at a time (no [rows, D] temporaries)."""
        before = self._snapshot(table, version)
        params = self._params[table]
        block = max(1, (1 << 22) // max(params.shape[1], 1))
        parts = [self.engine.change_rows(params[start:start + block], None,
                                         before[start:start + block])
                 for start in range(0, params.shape[0], block)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)

    def read(self, key: str, local: Local) -> np.ndarray:
        """Rows ``local`` (a slice or local row numbers) of a table or slot (state-file key) or
        of a snapshot (``before/TABLE/VERSION``), as a new array."""
        parts = key.split("/")
        if parts[0] == "before":
            array = self._snapshot(parts[1], int(parts[2]))
        else:
            array = self._array(key)
        return np.array(array[local], dtype=F32, copy=True)


def call(actor: Any, committed: int | None, method: str, args: Sequence[Any]) -> Any:
    """``actor.call``: ``method(*args)`` on the host after confirming step ``committed``; the
    arrays among ``args`` travel as arguments of their own (Ray's zero-copy path), the rest
    pickled into one (``Shard.call``). ``put`` (lists of blocks of rows) goes as it is."""
    if method == "put":
        return actor.call_args.remote(committed, method, *args)
    holes = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    values = [None if i in holes else a for i, a in enumerate(args)] if holes else list(args)
    message = dumps((committed, method, values, holes))
    return actor.call.remote(message, *(args[i] for i in holes))


def call_many(actor: Any, committed: int | None,
              calls: Sequence[tuple[str, Sequence[Any]]]) -> Any:
    """``actor.call_batch``: every ``(method, args)`` of ``calls`` in one Ray call, in order,
    after confirming step ``committed``; the arrays among the arguments travel as arguments of
    their own (Ray's zero-copy path), the rest pickled into one message, as for :func:`call`."""
    arrays: list[np.ndarray] = []
    packed: list[tuple[str, list[Any], list[int]]] = []
    for method, args in calls:
        holes = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
        packed.append((method, [None if i in holes else a for i, a in enumerate(args)], holes))
        arrays.extend(args[i] for i in holes)
    return actor.call_batch.remote(dumps((committed, packed)), *arrays)


def fitting_hosts(plan: Plan, limit: int, at_least: int = 1, most: int = 1 << 20) -> int | None:
    """The fewest hosts (>= ``at_least``) whose largest share fits ``limit`` bytes, or None."""
    if shard_bytes(plan, 0, most) > limit:
        return None
    low, high = at_least, most
    while low < high:
        middle = (low + high) // 2
        if shard_bytes(plan, 0, middle) <= limit:
            high = middle
        else:
            low = middle + 1
    return low
