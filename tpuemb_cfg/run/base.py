"""The :class:`Run` every mode shares, and the :class:`RunResult` it returns."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.executor.storage import Backend, choose_backend
from tpuemb_cfg.formats.limits import available_memory
from tpuemb_cfg.run.files import Anchored
from tpuemb_cfg.run.request import RunRequest
from tpuemb_cfg.sim.report import plan_text

__all__ = ["Progress", "Run", "RunResult"]

#: Called with the count done after each unit of a run's progress (``Run.total`` of them).
Progress = Callable[[int], None]


@dataclass
class RunResult:
    """What a run leaves: ``summary`` (the JSON of ``summary.json``, or of a replay's
    ``--json``), ``state`` (the tables and slots a tables file holds; None: no such file) and
    ``out`` (a replay's O.npz arrays: the final tables and slots and every step's
    activations; None for a synthetic run)."""

    summary: dict[str, Any]
    state: dict[str, Any] | None = None
    out: dict[str, Any] | None = None


class Run:
    """One run of a configuration: planned by :meth:`plan` (nothing allocated), started by
    :meth:`start` (the memory refused before anything is allocated, a checkpoint resumed),
    run by :meth:`run` (``progress`` called as it goes), its outputs returned by
    :meth:`result` for the caller to write.

    ``kind``: ``synthetic``, ``workers``, ``replay`` or ``sparsecore``; ``label``: the
    configuration as messages name it; ``backend``: its ``Backend`` (storage and run hooks).
    ``total``, ``first`` and ``unit``: what ``progress`` counts (from ``first``, a resumed
    run's step, to ``total``); :meth:`detail`: what a progress line adds (the loss).
    """

    kind = ""
    unit = "step"

    def __init__(self, request: RunRequest, label: str, real: Anchored) -> None:
        self.request = request
        self.label = label
        self._real = real
        self.backend: Backend = choose_backend(request.placement.backend)
        self.total = request.steps
        self.first = 0

    def where(self, path: str) -> str:
        """The absolute path of ``path`` (a path of the request, as typed), taken when the run
        was opened: where the caller reads or writes it whatever folder a spec moved to."""
        return self._real[path]

    def named_as_typed(self) -> contextlib.AbstractContextManager[None]:
        """Errors raised inside name the request's files as typed, not by absolute path."""
        return self._real.named_as_typed()

    def session(self) -> contextlib.AbstractContextManager[None]:
        """The backend's session for the run (connected to the Ray cluster: joined or started,
        then left)."""
        return self.backend.session(self.request.placement.options)

    @property
    def combiner_note(self) -> str | None:
        """Which combiners a configuration that records none was run with (None: its own)."""
        return None

    def plan(self, *, machine_memory: Callable[[], int | None] = available_memory,
             say: Callable[[Any], str] = str) -> dict[str, Any]:
        """What the run would do and need, as a dict: nothing runs or is allocated. The
        backend's own plan (where its processes would go, ``machine_memory()`` the memory of
        this machine) is under the backend's name, its refusal worded by ``say``."""
        raise NotImplementedError

    def plan_text(self, info: dict[str, Any]) -> str:
        """The text of :meth:`plan`'s ``info``."""
        lines = plan_text(info).split("\n")
        backend = info.get(self.backend.name)
        if backend is not None:
            lines[-1:-1] = self.backend.plan_lines(backend)
        return "\n".join(lines)

    def _with_backend_plan(self, info: dict[str, Any], plan: Any,
                           machine_memory: Callable[[], int | None],
                           say: Callable[[Any], str]) -> dict[str, Any]:
        request = self.request
        found = self.backend.plan(plan, request.placement, request.options.memory_limit,
                                  machine_memory, say)
        return info if found is None else {**info, self.backend.name: found}

    def start(self) -> None:
        """Read the inputs and allocate the tables (refused first when they would not fit)."""
        raise NotImplementedError

    def run(self, progress: Progress | None = None, *,
            checkpoint: Callable[[], None] | None = None,
            on_batch: Callable[[int, Any], None] | None = None) -> None:
        """Every step; ``progress(done)`` after each unit, ``checkpoint()`` every
        ``checkpoint_every`` steps (the caller saves :meth:`checkpoint_arrays`),
        ``on_batch(step, arrays)`` with each synthetic step's batch."""
        raise NotImplementedError

    def result(self) -> RunResult:
        """The run's summary and the arrays its outputs hold."""
        raise NotImplementedError

    def checkpoint_arrays(self) -> dict[str, Any]:
        """The full state of the run now, what a checkpoint file holds (a synthetic run on one
        worker: the others keep no checkpoint)."""
        raise InputError(f"a {self.kind} run keeps no checkpoint: only a synthetic run on one "
                         "worker does")

    def detail(self) -> str:
        """What a progress line shows after the rate."""
        return ""

    @contextlib.contextmanager
    def lost(self, hint: str | Callable[[], str]) -> Iterator[None]:
        """A backend host lost during the block: its error says ``hint`` (where to resume)."""
        with self.backend.lost(hint):
            yield

    def phase(self, name: str) -> contextlib.AbstractContextManager[None]:
        """A backend host lost during the block is said to be lost in phase ``name``."""
        return self.backend.phase(name)
