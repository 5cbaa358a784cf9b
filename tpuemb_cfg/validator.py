"""Run the rules over a configuration: file -> message -> diagnostics.

:func:`validate` is the library entry point (``tpuemb_cfg.validate``). It reads the file (if given
a path), derives section 1's quantities once, runs every selected rule, places each diagnostic at
the text position of its field (or of the nearest present ancestor), drops the ones silenced by a
``# tpuemb: disable=ID`` comment on their line, and sorts them by file, line, column and rule.

This module must stay light: ``tpuemb validate`` runs in pre-commit hooks, so nothing here (or in
the rules) imports NumPy.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.errors import InputError, UsageError, shorten_quoted
from tpuemb_cfg.rules import RULES, Context, Diagnostic, Rule, Severity

if TYPE_CHECKING:
    from tpuemb_cfg.io import Source
    from tpuemb_cfg.locations import Locations
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

PARSE_RULE = "PARSE001"

_DISABLE = re.compile(r"tpuemb:\s*disable\s*=\s*([A-Za-z0-9_,\s]+)")


def _parts(values: Iterable[str] | str | None) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for value in values:
        out += [v.strip().upper() for v in value.split(",") if v.strip()]
    return out


def _matches(rule_id: str, selector: str) -> bool:
    return selector == "ALL" or rule_id.startswith(selector)


def _check_selectors(selectors: Sequence[str], option: str) -> None:
    for selector in selectors:
        if not any(_matches(rule_id, selector) for rule_id in RULES):
            raise UsageError(
                f"{option} {selector!r} matches no rule; rule ids look like TAG002 and prefixes "
                "like TAG (tpuemb rules lists them)"
            )


def selected_rules(
    select: Iterable[str] | str | None = None,
    ignore: Iterable[str] | str | None = None,
    *,
    show_derived: bool = False,
) -> list[Rule]:
    """The rules to run, in id order.

    ``select``/``ignore`` hold ids or prefixes (``TAG``, ``TAG00``, ``ALL``), comma-separated
    strings allowed. Without ``select`` every default-on rule runs. An on-request rule (derived
    facts) runs only when its full id is selected, or with ``show_derived`` when the selection
    (if any) matches it. Raises
    :class:`UsageError` for a selector that matches no rule.
    """
    chosen = _parts(select)
    dropped = _parts(ignore) or []
    if chosen is not None:
        _check_selectors(chosen, "--select")
    _check_selectors(dropped, "--ignore")
    result = []
    for rule_id in sorted(RULES):
        rule = RULES[rule_id]
        if rule_id == PARSE_RULE:
            continue
        in_selection = chosen is None or any(_matches(rule_id, s) for s in chosen)
        if rule.on_request:
            wanted = (show_derived and in_selection) or (chosen is not None and rule_id in chosen)
        else:
            wanted = in_selection
        if wanted and not any(_matches(rule_id, s) for s in dropped):
            result.append(rule)
    return result


def _internal_error(rule: Rule, exc: Exception) -> Diagnostic:
    return Diagnostic(
        rule=rule.id,
        severity="error",
        message=f"internal error in rule {rule.id} ({type(exc).__name__}: {exc}); the other "
        "rules ran normally",
        field_path="",
        hint="this is a bug in the rule, not necessarily in your configuration; please report it "
        f"(or skip the rule with --ignore {rule.id})",
    )


def _shortened(diagnostic: Diagnostic) -> Diagnostic:
    """The diagnostic with long quoted values (a 5 MB table name) cut to their first characters
    and length, so that every message stays one readable line whatever the configuration holds."""
    message = shorten_quoted(diagnostic.message)
    hint = shorten_quoted(diagnostic.hint) if diagnostic.hint else diagnostic.hint
    if message == diagnostic.message and hint == diagnostic.hint:
        return diagnostic
    return replace(diagnostic, message=message, hint=hint)


def run_rules(
    config: TPUEmbeddingConfiguration,
    rules: Sequence[Rule],
    *,
    options: Mapping[str, Any] | None = None,
) -> list[Diagnostic]:
    """Run ``rules`` over ``config`` (no locations); a crashing rule becomes one internal error."""
    ctx = Context(config, options=options)
    found: list[Diagnostic] = []
    for rule in rules:
        ctx.current_rule = rule
        try:
            for diagnostic in rule.func(ctx):
                if not isinstance(diagnostic, Diagnostic):
                    raise TypeError(
                        f"rule yielded {type(diagnostic).__name__}, expected a Diagnostic"
                    )
                found.append(_shortened(diagnostic))
        except Exception as exc:  # noqa: BLE001 - one broken rule must not hide the others' findings
            found.append(_internal_error(rule, exc))
    ctx.current_rule = None
    return found


def _disabled(comments: list[str]) -> set[str]:
    ids: set[str] = set()
    for comment in comments:
        for match in _DISABLE.finditer(comment):
            ids.update(part.strip().upper() for part in match.group(1).split(",") if part.strip())
    return ids


def _position(locations: Locations, field_path: str) -> tuple[int, int]:
    """The field's position; a repeated field as a whole is at its first element; else the nearest
    present ancestor."""
    found = locations.get(field_path)
    if found is None and field_path:
        found = locations.get(f"{field_path}[0]")
    return found if found is not None else locations.nearest(field_path)


def place(
    diagnostics: Iterable[Diagnostic],
    *,
    path: str | None,
    locations: Locations | None,
) -> list[Diagnostic]:
    """Fill file, line and column; drop diagnostics silenced by ``# tpuemb: disable=ID``."""
    placed = []
    for diagnostic in diagnostics:
        line = column = None
        if locations is not None:
            line, column = _position(locations, diagnostic.field_path)
            comments = locations.line_comments.get(line)
            if comments:
                disabled = _disabled(comments)
                if "ALL" in disabled or any(diagnostic.rule.startswith(d) for d in disabled):
                    continue
        placed.append(replace(diagnostic, path=path, line=line, column=column))
    return placed


