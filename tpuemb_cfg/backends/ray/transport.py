"""How a Ray storage's rows travel: a step's reads and updates split by host
(``layout.split``), through the shared-memory arena for the hosts on the driver's machine
(``host.Arena``) and through Ray's object store for the others; whole arrays streamed a block of
rows at a time (:class:`ShardedArray`, ``_ship``)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tpuemb_cfg.model.layout import HostRows

from .calls import HostCalls, Submitted
from .deadlines import Work
from .host import Arena, Place, Positions

__all__ = ["BLOCK_BYTES", "SHM_DIR", "ShardedArray", "Transport"]

F32 = np.float32
#: The directory of shared-memory files (``storage.SHARED_MEMORY_ENV`` turns their use off).
SHM_DIR = "/dev/shm"
#: Bytes of one block of rows streamed from the shards (a file write, a fetch, a load).
BLOCK_BYTES = 32 << 20


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

    def __init__(self, storage: Transport, key: str, table: str, shape: tuple[int, int]) -> None:
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
# Rows to and from the hosts


class Transport(HostCalls):
    """The rows of a step and whole arrays, to and from the hosts (see the module docstring)."""

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
