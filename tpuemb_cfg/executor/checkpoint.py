"""The executor's checkpoint keys checked: the step number, every table and slot present, the
pipelining buffers (``Executor.checkpoint_arrays`` writes them); a damaged checkpoint raises
``InputError`` naming the file, the key and what to do (:data:`CHECKPOINT_REMEDY`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import InputError

if TYPE_CHECKING:
    from .plan import Plan

__all__ = ["CHECKPOINT_REMEDY", "checked_checkpoint", "checkpoint_step", "damaged_checkpoint"]

F32 = np.float32

#: What to do about a damaged checkpoint; tpuemb writes checkpoints whole and atomically.
CHECKPOINT_REMEDY = ("the checkpoint is damaged (tpuemb writes it whole, so it was changed or "
                     "cut short since): run again without --resume, or resume from an older "
                     "copy of it")


def damaged_checkpoint(source: str | None, key: str, problem: str) -> InputError:
    """The error for key ``key`` of checkpoint ``source``: ``problem``, and what to do."""
    return InputError(f"{problem}; {CHECKPOINT_REMEDY}", path=source, key=key)


def checkpoint_step(arrays: Mapping[str, Any], source: str | None = None) -> int:
    """The step number of a checkpoint (``executor/step``), checked: a non-negative integer
    scalar, else ``InputError`` naming ``source`` and the key."""
    value = arrays.get("executor/step")
    if value is None:
        raise damaged_checkpoint(source, "executor/step", "missing")
    step = np.asarray(value)
    if step.ndim != 0 or step.dtype.kind not in "iu":
        raise damaged_checkpoint(
            source, "executor/step",
            f"{step.dtype} of shape {step.shape} found, expected an integer scalar")
    if int(step) < 0:
        raise damaged_checkpoint(source, "executor/step",
                                 f"{int(step)} found, expected a step number (0 or more)")
    return int(step)

def checked_checkpoint(
    plan: Plan, arrays: Mapping[str, Any], source: str | None
) -> tuple[int, dict[str, tuple[np.ndarray | None, np.ndarray]]]:
    """The step and the pipelining buffers of a checkpoint, every table and slot present;
    ``InputError`` naming the key of the first problem."""
    step = checkpoint_step(arrays, source)
    for table in plan.tables:
        for key in (f"table/{table.name}",
                    *(f"slot/{table.name}/{slot}" for slot in table.slot_names)):
            if key not in arrays:
                raise damaged_checkpoint(source, key, "missing: a checkpoint holds every "
                                         "table and slot")
    undo: dict[str, tuple[np.ndarray | None, np.ndarray]] = {}
    for table in plan.tables:
        prefix = f"executor/undo/{table.name}/"
        values, rows = arrays.get(prefix + "values"), arrays.get(prefix + "rows")
        if values is None:
            if rows is not None:
                raise damaged_checkpoint(source, prefix + "values", "missing (the rows "
                                         "of this buffer are there)")
            continue
        ids = None if rows is None else np.asarray(rows)
        if ids is not None and (
            ids.ndim != 1 or ids.dtype.kind not in "iu" or (ids.size and (
                int(ids.min()) < 0 or int(ids.max()) >= table.vocabulary
                or bool((ids[1:] <= ids[:-1]).any())))):
            raise damaged_checkpoint(source, prefix + "rows", "expected distinct "
                                     f"increasing row ids in [0, {table.vocabulary})")
        expected = (table.vocabulary if ids is None else ids.shape[0], table.dimension)
        found = np.asarray(values)
        if found.dtype != F32 or found.shape != expected:
            raise damaged_checkpoint(source, prefix + "values", f"{found.dtype} of shape "
                                     f"{found.shape} found, expected float32 {expected}")
        undo[table.name] = (None if ids is None else np.array(ids, dtype=np.int64),
                            np.array(found, dtype=F32))
    return step, undo
