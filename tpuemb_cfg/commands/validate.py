"""``tpuemb validate``, ``tpuemb rules`` and ``tpuemb explain``: thin wrappers over the library.

Exit codes of ``validate``: 0 nothing at or above ``--fail-on``, 1 findings at or above it, 2 a
file could not be read or parsed (also reported as a ``PARSE001`` diagnostic) or bad usage.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.base.platform import legacy_chips
from tpuemb_cfg.commands._outputs import status_line
from tpuemb_cfg.commands.flags import cli_message, echo, keras_backend_option
from tpuemb_cfg.formats.atomic import refuse_hard_linked
from tpuemb_cfg.formats.io import Source, atomic_write_bytes, read_source
from tpuemb_cfg.rules import RULES, SEVERITY_RANK, Diagnostic
from tpuemb_cfg.spec_check import fix_sparsecore_spec, is_sparsecore_spec, is_spec, validate_spec
from tpuemb_cfg.validation import fix as fixes_module
from tpuemb_cfg.validation.fix import fixes_for
from tpuemb_cfg.validation.report import FORMATS, FileReport, render_chunks
from tpuemb_cfg.validation.settings import Settings, common_folder, load_settings, parse_tpu
from tpuemb_cfg.validation.validator import PARSE_RULE, parse_error, selected_rules, validate_source


def tpu_option(value: str) -> str:
    """``--tpu GEN`` checked (``UsageError`` naming the known generations)."""
    try:
        return parse_tpu(value)
    except InputError as exc:
        raise UsageError(f"--tpu: {exc.message}") from None


def _split(values: Sequence[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        out += [v.strip().upper() for v in value.split(",") if v.strip()]
    return out


def _lines(data: bytes) -> list[str]:
    """A file's lines for a diff (their line endings kept)."""
    return data.decode("utf-8", "replace").splitlines(keepends=True)


def _fix_file(source: Source, fixes: set[str], *, diff: bool) -> tuple[list[str], bool]:
    """Apply (or, with ``diff``, show) the fixes of one file; returns the messages to print and
    whether the file was rewritten (``fixes_module.fix_source``: looked up when called)."""
    result = fixes_module.fix_source(source, fixes)
    notes = list(result.notes)
    if not result.changed:
        return notes, False
    if diff:
        notes = [f"{note} [--diff: not written]" for note in notes]
        if source.format != "binary":
            lines = difflib.unified_diff(
                _lines(source.data), _lines(result.data),
                fromfile=source.path,
                tofile=f"{source.path} (fixed)",
            )
            echo("".join(lines), nl=False)
        else:
            notes.append(
                f"{source.path}: {source.format} file would be rewritten (no text diff to show)"
            )
    else:

        refuse_hard_linked(source.path)
        atomic_write_bytes(source.path, result.data)
        notes.append(f"{source.path}: fixed ({', '.join(result.applied)})")
        return notes, True
    return notes, False


def _fix_spec(path: str, fixes: set[str], *, diff: bool) -> bool:
    """--fix on a spec: SC001's renames in a SparseCore spec, else a note that specs are not
    rewritten; returns whether the file could not be written."""
    if "sparsecore_keys" in fixes and is_sparsecore_spec(path):
        return _fix_sparsecore_spec(path, diff=diff)
    echo(f"{path}: a spec is not rewritten by --fix; edit the spec itself "
         "(the findings below point at its lines)", err=True)
    return False


def _fix_sparsecore_spec(path: str, *, diff: bool) -> bool:
    """SC001's key renames in a SparseCore spec (written, or shown with ``diff``); returns
    whether the file could not be written. A spec that cannot be loaded is left to the
    validation below (PARSE001)."""
    try:
        with open(path, "rb") as handle:
            before = handle.read()
        result = fix_sparsecore_spec(path)
    except (InputError, OSError):
        return False
    for note in result.notes:
        echo(note + (" [--diff: not written]" if diff and result.changed else ""), err=True)
    if not result.changed:
        return False
    if diff:
        echo("".join(difflib.unified_diff(
            _lines(before), _lines(result.data), fromfile=path, tofile=f"{path} (fixed)")),
            nl=False)
        return False
    try:
        refuse_hard_linked(path)
        atomic_write_bytes(path, result.data)
    except (InputError, OSError) as exc:  # OutputError is an InputError
        echo(f"{path}: {exc} (not fixed)", err=True)
        return True
    echo(f"{path}: fixed ({', '.join(result.applied)})", err=True)
    return False


def _validate_file(path: str, source: Source | None, rules: list[Any], settings: Settings,
                   options: dict[str, Any]) -> tuple[list[Diagnostic], bool]:
    """The diagnostics of one file (``source``: already read by --fix) and whether it could
    not be read. Its bytes and text are dropped on return: only the findings are kept. A spec
    (.py/.toml) is compiled and its findings placed in it (``spec_check``)."""
    if source is None and is_spec(path):
        found = validate_spec(path, rules, severity=settings.severity, options=options)
        return found, any(d.rule == PARSE_RULE for d in found)
    try:
        if source is None:
            source = read_source(path)
    except InputError as exc:
        return [parse_error(exc)], True
    except UsageError as exc:  # e.g. an extension that names no format: this file only
        reason = str(exc).removeprefix(f"{path}: ")
        return [parse_error(InputError(reason, path=path))], True
    source.data = b""  # the text (and the message) is all validation reads
    return validate_source(source, rules, severity=settings.severity, options=options), False


def _rule_filter(name: str, which: str) -> Callable[[Callable[..., Any]], Any]:
    """``--select``/``--ignore``: rule ids or prefixes, comma-separated and repeatable."""
    return click.option(
        name, multiple=True,
        help=f"{which} these rule ids or prefixes (comma-separated, repeatable).",
    )


