"""The optimization algorithms: the table (``table``, plain data), one module per family with
the scalar element of each of its algorithms (its equations, written once; its NumPy update is
made from it), ``schedules`` (every learning-rate schedule's value) and ``update`` (what the
families share, and the registry).

Importing this package imports the table only (no NumPy, no protobuf); the family modules load
with ``update.load()`` / ``update.get(name)``.
"""

from __future__ import annotations

from .base import REQUIRED, Algorithm, Constraint, Hyper, Slot, StepInput
from .table import ALGORITHMS, checked_by, constraints, get, slot_names

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Constraint",
    "Hyper",
    "REQUIRED",
    "Slot",
    "StepInput",
    "checked_by",
    "constraints",
    "get",
    "slot_names",
]
