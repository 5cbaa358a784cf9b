"""``tpuemb diff``'s reports: text, JSON, SARIF, GitHub annotations and Markdown.

Every format renders one :class:`~tpuemb_cfg.review.diffing.ConfigDiff`. Text and Markdown list
the differences by section (the configuration, what it does on the TPU, the checkpoint); JSON
carries every record; SARIF and GitHub annotations carry the findings (DIFF and CKPT), at NEW's
lines. A finding about something only OLD has (a removed table) is put on NEW's file, without a
line, naming OLD's place in its message: code review annotates the new file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import printable
from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules.diff import diff_rules
from tpuemb_cfg.validation.report import FileReport, format_github, format_sarif

if TYPE_CHECKING:
    from .diffing import ConfigDiff

__all__ = ["DIFF_FORMATS", "render", "render_many"]

DIFF_FORMATS = ("text", "json", "sarif", "github", "markdown")

#: Sections of the text and Markdown reports: (title, the change subjects it shows).
SECTIONS = (
    ("Configuration", ("table", "feature", "optimizer", "hyper_parameter", "learning_rate",
                       "setting", "limit", "topology")),
    ("On the TPU", ("stack", "stack_limit", "memory", "load")),
    ("Findings", ("finding",)),
)
_MARK = {"added": "+", "removed": "-", "renamed": "~", "changed": "~"}


def _where(location: Sequence[Any] | None) -> str:
    if not location:
        return ""
    path, line, column = location
    return f"{path}:{line}:{column}"


def _file_reports(diff: ConfigDiff) -> list[FileReport]:
    """The findings grouped by file, every one on NEW's file (see the module docstring)."""
    findings: list[Diagnostic] = []
    for found in diff.findings:
        if found.path == diff.new:
            findings.append(found)
            continue
        where = f" (OLD: {found.path}:{found.line})" if found.path and found.line else ""
        findings.append(Diagnostic(rule=found.rule, severity=found.severity,
                                   message=found.message + where, field_path=found.field_path,
                                   hint=found.hint, path=diff.new))
    return [FileReport(diff.new, findings)]


#: What a checkpoint outcome means, for the summary line.
_OUTCOME = {
    "restores": "restores as it is",
    "reshards": "restores through TensorFlow's reshard (before build())",
    "fails": "does not restore: TensorFlow raises",
    "wrong": "restores without an error, but state is lost or misplaced",
}


def _verdict_line(diff: ConfigDiff) -> str:
    check = diff.checkpoint
    if check is None:
        return "checkpoint: not compared"
    moved = [v for v in check.verdicts if v.outcome != "restores"]
    count = f" ({len(moved)} variable{'' if len(moved) == 1 else 's'})" if moved else ""
    outcome = _OUTCOME.get(check.outcome, check.outcome)
    if check.outcome in ("restores", "reshards") and check.breaking:
        outcome += ", but state is dropped"
    return f"checkpoint: OLD's {outcome}{count}"


def _unsettled(diff: ConfigDiff) -> list[Any]:
    """The checkpoint verdicts that are not a plain restore."""
    check = diff.checkpoint
    return [] if check is None else [v for v in check.verdicts if v.outcome != "restores"]


def format_text(diff: ConfigDiff) -> str:
    """Sections of ``+``/``-``/``~`` lines with NEW's (else OLD's) location, the checkpoint's
    variables, and a summary line."""
    lines = [f"tpuemb diff {printable(diff.old)} ({diff.old_kind}) -> {printable(diff.new)} "
             f"({diff.new_kind})"]
    for title, subjects in SECTIONS:
        chosen = [c for c in diff.changes if c.subject in subjects]
        if not chosen:
            continue
        lines += ["", f"{title}:"]
        for change in chosen:
            where = _where(change.new_location or change.old_location)
            lines.append(f"  {_MARK.get(change.kind, '~')} {printable(change.message)}"
                         + (f"  ({printable(where)})" if where else ""))
    check = diff.checkpoint
    if check is not None and (_unsettled(diff) or check.outcome != "restores"):
        lines += ["", "Checkpoint (OLD's, restored under NEW as TensorFlow 2.21 does):"]
        for found in (d for d in diff.findings if d.rule.startswith("CKPT")):
            where = f"{found.path}:{found.line}:{found.column or 1}" if found.line else ""
            lines.append(f"  {found.severity}[{found.rule}] {printable(found.message)}"
                         + (f"  ({printable(where)})" if where else ""))
    for note in diff.notes:
        lines += ["", f"note: {printable(note)}"]
    lines += ["", _summary(diff)]
    return "\n".join(lines) + "\n"