@click.command("validate")
@keras_backend_option
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--fail-on", type=click.Choice(["error", "warning", "info"]), default=None,
    help="Lowest severity that makes the exit status 1 [default: error, or fail-on in "
    "pyproject.toml].",
)
@_rule_filter("--select", "Only")
@_rule_filter("--ignore", "Skip")
@click.option(
    "--show-derived",
    is_flag=True,
    help="Also report derived facts: tag table, counts, state, sizes.",
)
@click.option(
    "--tpu",
    "tpu",
    metavar="GEN",
    help="TPU generation whose device memory SIZE004 checks "
    f"({', '.join(c.key for c in legacy_chips())}) "
    "[default: tpu in pyproject.toml, else the largest device of any generation].",
)
@click.option(
    "--fix", is_flag=True,
    help="Apply the mechanical fixes (tags, legacy style, accumulation; SparseCore limit keys)."
)
@click.option(
    "--diff", is_flag=True, help="With --fix: print the changes as a diff instead of writing."
)
def validate(  # noqa: PLR0913  (a click command: one parameter per option)
    files: tuple[str, ...],
    fmt: str,
    fail_on: str | None,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    show_derived: bool,
    tpu: str | None,
    fix: bool,
    diff: bool,
) -> None:
    """Check configurations against every rule TensorFlow enforces, with file:line:col positions.

    FILE may be text (.pbtxt), binary (.pb/.binpb) or JSON (.json); '-' reads text from stdin.
    A spec (.py/.toml) is compiled as `tpuemb compile` compiles it, and its findings point at
    the spec's lines. Settings come from [tool.tpuemb] in the nearest pyproject.toml; options
    override them.
    """
    if diff and not fix:
        raise UsageError(
            "--diff only makes sense with --fix (it shows the fixes instead of writing them)"
        )
    settings: Settings = load_settings(common_folder(files))
    chosen = _split(select) if select else settings.select
    dropped = settings.ignore + _split(ignore)
    threshold = fail_on or settings.fail_on
    try:
        rules = selected_rules(chosen, dropped, show_derived=show_derived or settings.show_derived)
    except UsageError as exc:
        if settings.source is None:
            raise
        raise UsageError(
            f"{cli_message(exc)} (options combined with [tool.tpuemb] in {settings.source})"
        ) from None
    options = {
        "memory_budget_bytes": settings.memory_budget_bytes,
        "tpu_generation": tpu_option(tpu) if tpu is not None else settings.tpu_generation,
    }

    fix_failed = False
    unchanged: dict[str, Source] = {}  # files --fix read and left as they were: not read again
    if fix:
        if "-" in files:
            raise UsageError("--fix cannot rewrite standard input; pass file names")
        fixes = fixes_for(r.id for r in rules)
        for path in files:
            if is_spec(path):
                fix_failed |= _fix_spec(path, fixes, diff=diff)
                continue
            try:
                source = read_source(path)
            except (InputError, UsageError):
                continue  # reported below as PARSE001
            try:
                notes, written = _fix_file(source, fixes, diff=diff)
            except InputError as exc:
                echo(f"{exc} (not fixed)", err=True)
                fix_failed = True
                continue
            if not written:
                unchanged[path] = source
            for note in notes:
                echo(note, err=True)

    reports: list[FileReport] = []
    parse_failed = False
    with status_line() as status:
        for number, path in enumerate(files, start=1):
            status(f"validating {path}" + (f" ({number} of {len(files)})" if len(files) > 1
                                           else ""))
            diagnostics, failed = _validate_file(path, unchanged.pop(path, None), rules,
                                                 settings, options)
            parse_failed |= failed
            reports.append(FileReport(path=path if path != "-" else "<stdin>",
                                      diagnostics=diagnostics))
        status("writing the report")
        # Written a diagnostic at a time: never the whole report as one string in memory.
        write = sys.stdout.write
        for chunk in render_chunks(fmt, reports, fail_on=threshold):
            write(chunk)
        sys.stdout.flush()
    if parse_failed or fix_failed:
        sys.exit(2)
    limit = SEVERITY_RANK[threshold]
    failing = any(
        SEVERITY_RANK[d.severity] >= limit
        for r in reports
        for d in r.diagnostics
        if d.rule != PARSE_RULE
    )
    sys.exit(1 if failing else 0)


@click.command("rules")
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def rules(fmt: str) -> None:
    """List the rules (validate's, plan's and diff's): id, default severity, summary."""
    entries = [RULES[rule_id] for rule_id in sorted(RULES)]
    if fmt == "json":
        document = [{"id": r.id, "severity": r.severity, "summary": r.summary} for r in entries]
        echo(json.dumps(document, indent=2))
        return
    for r in entries:
        note = "  (on request)" if r.on_request else ""
        echo(f"{r.id:<9} {r.severity:<8} {r.summary}{note}")


@click.command("explain")
@click.argument("rule_id", metavar="ID")
def explain(rule_id: str) -> None:
    """Explain one rule of validate, plan or diff (what it checks, why, and the fix)."""
    key = rule_id.strip().upper()
    rule = RULES.get(key)
    if rule is None:
        close = difflib.get_close_matches(key, list(RULES), n=3)
        suggestion = f"; did you mean {', '.join(close)}?" if close else "; tpuemb rules lists them"
        raise UsageError(f"unknown rule {rule_id!r}{suggestion}")
    on_request = " (on request: --select it or use --show-derived)" if rule.on_request else ""
    echo(f"{rule.id} · {rule.severity} · {rule.summary}{on_request}\n")
    echo(rule.explanation)
