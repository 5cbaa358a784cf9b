"""The rows of a table before its update, kept for the diagnosis of a non-finite result.

:class:`KeptRows` keeps, per table, copies of the slots of the rows a lazy update changes in
a storage in this process (``keep``, before the update); the compiled update keeps the
parameters and slots itself, of the rows whose change is not finite only, so a step that stays
finite copies nothing (``put``, after the update; a copy of every touched row took 13% of the
anchor step). Not whole tables (a non-lazy update's, whose cause is then replayed from the values
it left) nor remote rows. :meth:`KeptRows.first_nonfinite` replays the update of the first
non-finite element (``nonfinite.diagnose``) from what was kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .engines import Engine
from .nonfinite import NonFinite, diagnose, row_gradient
from .plan import TablePlan
from .records import TableDeduplication
from .storage import Storage

__all__ = ["KeptRows"]

F32 = np.float32


class KeptRows:
    """The rows of each table before its update (see the module docstring), of ``storage``
    (its live arrays where it has them: ``Storage.live``). ``rate_source``: where a table's
    learning rate comes from, in words, and the library parameter that set it."""

    def __init__(self, storage: Storage, engine: Engine,
                 rate_source: Callable[[TablePlan], tuple[str, str | None]]) -> None:
        self._storage = storage
        self._rate_source = rate_source
        self._live = storage.live()
        self._engine = engine
        self._slots: dict[str, tuple[np.ndarray, ...]] = {}
        self._params: dict[str, np.ndarray] = {}

    def keep(self, table: TablePlan, rows: np.ndarray | None) -> None:
        """Keep the slots of ``rows`` of ``table`` before its update (nothing for every row, or
        remote rows)."""
        if rows is None or self._live is None:
            return
        _, slots = self._live.local(table.name, rows)
        self._slots[table.name] = tuple(np.take(slot, rows, axis=0) for slot in slots)

    def put(self, table: TablePlan, params: np.ndarray, slots: Sequence[np.ndarray]) -> None:
        """Keep the parameters and slots of ``table``'s touched rows before its update, as the
        compiled update kept them (``fused.update_table``): [rows, D] arrays whose rows hold
        the values only where the row's change was not finite, which includes every row the
        update left NaN or infinite, the only rows ``first_nonfinite`` reads."""
        self._params[table.name] = params
        self._slots[table.name] = tuple(slots)

    def take_params(self, table: TablePlan) -> np.ndarray | None:
        """The parameters kept of ``table`` (None: none), forgotten."""
        return self._params.pop(table.name, None)

    def drop(self, table: TablePlan) -> None:
        """Forget the slots kept of ``table`` (its update stayed finite)."""
        self._slots.pop(table.name, None)

    def _slot_rows(self, table: TablePlan, row: int) -> list[np.ndarray]:
        """Row ``row`` of each slot of ``table`` ([1, D] arrays), as the storage holds it."""
        ids = np.array([row], dtype=np.int64)
        if self._live is not None:
            _, slots = self._live.local(table.name, ids)
            return [np.asarray(slot[row:row + 1]) for slot in slots]
        arrays = [self._storage.arrays()[f"slot/{table.name}/{name}"]
                  for name in table.slot_names]
        return [np.asarray(a[row:row + 1]) if isinstance(a, np.ndarray)
                else np.asarray(a.take(ids))  # a remote array (the Ray backend's): that row
                for a in arrays]

    def first_nonfinite(
        self, step: int, table: TablePlan, rows: np.ndarray | None, values: np.ndarray,
        lr: np.float32, rates: np.ndarray, source: tuple[TableDeduplication, list[np.ndarray]],
        before: np.ndarray | None,
    ) -> NonFinite:
        """The ``NonFinite`` of the first non-finite element of the updated ``values`` (of
        ``rows``; None: every row) of step ``step``: its update replayed
        (``nonfinite.diagnose``) with learning rate ``lr`` from the parameter before the step
        (``before``, where the route kept it), the slots the step left and the row's gradient
        recomputed from ``source`` (the step's record and activation gradients)."""
        bad = np.argwhere(~np.isfinite(values))
        position, column = (int(i) for i in bad[0])
        count = int(bad.shape[0])
        row = position if rows is None else int(rows[position])
        kept = self._slots.pop(table.name, None)
        exact = before is not None and kept is not None
        if exact:
            assert before is not None and kept is not None
            w = F32(before[position, column])
            slots = [F32(slot[position, column]) for slot in kept]
        else:  # the compiled update worked in place: the values it left
            w = F32(values[position, column])
            slots = [F32(slot[0, column]) for slot in self._slot_rows(table, row)]
        grad = row_gradient(self._engine, table, *source, row)
        cause, operation, blamed = diagnose(table, w, slots, F32(grad[column]), lr,
                                            tuple(float(r) for r in rates), exact=exact)
        parameter = None
        if blamed:
            text, parameter = self._rate_source(table)
            cause = (f"{cause}, with learning rate {float(lr):.6g} ({text}); lower the "
                     "learning rate")
        return NonFinite(step, table.name, row, column,
                         str(values[position, column]), cause, operation, count, blamed,
                         parameter, float(lr) if blamed else None)
