"""Learning-rate schedules: the value of one dynamic tag as a function of the global step.

A simulation spec (:mod:`.spec`) declares them; the synthetic and multi-worker runs
(:mod:`.synthetic`) send, for a scheduled tag, the schedule's value at the global step instead of
the run's default learning rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from tpuemb_cfg.base.errors import UsageError

from ..algorithms.schedules import exponential_decay, piecewise_constant

__all__ = ["Schedule", "ScheduleKind", "check_schedule_tags"]

ScheduleKind = Literal["constant", "exponential_decay", "piecewise_constant"]


@dataclass(frozen=True)
class Schedule:
    """The learning rate of one dynamic tag as a function of the global step ``g``.

    - ``constant``: ``values[0]``;
    - ``exponential_decay``: ``initial * rate ^ (g / decay_steps)`` (``floor`` of the exponent
      with ``staircase``), computed in float32 like TensorFlow's ``ExponentialDecay``, the power
      by ``numerics.pow32`` (the same bits on every machine);
    - ``piecewise_constant``: ``values[i]`` for ``boundaries[i-1] <= g < boundaries[i]``.

    The values come from :mod:`tpuemb_cfg.algorithms.schedules`, the one home of each kind: a
    model spec's schedule of the same kind gives the same rates.
    """

    tag: int
    kind: ScheduleKind
    values: tuple[float, ...] = ()
    boundaries: tuple[int, ...] = ()
    decay_steps: int = 1
    decay_rate: float = 1.0
    staircase: bool = False

    def __call__(self, step: int) -> np.float32:
        if self.kind == "constant":
            return np.float32(self.values[0])
        if self.kind == "exponential_decay":
            return exponential_decay(self.values[0], self.decay_rate, self.decay_steps,
                                     self.staircase, step)
        return np.float32(piecewise_constant(self.boundaries, self.values, step))

    def describe(self) -> str:
        """One line for summaries: ``tag 0: exponential_decay(0.1, rate 0.5 every 10 steps)``."""
        if self.kind == "constant":
            return f"tag {self.tag}: constant {self.values[0]:g}"
        if self.kind == "exponential_decay":
            stair = ", staircase" if self.staircase else ""
            return (f"tag {self.tag}: exponential_decay({self.values[0]:g}, rate "
                    f"{self.decay_rate:g} every {self.decay_steps} steps{stair})")
        pieces = [f"{self.values[0]:g}"]
        for boundary, value in zip(self.boundaries, self.values[1:], strict=True):
            pieces.append(f"from {boundary}: {value:g}")
        return f"tag {self.tag}: piecewise_constant({', '.join(pieces)})"


def check_schedule_tags(schedules: Sequence[Schedule],
                        num_learning_rates: int, source: str | None = None) -> None:
    """Refuse (``UsageError``) a schedule for a tag the configuration does not have."""
    for schedule in schedules:
        if schedule.tag >= num_learning_rates:
            where = f"{source}: " if source else ""
            have = (f"tags 0..{num_learning_rates - 1}" if num_learning_rates
                    else "no dynamic learning rate")
            raise UsageError(
                f"{where}learning_rate_schedule for tag {schedule.tag}, but the configuration "
                f"has {have}; remove the schedule or fix its tag"
            )
