"""What a run asks of the backend its tables live on, by the backend's name.

The executor opens a backend's storage (``executor.storage.BACKENDS``); a run around it needs
more of the backend: which settings of the ``Placement`` it reads, the session it runs in (the
Ray backend connects to a cluster), how it reads a state file (``--init``, a checkpoint), the
plan of where its rows would go (``--dry-run``) and that plan's text, and what a lost host
means for the run. :func:`backend_tools` returns them as a :class:`BackendTools`; the run layer
(``tpuemb_cfg.run``) and ``tpuemb simulate`` ask it instead of testing the backend's name.

The local backend keeps everything in this process and adds nothing: :data:`LOCAL` is the
default of every hook. A backend adds its tools to :data:`TOOLS` (``name ->
"module:attribute"``, imported when asked for, as ``BACKENDS`` is).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["LOCAL", "TOOLS", "BackendTools", "backend_options", "backend_tools"]


class BackendTools:
    """The hooks of the local backend, every other backend's defaults.

    ``name``: the backend's name; ``in_process``: whether its tables are this process's memory
    (a run then checks them against the machine's); ``options``: the names of the command
    options only this backend reads (``ray_address``, ``shards``, ...).
    """

    name = "local"
    in_process = True
    options: tuple[str, ...] = ()

    def runtime_env(self, text: str | None) -> dict[str, Any] | None:
        """The parsed environment option of the backend's processes (None: none)."""
        return None

    @contextlib.contextmanager
    def session(self, placement: Any) -> Iterator[None]:
        """Connected to what the backend runs on for the block (nothing to connect to)."""
        yield

    def read_state(self) -> Callable[..., Any]:
        """How a state file (``--init``, a checkpoint) is read: into memory."""
        from tpuemb_cfg.npzio import read_npz

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


LOCAL = BackendTools()

#: The tools of each backend other than the local one: ``"module:attribute"``.
TOOLS: dict[str, str] = {"ray": "tpuemb_cfg.backends.ray.describe:RAY"}


def backend_tools(backend: Any) -> BackendTools:
    """The :class:`BackendTools` of ``backend`` (a name, or a ``Backend`` object: the local
    defaults)."""
    target = TOOLS.get(backend) if isinstance(backend, str) else None
    if target is None:
        return LOCAL
    module, _, attribute = target.partition(":")
    found: BackendTools = getattr(importlib.import_module(module), attribute)
    return found


def backend_options() -> dict[str, str]:
    """Every backend-only option name, with the backend that reads it."""
    owners: dict[str, str] = {}
    for name in TOOLS:
        tools = backend_tools(name)
        owners.update({option: name for option in tools.options})
    return owners

