"""The records of a step the executor hands out: its partial gradients, the de-duplication
record ``recv_activations`` returns and ``send_gradients`` takes, and the per-table report.

Plain records (no executor state): the executor makes them, the sims and the reports read them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .engines import Engine
    from .plan import Plan, TablePlan

__all__ = ["DeduplicationData", "Partial", "TableDeduplication", "TableReport", "table_report"]


@dataclass(frozen=True)
class Partial:
    """One partial gradient of a table (spec section 5): the rows it touches and how to sum.

    ``core`` is None for the single partial of accumulation ENABLED/UNSPECIFIED, else the
    TensorCore whose block of bags it covers. ``rows`` are its touched rows (sorted unique ids);
    ``inverse[j]`` is the position in ``rows`` of the j-th covered occurrence; ``occurrences``
    indexes the table's occurrence arrays (None: all of them, in order).
    """

    core: int | None
    rows: np.ndarray
    inverse: np.ndarray
    occurrences: np.ndarray | None


@dataclass(frozen=True)
class TableDeduplication:
    """What the activations of one table came from, per occurrence and per partial.

    Occurrences are the table's features in feature-index order, then bags, then positions (the
    spec's reference order). ``sample[j]`` is the row of occurrence j in the table's features'
    activation gradients stacked in that order; ``gains[j]`` is its combiner gain (spec 3.1).
    ``unique_ids``/``inverse`` are the table-wide de-duplication the forward pass gathered.
    ``compiled``: the compiled step made the record (its forward pass read the live table).
    """

    table: str
    features: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    ids: np.ndarray
    gains: np.ndarray
    sample: np.ndarray
    unique_ids: np.ndarray
    inverse: np.ndarray
    partials: tuple[Partial, ...]
    compiled: bool = False


@dataclass(frozen=True)
class DeduplicationData:
    """The de-duplication record of one step, keyed by table name; valid for that step only."""

    step: int
    tables: Mapping[str, TableDeduplication]
    batch_sizes: tuple[int, ...]
    token: object = field(repr=False, compare=False, default=None)


@dataclass
class TableReport:
    """Per-step numbers for one table: what the summary of a run shows.

    ``ids_per_host`` / ``unique_ids_per_host``: id occurrences and distinct ids of the step by
    the host that owns them (spec section 8). ``rows_touched``: distinct ids looked up;
    ``rows_updated``: rows the optimizer stepped (all rows for non-lazy Adam/Lion);
    ``update_norm``: Euclidean norm of the change of the table's parameters in the step (in
    ``as_dict``, None when it is not finite: JSON has no NaN);
    ``zero_denominator_bags``: per feature of the table, bags whose mean/sqrtn denominator was 0.
    """

    ids_per_host: np.ndarray
    unique_ids_per_host: np.ndarray
    rows_touched: int
    zero_denominator_bags: dict[int, int]
    rows_updated: int = 0
    update_norm: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready values (per-host counts as lists, feature indices as strings)."""
        return {
            "rows_touched": self.rows_touched,
            "rows_updated": self.rows_updated,
            "update_norm": self.update_norm if math.isfinite(self.update_norm) else None,
            "ids_per_host": [int(v) for v in self.ids_per_host],
            "unique_ids_per_host": [int(v) for v in self.unique_ids_per_host],
            "zero_denominator_bags": {str(f): n for f, n in self.zero_denominator_bags.items()},
        }


def table_report(plan: Plan, engine: Engine, table: TablePlan, record: TableDeduplication,
                 zero_bags: dict[int, int]) -> TableReport:
    """The report of ``table`` in a step: its ids and distinct ids per host (spec section 8),
    the rows touched and the bags whose denominator was 0; the update fills in the rest."""
    ids, unique = record.ids, record.unique_ids
    hosts = plan.num_hosts
    per_host: list[np.ndarray]
    if hosts == 1:
        per_host = [np.array([ids.shape[0]]), np.array([unique.shape[0]])]
    else:
        per_host = [
            np.bincount(
                engine.host_of(values, table.vocabulary, hosts, plan.mod_sharding),
                minlength=hosts,
            )
            for values in (ids, unique)
        ]
    return TableReport(
        ids_per_host=per_host[0],
        unique_ids_per_host=per_host[1],
        rows_touched=int(unique.shape[0]),
        zero_denominator_bags=zero_bags,
    )
