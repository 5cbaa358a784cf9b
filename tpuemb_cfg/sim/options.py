"""The option records of the simulated runs (beside ``executor.options``' ``RunOptions`` and
``Placement``): what data a synthetic run draws, and how several workers aggregate.

:class:`SyntheticOptions` is the workload of both runs (the learning rate sent on dynamic tags,
schedules, the id distribution, sequence lengths); :class:`WorkerOptions` the workers of a
multi-worker run. Both check their values when made, with errors naming the library parameter
(``workers=``, ``max_staleness=``), and refuse a combination one of whose values would be ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.errors import parameter as arg

from ..executor.workload import (
    IdDistribution,
    SequenceLengths,
    parse_ids,
    parse_sequence_lengths,
)
from .schedules import Schedule

__all__ = ["MAX_WORKERS", "DelayModel", "SyntheticOptions", "WorkerOptions"]

#: The most workers a run simulates. Every worker's gradients are computed in turn on this CPU
#: and held until the chief applies them, so time and memory grow with N x steps; aggregation
#: and staleness patterns show with a handful of workers.
MAX_WORKERS = 1024


@dataclass(frozen=True)
class SyntheticOptions:
    """The synthetic data of a run (``sim.synthetic.SyntheticData``).

    ``learning_rate``: the value sent on every dynamic tag (None: a compiled spec's schedules
    where the plan has them, else 0.1); ``schedules``: learning-rate schedules per tag
    (``sim.schedules``), ``schedules_source`` the spec file they came from, for errors;
    ``ids``: how ids fall over a table's rows (``zipf:S``, ``uniform``; default ``zipf:1.1``);
    ``sequence_lengths``: how many positions of a sequence feature each sample fills (``full``,
    ``fixed:N``, ``uniform[:LO[:HI]]``, ``geometric:MEAN``). Strings are parsed when made.
    """

    learning_rate: float | None = None
    schedules: Sequence[Schedule] = ()
    schedules_source: str | None = None
    ids: str | IdDistribution | None = None
    sequence_lengths: str | SequenceLengths | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", parse_ids(self.ids, "ids"))
        object.__setattr__(self, "sequence_lengths",
                           parse_sequence_lengths(self.sequence_lengths, "sequence_lengths"))
        object.__setattr__(self, "schedules", tuple(self.schedules))

    @property
    def id_distribution(self) -> IdDistribution:
        """``ids``, parsed."""
        assert isinstance(self.ids, IdDistribution)
        return self.ids

    @property
    def lengths(self) -> SequenceLengths:
        """``sequence_lengths``, parsed."""
        assert isinstance(self.sequence_lengths, SequenceLengths)
        return self.sequence_lengths


@dataclass(frozen=True)
class DelayModel:
    """How many ticks a gradient takes beyond the one tick of computing it.

    ``fixed:K``: always ``K`` (an integer >= 0). ``geometric:P``: the number of failures before
    the first success of a coin with success probability ``0 < P <= 1`` (mean ``(1 - P) / P``).
    """

    kind: Literal["fixed", "geometric"]
    value: float

    @classmethod
    def parse(cls, text: str) -> DelayModel:
        """``fixed:K`` or ``geometric:P``; raise ``UsageError`` otherwise."""
        kind, _, number = text.strip().partition(":")
        try:
            if kind == "fixed":
                ticks = int(number)
                if ticks >= 0:
                    return cls("fixed", ticks)
            elif kind == "geometric":
                p = float(number)
                if 0 < p <= 1:
                    return cls("geometric", p)
        except ValueError:
            pass
        raise UsageError(
            f"{arg('delay')} {text!r}: expected fixed:K (K >= 0 whole ticks, e.g. fixed:2) or "
            "geometric:P (0 < P <= 1, e.g. geometric:0.5)"
        )

    def draw(self, rng: np.random.Generator) -> int:
        if self.kind == "fixed":
            return int(self.value)
        return int(rng.geometric(self.value)) - 1

    def __str__(self) -> str:
        return f"{self.kind}:{int(self.value) if self.kind == 'fixed' else self.value!r}"


@dataclass(frozen=True)
class WorkerOptions:
    """The workers of a multi-worker run and how the chief aggregates their gradients.

    ``workers`` = N (1 to :data:`MAX_WORKERS`); synchronous replicas (the default):
    ``replicas_to_aggregate`` = R (default N) and ``init_tokens`` (default -1: R tokens);
    ``max_staleness`` selects DropStale mode instead (a negative one drops every gradient, as
    TensorFlow's rule does), where neither of the other two applies: giving one is refused.
    ``delay``: a :class:`DelayModel` or its text (default ``fixed:0``).
    """

    workers: int = 1
    replicas_to_aggregate: int | None = None
    max_staleness: int | None = None
    init_tokens: int = -1
    delay: DelayModel | str | None = field(default=None)

    def __post_init__(self) -> None:
        self._check()
        delay = self.delay
        object.__setattr__(self, "delay", DelayModel.parse(delay) if isinstance(delay, str)
                           else (delay or DelayModel("fixed", 0)))

    def _check(self) -> None:
        workers, replicas = self.workers, self.replicas_to_aggregate
        if workers < 1:
            raise UsageError(f"{arg('workers')} {workers}: expected at least 1 worker")
        if workers > MAX_WORKERS:
            raise UsageError(
                f"{arg('workers')} {workers}: at most {MAX_WORKERS} workers are simulated (each "
                "one's gradients are computed in turn on this CPU and held until applied, so time "
                f"and memory grow with N x steps); use {arg('workers')} {MAX_WORKERS} or fewer - "
                "the aggregation and staleness patterns show with a few workers"
            )
        if replicas is not None and replicas < 1:
            raise UsageError(f"{arg('replicas_to_aggregate')} {replicas}: expected at least 1")
        for name, value in (("replicas_to_aggregate", replicas),
                            ("max_staleness", self.max_staleness),
                            ("init_tokens", self.init_tokens)):
            if value is not None and not -units.MAX_INT64 - 1 <= value <= units.MAX_INT64:
                raise UsageError(f"{name}={value}: expected at most {units.MAX_INT64} (2^63 - 1: "
                                 "TensorFlow holds it in an int64)")
        if self.max_staleness is not None and replicas is not None:
            raise UsageError(
                f"{arg('replicas_to_aggregate')} applies to synchronous replicas; "
                f"{arg('max_staleness')} selects DropStale mode, where every worker applies its "
                "own gradients - give one of the two"
            )
        if self.max_staleness is not None and self.init_tokens != -1:
            raise UsageError(f"{arg('init_tokens')} applies to synchronous replicas, not to "
                             f"DropStale mode ({arg('max_staleness')}); remove it")

    @property
    def delay_model(self) -> DelayModel:
        """``delay``, parsed."""
        assert isinstance(self.delay, DelayModel)
        return self.delay

    @property
    def mode(self) -> Literal["sync_replicas", "drop_stale"]:
        """``drop_stale`` when ``max_staleness`` is given, else ``sync_replicas``."""
        return "sync_replicas" if self.max_staleness is None else "drop_stale"

    @property
    def replicas(self) -> int | None:
        """R: the gradients the chief averages per update (None in DropStale mode)."""
        if self.max_staleness is not None:
            return None
        return int(self.replicas_to_aggregate or self.workers)
