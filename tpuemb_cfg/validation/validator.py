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
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import InputError, UsageError, parameter, shorten_quoted
from tpuemb_cfg.base.protoutil import is_repeated
from tpuemb_cfg.formats.locations import DISABLE, iter_tokens, scan_locations, wanted_paths
from tpuemb_cfg.rules import Context, Diagnostic, Rule, Severity, SparseCoreContext, all_rules

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor

    from tpuemb_cfg.formats.io import Source
    from tpuemb_cfg.formats.locations import Locations
    from tpuemb_cfg.model.derived import Derived
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig
    from tpuemb_cfg.sparsecore.stacking import Stacking

PARSE_RULE = "PARSE001"



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


def _validate_rules() -> list[Rule]:
    """The rules validation runs (``tpuemb plan``'s and ``tpuemb diff``'s run on their facts), in
    id order."""
    return [rule for rule in all_rules() if rule.target not in ("plan", "diff")]


def _check_selectors(selectors: Sequence[str], option: str) -> None:
    ids = [rule.id for rule in _validate_rules()]
    for selector in selectors:
        if not any(_matches(rule_id, selector) for rule_id in ids):
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
        _check_selectors(chosen, parameter("select"))
    _check_selectors(dropped, parameter("ignore"))
    result = []
    for rule in _validate_rules():
        rule_id = rule.id
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
    derived: Derived | None = None,
) -> list[Diagnostic]:
    """Run ``rules`` over ``config`` (no locations); a crashing rule becomes one internal error.
    ``derived``: ``derive(config)``, when the caller has it (it is computed otherwise). Rules
    for SparseCore configurations (``target="sparsecore"``) are skipped."""
    ctx = Context(config, derived, options=options)
    return _collect(ctx, [r for r in rules if r.target == "configuration"])


def run_sparsecore_rules(
    config: SparseCoreConfig,
    rules: Sequence[Rule],
    *,
    options: Mapping[str, Any] | None = None,
    stacking: Stacking | None = None,
) -> list[Diagnostic]:
    """Run the SparseCore rules among ``rules`` over ``config`` (no locations; field paths
    named after the API: ``tables["user"].optimizer``). ``stacking``: ``feed.stack(config)``,
    when the caller has it (computed on first use otherwise)."""
    ctx = SparseCoreContext(config, stacking, options=options)
    return _collect(ctx, [r for r in rules if r.target == "sparsecore"])


def _collect(ctx: Context | SparseCoreContext, rules: Sequence[Rule]) -> list[Diagnostic]:
    """Every diagnostic of ``rules`` in ``ctx``; a crashing rule becomes one internal error."""
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
        for match in DISABLE.finditer(comment):
            ids.update(part.strip().upper() for part in match.group(1).split(",") if part.strip())
    return ids


def _position(locations: Locations, field_path: str) -> tuple[int, int]:
    """The field's position; a repeated field as a whole is at its first element; else the nearest
    present ancestor."""
    found = locations.get(field_path)
    if found is None and field_path:
        found = locations.get(f"{field_path}[0]")
    return found if found is not None else locations.nearest(field_path)


def _silenced(rule_id: str, comments: list[str] | None) -> bool:
    """Whether ``# tpuemb: disable=...`` in ``comments`` (of one line) names the rule."""
    if not comments:
        return False
    disabled = _disabled(comments)
    return "ALL" in disabled or any(rule_id.startswith(d) for d in disabled)


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
            if _silenced(diagnostic.rule, locations.line_comments.get(line)):
                continue
        placed.append(replace(diagnostic, path=path, line=line, column=column))
    return placed


# --- Locating only what is needed -----------------------------------------------------------------
#
# Scanning every field of a large text file costs about as much as protobuf's parse, and keeping
# the position of every field a finding may be placed at (its path, its first element, its
# ancestors) costs more memory than the file. A finding only needs the positions inside the
# top-level element it is about (one table, one feature), so the text is read as a sequence of
# top-level elements with a quick pass that looks only at strings, comments and brackets, and the
# full scanner (tpuemb_cfg.formats.locations) runs on each element that holds findings, in the
# order of the text, its positions let go of once the element's findings have theirs. Anything
# unusual at the top level (list syntax, extensions) falls back to scanning the whole text.

