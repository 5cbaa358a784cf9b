"""The records ``tpuemb diff`` returns (design of issue 37): one :class:`Change` per difference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Change", "Location"]

#: (path, line, column), 1-based; column 1 when unknown.
Location = tuple[str, int, int]


@dataclass(frozen=True)
class Change:
    """One difference between two configurations.

    ``subject``: ``"table"``, ``"feature"``, ``"optimizer"``, ``"hyper_parameter"``,
    ``"learning_rate"``, ``"setting"``, ``"topology"``, ``"stack"``, ``"limit"``,
    ``"memory"``, ``"finding"`` or ``"load"``. ``kind``: ``"added"``, ``"removed"``,
    ``"renamed"`` or ``"changed"``. ``name``: the table, feature, stack or setting it is about
    (NEW's name; OLD's when removed). ``field``: what changed (``"vocabulary_size"``,
    ``"optimizer.learning_rate"``; ``""`` for the whole object). ``old``/``new``: JSON-able
    values (``None`` when added / removed). ``message``: one line.
    """

    subject: str
    kind: str
    name: str
    field: str
    old: Any
    new: Any
    message: str
    new_location: Location | None = None
    old_location: Location | None = None
