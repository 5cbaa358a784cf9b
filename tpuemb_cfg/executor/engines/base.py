"""The engine record: one implementation of the executor's hot loops behind one interface.

The executor calls nothing but these functions for the work that touches every occurrence or
every looked-up row; each engine module (``numpy``, ``numba``) builds one ``Engine``.

Conventions: ids are int64, values float32; a *bag* is one row of ``row_splits`` (the occurrences
``row_splits[b] : row_splits[b + 1]``); *segments* are groups of occurrences sharing an index.

``deduplicate(ids) -> (unique, inverse)``
    the sorted distinct ids and, per occurrence, its position in them (``unique[inverse] == ids``);
``segment_sum(values, segments, num_segments)``
    per segment, the float32 sum of the rows of ``values`` [n, D] in it, in occurrence order;
``backprop_sum(d_activations, sample, gains, segments, num_segments)``
    per segment s, the sum over occurrences j with ``segments[j] == s`` of
    ``gains[j] * d_activations[sample[j]]`` (spec section 4: back-propagation and the duplicate
    sum in one call);
``gather(table, rows)`` / ``scatter(table, rows, values)``
    whole rows out of / into a [V, D] array (rows distinct for ``scatter``);
``combine(rows, gains, row_splits)`` / ``gather_combine(rows, index, gains, row_splits)``
    activations: per bag, the sum of ``gains[j] * rows[j]`` (``rows[index[j]]``) in position order;
``update_rows(table, params, slots, rows, grad, lr, ctx) -> bool``
    run the per-row pipeline (gradient clipping, weight decay, the optimizer, weight clipping)
    on ``rows`` of ``params`` and ``slots`` in place (every row, the others with a zero
    gradient, for a non-lazy table) and return True, or return False without touching anything
    when the engine has no fused kernel for the arrays (the executor then runs the NumPy
    pipeline of ``tpuemb_cfg.executor.pipeline``);
``change_rows(params, rows, before) -> float64 [n]``
    per row, the squared Euclidean length of ``params[rows] - before`` (``rows`` None: every
    row), in the order ``numerics.row_sumsq`` defines;
``change_norm(params, rows, before) -> float``
    the Euclidean norm of the same: ``sqrt(numerics.total(change_rows(...)))``, rows added in
    order, so every engine, thread count and backend gives the same bits;
``bag_of_occurrence``, ``bag_scales``, ``clip``, ``quantize``, ``host_of``
    as in ``tpuemb_cfg.executor.engines.numpy``;
``fused``
    None, or the compiled step the executor runs on tables in this process
    (``engines.numba.FusedStep``: de-duplication with occurrence lists, the forward pass from
    the table, back-propagation with the input check, the fused update with its norm).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from ...algorithms.update import UpdateContext
    from ..plan import TablePlan

#: ``update_rows(table, params, slots, rows, grad, lr, ctx) -> bool`` (the module docstring).
UpdateRows = Callable[
    ["TablePlan", np.ndarray, Sequence[np.ndarray], np.ndarray | None, np.ndarray, np.float32,
     "UpdateContext"],
    bool,
]

__all__ = ["Engine"]


class CompiledStep(Protocol):
    """The compiled step's one interface (``Engine.fused``; the numba engine's
    ``engines.numba.FusedStep``), what the executor and this module call: de-duplication and
    the forward lookup on live rows, the pending-row probe of a lazy table, back-propagation
    with the input check (``(grad or grouped occurrences, finite)``), the fused update returning
    each row's squared change, and its threads (``parallel`` tasks, one task ``alongside``
    another, the thread count)."""

    def deduplicate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def lookup(self, rows: np.ndarray, unique: np.ndarray, inverse: np.ndarray | None,
               gains: np.ndarray, row_splits: np.ndarray) -> np.ndarray: ...

    def missing_rows(self, done: np.ndarray, ids: np.ndarray) -> np.ndarray: ...

    def backprop(self, d_activations: np.ndarray, sample: np.ndarray, gains: np.ndarray,
                 inverse: np.ndarray, rows: int) -> tuple[Any, bool]: ...

    def update(self, table: TablePlan, params: np.ndarray, slots: tuple[np.ndarray, ...],
               rows: np.ndarray, grad: Any, lr: np.float32, ctx: UpdateContext,
               kept: tuple[np.ndarray, ...] | None = None) -> np.ndarray: ...

    def parallel(self, tasks: Sequence[Callable[..., Any]]) -> list[Any]: ...

    def alongside(self, background: Callable[[], Any], foreground: Callable[[], Any]
                  ) -> tuple[Any, Any]: ...

    def threads(self) -> int: ...


@dataclass(frozen=True)
class Engine:
    """One implementation of the executor's hot loops (see the module docstring).

    ``name`` is the engine actually in use; ``requested`` the one asked for (they differ after a
    fallback, and ``fallback`` then says why).
    """

    name: str
    requested: str
    deduplicate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    segment_sum: Callable[[np.ndarray, np.ndarray, int], np.ndarray]
    backprop_sum: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]
    gather: Callable[[np.ndarray, np.ndarray], np.ndarray]
    scatter: Callable[[np.ndarray, np.ndarray, np.ndarray], None]
    combine: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    gather_combine: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    update_rows: UpdateRows
    change_rows: Callable[[np.ndarray, np.ndarray | None, np.ndarray], np.ndarray]
    change_norm: Callable[[np.ndarray, np.ndarray | None, np.ndarray], float]
    bag_of_occurrence: Callable[[np.ndarray], np.ndarray]
    bag_scales: Callable[[np.ndarray, np.ndarray, str], tuple[np.ndarray, np.ndarray]]
    clip: Callable[[np.ndarray, np.float32 | None, np.float32 | None], np.ndarray]
    quantize: Callable[[np.ndarray, np.float32, np.float32, int], np.ndarray]
    host_of: Callable[[np.ndarray, int, int, bool], np.ndarray]
    fallback: str | None = None
    fused: CompiledStep | None = None