# Strings as unrolled loops: a repeated alternation costs regex memory per character (see
# tpuemb_cfg.formats.locations), which for a multi-megabyte string is hundreds of megabytes.
_INNER = re.compile(
    r"""\"[^"\\\n]*(?:\\.[^"\\\n]*)*"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'|#[^\n]*|[{}<>]"""
)
_TOP = re.compile(
    r"""\s+|#[^\n]*|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'"""
    r"""|[A-Za-z_][A-Za-z0-9_]*"""
    r"""|[-+.0-9][A-Za-z0-9_.+-]*|."""
)
#: The top-level field of a field path and its index: ``table_descriptor[2]`` of
#: ``table_descriptor[2].name``.
_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?(?=\.|$)")


class _Unusual(Exception):
    """The top level of the text is not a plain sequence of fields."""


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


def _top_elements(text: str) -> Iterator[tuple[str, int, int]]:
    """(field name, start, end) of every top-level field occurrence, in order; raises
    :class:`_Unusual` where the top level is not a plain sequence of fields."""
    pos = 0
    while True:
        token, start, pos = _skip(text, pos)
        if not token:
            return
        if token in (",", ";"):
            continue
        if not (token[0].isalpha() or token[0] == "_"):
            raise _Unusual
        value, _, pos = _skip(text, pos)
        if value == ":":
            value, _, pos = _skip(text, pos)
        if value in ("{", "<"):
            depth = 1
            while depth:
                match = _INNER.search(text, pos)
                if match is None:
                    raise _Unusual
                pos = match.end()
                char = match.group()
                if char in ("{", "<"):
                    depth += 1
                elif char in ("}", ">"):
                    depth -= 1
        elif not value or value in ("[", "]", "}", ">", ":"):
            raise _Unusual
        else:
            while value.startswith(("'", '"')):  # adjacent string literals concatenate
                following, _, after = _skip(text, pos)
                if not following.startswith(("'", '"')):
                    break
                value, pos = following, after
        yield token, start, pos


def _line_comments(text: str, first: int) -> list[str] | None:
    """The comments of the line that starts at offset ``first`` (read as a stream: the line may
    be the whole file)."""
    last = text.find("\n", first)
    last = len(text) if last < 0 else last
    if text.find("#", first, last) < 0:  # most lines: no comment to look for
        return None
    comments: dict[int, list[str]] = {}
    for _ in iter_tokens(text, comments, start=first, end=last):
        pass
    return comments.get(1)


class _Placed:
    """Line, column and the comments of that line, per field path (8 + 8 + 8 bytes each)."""

    def __init__(self, count: int) -> None:
        self.lines = array("q", [1]) * count
        self.columns = array("q", [1]) * count
        self.comments: list[list[str] | None] = [None] * count


def _locate(text: str, descriptor: Descriptor, field_paths: Sequence[str]) -> _Placed:
    """Where each of ``field_paths`` is placed in ``text`` (what :func:`_position` gives on a
    scan of the whole text) and the comments of that line.

    Only the top-level elements that hold a path are scanned, one at a time and in the order of
    the text; the memory is a few integers per path, whatever the size of the file. An unusual
    top level falls back to :func:`_locate_in_whole_text`.
    """
    try:
        return _locate_by_element(text, descriptor, field_paths)
    except _Unusual:
        return _locate_in_whole_text(text, descriptor, field_paths)