# --- Locating only what is needed -----------------------------------------------------------------
#
# Scanning every field of a large text file costs about as much as protobuf's parse. A finding
# only needs the positions inside the top-level element it is about (one table, one feature), so
# the text is split into top-level elements with a quick pass that looks only at strings, comments
# and brackets, and the full scanner (tpuemb_cfg.locations) runs on the elements that matter.
# Anything unusual at the top level (list syntax, extensions) falls back to scanning everything.

# Strings as unrolled loops: a repeated alternation costs regex memory per character (see
# tpuemb_cfg.locations), which for a multi-megabyte string is hundreds of megabytes.
_INNER = re.compile(
    r"""\"[^"\\\n]*(?:\\.[^"\\\n]*)*"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'|#[^\n]*|[{}<>]"""
)
_TOP = re.compile(
    r"""\s+|#[^\n]*|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'"""
    r"""|[A-Za-z_][A-Za-z0-9_]*"""
    r"""|[-+.0-9][A-Za-z0-9_.+-]*|."""
)


def _skip(text: str, pos: int) -> tuple[str, int, int]:
    """The next token at the top level that is not space or a comment: (token, start, end)."""
    while pos < len(text):
        match = _TOP.match(text, pos)
        if match is None:
            break
        token = match.group()
        if not token.isspace() and not token.startswith("#"):
            return token, match.start(), match.end()
        pos = match.end()
    return "", len(text), len(text)


def _top_level(text: str) -> list[tuple[str, int, int]] | None:
    """(field name, start, end) of every top-level field occurrence; ``None`` if unusual."""
    out: list[tuple[str, int, int]] = []
    pos = 0
    while True:
        token, start, pos = _skip(text, pos)
        if not token:
            return out
        if token in (",", ";"):
            continue
        if not (token[0].isalpha() or token[0] == "_"):
            return None
        value, _, pos = _skip(text, pos)
        if value == ":":
            value, _, pos = _skip(text, pos)
        if value in ("{", "<"):
            depth = 1
            while depth:
                match = _INNER.search(text, pos)
                if match is None:
                    return None
                pos = match.end()
                char = match.group()
                if char in ("{", "<"):
                    depth += 1
                elif char in ("}", ">"):
                    depth -= 1
        elif not value or value in ("[", "]", "}", ">", ":"):
            return None
        else:
            while value.startswith(("'", '"')):  # adjacent string literals concatenate
                following, _, after = _skip(text, pos)
                if not following.startswith(("'", '"')):
                    break
                value, pos = following, after
        out.append((token, start, pos))


def _partial_locations(
    text: str, descriptor: Any, field_paths: Iterable[str], *, always: bool = False
) -> Locations:
    """Locations of the top-level fields and of everything inside the elements ``field_paths``
    touch; line comments of every line a position is on. Scans everything when most of the
    elements are needed, unless ``always`` (for tests)."""
    from tpuemb_cfg.locations import Locations, scan_locations, tokenize

    paths = list(field_paths)
    elements = _top_level(text)
    wanted = {_top_key(p) for p in paths}
    if elements is None or (len(wanted) * 4 > len(elements) and not always):
        return scan_locations(text, descriptor)  # unusual layout, or most of the file is needed
    newlines = [m.start() for m in re.finditer("\n", text)]

    def position(offset: int) -> tuple[int, int]:
        line = bisect_left(newlines, offset)
        start = newlines[line - 1] + 1 if line else 0
        return line + 1, offset - start + 1

    result = Locations()
    counts: dict[str, int] = {}
    spans: dict[str, tuple[int, int]] = {}
    for name, start, end in elements:
        field = descriptor.fields_by_name.get(name)
        key = name
        if field is not None and field.is_repeated:
            index = counts.get(name, 0)
            counts[name] = index + 1
            key = f"{name}[{index}]"
        if key not in result.positions:
            result.positions[key] = position(start)
            spans[key] = (start, end)
    for key in sorted(wanted & spans.keys()):
        start, end = spans[key]
        line, column = result.positions[key]
        inner = scan_locations(text[start:end], descriptor)
        name = key.split("[", 1)[0]
        local = f"{name}[0]" if key != name else name
        for path, (row, col) in inner.positions.items():
            if path == local or path.startswith((local + ".", local + "[")):
                moved = key + path[len(local) :]
                where = (line + row - 1, col + column - 1 if row == 1 else col)
                result.positions.setdefault(moved, where)
    lines = {1} | {_position(result, p)[0] for p in paths}  # 1: the root's line
    for line in lines:
        first = newlines[line - 2] + 1 if line > 1 else 0
        last = newlines[line - 1] if line - 1 < len(newlines) else len(text)
        comments = tokenize(text[first:last])[1].get(1)
        if comments:
            result.line_comments[line] = comments
    return result