def _summary(diff: ConfigDiff) -> str:
    n = len(diff.changes)
    counts = {s: sum(1 for d in diff.findings if d.severity == s)
              for s in ("error", "warning", "info")}
    differences = f"{n} difference{'' if n == 1 else 's'}; " if n or not diff.findings else ""
    return (f"{differences}{counts['error']} error(s), {counts['warning']} warning(s); "
            f"{_verdict_line(diff)}")


def _md(text: str) -> str:
    return printable(text).replace("|", "\\|").replace("\n", " ")


def format_markdown(diff: ConfigDiff) -> str:
    """A pull-request comment: a verdict line, one table per section, the checkpoint's table."""
    check = diff.checkpoint
    icon = "❌" if diff.breaking else "⚠️" if any(
        d.severity != "info" for d in diff.findings) else "✅"
    lines = [f"### tpuemb diff: `{_md(diff.old)}` → `{_md(diff.new)}`", "",
             f"{icon} {_md(_summary(diff))}"]
    for title, subjects in SECTIONS:
        chosen = [c for c in diff.changes if c.subject in subjects]
        if not chosen:
            continue
        lines += ["", f"#### {title}", "", "| | change | where |", "|---|---|---|"]
        for change in chosen:
            where = _where(change.new_location or change.old_location)
            lines.append(f"| {_MARK.get(change.kind, '~')} | {_md(change.message)} | "
                         f"{'`' + _md(where) + '`' if where else ''} |")
    if check is not None:
        lines += ["", "#### Checkpoint", "", _md(_verdict_line(diff))]
        unsettled = _unsettled(diff)
        if unsettled:
            lines += ["", "| variable | outcome | how | why |", "|---|---|---|---|"]
            for verdict in unsettled:
                lines.append(f"| `{_md(verdict.variable)}` | {verdict.outcome} | "
                             f"{_md(verdict.how)} | {_md(verdict.reason)} |")
        found = [d for d in diff.findings if d.rule.startswith("CKPT")]
        if found:
            lines.append("")
            lines += [f"- **{d.severity}[{d.rule}]** {_md(d.message)}" for d in found]
    for note in diff.notes:
        lines += ["", f"> {_md(note)}"]
    return "\n".join(lines) + "\n"


def format_json(diff: ConfigDiff) -> str:
    return json.dumps(diff.to_json(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def render(fmt: str, diff: ConfigDiff) -> str:
    """``diff`` in ``fmt`` (one of :data:`DIFF_FORMATS`)."""
    if fmt == "text":
        return format_text(diff)
    if fmt == "markdown":
        return format_markdown(diff)
    if fmt == "json":
        return format_json(diff)
    return render_many(fmt, [diff])


def render_many(fmt: str, diffs: Sequence[ConfigDiff]) -> str:
    """Several diffs (``tpuemb diff --against REF A B ...``) as one report: text and Markdown
    one after the other, JSON a list, SARIF one run with every file's findings, GitHub every
    annotation."""
    if len(diffs) == 1 and fmt in ("text", "markdown", "json"):
        return render(fmt, diffs[0])
    if fmt in ("text", "markdown"):
        return "\n".join(render(fmt, d) for d in diffs)
    if fmt == "json":
        return json.dumps([d.to_json() for d in diffs], indent=2, ensure_ascii=False) + "\n"
    reports = [report for d in diffs for report in _file_reports(d)]
    if fmt == "sarif":
        return format_sarif(reports, rules=[r.id for r in diff_rules()])
    if fmt == "github":
        return format_github(reports)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(DIFF_FORMATS)}")
