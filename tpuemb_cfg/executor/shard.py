"""One host's rows of every table and slot, and the work done where they live.

A :class:`Shard` is what a Ray actor of the sharded storage (``ray_storage``) runs; it is plain
Python and NumPy, so it also runs (and is tested) in this process. It holds, for every table,
the rows ``sharding.TableLayout`` gives its host - float32 ``[rows, D]`` parameters and one
array per slot - and nothing else: it allocates only its rows, initialised by
``state.initial_table_rows`` / ``state.initial_slot_rows``, which depend only on the seed, the
table and the global id, so the sharded state is bit-identical to one machine's.

Per step the driver asks for rows by *local* row number (``gather``), sends the per-row
gradients of its rows (``update``, which runs the per-row pipeline ``fn`` of spec section 6 on
the shard's own arrays), and closes the step (``commit``). A step is all or nothing: before
``update`` changes a row it keeps the row's values (parameters and slots) in an undo log, so
``abort`` puts back everything the open step changed on this shard; the driver calls it on
every shard when one shard fails, and ``commit`` drops the log once every shard has updated.

Whole-table reads never gather a table in one place: ``snapshot`` keeps a copy of this shard's
parameters where they are (the pre-step values of a non-lazy table: its update norm and the
forward pass of a pipelined step read them), and ``read`` returns one block of local rows of a
table, slot or snapshot at a time, for streaming into a file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import state
from .engines import get_engine
from .optimizers import UpdateContext
from .pipeline import RowPipeline
from .plan import Plan, TablePlan
from .sharding import TableLayout
from .state import slot_key, table_key
from .storage import RowUpdate

__all__ = ["PipelineRef", "Shard", "shard_bytes"]

F32 = np.float32

Local = slice | np.ndarray


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
        slots = len(table.optimizer.slots)
        arrays = 1 + slots + (0 if table.lazy else 3 + 2 * slots)
        total += rows * table.dimension * 4 * arrays
    return total


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

    # ----------------------------------------------------------------------------------------
    # Set-up

    def where(self) -> tuple[str, int]:
        """(the host name this process runs on, its CPU count), for thread placement."""
        return os.uname().nodename, os.cpu_count() or 1

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
        """Drop every array (the actor stays, for the next executor)."""
        self._params.clear()
        self._slots.clear()
        self._undo.clear()
        self._before.clear()
        self._unchanged.clear()

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

    def put_defaults(self, key: str, seed: int) -> None:
        """Reset the table or slot ``key`` to its defaults (spec section 11) for this host."""
        parts = key.split("/")
        table = self._tables[parts[1]]
        ids = self.layouts[table.name].global_ids(self.host)
        if parts[0] == "table":
            self._params[table.name][...] = state.initial_table_rows(table, seed, ids)
        else:
            index = table.slot_names.index(parts[2])
            self._array(key)[...] = state.initial_slot_rows(table, index, ids)

    # ----------------------------------------------------------------------------------------
    # A step

    def call(self, committed: int | None, method: str, *args: Any) -> Any:
        """``method(*args)``, after ``commit(committed)`` when the driver has a step to
        confirm: the end of a step rides on the next call instead of a message of its own."""
        if committed is not None:
            self.commit(committed)
        # Ray hands arrays over read-only; numba compiles (and caches) kernels per argument type,
        # so writable copies reuse the kernels the driver's process compiled and cached instead
        # of compiling read-only variants in every new actor process.
        args = tuple(np.array(a) if isinstance(a, np.ndarray) and not a.flags.writeable else a
                     for a in args)
        return getattr(self, method)(*args)

    def gather(self, table: str, local: np.ndarray) -> np.ndarray:
        """The parameter rows ``local`` of ``table`` (a new float32 [len(local), D] array)."""
        return self.engine.gather(self._params[table], local)

    def update(self, table: str, local: np.ndarray | None, grad: np.ndarray,
               fn: RowUpdate | PipelineRef, step: int = 0) -> float:
        """Run ``fn`` (the per-row pipeline) on ``local`` rows of ``table`` with ``grad``,
        logging the rows' values first (as part of open step ``step``) so that ``abort`` can
        put them back. Returns the float64 sum of squares of the parameters' change on the
        rows ``local`` (0 for a non-lazy table: its change is summed by ``change_sumsq``)."""
        if isinstance(fn, PipelineRef):
            fn = RowPipeline(self._tables[table], fn.lr, fn.ctx, self.engine)
        params, slots = self._params[table], self._slots[table]
        if self._tables[table].lazy and local is not None:
            self._undo.append((step, table, local, self.engine.gather(params, local),
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
            return 0.0
        rows = np.ascontiguousarray(local, dtype=np.int64)
        fused = self.engine.fused
        if isinstance(fn, RowPipeline) and fn.table is plan and fused is not None:
            # The compiled step's update: the same per-row pipeline, with the sum of squares
            # of the change from the same pass.
            return float(fused.update(plan, params, slots, rows,
                                      np.ascontiguousarray(grad, dtype=F32), fn.lr, fn.ctx))
        fn(params, slots, local, grad)
        return self._sumsq(params, rows, self._undo[-1][3])

    def _sumsq(self, params: np.ndarray, local: np.ndarray, before: np.ndarray) -> float:
        """sum((params[local] - before)^2): the difference in float32, squared and summed in
        float64 by the engine (the numba one without temporaries)."""
        norm = self.engine.change_norm(params, local, before)
        return norm * norm

    def change_sumsq_rows(self, table: str, step: int) -> float:
        """The float64 sum of squares of the change step ``step`` made to ``table``'s rows on
        this shard, each row against its value before the step (its first undo entry): what
        several partial updates of one step (accumulation DISABLED) changed together."""
        entries = [(local, values) for s, name, local, values, _ in self._undo
                   if s == step and name == table and local is not None]
        if not entries:
            return 0.0
        rows = np.concatenate([np.asarray(local, dtype=np.int64) for local, _ in entries])
        before = np.concatenate([values for _, values in entries])
        unique, first = np.unique(rows, return_index=True)  # the earliest entry of each row
        return self._sumsq(self._params[table], unique, before[first])

    def commit(self, step: int | None = None) -> None:
        """Steps up to ``step`` (None: all) are applied on every shard: forget their undo log."""
        self._undo = [e for e in self._undo if step is not None and e[0] > step]

    def abort(self, step: int | None = None) -> None:
        """Another shard failed during step ``step`` (None: whatever is open): put back every
        row it changed here. Earlier steps were complete (their commit had not arrived yet)."""
        if step is not None:
            self.commit(step - 1)
        for _, table, local, values, slots in reversed(self._undo):
            if local is None:
                self._params[table][...] = values
                for array, saved in zip(self._slots[table], slots, strict=True):
                    array[...] = saved
            else:
                self.engine.scatter(self._params[table], local, values)
                for array, saved in zip(self._slots[table], slots, strict=True):
                    self.engine.scatter(array, local, saved)
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

    def change_sumsq(self, table: str, version: int) -> float:
        """The float64 sum of squares of (parameters - snapshot ``version``) on this shard,
        a block of rows at a time (no shard-sized temporaries)."""
        before = self._snapshot(table, version)
        params = self._params[table]
        total = 0.0
        block = max(1, (1 << 22) // max(params.shape[1], 1))
        for start in range(0, params.shape[0], block):
            delta = (params[start:start + block] - before[start:start + block]).astype(np.float64)
            total += float(np.sum(delta * delta))
        return total

    def read(self, key: str, local: Local) -> np.ndarray:
        """Rows ``local`` (a slice or local row numbers) of a table or slot (state-file key) or
        of a snapshot (``before/TABLE/VERSION``), as a new array."""
        parts = key.split("/")
        if parts[0] == "before":
            array = self._snapshot(parts[1], int(parts[2]))
        else:
            array = self._array(key)
        return np.array(array[local], dtype=F32, copy=True)
