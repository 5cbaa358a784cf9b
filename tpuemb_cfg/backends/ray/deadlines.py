"""How long the driver waits for its hosts: a deadline derived from the work waited for.

Every wait of the Ray backend on its host actors ends. Two things end it early and one late:

- Ray reports the failure (an actor that died, a task that raised): seen at the next poll;
- the node of a host waited for is dead in the cluster's node table (``ray.nodes()``), which
  the driver checks every ``POLL_SECONDS`` while it waits: a machine that went away is
  reported within seconds of the cluster noticing, even when the reply was half-way through
  Ray's object transfer (where ``ray.get`` alone was seen to wait for more than 10 minutes);
- the deadline, the backstop for a host that is alive but does not answer (a stalled
  process, a network partition the cluster has not noticed yet):

      seconds = scale * (BASE_SECONDS + moved / MOVE_RATE + touched / TOUCH_RATE
                         + actors * ACTOR_SECONDS + compiles * COMPILE_SECONDS)

  ``moved``: the bytes that travel between the driver and the hosts in the calls waited for
  (arrays sent, rows read back); ``touched``: the bytes of rows the busiest host of the calls
  reads, writes or steps (its whole share for an allocation, a copy or a non-lazy update);
  ``actors``: the actors started; ``compiles``: the optimizer kernels the hosts may compile in
  this wait (the first update of each optimizer the storage runs: numba compiles it in every
  host that has no cached copy, 2-4 s on an idle core, and the hosts of a node compile at the
  same time on its cores - a cold cache on a busy CI machine went past the base alone). The
  rates are deliberately low - a tenth of what a congested 1 Gb/s link and a busy core manage -
  and the base covers what does not grow with the work (scheduling, a garbage-collection
  pause, the small kernels of a first step): a deadline that fires on a slow but healthy
  cluster is worse than a late one.

``scale`` (default 1) multiplies every deadline: ``ActorOptions(deadline_scale=...)`` for a
``RayStorage`` made directly, else the environment's ``TPUEMB_RAY_DEADLINE_SCALE`` (e.g. 4 on
an overloaded cluster, 0.05 in a test that proves a deadline fires).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from tpuemb_cfg.base.errors import UsageError

__all__ = [
    "ACTOR_SECONDS",
    "BASE_SECONDS",
    "COMPILE_SECONDS",
    "DEADLINE_SCALE_ENV",
    "MOVE_RATE",
    "POLL_SECONDS",
    "TOUCH_RATE",
    "Work",
    "deadline_scale",
    "seconds",
]

#: The variable that multiplies every deadline (a positive number).
DEADLINE_SCALE_ENV = "TPUEMB_RAY_DEADLINE_SCALE"
#: Seconds every wait is allowed before its work is counted.
BASE_SECONDS = 60.0
#: Bytes per second assumed for what travels between the driver and the hosts.
MOVE_RATE = 10e6
#: Bytes per second assumed for the rows a host reads, writes or steps.
TOUCH_RATE = 20e6
#: Seconds allowed per actor started (a Python process: importing NumPy, numba and Ray).
ACTOR_SECONDS = 5.0
#: Seconds allowed per optimizer kernel the hosts may compile (``Work.compiles``).
COMPILE_SECONDS = 120.0
#: Seconds between two checks of the hosts' nodes while a wait goes on.
POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Work:
    """What one wait waits for: ``moved`` bytes between driver and hosts, ``touched`` bytes of
    rows on the busiest host, ``actors`` started, ``compiles`` optimizer kernels the hosts may
    compile."""

    moved: int = 0
    touched: int = 0
    actors: int = 0
    compiles: int = 0


def deadline_scale(option: float | None = None) -> float:
    """The factor of every deadline: ``option`` (``ActorOptions.deadline_scale``) when given,
    else ``TPUEMB_RAY_DEADLINE_SCALE``, else 1; anything but a positive finite number is refused
    with one line."""
    origin = "ActorOptions.deadline_scale"
    value: object = option
    if option is None:
        text = os.environ.get(DEADLINE_SCALE_ENV, "").strip()
        if not text:
            return 1.0
        origin, value = DEADLINE_SCALE_ENV, text
    try:
        scale = float(value)  # type: ignore[arg-type]  # a number or its text
    except (TypeError, ValueError):
        scale = math.nan
    if not (math.isfinite(scale) and scale > 0):
        raise UsageError(f"{origin} {value!r}: expected a positive number (the factor of every "
                         "deadline of the Ray backend; 1 is the default, 2 doubles them)")
    return scale


def seconds(work: Work, scale: float = 1.0) -> float:
    """The deadline of ``work``, in seconds (see the module's formula)."""
    return scale * (BASE_SECONDS + work.moved / MOVE_RATE + work.touched / TOUCH_RATE
                    + work.actors * ACTOR_SECONDS + work.compiles * COMPILE_SECONDS)
