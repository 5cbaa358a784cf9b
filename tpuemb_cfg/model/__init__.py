"""Plain records shared by layers that do not import each other.

A validator finding (:class:`Diagnostic`, reported by the rules, refused by the session, kept by
the prepared configuration) and a table's initial values (:class:`TableInit`, resolved from a
spec's initializer by the compiler, drawn by the executor). Nothing here imports NumPy or
protobuf.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

__all__ = ["SEVERITIES", "SEVERITY_RANK", "Diagnostic", "Severity", "TableInit"]

Severity = Literal["error", "warning", "info"]

#: Severities from the most to the least serious.
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
#: Rank of a severity: a larger number is more serious.
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}

@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding.

    ``field_path`` uses proto field names and ``[i]`` for repeated elements
    (``table_descriptor[2].optimization_parameters.learning_rate.dynamic.tag``); ``""`` is the
    top-level message. ``line``/``column`` are 1-based positions in a text file (``None`` for
    binary/JSON input or a message object); ``path`` is the file (``None`` for a message object).
    The validator fills ``line``, ``column`` and ``path``; a rule only gives the field path.
    """

    rule: str
    severity: Severity
    message: str
    field_path: str
    line: int | None = None
    column: int | None = None
    hint: str | None = None
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of ``tpuemb validate --format json`` (file path excluded)."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "field_path": self.field_path,
            "line": self.line,
            "column": self.column,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class TableInit:
    """A table's initial values: ``kind`` and its float64 parameters.

    - ``truncated_normal``: ``mean + stddev x``, x a unit normal within (-2, 2);
    - ``normal``: ``mean + stddev x``, x a unit normal;
    - ``uniform``: uniform on [``low``, ``high``];
    - ``constant``: ``value`` everywhere;
    - ``row_id``: row r holds ``value + r`` in every column;
    - ``identity``: ``value`` where r == c, else 0;
    - ``callable``: ``fn((vocabulary_size, dim), dtype="float32")``, once.

    ``seed``: the initializer's own seed (None: the run's); ``source``: what the spec said, for
    messages.
    """

    kind: str
    source: str
    mean: float = 0.0
    stddev: float = 0.0
    low: float = 0.0
    high: float = 0.0
    value: float = 0.0
    seed: int | None = None
    fn: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled without ``fn``: a plan goes to the Ray hosts, which get a callable's table
        from the driver and never call it, so the function need not be importable there."""
        return (TableInit, tuple(None if f.name == "fn" else getattr(self, f.name)
                                 for f in fields(self)))