def _locate_by_element(text: str, descriptor: Descriptor,
                       field_paths: Sequence[str]) -> _Placed:
    """:func:`_locate`, scanning only the top-level elements that hold a path (raises
    :class:`_Unusual` for a text or path this does not handle)."""
    count = len(field_paths)
    placed = _Placed(count)
    first, following = _paths_by_element(descriptor, field_paths)
    located = bytearray(count)

    seen: dict[str, int] = {}
    line, line_start, offset = 1, 0, 0  # the line at `offset` and where it starts
    comments: dict[int, list[str] | None] = {}  # by line, of the lines read last
    for name, start, end in _top_elements(text):
        i = seen.get(name, 0)
        seen[name] = i + 1
        paths = first.get(name)
        if paths is None or i >= len(paths) or paths[i] < 0:
            continue
        breaks = text.count("\n", offset, start)
        if breaks:
            line += breaks
            line_start = text.rfind("\n", offset, start) + 1
        offset = start
        comments = {row: found for row, found in comments.items() if row >= line}
        members = _element_members(name, i, paths[i], following, field_paths)
        inner = scan_locations(text, descriptor, wanted_paths(p for _, p in members),
                               start=start, end=end, line=line, line_start=line_start)
        starts = [line_start]  # where the element's lines start
        for k, path in members:
            row, column = _position(inner, path)
            if row < line:  # nothing of the path in the element: the root
                continue
            while len(starts) <= row - line:
                starts.append(text.find("\n", starts[-1]) + 1)
            if row not in comments:
                comments[row] = _line_comments(text, starts[row - line])
            placed.lines[k], placed.columns[k] = row, column
            placed.comments[k] = comments[row]
            located[k] = 1
    on_first_line = _line_comments(text, 0)
    for k in range(count):
        if not located[k]:  # at the root, or in an element the text does not have: line 1
            placed.comments[k] = on_first_line
    return placed


def _paths_by_element(descriptor: Descriptor, field_paths: Sequence[str]
                      ) -> tuple[dict[str, array[int]], array[int]]:
    """The paths by element, as linked lists of path numbers: ``first[name][i]`` is the first
    path in the i-th element of the top-level field ``name`` (its first one, for a field that is
    not repeated), ``following[k]`` the next path in the same element as path k (-1: none).
    Raises :class:`_Unusual` for a path this does not handle."""
    count = len(field_paths)
    first: dict[str, array[int]] = {}
    following = array("q", [-1]) * count
    for k in range(count - 1, -1, -1):
        path = field_paths[k]
        head = _HEAD.match(path)
        if head is None:
            if path:
                raise _Unusual
            continue  # the root: line 1
        name, index = head.group(1), head.group(2)
        field = descriptor.fields_by_name.get(name)
        if index is not None and (field is None or not is_repeated(field)):
            raise _Unusual
        i = int(index) if index is not None else 0
        paths = first.get(name)
        if paths is None:
            paths = first[name] = array("q")
        if len(paths) <= i:
            paths.extend(array("q", [-1]) * (i + 1 - len(paths)))
        following[k] = paths[i]
        paths[i] = k
    return first, following


def _element_members(name: str, i: int, k: int, following: array[int],
                     field_paths: Sequence[str]) -> list[tuple[int, str]]:
    """The paths of the i-th element of ``name`` from path ``k`` on (path number and the path in
    the element read as a message of its own, in which it is the first ``name``)."""
    indexed = f"{name}[{i}]"
    members: list[tuple[int, str]] = []
    while k >= 0:
        path = field_paths[k]
        if path.startswith(indexed):
            path = f"{name}[0]{path[len(indexed):]}"
        members.append((k, path))
        k = following[k]
    return members


def _locate_in_whole_text(text: str, descriptor: Descriptor,
                          field_paths: Sequence[str]) -> _Placed:
    """:func:`_locate` by one scan of the whole text, recording only what the paths may be
    placed at (:func:`~tpuemb_cfg.formats.locations.wanted_paths`)."""
    locations = scan_locations(text, descriptor, wanted=wanted_paths(field_paths))
    starts = array("q", [0])
    starts.extend(m.end() for m in re.finditer("\n", text))
    placed = _Placed(len(field_paths))
    comments: dict[int, list[str] | None] = {}
    for k, path in enumerate(field_paths):
        line, column = _position(locations, path)
        if line not in comments:
            comments[line] = _line_comments(text, starts[line - 1])
        placed.lines[k], placed.columns[k] = line, column
        placed.comments[k] = comments[line]
    return placed


