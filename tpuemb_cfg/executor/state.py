"""Tables and slots: the initial state (given or default, spec section 11) and its npz key names.

State-file keys (replay contract): ``table/{table}`` and ``slot/{table}/{slot}``, float32
[vocabulary_size, dimension].
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import InputError
from .plan import Plan, TablePlan

__all__ = ["initial_state", "slot_key", "table_key", "truncated_normal"]

F32 = np.float32


def table_key(table: str) -> str:
    return f"table/{table}"


def slot_key(table: str, slot: str) -> str:
    return f"slot/{table}/{slot}"


def truncated_normal(rng: np.random.Generator, shape: tuple[int, int], stddev: float) -> np.ndarray:
    """float32 normal(0, stddev) samples redrawn until within two standard deviations.

    Deterministic for a given generator state (redraws consume the stream in a fixed order).
    """
    values = rng.standard_normal(shape, dtype=F32)
    flat = values.reshape(-1)
    # The positions beyond 2, in order, a block at a time: np.abs(values) at once would be a
    # temporary as large as the table (peak memory, issue 8).
    block = 1 << 20
    outside = np.concatenate([
        np.flatnonzero(np.abs(flat[start:start + block]) > 2) + start
        for start in range(0, flat.shape[0], block)
    ])
    while outside.size:
        flat[outside] = rng.standard_normal(outside.size, dtype=F32)
        outside = outside[np.abs(flat[outside]) > 2]
    values *= F32(stddev)
    return values


def _default_table(table: TablePlan, seed: int) -> np.ndarray:
    shape = (table.vocabulary, table.dimension)
    if table.optimizer.name == "frequency_estimator":
        # The rows hold the estimate D, initialised to the cap (spec section 11).
        return np.full(shape, F32(table.hyper.max_delta), dtype=F32)
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0x7A62, table.index])
    return truncated_normal(rng, shape, 1.0 / float(np.sqrt(table.dimension)))


def _given(
    arrays: Mapping[str, Any], key: str, shape: tuple[int, int], source: str | None, strict: bool
) -> np.ndarray:
    array = np.asarray(arrays[key])
    if array.dtype != F32 and (strict or array.dtype.kind not in "fiu"):
        raise InputError(
            f"dtype {array.dtype} found, expected float32; cast with .astype(np.float32)",
            path=source, key=key,
        )
    if array.shape != shape:
        raise InputError(
            f"shape {array.shape} found, expected {shape} ([vocabulary_size, dimension])",
            path=source, key=key,
        )
    # A private, writable float32 copy: the executor updates it in place.
    return np.array(array, dtype=F32, copy=True)


def initial_state(
    plan: Plan,
    given: Mapping[str, Any] | None = None,
    seed: int = 0,
    source: str | None = None,
    strict: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, list[np.ndarray]]]:
    """``(tables, slots)`` from the state arrays ``given`` plus defaults for what is missing.

    Raises ``InputError`` naming the key for an unknown key, a wrong dtype (``strict``: only
    float32) or a wrong shape.
    """
    given = given or {}
    expected: dict[str, tuple[TablePlan, str | None]] = {}
    for table in plan.tables:
        expected[table_key(table.name)] = (table, None)
        for slot in table.slot_names:
            expected[slot_key(table.name, slot)] = (table, slot)
    for key in given:
        if key not in expected:
            raise InputError(_unknown_key_message(plan, key), path=source, key=key)
    tables: dict[str, np.ndarray] = {}
    slots: dict[str, list[np.ndarray]] = {}
    for table in plan.tables:
        shape = (table.vocabulary, table.dimension)
        name = table_key(table.name)
        tables[table.name] = (
            _given(given, name, shape, source, strict) if name in given
            else _default_table(table, seed)
        )
        slots[table.name] = []
        for spec in table.optimizer.slots:
            name = slot_key(table.name, spec.name)
            if name in given:
                slots[table.name].append(_given(given, name, shape, source, strict))
            else:
                slots[table.name].append(np.full(shape, F32(spec.initial(table.hyper)), dtype=F32))
    return tables, slots


def _unknown_key_message(plan: Plan, key: str) -> str:
    parts = key.split("/")
    by_name = {t.name: t for t in plan.tables}
    if len(parts) == 3 and parts[0] == "slot" and parts[1] in by_name:
        table = by_name[parts[1]]
        names = ", ".join(table.slot_names) or "none"
        return (
            f"table {table.name!r} uses {table.optimizer.name}, which has no slot {parts[2]!r}; "
            f"its slots are: {names}"
        )
    tables = ", ".join(repr(t.name) for t in plan.tables)
    return (
        f"unexpected key; a state file holds table/NAME and slot/NAME/SLOT for the tables "
        f"{tables}"
    )
