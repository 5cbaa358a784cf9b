"""Memory of a configuration, per host (legacy) and per SparseCore, chip and host (SparseCore).

Work in progress: the records and signatures are final; the bodies follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tpuemb_cfg.model import Diagnostic

if TYPE_CHECKING:
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig
    from tpuemb_cfg.sparsecore.stacking import Stacking

__all__ = ["Level", "MemoryReport", "UnitMemory", "legacy_memory", "memory_findings",
           "sparsecore_memory"]

#: What one unit of a report is.
Level = Literal["host", "chip", "sparsecore"]

#: How many tables ``MemoryReport.dominant`` lists.
DOMINANT = 5


@dataclass(frozen=True)
class UnitMemory:
    """The bytes of one host, chip or SparseCore (``index``), by part.

    Parts (bytes; a part that does not apply is absent): ``tables`` and ``slots`` (the real
    elements of the tables and of their optimizer's slots), ``padding`` (SparseCore: padded
    minus real elements of tables and slots), ``snapshots`` (legacy: the pre-step copy the
    executor keeps of a non-lazy table's rows), ``buffers`` (SparseCore COO buffers and row
    pointers), ``activations``, ``gradients`` (SparseCore), ``host_tables`` (a SparseCore
    host's copy of the tables under ``initialize_tables_on_host``).
    """

    index: int
    parts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "parts": dict(self.parts), "total": self.total}


@dataclass(frozen=True)
class MemoryReport:
    """Memory per unit of ``level`` against ``capacity_bytes`` (``None``: unknown, fits).

    ``dominant``: the tables (SparseCore: stacks) holding the most bytes in the fullest unit,
    ``(name, bytes)``, largest first, at most :data:`DOMINANT`. ``fits``: every unit of this
    report and of ``breakdown`` is within its capacity. ``breakdown``: the same configuration
    at the other levels (SparseCore: the per-SparseCore and per-host reports beside the chip
    report). ``paths``: the configuration field of each name in ``dominant`` and of each table
    (legacy ``table_descriptor[i]``, SparseCore ``tables["name"]``), for findings.
    """

    level: Level
    units: tuple[UnitMemory, ...]
    capacity_bytes: int | None
    dominant: tuple[tuple[str, int], ...]
    fits: bool
    breakdown: tuple[MemoryReport, ...] = ()
    paths: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "capacity_bytes": self.capacity_bytes,
            "fits": self.fits,
            "units": [u.to_json() for u in self.units],
            "dominant": [[name, size] for name, size in self.dominant],
            "breakdown": [r.to_json() for r in self.breakdown],
        }


def legacy_memory(config: TPUEmbeddingConfiguration, *, hosts: int | None = None,
                  strategy: str | None = None,
                  host_memory_bytes: int | None = None) -> MemoryReport:
    """Bytes per host of a legacy configuration: what each Ray host of the executor holds."""
    raise NotImplementedError


def sparsecore_memory(config: SparseCoreConfig, stacking: Stacking, *,
                      limits: Mapping[str, tuple[int, int]] | None = None,
                      hbm_bytes: int | None = None,
                      host_memory_bytes: int | None = None) -> MemoryReport:
    """Bytes per chip (with per-SparseCore and per-host breakdowns) of a SparseCore config."""
    raise NotImplementedError


def memory_findings(report: MemoryReport) -> list[Diagnostic]:
    """PLAN001.. findings: every unit over its capacity."""
    raise NotImplementedError
