"""Simulation-spec files: every `tpuemb simulate` option in one ``SimulationSpec`` message.

A run is reproducible from two files, the configuration and the spec
(``protos/tpuemb_cfg/proto/simulation.proto``)::

    tpuemb simulate CONFIG --spec sim.pbtxt [--steps 50 ...]

:func:`load_spec` reads and checks a spec (text, binary or JSON, by extension) and returns a
:class:`LoadedSpec`: ``options`` maps the command's option names to the values the spec sets
(paths resolved relative to the spec file) and ``schedules`` holds the learning-rate schedules.
The command installs ``options`` as click's ``default_map``, so an option given on the command
line overrides the spec field by field and a field the spec leaves out takes the command default.

:class:`ScheduledRun` is the synthetic run with the schedules applied: for a scheduled tag the
value of the schedule at the global step replaces the run's default value.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .errors import InputError, UsageError
from .executor.synthetic import SyntheticRun

if TYPE_CHECKING:
    import click

    from .proto.simulation_pb2 import SimulationSpec

__all__ = [
    "SPEC_KEY",
    "LoadedSpec",
    "Schedule",
    "ScheduledRun",
    "check_schedule_tags",
    "load_spec",
    "spec_callback",
]

SPEC_KEY = "tpuemb_cfg.simspec"
"""Where :func:`spec_callback` leaves the :class:`LoadedSpec` in ``click.Context.meta``."""

ScheduleKind = Literal["constant", "exponential_decay", "piecewise_constant"]


@dataclass(frozen=True)
class Schedule:
    """The learning rate of one dynamic tag as a function of the global step ``g``.

    - ``constant``: ``values[0]``;
    - ``exponential_decay``: ``initial * rate ^ (g / decay_steps)`` (``floor`` of the exponent
      with ``staircase``), computed in float32 like TensorFlow's ``ExponentialDecay``;
    - ``piecewise_constant``: ``values[i]`` for ``boundaries[i-1] <= g < boundaries[i]``.
    """

    tag: int
    kind: ScheduleKind
    values: tuple[float, ...] = ()
    boundaries: tuple[int, ...] = ()
    decay_steps: int = 1
    decay_rate: float = 1.0
    staircase: bool = False

    def __call__(self, step: int) -> np.float32:
        f32 = np.float32
        if self.kind == "constant":
            return f32(self.values[0])
        if self.kind == "exponential_decay":
            if self.staircase:
                exponent = f32(step // self.decay_steps)
            else:
                exponent = f32(step) / f32(self.decay_steps)
            return f32(f32(self.values[0]) * f32(self.decay_rate) ** exponent)
        position = sum(1 for boundary in self.boundaries if step >= boundary)
        return f32(self.values[position])

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


@dataclass(frozen=True)
class LoadedSpec:
    """A checked spec: option values by the command's parameter names, and the schedules."""

    path: str
    message: Any
    options: dict[str, Any] = field(default_factory=dict)
    schedules: tuple[Schedule, ...] = ()


def _fail(path: str, where: tuple[int, int] | None, message: str) -> InputError:
    line, column = where if where is not None else (None, None)
    return InputError(message, path=path, line=line, column=column)


