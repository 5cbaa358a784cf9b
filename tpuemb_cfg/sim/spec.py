"""Simulation-spec files: every `tpuemb simulate` option in one ``SimulationSpec`` message.

A run is reproducible from two files, the configuration and the spec
(``protos/tpuemb_cfg/proto/simulation.proto``)::

    tpuemb simulate CONFIG --spec sim.pbtxt [--steps 50 ...]

:func:`load_spec` reads and checks a spec (text, binary or JSON, by extension) and returns a
:class:`LoadedSpec`: ``options`` maps the command's option names to the values the spec sets
(paths resolved relative to the spec file) and ``schedules`` holds the learning-rate schedules
(:mod:`.schedules`). The command makes ``options`` the defaults of its options, so an option given
on the command line overrides the spec field by field and a field the spec leaves out takes the
command default.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.formats.locations import scan_locations

from ..executor.workload import parse_ids, parse_sequence_lengths
from .multiworker import MAX_WORKERS
from .schedules import Schedule

if TYPE_CHECKING:
    from ..proto.simulation_pb2 import (
        Delay,
        LearningRateSchedule,
        SimulationSpec,
        SyntheticWorkload,
    )

__all__ = ["LoadedSpec", "load_spec"]


@dataclass(frozen=True)
class LoadedSpec:
    """A checked spec: option values by the command's parameter names, and the schedules."""

    path: str
    message: SimulationSpec
    options: dict[str, Any] = field(default_factory=dict)
    schedules: tuple[Schedule, ...] = ()


#: Builds the error of a field (its path, the message).
_Fail = Callable[[str, str], InputError]
#: A path of the spec, resolved against the spec file's folder.
_Resolve = Callable[[str], str]


def _fail(path: str, where: tuple[int, int] | None, message: str) -> InputError:
    line, column = where if where is not None else (None, None)
    return InputError(message, path=path, line=line, column=column)


def load_spec(path: str | os.PathLike[str]) -> LoadedSpec:
    """Read and check a ``SimulationSpec`` file; raise ``InputError`` pointing at a bad field.

    Relative paths in the spec (``out_dir``, the replay files) are resolved against the spec
    file's folder, so the spec works from any working directory.
    """
    from tpuemb_cfg.formats.io import read_source

    from ..proto.simulation_pb2 import SimulationSpec

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

    options = _run_options(spec, fail, resolve)
    if spec.workload.WhichOneof("source") == "synthetic":
        options.update(_synthetic_options(spec.workload.synthetic, fail, resolve))
    if spec.workload.WhichOneof("source") == "replay":
        options.update(_replay_options(spec, fail, resolve))
    if spec.HasField("workers"):
        options.update(_worker_options(spec, fail))
    schedules = _schedules(spec, fail)
    return LoadedSpec(path=name, message=spec, options=options, schedules=schedules)


def _run_options(spec: SimulationSpec, fail: _Fail, resolve: _Resolve) -> dict[str, Any]:
    """The options of the spec's top-level fields, each checked in its option's grammar."""
    options: dict[str, Any] = {}
    if spec.HasField("steps"):
        if spec.steps < 1:
            raise fail("steps", f"{spec.steps} found, expected at least 1")
        options["steps"] = int(spec.steps)
    if spec.HasField("seed"):
        if spec.seed < 0:
            raise fail("seed", f"{spec.seed} found, expected {units.SEED_HELP}")
        options["seed"] = int(spec.seed)
    if spec.combiner:
        options["combiners"] = tuple(spec.combiner)
    if spec.HasField("learning_rate"):
        options["learning_rate"] = float(spec.learning_rate)
    if spec.HasField("out_dir"):
        options["out_dir"] = resolve(spec.out_dir)
    if spec.HasField("max_memory"):
        try:
            units.parse_size(spec.max_memory)
        except ValueError as exc:
            raise fail("max_memory", f"{spec.max_memory!r}: {exc}") from None
        options["max_memory"] = spec.max_memory
    if spec.HasField("strict_finite"):
        options["strict_finite"] = bool(spec.strict_finite)
    return options


def _replay_options(spec: SimulationSpec, fail: _Fail, resolve: _Resolve) -> dict[str, Any]:
    """The options of ``workload.replay``; the fields only a synthetic run has are refused."""
    options: dict[str, Any] = {}
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
    return options


