"""The errors of the Ray backend: a lost host (:class:`ShardLost`, what the commands report,
naming the phase of the run, :data:`PHASES`) and the causes the storage's waits find
(:class:`NodeLost`, :class:`HeadLost`, :class:`NoAnswer`)."""

from __future__ import annotations

from tpuemb_cfg.base.errors import TpuembError

__all__ = ["PHASES", "HeadLost", "NoAnswer", "NodeLost", "ShardLost"]

#: What each phase of a run is called in a ``ShardLost`` line. The storage knows ``start``
#: (actors, set-up, the rows of given arrays or a checkpoint resumed), ``step`` (the reads of
#: a step), ``update`` and ``read`` (whole arrays read out); the command that writes a file
#: names a ``read`` by what it writes (``checkpoint``, ``output``: ``ShardLost.in_phase``).
PHASES = {"start": "the start", "step": "a step's reads", "update": "a step's update",
          "read": "a read of the state", "checkpoint": "a checkpoint write",
          "output": "the output write"}


class ShardLost(TpuembError):
    """A host's actor died, failed or did not answer within its deadline; the open step was
    rolled back on every other host.

    ``host`` is the host that failed, ``phase`` the phase of the run it failed in (a key of
    :data:`PHASES`); ``str()`` is one line: ``head`` (who), the phase, ``tail`` (what it was
    doing, the cause, what was rolled back), then what the command adds (``with_resume_hint``:
    the last checkpoint and how to resume).
    """

    def __init__(self, head: str, tail: str, host: int, phase: str = "step") -> None:
        self.head, self.tail, self.host, self.phase = head, tail, host, phase
        self.message = f"{head} during {PHASES.get(phase, phase)}, {tail}"
        super().__init__(self.message)

    def in_phase(self, phase: str) -> ShardLost:
        """The same error, said to have happened in ``phase``."""
        return ShardLost(self.head, self.tail, self.host, phase)

    def with_resume_hint(self, hint: str) -> ShardLost:
        """The same error with ``hint`` (the last checkpoint and how to resume) appended."""
        return ShardLost(self.head, f"{self.tail}; {hint}", self.host, self.phase)


class NodeLost(Exception):
    """The cluster counts the Ray node of a host waited for as dead."""

    def __init__(self) -> None:
        super().__init__("its node is dead: the cluster stopped hearing from it")


class HeadLost(Exception):
    """The head of the cluster (its GCS) does not answer: the run cannot go on."""

    def __init__(self, address: str, why: str) -> None:
        super().__init__(why)
        self.address = address


class NoAnswer(Exception):
    """A host did not answer within the deadline of the work waited for."""

    def __init__(self, limit: float) -> None:
        super().__init__(f"no answer within {limit:.0f} s")
        self.limit = limit
