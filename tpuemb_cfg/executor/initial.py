"""The state a run starts from: the arrays given (whole or in part, ``partial``) over the
defaults of spec section 11 (``state``), and the tables of callable initializers
(``initializers``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .aligned import aligned_empty
from .initializers import called_table
from .partial import apply_partial, rows_key, split_partial, values_key
from .plan import Plan
from .state import Pending, check_given, default_slot, default_table, slot_key, table_key

__all__ = ["InitialState", "called_tables", "initial_state"]


def _given(arrays: Mapping[str, Any], key: str, shape: tuple[int, int]) -> np.ndarray:
    """A private, writable float32 copy of the checked (``check_given``) array ``arrays[key]``,
    its rows on cache lines (``aligned``): the executor updates it in place."""
    out = aligned_empty(shape)
    np.copyto(out, np.asarray(arrays[key]), casting="unsafe")
    return out


class InitialState(dict[str, np.ndarray]):
    """What ``initial_state`` returns: the arrays by state-file key, and ``pending`` (lazy: per
    table name, the default rows not computed yet; empty otherwise)."""

    pending: dict[str, Pending]


def initial_state(
    plan: Plan,
    given: Mapping[str, Any] | None = None,
    seed: int = 0,
    source: str | None = None,
    strict: bool = False,
    lazy: bool = False,
) -> InitialState:
    """Every table and slot under its state-file key: the arrays ``given`` (private float32
    copies), plus the defaults of spec section 11 for what is missing.

    The keys come table by table: ``table/NAME``, then its ``slot/NAME/SLOT`` in state order.
    Raises ``InputError`` naming the key for an unknown key, a wrong dtype (``strict``: only
    float32) or a wrong shape. ``lazy``: the default arrays are allocated but not written (the
    operating system provides their memory only when touched) and ``pending`` says which rows
    still need their values: the owner computes a row when it is first read or written
    (``Pending.materialize``; ``LocalStorage`` does), so a run pays only for the rows it
    touches. The values are the same either way (counter-based, ``counter``). ``given`` may
    hold partial tables (``partial``: ``table/NAME/rows`` and the ``.../values`` of
    those rows); their other rows get the defaults.
    """
    given, partial = split_partial(plan, given or {}, source, strict)
    check_given(plan, given, source, strict)
    state = InitialState()
    state.pending = {}
    for table in plan.tables:
        shape = (table.vocabulary, table.dimension)
        name = table_key(table.name)
        params_pending = name not in given and lazy
        state[name] = (
            _given(given, name, shape) if name in given
            else aligned_empty(shape) if lazy
            else default_table(table, seed)
        )
        slots_pending = []
        for index, slot in enumerate(table.slot_names):
            name = slot_key(table.name, slot)
            slots_pending.append(name not in given and lazy)
            state[name] = (
                _given(given, name, shape) if name in given
                else aligned_empty(shape) if lazy
                else default_slot(table, index)
            )
        if params_pending or any(slots_pending):
            state.pending[table.name] = Pending(
                table, int(seed), params_pending, tuple(slots_pending),
                Pending.bitmap(table.vocabulary), table.vocabulary,
            )
        if table.name in partial and apply_partial(partial[table.name], state,
                                                   state.pending.get(table.name)):
            del state.pending[table.name]
    return state


def called_tables(plan: Plan, given: Mapping[str, Any] | None,
                  source: str | None = None) -> dict[str, Any] | None:
    """``given`` (initial arrays by state-file key) plus the tables whose initializer is a
    callable (called once here, unless ``given`` holds the table): what the executor starts
    from. A table given in part (``executor.partial``: the rows a run touched) gets its rows on
    top of the callable's table, whose other rows are its initial values."""
    tables = [(t, t.initializer) for t in plan.tables if t.initializer is not None
              and t.initializer.kind == "callable" and table_key(t.name) not in (given or {})]
    if not tables:
        return None if given is None else dict(given)
    out = dict(given or {})
    for table, init in tables:
        key = table_key(table.name)
        whole = called_table(table.name, init, (table.vocabulary, table.dimension))
        if values_key(key) in out:  # checked as every partial table is
            _, found = split_partial(plan, {k: out[k] for k in (rows_key(table.name),
                                                                values_key(key)) if k in out},
                                     source)
            part = found[table.name]
            whole[part.rows] = part.values[key]
            del out[values_key(key)]
        out[key] = whole
    return out
