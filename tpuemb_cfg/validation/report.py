"""Formatters for ``tpuemb validate``: text, JSON, SARIF 2.1.0, GitHub annotations, JUnit XML.

Each formatter takes the per-file results in the order the files were given and returns the
whole output as one string. Diagnostics inside a file are already sorted (line, column, rule).
:func:`render_chunks` gives the same text a piece at a time (a diagnostic, or a line), which is
how ``tpuemb validate`` writes it: a report of a million findings is never one string, nor one
JSON document of a million dictionaries, in memory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree as ET

from tpuemb_cfg.base.errors import printable, printable_json
from tpuemb_cfg.base.version import __version__
from tpuemb_cfg.rules import RULES, SEVERITY_RANK, Diagnostic, all_rules

FORMATS = ("text", "json", "sarif", "github", "junit")

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


@dataclass
class FileReport:
    """The diagnostics of one input file (``path`` as given on the command line)."""

    path: str
    diagnostics: list[Diagnostic]


def summary(reports: Sequence[FileReport]) -> dict[str, int]:
    """Number of diagnostics per severity, over every file."""
    counts = {"error": 0, "warning": 0, "info": 0}
    for report in reports:
        for d in report.diagnostics:
            counts[d.severity] = counts.get(d.severity, 0) + 1
    return counts


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 or word == "info" else f"{n} {word}s"


def format_text(reports: Sequence[FileReport], *, fail_on: str = "error") -> str:
    """``FILE:LINE:COL: severity[ID] message`` per diagnostic, an indented hint, and a summary.

    Binary/JSON inputs have no line: ``FILE: severity[ID] message (at field_path)``. A clean run
    prints nothing.
    """
    return "".join(_text_chunks(reports))


def _text_chunks(reports: Sequence[FileReport]) -> Iterator[str]:
    for report in reports:
        path = printable(report.path)
        for d in report.diagnostics:
            if d.line is not None:
                line = (f"{path}:{d.line}:{d.column or 1}: {d.severity}[{d.rule}] "
                        f"{printable(d.message)}\n")
            else:
                where = f" (at {d.field_path})" if d.field_path else ""
                line = f"{path}: {d.severity}[{d.rule}] {printable(d.message)}{where}\n"
            yield line + (f"    hint: {printable(d.hint)}\n" if d.hint else "")
    counts = summary(reports)
    if any(counts.values()):
        files = sum(1 for r in reports if r.diagnostics)
        yield (
            f"Found {_plural(counts['error'], 'error')}, {_plural(counts['warning'], 'warning')} "
            f"and {_plural(counts['info'], 'info')} in {_plural(files, 'file')}.\n"
        )


def format_json(reports: Sequence[FileReport], *, fail_on: str = "error") -> str:
    """``{"schema_version": 1, "files": [...], "summary": {...}}`` (see docs/validate.md)."""
    return "".join(_json_chunks(reports))


def _json_chunks(reports: Sequence[FileReport]) -> Iterator[str]:
    holes: list[tuple[Iterable[Any], int]] = []
    files = []
    for report in reports:
        files.append({"path": report.path, "diagnostics": _hole(holes, (
            d.to_dict() for d in report.diagnostics), depth=3)})
    document = {"schema_version": 1, "files": files, "summary": summary(reports)}
    return _streamed_json(document, holes)


def _hole(holes: list[tuple[Iterable[Any], int]], items: Iterable[Any], *, depth: int) -> str:
    """A stand-in, in a document for :func:`_streamed_json`, for the JSON array of ``items``
    whose key is ``depth`` levels deep."""
    holes.append((items, depth))
    return f"\x00{len(holes) - 1}"


_HOLE = re.compile(r'"\\u0000(\d+)"')


def _streamed_json(document: Any, holes: Sequence[tuple[Iterable[Any], int]]) -> Iterator[str]:
    """``printable_json(document, indent=2) + "\\n"`` with each stand-in of
    :func:`_hole` replaced by its array, written one item at a time (the same bytes)."""
    parts = _HOLE.split(printable_json(document, indent=2))
    yield parts[0]
    for k in range(1, len(parts), 2):
        items, depth = holes[int(parts[k])]
        pad = "  " * (depth + 1)
        first = True
        for item in items:
            # JSON strings hold no raw line break: every line of an item is indented alike
            body = printable_json(item, indent=2).replace("\n", "\n" + pad)
            yield ("[\n" if first else ",\n") + pad + body
            first = False
        yield "[]" if first else "\n" + "  " * depth + "]"
        yield parts[k + 1]
    yield "\n"


def _uri(path: str) -> str:
    normalized = path.replace(os.sep, "/") if os.sep != "/" else path
    if os.path.isabs(path):
        return "file://" + quote(normalized if normalized.startswith("/") else "/" + normalized)
    return quote(normalized)


def _sarif_rule(rule_id: str) -> dict[str, Any]:
    rule = RULES[rule_id]
    return {
        "id": rule.id,
        "name": "".join(word.capitalize() for word in rule.func.__name__.strip("_").split("_"))
        or rule.id,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.explanation},
        "help": {"text": rule.explanation},
        "defaultConfiguration": {
            "level": SARIF_LEVEL[rule.severity],
            "enabled": not rule.on_request,
        },
        "properties": {"tags": [rule.family]},
    }


def format_sarif(reports: Sequence[FileReport], *, fail_on: str = "error",
                 rules: Iterable[str] | None = None) -> str:
    """A SARIF 2.1.0 log with one run; ``tool.driver.rules`` lists the registered ``rules``
    (ids; default: every rule validation runs, i.e. all but ``tpuemb plan``'s and
    ``tpuemb diff``'s)."""
    return "".join(_sarif_chunks(reports, rules))


def _sarif_chunks(reports: Sequence[FileReport],
                  rules: Iterable[str] | None = None) -> Iterator[str]:
    if rules is None:
        rules = (r.id for r in all_rules() if r.target not in ("plan", "diff"))
    rule_ids = sorted(set(rules))
    index = {rule_id: i for i, rule_id in enumerate(rule_ids)}

    def results() -> Iterator[dict[str, Any]]:
        for report in reports:
            yield from _sarif_results(report, index)

    holes: list[tuple[Iterable[Any], int]] = []
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "tpuemb",
                        "version": __version__,
                        "rules": [_sarif_rule(rule_id) for rule_id in rule_ids],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": _hole(holes, results(), depth=3),
            }
        ],
    }
    return _streamed_json(log, holes)


