"""``tpuemb_cfg.diff``: what a configuration change does, as one typed record.

:func:`diff` loads both sides once (``sides.load_side``) and compares them in three ways:

1. **the configurations** (``semantic``): tables, features, optimizers, learning rates,
   settings and topology, matched by name, renames detected;
2. **the TPU** (``tpu``): stacks and table places, limits, memory per unit, validation
   findings, and with a sample (``ids``) the load and drops of ``tpuemb plan`` on both;
3. **the checkpoint** (``model.checkpoint``): whether OLD's checkpoint restores under NEW as
   it is, through TensorFlow 2.21's reshard, or not at all, variable by variable.

Every difference becomes a finding of the one registry (DIFF, CKPT), at NEW's line. The
result, :class:`ConfigDiff`, is what the command renders (``report``) and what a notebook
reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.tf_versions import DEFAULT_TF_VERSION
from tpuemb_cfg.model.checkpoint import DEFAULT_OBJECT_PATH, CheckpointReport
from tpuemb_cfg.planner.planning import PlanOptions
from tpuemb_cfg.rules.diff import Change, Location, diff_findings
from tpuemb_cfg.session import open_plan, validate

from . import tpu
from .checkpoints import checkpoint_report
from .facts import Facts, load_facts
from .semantic import semantic_changes
from .sides import Side, SideOptions, load_side

if TYPE_CHECKING:
    from tpuemb_cfg.model import Diagnostic

__all__ = ["ConfigDiff", "DiffOptions", "diff"]


@dataclass(frozen=True)
class DiffOptions:
    """How :func:`diff` reads and compares: ``old`` / ``new`` (each side's
    ``sides.SideOptions``: topology, Keras backend, TensorFlow version), ``ids`` (a sample of
    real ids, read by ``tpuemb plan``'s readers: load and drops on both sides), ``findings``
    (compare ``tpuemb validate``'s findings), ``checkpoint`` (compare the checkpoints: OLD's
    restored under NEW, with the embedding object at ``object_path`` of the checkpoint, before
    ``build()`` as a restore-on-create does, or ``after_build``)."""

    old: SideOptions = SideOptions()
    new: SideOptions = SideOptions()
    ids: str | Sequence[str] | None = None
    findings: bool = True
    checkpoint: bool = True
    object_path: str = DEFAULT_OBJECT_PATH
    after_build: bool = False

    def __post_init__(self) -> None:
        for name in ("old", "new"):
            if not isinstance(getattr(self, name), SideOptions):
                raise TypeError(f"DiffOptions {name}: expected SideOptions, got "
                                f"{type(getattr(self, name)).__name__}")
        for name in ("findings", "checkpoint", "after_build"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"DiffOptions {name}: expected a bool, got "
                                f"{type(getattr(self, name)).__name__}")
        if not isinstance(self.object_path, str):
            raise TypeError(f"DiffOptions object_path: expected a string, got "
                            f"{type(self.object_path).__name__}")


@dataclass(frozen=True)
class ConfigDiff:
    """The differences between OLD and NEW. ``old`` / ``new``: the names shown; ``*_kind``:
    ``legacy`` or ``sparsecore``; ``changes``: every difference (``rules.diff.Change``), the
    configuration's first, then the TPU's; ``findings``: the DIFF and CKPT findings, at NEW's
    lines; ``checkpoint``: the checkpoint verdict (``model.checkpoint.CheckpointReport``),
    None when not compared."""

    old: str
    new: str
    old_kind: str
    new_kind: str
    changes: tuple[Change, ...]
    findings: tuple[Diagnostic, ...]
    checkpoint: CheckpointReport | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def breaking(self) -> bool:
        """Whether OLD's checkpoint does not restore under NEW as it was: TensorFlow raises, or
        state is lost or misplaced without an error (``CheckpointReport.breaking``)."""
        return self.checkpoint is not None and self.checkpoint.breaking

    @property
    def identical(self) -> bool:
        return not self.changes and not self.findings

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old, "new": self.new, "old_kind": self.old_kind,
            "new_kind": self.new_kind, "breaking": self.breaking,
            "changes": [c.to_json() for c in self.changes],
            "findings": [{**d.to_dict(), "path": d.path} for d in self.findings],
            "checkpoint": (dataclasses.asdict(self.checkpoint)
                           if self.checkpoint is not None else None),
            "notes": list(self.notes),
        }


Progress = Callable[[int, int], None]


def diff(old: Any, new: Any, options: DiffOptions = DiffOptions(), *,
         old_label: str | None = None, new_label: str | None = None,
         on_sample: Callable[[Any, str], None] | None = None) -> ConfigDiff:
    """Compare the configurations ``old`` and ``new`` (paths or objects, of any kind tpuemb
    reads; the module docstring says how). ``old_label`` / ``new_label``: the names reports
    show (a file read from git: ``HEAD:model.py``). ``on_sample``: called with each side's
    ``planner.planning.Planner`` and label before its sample is read (a progress line hooks in
    there).

    Raises ``InputError`` for an input that cannot be read, ``UsageError`` for bad options."""
    if not isinstance(options, DiffOptions):
        raise TypeError(f"options: expected DiffOptions, got {type(options).__name__}")
    a = load_side(old, options.old, label=old_label)
    b = load_side(new, options.new, label=new_label)
    return compare(a, b, options, on_sample=on_sample)


def compare(a: Side, b: Side, options: DiffOptions = DiffOptions(), *,
            on_sample: Callable[[Any, str], None] | None = None) -> ConfigDiff:
    """:func:`diff` of two loaded sides."""
    old_facts, new_facts = facts_of(a), facts_of(b)
    changes: list[Change] = semantic_changes(old_facts, new_facts)
    changes += _slices(a, b) + _versions(a, b)
    renamed = {c.name: c.old for c in changes if c.subject == "table" and c.kind == "renamed"}
    locate_new, locate_old = _locator(new_facts), _locator(old_facts)
    notes: list[str] = []
    if a.kind == b.kind == "sparsecore":
        changes += tpu.stack_changes(a, b, renamed=renamed, locate_new=locate_new,
                                     locate_old=locate_old)
        changes += tpu.limit_changes(a, b, locate_new=locate_new, locate_old=locate_old)
    for side in (a, b):
        if side.stacking_error:
            notes.append(f"{side.label}: the tables cannot be stacked: {side.stacking_error}")
    top = _top_of(b)
    changes += tpu.memory_changes(a, b, where=top)
    if options.findings:
        changes += tpu.finding_changes(_findings(a), _findings(b), shown_new=b.shown,
                                       shown_old=a.shown)
    if options.ids is not None:
        plans = [_plan(side, options.ids, on_sample) for side in (a, b)]
        changes += tpu.load_changes(plans[0], plans[1], locate_new=locate_new, where=top)
    found = diff_findings(changes)
    report = None
    if options.checkpoint:
        report, ckpt_findings, why = checkpoint_report(
            a, b, locate_new=locate_new, locate_old=locate_old,
            object_path=options.object_path, after_build=options.after_build)
        found += ckpt_findings
        notes += why
    return ConfigDiff(a.label, b.label, a.kind, b.kind, tuple(changes), tuple(found), report,
                      tuple(notes))


def facts_of(side: Side) -> Facts:
    """The side's semantic facts (``facts.load_facts``), from what the side loaded: a
    SparseCore configuration as the side runs it (its topology, Keras backend), a legacy file
    by its path (its lines), under the side's label."""
    if side.kind == "sparsecore":
        return load_facts(side.config, name=side.label)
    if side.path is not None:
        return load_facts(side.path, name=side.label)
    return load_facts(side.message, name=side.label)


def _locator(facts: Facts) -> Callable[[str], Location | None]:
    """A table's place in ``facts`` by name (None for a table it does not have)."""
    places = {t.name: t.location for t in facts.tables}
    return lambda name: places.get(name)


def _slices(a: Side, b: Side) -> list[Change]:
    """A legacy configuration's slice given on the command line (``--topology``: its host
    count), which its facts do not show; SparseCore sides' facts carry their slice."""
    if a.kind == "sparsecore" and b.kind == "sparsecore":
        return []
    hosts = [int(s.message.num_hosts) if s.message is not None else None for s in (a, b)]
    if a.kind != b.kind or hosts[0] == hosts[1] or None in hosts:
        return []
    if a.options.topology == b.options.topology:
        return []
    where = _top_of(b)
    return [Change("setting", "changed", "num_hosts", "num_hosts", hosts[0], hosts[1],
                   f"num_hosts {hosts[0]} -> {hosts[1]} (--topology "
                   f"{a.options.topology or 'as configured'} -> "
                   f"{b.options.topology or 'as configured'})", where)]


def _versions(a: Side, b: Side) -> list[Change]:
    """The TensorFlow release each side is laid out with, when the two differ."""
    if a.kind != "sparsecore" or b.kind != "sparsecore":
        return []
    versions = [s.options.tf_version or DEFAULT_TF_VERSION for s in (a, b)]
    if versions[0] == versions[1]:
        return []
    return [Change("setting", "changed", "tf_version", "tf_version", versions[0], versions[1],
                   f"TensorFlow {versions[0]} -> {versions[1]} (the stacker and layouts of "
                   "TPUEmbeddingV2)", _top_of(b))]


def _top_of(side: Side) -> Location | None:
    """The first line of the side's file: where a finding about the whole configuration goes."""
    return (side.label, 1, 1) if side.path is not None else None


def _findings(side: Side) -> list[Diagnostic]:
    """``tpuemb validate``'s findings of the side (its rules, at its lines)."""
    source = side.config if side.kind == "sparsecore" else side.source
    try:
        return list(validate(source))
    except InputError:
        return []


def _plan(side: Side, ids: str | Sequence[str],
          on_sample: Callable[[Any, str], None] | None) -> Any:
    """``tpuemb plan`` of the side on the sample (its load and limits)."""
    source = side.config if side.kind == "sparsecore" else side.source
    try:
        planner = open_plan(source, ids, options=PlanOptions(topology=side.options.topology))
    except InputError as exc:
        raise InputError(f"{exc.message} (reading the sample for {side.label}: --ids is read "
                         "for both sides, so it needs every feature of both)", path=exc.path,
                         line=exc.line, column=exc.column, offset=exc.offset,
                         key=exc.key) from None
    if on_sample is not None:
        on_sample(planner, side.label)
    return planner.run()