def _place_in_file(found: list[Diagnostic], path: str, placed: _Placed | None,
                   severity: Mapping[str, Severity] | None) -> None:
    """Give ``found`` (in place) their file, line and column (``None`` without ``placed``) and
    ``severity``, and drop the findings silenced by ``# tpuemb: disable=ID`` on their line. Each
    placed copy takes its original's place, so the two never coexist (half the memory for a
    million findings)."""
    kept = 0
    for k, d in enumerate(found):
        line = column = None
        if placed is not None:
            if _silenced(d.rule, placed.comments[k]):
                continue
            line, column = placed.lines[k], placed.columns[k]
        new = severity.get(d.rule) if severity and d.rule != PARSE_RULE else None
        found[kept] = replace(d, path=path, line=line, column=column, severity=new or d.severity)
        kept += 1
    del found[kept:]


def _sort_in_file(found: list[Diagnostic]) -> None:
    """Sort one file's diagnostics by :func:`sort_key`, in place, keyed by one integer each
    (line and column) rather than a tuple of six; the few that share a position are then
    ordered by rule, field path and message."""
    width = 1 + max((d.column or 0 for d in found), default=0)

    def position(d: Diagnostic) -> int:
        return (d.line or 0) * width + (d.column or 0)

    found.sort(key=position)
    start = 0
    while start < len(found):
        at = position(found[start])
        end = start + 1
        while end < len(found) and position(found[end]) == at:
            end += 1
        if end - start > 1:
            found[start:end] = sorted(found[start:end], key=sort_key)
        start = end


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
    """``diagnostics`` with ``severity`` applied, in place."""
    for k, d in enumerate(diagnostics if severity else ()):
        new = severity.get(d.rule) if severity else None
        if new and d.rule != PARSE_RULE:
            diagnostics[k] = replace(d, severity=new)
    return diagnostics


def validate_source(
    source: Source,
    rules: Sequence[Rule],
    *,
    severity: Mapping[str, Severity] | None = None,
    options: Mapping[str, Any] | None = None,
    derived: Derived | None = None,
) -> list[Diagnostic]:
    """Validate a parsed file; text files get line/column positions and suppression comments.
    ``derived``: ``derive(source.message)``, when the caller has it.

    The text is scanned for positions only when there is something to place: a clean file (the
    usual case in a pre-commit hook) costs the parse and the rules alone.
    """
    found = run_rules(source.message, rules, options=options, derived=derived)
    if not found:
        return []
    placed = None
    if source.format == "text" and source.text is not None:
        placed = _locate(source.text, source.message.DESCRIPTOR, [d.field_path for d in found])
    _place_in_file(found, source.path, placed, severity)
    del placed
    _sort_in_file(found)
    return found


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
    binary or JSON by extension; ``-`` for stdin) or binary bytes; ``tpuemb_cfg.validate``
    (:func:`tpuemb_cfg.session.validate`) also takes a ``.py``/``.toml`` spec. A file that
    cannot be read or parsed gives a single ``PARSE001`` error diagnostic instead of an
    exception. Diagnostics of a
    text file carry 1-based line/column; other inputs have ``None``.

    ``select``/``ignore``: rule ids or prefixes (see :func:`selected_rules`); ``show_derived``
    adds the on-request info rules (tag table, derived counts, state variables, sizes);
    ``severity`` overrides default severities by rule id; ``options`` is passed to the rules
    (``memory_budget_bytes`` for SIZE003).
    """
    rules = selected_rules(select, ignore, show_derived=show_derived)
    if isinstance(config_or_path, str | os.PathLike):
        from tpuemb_cfg.formats.io import read_source

        try:
            source = read_source(config_or_path)
        except InputError as exc:
            return [parse_error(exc)]
        except UsageError as exc:  # an extension that names no format
            name = os.fspath(config_or_path)
            return [parse_error(InputError(str(exc).removeprefix(f"{name}: "), path=name))]
        return validate_source(source, rules, severity=severity, options=options)
    from tpuemb_cfg.formats.io import as_config

    try:
        config = as_config(config_or_path)
    except InputError as exc:
        return [parse_error(exc)]
    found = _apply_severity(run_rules(config, rules, options=options), severity)
    return sorted(found, key=sort_key)