def load_spec(path: str | os.PathLike[str]) -> LoadedSpec:
    """Read and check a ``SimulationSpec`` file; raise ``InputError`` pointing at a bad field.

    Relative paths in the spec (``out_dir``, the replay files) are resolved against the spec
    file's folder, so the spec works from any working directory.
    """
    from .io import read_source
    from .locations import scan_locations
    from .proto.simulation_pb2 import SimulationSpec

    source = read_source(path, message_type=SimulationSpec)
    spec: SimulationSpec = source.message
    locations = scan_locations(source.text, SimulationSpec.DESCRIPTOR) if source.text else None
    name = source.path

    def fail(field_path: str, message: str) -> InputError:
        where = None
        if locations is not None:  # a repeated field's position is that of its first element
            where = (locations.get(field_path) or locations.get(field_path + "[0]")
                     or locations.nearest(field_path))
        return _fail(name, where, f"{field_path}: {message}")

    base = os.path.dirname(os.path.abspath(os.fspath(path)))

    def resolve(value: str) -> str:
        return value if os.path.isabs(value) else os.path.normpath(os.path.join(base, value))

    options: dict[str, Any] = {}
    if spec.HasField("steps"):
        if spec.steps < 1:
            raise fail("steps", f"{spec.steps} found, expected at least 1")
        options["steps"] = int(spec.steps)
    if spec.HasField("seed"):
        options["seed"] = int(spec.seed)
    if spec.combiner:
        options["combiners"] = tuple(spec.combiner)
    if spec.HasField("learning_rate"):
        options["learning_rate"] = float(spec.learning_rate)
    if spec.HasField("out_dir"):
        options["out_dir"] = resolve(spec.out_dir)
    if spec.HasField("max_memory"):
        options["max_memory"] = spec.max_memory
    replay = spec.workload.WhichOneof("source") == "replay"
    if replay:
        files = spec.workload.replay
        if not files.batches or not files.out:
            missing = "batches" if not files.batches else "out"
            raise fail(f"workload.replay.{missing}",
                       "a replay needs both batches (the recorded steps) and out (the output file)")
        options["batches_path"] = resolve(files.batches)
        options["out_path"] = resolve(files.out)
        if files.init:
            options["init_path"] = resolve(files.init)
        present = {"out_dir": spec.HasField("out_dir"), "workers": spec.HasField("workers"),
                   "learning_rate": spec.HasField("learning_rate"),
                   "learning_rate_schedule": bool(spec.learning_rate_schedule)}
        for other, given in present.items():
            if given:
                raise fail(other, "applies to synthetic runs only, not to a replay workload "
                           "(a replay has its recorded learning rates and one worker); remove it")
    if spec.HasField("workers"):
        options.update(_worker_options(spec, fail))
    schedules = tuple(
        _schedule(item, f"learning_rate_schedule[{i}]", fail)
        for i, item in enumerate(spec.learning_rate_schedule)
    )
    seen: dict[int, int] = {}
    for i, schedule in enumerate(schedules):
        if schedule.tag in seen:
            raise fail(f"learning_rate_schedule[{i}].tag",
                       f"tag {schedule.tag} already has a schedule "
                       f"(learning_rate_schedule[{seen[schedule.tag]}]); give one per tag")
        seen[schedule.tag] = i
    return LoadedSpec(path=name, message=spec, options=options, schedules=schedules)


def _worker_options(spec: SimulationSpec, fail: Any) -> dict[str, Any]:
    workers = spec.workers
    options: dict[str, Any] = {}
    if workers.HasField("count"):
        if workers.count < 1:
            raise fail("workers.count", f"{workers.count} found, expected at least 1")
        options["workers"] = int(workers.count)
    if workers.HasField("replicas_to_aggregate"):
        if workers.replicas_to_aggregate < 1:
            raise fail("workers.replicas_to_aggregate",
                       f"{workers.replicas_to_aggregate} found, expected at least 1")
        options["replicas_to_aggregate"] = int(workers.replicas_to_aggregate)
    if workers.HasField("max_staleness"):
        options["max_staleness"] = int(workers.max_staleness)
    if workers.HasField("init_tokens"):
        options["init_tokens"] = int(workers.init_tokens)
    if workers.HasField("max_staleness"):
        for other in ("replicas_to_aggregate", "init_tokens"):
            if workers.HasField(other):
                raise fail(f"workers.{other}",
                           "applies to synchronous replicas; max_staleness selects DropStale "
                           f"mode, which has no {other} - remove one of the two")
    model = workers.delay.WhichOneof("model")
    if model == "fixed":
        if workers.delay.fixed < 0:
            raise fail("workers.delay.fixed",
                       f"{workers.delay.fixed} found, expected a whole number of ticks >= 0")
        options["delay"] = f"fixed:{workers.delay.fixed}"
    elif model == "geometric":
        p = workers.delay.geometric
        if not 0 < p <= 1:
            raise fail("workers.delay.geometric",
                       f"{p!r} found, expected a probability 0 < p <= 1")
        options["delay"] = f"geometric:{p!r}"
    if "workers" not in options:
        options["workers"] = 1
    return options