def _sarif_results(report: FileReport, index: Mapping[str, int]) -> Iterator[dict[str, Any]]:
    """The SARIF result of each diagnostic of one file."""
    for d in report.diagnostics:
        physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(report.path)}}
        if d.line is not None:
            physical["region"] = {"startLine": d.line, "startColumn": d.column or 1}
        location: dict[str, Any] = {"physicalLocation": physical}
        if d.field_path:
            location["logicalLocations"] = [{"fullyQualifiedName": d.field_path}]
        text = d.message if not d.hint else f"{d.message}\nhint: {d.hint}"
        result: dict[str, Any] = {
            "ruleId": d.rule,
            "level": SARIF_LEVEL[d.severity],
            "message": {"text": text},
            "locations": [location],
        }
        if d.rule in index:
            result["ruleIndex"] = index[d.rule]
        yield result


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(reports: Sequence[FileReport], *, fail_on: str = "error") -> str:
    """GitHub Actions workflow commands: ``::error file=F,line=L,col=C,title=ID::message``."""
    return "".join(_github_chunks(reports))


def _github_chunks(reports: Sequence[FileReport]) -> Iterator[str]:
    for report in reports:
        for d in report.diagnostics:
            props = [f"file={_gh_property(report.path)}"]
            if d.line is not None:
                props += [f"line={d.line}", f"col={d.column or 1}"]
            props.append(f"title={_gh_property(f'{d.rule} ({d.severity})')}")
            text = printable(d.message)
            if d.hint:
                text += f"\nhint: {printable(d.hint)}"
            yield f"::{GITHUB_LEVEL[d.severity]} {','.join(props)}::{_gh_data(text)}\n"


_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml(text: str) -> str:
    """Drop characters XML 1.0 cannot carry (control characters from odd names)."""
    return _XML_INVALID.sub("\ufffd", text)


def format_junit(reports: Sequence[FileReport], *, fail_on: str = "error") -> str:
    """JUnit XML: one test suite per file, one test case per diagnostic (or one passing case).

    Diagnostics at or above ``fail_on`` are failures (``PARSE001`` an error); the rest are passing
    cases whose text is in ``system-out``.
    """
    threshold = SEVERITY_RANK[fail_on]
    root = ET.Element("testsuites", name="tpuemb validate")
    total = failures = errors = 0
    for report in reports:
        path = _xml(report.path)
        suite = ET.SubElement(root, "testsuite", name=path)
        s_tests = s_failures = s_errors = 0
        for d in report.diagnostics:
            s_tests += 1
            where = f"{d.line}:{d.column or 1}" if d.line is not None else d.field_path or "<root>"
            case = ET.SubElement(suite, "testcase", classname=path, name=_xml(f"{d.rule} {where}"))
            body = f"{path}:{where}: {d.severity}[{d.rule}] {d.message}"
            if d.hint:
                body += f"\nhint: {d.hint}"
            body = _xml(body)
            message = _xml(d.message)
            if d.rule == "PARSE001":
                s_errors += 1
                ET.SubElement(case, "error", message=message, type=d.rule).text = body
            elif SEVERITY_RANK[d.severity] >= threshold:
                s_failures += 1
                ET.SubElement(case, "failure", message=message, type=d.severity).text = body
            else:
                ET.SubElement(case, "system-out").text = body
        if not report.diagnostics:
            s_tests += 1
            ET.SubElement(suite, "testcase", classname=path, name="valid")
        suite.set("tests", str(s_tests))
        suite.set("failures", str(s_failures))
        suite.set("errors", str(s_errors))
        total, failures, errors = total + s_tests, failures + s_failures, errors + s_errors
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


FORMATTERS: dict[str, Callable[..., str]] = {
    "text": format_text,
    "json": format_json,
    "sarif": format_sarif,
    "github": format_github,
    "junit": format_junit,
}


def render(fmt: str, reports: Sequence[FileReport], *, fail_on: str = "error") -> str:
    """Render ``reports`` in format ``fmt`` (one of :data:`FORMATS`)."""
    return FORMATTERS[fmt](reports, fail_on=fail_on)


def render_chunks(fmt: str, reports: Sequence[FileReport], *,
                  fail_on: str = "error") -> Iterator[str]:
    """What :func:`render` returns, a piece at a time (JUnit's XML tree is built whole)."""
    streamed: dict[str, Callable[[Sequence[FileReport]], Iterable[str]]] = {
        "text": _text_chunks, "json": _json_chunks, "sarif": _sarif_chunks,
        "github": _github_chunks,
    }
    if fmt in streamed:
        yield from streamed[fmt](reports)
    else:
        yield render(fmt, reports, fail_on=fail_on)
