"""A synthetic run's per-step records, held in bounded memory however long the run.

Every step's record (its loss, each table's report, the learning rates) goes to ``append``.
Up to ``limit`` steps every record is kept, and the summary lists one value per step as it
always did. Past that the records are thinned: the steps kept are the multiples of a stride,
which doubles each time the kept records would exceed ``limit`` (every other one is dropped),
so the run holds at most ``limit`` records plus the last one, whatever its length: a 10,000-step
run's summary lists about 1,250 to 2,500 evenly spaced steps, always step 0 and the last step,
and names them (``recorded_steps``). The series keep their meaning (the same quantity at the
steps listed), so the plot and the text report draw and quote the same curves, sampled.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["LIMIT", "History"]

#: The records kept before thinning (about 7 KB each for the quickstart configuration).
LIMIT = 2048


class History:
    """The records of a run's steps, in step order: at most ``limit`` kept (``kept``), the
    multiples of ``stride``, and the last one (``last``). ``len()`` is the number of steps
    recorded; iteration gives the kept records and then the last one when it is not kept;
    ``[-1]`` the last record."""

    def __init__(self, limit: int = LIMIT) -> None:
        if limit < 2:
            raise ValueError(f"limit: at least 2 records, found {limit}")
        self.limit = limit
        self.stride = 1
        self.steps = 0
        self.kept: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None

    def append(self, entry: dict[str, Any]) -> None:
        """Record the next step's ``entry`` (its ``step`` is the number of steps so far)."""
        self.last = entry
        if self.steps % self.stride == 0:
            self.kept.append(entry)
            if len(self.kept) > self.limit:
                self.kept = self.kept[::2]
                self.stride *= 2
        self.steps += 1

    @property
    def thinned(self) -> bool:
        """Whether some steps' records were dropped."""
        return self.stride > 1

    def __len__(self) -> int:
        return self.steps

    def __bool__(self) -> bool:
        return self.steps > 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.kept
        if self.last is not None and (not self.kept or self.kept[-1] is not self.last):
            yield self.last

    def __getitem__(self, index: int) -> dict[str, Any]:
        if index != -1 or self.last is None:
            raise IndexError("a run's history gives its last record only ([-1])")
        return self.last

    def __eq__(self, other: object) -> bool:
        """The same records (another ``History``, or the list of an unthinned one)."""
        if isinstance(other, History):
            return bool(self.to_json() == other.to_json())
        if isinstance(other, list):
            return bool(self.to_json() == other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def recorded_steps(self) -> list[int]:
        """The step of each record iteration gives."""
        return [int(entry["step"]) for entry in self]

    # -- checkpoints
    def to_json(self) -> Any:
        """What a checkpoint stores: the list of records while none was dropped (the format
        of earlier releases), else the stride, the step count and the records."""
        if not self.thinned:
            return list(self)
        return {"stride": self.stride, "steps": self.steps, "records": list(self)}

    @classmethod
    def from_json(cls, value: Any, limit: int = LIMIT) -> History:
        """The history ``to_json`` gave (checked by the caller: ``synthetic._history_problem``)."""
        history = cls(limit)
        if isinstance(value, list):
            for entry in value:
                history.append(entry)
            return history
        records = list(value["records"])
        history.stride = int(value["stride"])
        history.steps = int(value["steps"])
        history.last = records[-1] if records else None
        history.kept = [e for e in records if int(e["step"]) % history.stride == 0]
        return history