def _schedule(item: Any, where: str, fail: Any) -> Schedule:
    if item.tag < 0:
        raise fail(f"{where}.tag", f"{item.tag} found, expected a tag >= 0")
    kind = item.WhichOneof("schedule")
    if kind is None:
        raise fail(where, "no schedule: set constant, exponential_decay or piecewise_constant")
    if kind == "constant":
        _finite(item.constant, f"{where}.constant", fail)
        return Schedule(item.tag, "constant", (item.constant,))
    if kind == "exponential_decay":
        decay = item.exponential_decay
        if decay.decay_steps < 1:
            raise fail(f"{where}.exponential_decay.decay_steps",
                       f"{decay.decay_steps} found, expected at least 1")
        _finite(decay.initial_learning_rate,
                f"{where}.exponential_decay.initial_learning_rate", fail)
        _finite(decay.decay_rate, f"{where}.exponential_decay.decay_rate", fail)
        return Schedule(item.tag, "exponential_decay", (decay.initial_learning_rate,),
                        decay_steps=int(decay.decay_steps), decay_rate=decay.decay_rate,
                        staircase=decay.staircase)
    piecewise = item.piecewise_constant
    boundaries = tuple(int(b) for b in piecewise.boundaries)
    values = tuple(piecewise.values)
    if len(values) != len(boundaries) + 1:
        raise fail(f"{where}.piecewise_constant.values",
                   f"{len(values)} value(s) for {len(boundaries)} boundar"
                   f"{'y' if len(boundaries) == 1 else 'ies'}; give one value more than "
                   "boundaries (the first applies before the first boundary)")
    for i in range(1, len(boundaries)):
        if boundaries[i] <= boundaries[i - 1]:
            raise fail(f"{where}.piecewise_constant.boundaries",
                       f"boundaries[{i}] is {boundaries[i]} after {boundaries[i - 1]}; "
                       "boundaries must increase")
    for value in values:
        _finite(value, f"{where}.piecewise_constant.values", fail)
    return Schedule(item.tag, "piecewise_constant", values, boundaries=boundaries)


def _finite(value: float, where: str, fail: Any) -> None:
    if not math.isfinite(value):
        raise fail(where, f"{value} found, expected a finite number")


def spec_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """The ``--spec`` option's callback: load the spec, make its values the option defaults.

    The option must be eager, so that it runs before the options it provides defaults for.
    """
    if value is None:
        return
    loaded = load_spec(value)
    ctx.default_map = {**(ctx.default_map or {}), **loaded.options}
    ctx.meta[SPEC_KEY] = loaded


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


class ScheduledRun(SyntheticRun):
    """A ``SyntheticRun`` (same keyword arguments) whose scheduled tags follow ``schedules``.

    The value of a schedule at step ``g`` replaces the run's default value for its tag (no Adam
    bias correction is added). The schedules enter the run's fingerprint, so ``--resume``
    refuses a checkpoint written with other schedules. Raises ``UsageError`` for a schedule of a
    tag the configuration lacks (``spec_path`` names the spec in that message).
    """

    def __init__(self, config: Any, *, schedules: Sequence[Schedule] = (),
                 spec_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        check_schedule_tags(schedules, self.plan.num_learning_rates, spec_path)
        self.schedules = tuple(schedules)
        if self.schedules:
            described = json.dumps([s.describe() for s in self.schedules])
            self.fingerprint = hashlib.sha256(
                (self.fingerprint + described).encode()).hexdigest()

    def learning_rates(self, step: int) -> np.ndarray:
        rates = super().learning_rates(step)
        for schedule in self.schedules:
            rates[schedule.tag] = schedule(step)
        return rates