def _schedules(spec: SimulationSpec, fail: _Fail) -> tuple[Schedule, ...]:
    """The learning-rate schedules, one per tag."""
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
    return schedules


def _synthetic_options(synthetic: SyntheticWorkload, fail: _Fail,
                       resolve: _Resolve) -> dict[str, Any]:
    """The options of ``workload.synthetic``, each checked in its option's grammar."""
    options: dict[str, Any] = {}
    where = "workload.synthetic."
    checks: dict[Literal["ids", "sequence_lengths"], Callable[[str, str], object]] = {
        "ids": parse_ids, "sequence_lengths": parse_sequence_lengths}
    for name, parse in checks.items():
        if synthetic.HasField(name):
            try:
                parse(getattr(synthetic, name), where + name)
            except UsageError as exc:
                raise fail(where + name, str(exc).removeprefix(where + name + " ")) from None
            options[name] = getattr(synthetic, name)
    choices: dict[Literal["bag_sizes", "tables"], tuple[str, ...]] = {
        "bag_sizes": ("auto", "fixed", "uniform"), "tables": ("touched", "all", "none")}
    for choice, allowed in choices.items():
        if synthetic.HasField(choice):
            value = getattr(synthetic, choice)
            if value not in allowed:
                raise fail(where + choice, f"{value!r} found, expected one of "
                           + ", ".join(allowed))
            options["tables_output" if choice == "tables" else choice] = value
    if synthetic.HasField("save_batches"):
        options["save_batches"] = resolve(synthetic.save_batches)
    return options


def _worker_options(spec: SimulationSpec, fail: _Fail) -> dict[str, Any]:
    workers = spec.workers
    options: dict[str, Any] = {}
    if workers.HasField("count"):
        if workers.count < 1:
            raise fail("workers.count", f"{workers.count} found, expected at least 1")
        if workers.count > MAX_WORKERS:
            raise fail("workers.count", f"{workers.count} found, expected at most {MAX_WORKERS} "
                       "(each worker's gradients are computed in turn on this CPU)")
        options["workers"] = int(workers.count)
    if workers.HasField("replicas_to_aggregate"):
        if workers.replicas_to_aggregate < 1:
            raise fail("workers.replicas_to_aggregate",
                       f"{workers.replicas_to_aggregate} found, expected at least 1")
        options["replicas_to_aggregate"] = int(workers.replicas_to_aggregate)
    if workers.HasField("max_staleness"):
        if workers.max_staleness < 0:
            raise fail("workers.max_staleness",
                       f"{workers.max_staleness} found, expected 0 or more (a negative "
                       "max_staleness drops every gradient)")
        options["max_staleness"] = int(workers.max_staleness)
    if workers.HasField("init_tokens"):
        options["init_tokens"] = int(workers.init_tokens)
    if workers.HasField("max_staleness"):
        for other in ("replicas_to_aggregate", "init_tokens"):
            if workers.HasField(other):
                raise fail(f"workers.{other}",
                           "applies to synchronous replicas; max_staleness selects DropStale "
                           f"mode, which has no {other} - remove one of the two")
    delay = _delay(workers.delay, fail)
    if delay is not None:
        options["delay"] = delay
    if "workers" not in options:
        options["workers"] = 1
    return options


def _delay(delay: Delay, fail: _Fail) -> str | None:
    """``workers.delay`` in the grammar of ``--delay``; ``None`` when the spec has none."""
    model = delay.WhichOneof("model")
    if model == "fixed":
        if delay.fixed < 0:
            raise fail("workers.delay.fixed",
                       f"{delay.fixed} found, expected a whole number of ticks >= 0")
        return f"fixed:{delay.fixed}"
    if model == "geometric":
        p = delay.geometric
        if not 0 < p <= 1:
            raise fail("workers.delay.geometric",
                       f"{p!r} found, expected a probability 0 < p <= 1")
        return f"geometric:{p!r}"
    return None


def _schedule(item: LearningRateSchedule, where: str, fail: _Fail) -> Schedule:
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


def _finite(value: float, where: str, fail: _Fail) -> None:
    if not math.isfinite(value):
        raise fail(where, f"{value} found, expected a finite number")
