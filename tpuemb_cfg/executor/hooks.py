"""What a run asks of a backend besides its storage, with the local backend's answers.

A backend (``executor.storage.Backend``) opens the storage the executor steps. A run around
the executor (``tpuemb_cfg.run``, ``tpuemb simulate``) needs more of it, and asks the same
object: which command options only it reads (``options``), its processes' environment
(``runtime_env``), how it reads a state file (``--init``, a checkpoint), the plan of where its
rows would go (``--dry-run``) and that plan's text, and what a lost host means for the run
(``lost``, ``phase``). :class:`RunHooks` holds the answers of a backend whose tables are this
process's arrays; the local backend is one, the Ray backend overrides each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tpuemb_cfg.formats.npzio import read_npz

__all__ = ["RunHooks"]


class RunHooks:
    """The run-level hooks of a backend whose tables live in this process."""

    #: The names of the command options only this backend reads (``ray_address``, ...).
    options: tuple[str, ...] = ()

    def runtime_env(self, text: str | None) -> dict[str, Any] | None:
        """The parsed environment option of the backend's processes (None: none)."""
        return None

    def read_state(self) -> Callable[..., Any]:
        """How a state file (``--init``, a checkpoint) is read: into memory."""
        return read_npz

    def plan(self, plan: Any, placement: Any, limit: int | None,
             machine_memory: Callable[[], int | None],
             say: Callable[[Any], str] = str) -> dict[str, Any] | None:
        """Where the rows of ``plan`` would go (None: in this process); ``machine_memory()``:
        this machine's available memory; ``say``: how a refusal is worded."""
        return None

    def plan_lines(self, shown: Mapping[str, Any]) -> list[str]:
        """The text of a :meth:`plan`."""
        return []

    @contextlib.contextmanager
    def lost(self, hint: str | Callable[[], str]) -> Iterator[None]:
        """A host lost during the block: its error completed with ``hint`` (where to resume)."""
        yield

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A host lost during the block is said to be lost in phase ``name``."""
        yield
