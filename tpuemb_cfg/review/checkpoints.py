"""Whether a checkpoint written under OLD restores under NEW: ``model.checkpoint`` on two sides.

Each side's checkpoint is what its API saves (``model.checkpoint``'s views): the mid-level
API's per-table variables for a legacy configuration, ``TPUEmbeddingV2``'s stacked variables
and layouts for a TensorFlow or keras-rs-on-TensorFlow SparseCore configuration. The verdict is
what TensorFlow 2.21's restore does (``checkpoint_verdicts``), and its findings are the CKPT
rules', placed at NEW's line of the table concerned (OLD's when NEW has no such table).

jax-tpu-embedding and keras-rs on JAX save Orbax checkpoints, which TensorFlow's adapter never
sees: such a side is not compared (the diff says so in its notes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.model.checkpoint import (
    DEFAULT_OBJECT_PATH,
    CheckpointReport,
    CheckpointView,
    checkpoint_verdicts,
    view_of_legacy,
    view_of_sparsecore,
)
from tpuemb_cfg.model.jax_checkpoint import view_of_jax
from tpuemb_cfg.rules.checkpoint import checkpoint_findings
from tpuemb_cfg.rules.diff import Location

from .sides import Side

__all__ = ["checkpoint_report", "view_of"]

_TABLE_PATH = re.compile(r'^tables\[("(?:[^"\\]|\\.)*")\]')


def view_of(side: Side, object_path: str = DEFAULT_OBJECT_PATH, *, jax: bool = False
            ) -> CheckpointView | None:
    """The checkpoint ``side`` saves, or None when it cannot be laid out or when TensorFlow's
    restore never reads it (an Orbax checkpoint of jax-tpu-embedding or keras-rs on JAX)
    unless ``jax``: then jax-tpu-embedding's view (``model.jax_checkpoint.view_of_jax``)."""
    if side.kind == "sparsecore":
        if side.config is None or side.stacking is None:
            return None
        if side.stacking.mode != "tensorflow":
            if not jax:
                return None
            algorithms = {t.name: t.optimizer.algorithm for t in side.config.tables}
            return view_of_jax(side.stacking, algorithms, object_path=object_path)
        return view_of_sparsecore(side.config, side.stacking, object_path=object_path)
    if side.message is None:
        return None
    return view_of_legacy(side.message, object_path=object_path)


def why_not(side: Side) -> str:
    """Why ``side``'s checkpoint is not compared (:func:`view_of` gave None)."""
    if side.kind == "sparsecore" and side.stacking is not None:
        return (f"{side.label}: jax-tpu-embedding and keras-rs on JAX save Orbax checkpoints, "
                "which TensorFlow's checkpoint adapter never reads: the checkpoint is not "
                "compared")
    return f"{side.label}: its tables cannot be laid out: the checkpoint is not compared"


def checkpoint_report(a: Side, b: Side, *, locate_new: Callable[[str], Location | None],
                      locate_old: Callable[[str], Location | None],
                      object_path: str = DEFAULT_OBJECT_PATH, after_build: bool = False,
                      ) -> tuple[CheckpointReport | None, list[Diagnostic], list[str]]:
    """(the verdict, its CKPT findings at their lines, notes) of restoring ``a``'s checkpoint
    under ``b``; (None, [], why) when either side's checkpoint is not TensorFlow's."""
    old, new = view_of(a, object_path), view_of(b, object_path)
    if old is None or new is None:
        return None, [], [why_not(a if old is None else b)]
    report = checkpoint_verdicts(old, new, after_build=after_build)
    placed = [_placed(d, locate_new, locate_old, b.label)
              for d in checkpoint_findings([report])]
    return report, placed, []


def _placed(found: Diagnostic, locate_new: Callable[[str], Location | None],
            locate_old: Callable[[str], Location | None], new_label: str) -> Diagnostic:
    """``found`` (at ``tables["name"]``) at the table's line in NEW, else in OLD, else at the
    top of NEW."""
    match = _TABLE_PATH.match(found.field_path)
    where: Location | None = None
    if match is not None:
        name = json.loads(match.group(1))
        where = locate_new(name) or locate_old(name)
    path, line, column = where or (new_label, 1, 1)
    return Diagnostic(rule=found.rule, severity=found.severity, message=found.message,
                      field_path=found.field_path, line=line, column=column, hint=found.hint,
                      path=path)