def _top_key(field_path: str) -> str:
    """``table_descriptor[2]`` for ``table_descriptor[2].name``; ``mode`` for ``mode``."""
    return field_path.split(".", 1)[0]


def sort_key(d: Diagnostic) -> tuple[str, int, int, str, str, str]:
    """File, line, column, rule (then field path and message, for a total order)."""
    return (d.path or "", d.line or 0, d.column or 0, d.rule, d.field_path, d.message)


def parse_error(exc: InputError) -> Diagnostic:
    """The PARSE001 diagnostic for a file that could not be read or parsed."""
    message = exc.message
    if exc.line is None and exc.offset is not None:
        message = f"byte {exc.offset}: {message}"
    elif exc.line is None and exc.key is not None:
        message = f"key {exc.key}: {message}"
    return Diagnostic(
        rule=PARSE_RULE,
        severity="error",
        message=message,
        field_path="",
        line=exc.line,
        column=exc.column if exc.column is not None or exc.line is None else 1,
        path=exc.path,
    )


def _apply_severity(
    diagnostics: list[Diagnostic], severity: Mapping[str, Severity] | None
) -> list[Diagnostic]:
    if not severity:
        return diagnostics
    out = []
    for d in diagnostics:
        new = severity.get(d.rule)
        out.append(replace(d, severity=new) if new and d.rule != PARSE_RULE else d)
    return out


def validate_source(
    source: Source,
    rules: Sequence[Rule],
    *,
    severity: Mapping[str, Severity] | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[Diagnostic]:
    """Validate a parsed file; text files get line/column positions and suppression comments.

    The text is scanned for positions only when there is something to place: a clean file (the
    usual case in a pre-commit hook) costs the parse and the rules alone.
    """
    found = run_rules(source.message, rules, options=options)
    if not found:
        return []
    locations = None
    if source.format == "text" and source.text is not None:
        locations = _partial_locations(
            source.text, source.message.DESCRIPTOR, [d.field_path for d in found]
        )
    placed = place(found, path=source.path, locations=locations)
    return sorted(_apply_severity(placed, severity), key=sort_key)


def validate(
    config_or_path: Any,
    *,
    select: Iterable[str] | str | None = None,
    ignore: Iterable[str] | str | None = None,
    show_derived: bool = False,
    severity: Mapping[str, Severity] | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[Diagnostic]:
    """Validate a configuration and return every finding, sorted by file, line, column and rule.

    ``config_or_path``: a ``TPUEmbeddingConfiguration`` (tpuemb's or TensorFlow's), a path (text,
    binary or JSON by extension; ``-`` for stdin) or binary bytes. A file that cannot be read or
    parsed gives a single ``PARSE001`` error diagnostic instead of an exception. Diagnostics of a
    text file carry 1-based line/column; other inputs have ``None``.

    ``select``/``ignore``: rule ids or prefixes (see :func:`selected_rules`); ``show_derived``
    adds the on-request info rules (tag table, derived counts, state variables, sizes);
    ``severity`` overrides default severities by rule id; ``options`` is passed to the rules
    (``memory_budget_bytes`` for SIZE003).
    """
    rules = selected_rules(select, ignore, show_derived=show_derived)
    if isinstance(config_or_path, str | os.PathLike):
        from tpuemb_cfg.io import read_source

        try:
            source = read_source(config_or_path)
        except InputError as exc:
            return [parse_error(exc)]
        except UsageError as exc:  # an extension that names no format
            name = os.fspath(config_or_path)
            return [parse_error(InputError(str(exc).removeprefix(f"{name}: "), path=name))]
        return validate_source(source, rules, severity=severity, options=options)
    from tpuemb_cfg.io import as_config

    try:
        config = as_config(config_or_path)
    except InputError as exc:
        return [parse_error(exc)]
    found = _apply_severity(run_rules(config, rules, options=options), severity)
    return sorted(found, key=sort_key)
