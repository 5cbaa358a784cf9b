"""The paths of a run, anchored where it started, the headers of an ``.npz`` file, and a
state file (``--init``): an ``.npz`` of tpuemb's state or a TensorFlow checkpoint."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.checkpoints.state import (
    checkpoint_state_bytes,
    is_checkpoint,
    read_checkpoint_state,
)
from tpuemb_cfg.formats.npzio import read_npz

__all__ = ["Anchored", "npz_headers", "plan_tables", "read_state_file", "state_file_bytes"]


class Anchored:
    """The paths a run reads and its caller writes, anchored to the folder the run started in.

    Code the run executes (a Python spec, a custom optimizer or combiner) may call
    ``os.chdir``: every file is read and written by its absolute path, taken before any such
    code runs, so outputs land where the user asked and the messages stay true.
    ``self[path]`` is the absolute path of ``path`` as typed; errors raised inside
    :meth:`named_as_typed` name the file as typed.
    """

    def __init__(self, *paths: str | None) -> None:
        self._real = {p: os.path.abspath(p) for p in paths if p is not None and p != "-"}

    def __getitem__(self, path: str) -> str:
        return self._real.get(path, path)

    @contextlib.contextmanager
    def named_as_typed(self) -> Iterator[None]:
        typed = {real: path for path, real in self._real.items()}
        try:
            yield
        except InputError as exc:
            if exc.path in typed:
                exc.path = typed[exc.path]
            raise


class _HeadersRead(Exception):
    """The headers of an ``.npz`` file are read: stop before any array data."""


def npz_headers(path: str, check: Callable[[Any], object] | None = None) -> dict[str, Any]:
    """The ``.npy`` headers of every member of ``path`` by key (``npzio.read_npz``'s checks,
    then ``check(headers)``), without decompressing any array."""
    found: dict[str, Any] = {}

    def keep(headers: Any) -> None:
        if check is not None:
            check(headers)
        found.update(headers)
        raise _HeadersRead

    try:
        read_npz(path, check_keys=keep)
    except _HeadersRead:
        pass
    return found


def plan_tables(plan: Any) -> list[tuple[str, int, int, tuple[str, ...]]]:
    """(name, rows, dim, slot names) of every table of an executor plan: what a checkpoint's
    embedding is read into."""
    return [(t.name, int(t.vocabulary), int(t.dimension), tuple(t.slot_names))
            for t in plan.tables]


def state_file_bytes(path: str) -> int:
    """The bytes reading state file ``path`` takes: a checkpoint's float32 variables (from its
    index), an ``.npz``'s arrays (from its ``.npy`` headers)."""
    if is_checkpoint(path):
        return checkpoint_state_bytes(path)
    return sum(h.nbytes for h in npz_headers(path).values())


def read_state_file(path: str, tables: list[tuple[str, int, int, tuple[str, ...]]]
                    ) -> dict[str, Any]:
    """State file ``path``: a TensorFlow checkpoint's embedding unstacked into tpuemb's keys
    (``checkpoints.state``), or an ``.npz`` as it is."""
    if is_checkpoint(path):
        return read_checkpoint_state(path, tables)
    return read_npz(path)
