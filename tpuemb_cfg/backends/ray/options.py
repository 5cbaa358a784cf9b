"""The Ray backend's own options: what ``Placement.options`` carries for ``backend="ray"``.

:class:`RayOptions` is made from named settings by ``RayBackend.settings``
(``executor.storage.placement("ray", shards=..., ...)``), which refuses names it does not know,
or directly: ``Placement("ray", RayOptions(shards=2))``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ...executor.storage import refuse_settings

__all__ = ["RayOptions"]


@dataclass(frozen=True)
class RayOptions:
    """Where the Ray backend's host actors run.

    ``shards``: the number of host actors (default ``num_hosts``); ``ray_address``: the Ray
    cluster to join (default ``RAY_ADDRESS``, else a local instance); ``runtime_env``: Ray's
    ``runtime_env`` of the host actors (``pip``, ``env_vars``, ``working_dir`` ...), merged
    with the driver's own ``tpuemb_cfg`` package, which the actors receive in ``py_modules``
    unless ``ship`` is False (docs/scale.md).
    """

    shards: int | None = None
    ray_address: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    ship: bool = True

    @classmethod
    def of(cls, given: Mapping[str, Any], backend: str = "ray") -> RayOptions:
        """The options of the named settings ``given``; ``UsageError`` naming those it does
        not know (``backend``: the name the message gives)."""
        known = {field.name for field in fields(cls)}
        refuse_settings(backend, [name for name in given if name not in known])
        return cls(**given)
