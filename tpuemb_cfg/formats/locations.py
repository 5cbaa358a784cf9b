"""Where each field of a text-format file is: field path -> (line, column).

protobuf's text parser does not keep positions, so this module runs a small tokenizer of its own
over the text (only after protobuf accepted it, so the text is known to be well formed) and records,
for every field occurrence, the 1-based line and column of the field's name. Paths use proto field
names and ``[i]`` for the i-th element of a repeated field within its parent message, e.g.
``table_descriptor[2].optimization_parameters.learning_rate.dynamic.tag``.

It also collects ``#`` comments per line (for ``# tpuemb: disable=ID``) and which field each comment
belongs to (for ``tpuemb fmt``, which keeps comments).

Strings are matched as unrolled loops (``"[^"\\]*(?:\\.[^"\\]*)*"``), not as a repeated
alternation: Python's regex engine keeps a backtracking record per repetition of a group, which for
a 5 MB string literal meant about 700 MB of memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tpuemb_cfg.base.protoutil import is_repeated

_TOKEN = re.compile(
    r"""
    [ \t\r\f\v]*
    (?:
      (?P<nl>\n)
    | (?P<comment>\#[^\n]*)
    | (?P<string>"[^"\\\n]*(?:\\.[^"\\\n]*)*"|'[^'\\\n]*(?:\\.[^'\\\n]*)*')
    | (?P<ident>\[[A-Za-z_][A-Za-z0-9_./]*\]|[A-Za-z_][A-Za-z0-9_.]*)
    | (?P<number>[-+]?(?:\.?[0-9][A-Za-z0-9_.+-]*)|-[A-Za-z]+)
    | (?P<punct>[{}<>:\[\],;])
    )
    """,
    re.VERBOSE,
)


#: ``# tpuemb: disable=ID,...``: silences the findings placed on the comment's line.
DISABLE = re.compile(r"tpuemb:\s*disable\s*=\s*([A-Za-z0-9_,\s]+)")


class Token(NamedTuple):
    kind: str
    text: str
    line: int
    column: int


def iter_tokens(text: str, comments: dict[int, list[str]] | None = None, *, start: int = 0,
                end: int | None = None, line: int = 1, line_start: int = 0) -> Iterator[Token]:
    """The tokens of ``text`` one at a time (comments and white space dropped); the comments go
    into ``comments`` by line when it is given.

    ``start``/``end``: only the tokens of ``text[start:end]``, whose first line is ``line`` of
    ``text`` and begins at offset ``line_start``; lines and columns are then the whole text's.
    """
    for match in _TOKEN.finditer(text, start, len(text) if end is None else end):
        kind = match.lastgroup
        if kind is None:  # trailing white space
            continue
        if kind == "nl":
            line += 1
            line_start = match.end()
            continue
        value = match.group(kind)
        if kind == "comment":
            if comments is not None:
                comments.setdefault(line, []).append(value[1:])
        else:
            yield Token(kind, value, line, match.end() - len(value) - line_start + 1)


def tokenize(text: str) -> tuple[list[Token], dict[int, list[str]]]:
    """Split text into tokens (comments and white space dropped) and comments by line."""
    comments: dict[int, list[str]] = {}
    tokens = list(iter_tokens(text, comments))
    return tokens, comments


@dataclass
class Locations:
    """Field paths of a text file and their positions."""

    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    line_comments: dict[int, list[str]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def get(self, field_path: str) -> tuple[int, int] | None:
        """(line, column) of the field's name, or None when the field is not in the file."""
        return self.positions.get(field_path)

    def nearest(self, field_path: str) -> tuple[int, int]:
        """Position of the field or of its nearest ancestor present in the file; (1, 1) at worst."""
        path = field_path
        while path:
            found = self.positions.get(path)
            if found is not None:
                return found
            path = parent_path(path)
        return (1, 1)

    def path_at_line(self) -> dict[int, str]:
        """The first field path starting on each line."""
        result: dict[int, str] = {}
        for path in self.order:
            line = self.positions[path][0]
            result.setdefault(line, path)
        return result


_INDEX = re.compile(r"\[\d+\]$")


def parent_path(path: str) -> str:
    """``a.b[2].c`` -> ``a.b[2]`` -> ``a.b`` -> ``a`` -> ``""``."""
    if _INDEX.search(path):
        return _INDEX.sub("", path)
    dot = path.rfind(".")
    return path[:dot] if dot >= 0 else ""


class _Scanner:
    """Reads the tokens once, front to back, with one token of lookahead; records the position
    of every field path, or (``wanted``) of those paths only, so that its memory is what it
    records, not the size of the file."""

    def __init__(self, tokens: Iterable[Token], result: Locations,
                 wanted: Mapping[str, str] | None = None) -> None:
        self._tokens = iter(tokens)
        self._next = next(self._tokens, None)
        self.result = result
        self.wanted = wanted

    def peek(self) -> Token | None:
        return self._next

    def take(self) -> Token | None:
        token = self._next
        self._next = next(self._tokens, None)
        return token

    def record(self, path: str, token: Token) -> None:
        if self.wanted is not None:
            shared = self.wanted.get(path)  # the wanted string itself: one copy of each path
            if shared is None:
                return
            path = shared
        if path not in self.result.positions:
            self.result.positions[path] = (token.line, token.column)
            self.result.order.append(path)

    def message(self, descriptor: Any, prefix: str, closer: str | None) -> None:
        counts: dict[str, int] = {}
        while True:
            token = self.peek()
            if token is None:
                return
            if closer is not None and token.text == closer:
                self.take()
                return
            if token.text in (",", ";"):
                self.take()
                continue
            self.take()
            name = token.text
            fdesc = None
            if descriptor is not None and token.kind == "ident":
                fdesc = descriptor.fields_by_name.get(name)
                if fdesc is None and not name.startswith("["):
                    # groups and extensions are not used by these schemas; tolerate anyway
                    lowered = name.lower()
                    fdesc = descriptor.fields_by_name.get(lowered)
            repeated = fdesc is not None and is_repeated(fdesc)
            base = f"{prefix}.{name}" if prefix else name
            sub = fdesc.message_type if fdesc is not None else None
            nxt = self.peek()
            if nxt is not None and nxt.text == ":":
                self.take()
                nxt = self.peek()
            if nxt is not None and nxt.text == "[":
                self.take()
                self.list_value(base, sub, counts, name, token)
                continue
            if nxt is not None and nxt.kind == "ident" and nxt.text.startswith("["):
                # `field: [ENUM_VALUE]`, a one-element list that reads like an extension name
                self.take()
                self.record(base, token)
                index = counts.get(name, 0)
                counts[name] = index + 1
                self.record(f"{base}[{index}]", Token("ident", nxt.text[1:-1], nxt.line,
                                                      nxt.column + 1))
                continue
            path = base
            if repeated:
                index = counts.get(name, 0)
                counts[name] = index + 1
                path = f"{base}[{index}]"
            self.record(path, token)
            if nxt is not None and nxt.text in ("{", "<"):
                self.take()
                self.message(sub, path, "}" if nxt.text == "{" else ">")
            else:
                self.scalar()

    def scalar(self) -> None:
        token = self.take()
        # adjacent string literals concatenate
        while token is not None and token.kind == "string":
            nxt = self.peek()
            if nxt is None or nxt.kind != "string":
                break
            token = self.take()

    def list_value(self, base: str, sub: Any, counts: dict[str, int], name: str,
                   name_token: Token) -> None:
        first = True
        while True:
            token = self.peek()
            if token is None:
                return
            if token.text == "]":
                self.take()
                return
            if token.text == ",":
                self.take()
                continue
            index = counts.get(name, 0)
            counts[name] = index + 1
            path = f"{base}[{index}]"
            if first:
                self.record(base, name_token)
                first = False
            if token.text in ("{", "<"):
                self.take()
                self.record(path, token)
                self.message(sub, path, "}" if token.text == "{" else ">")
            else:
                self.record(path, token)
                self.scalar()


def scan_locations(text: str, descriptor: Any, wanted: Mapping[str, str] | None = None, *,
                   start: int = 0, end: int | None = None, line: int = 1,
                   line_start: int = 0) -> Locations:
    """Positions of every field occurrence in ``text`` (a message of type ``descriptor``), and
    its comments by line.

    ``wanted``: record only these field paths, and no comments (see :func:`wanted_paths`); the
    text is then read as a stream, so a large file costs what is recorded, not a list of its
    tokens. ``start``, ``end``, ``line``, ``line_start`` (with ``wanted``): read only
    ``text[start:end]`` as a message of its own, with the whole text's lines and columns (see
    :func:`iter_tokens`).
    """
    if wanted is not None:
        result = Locations()
        stream = iter_tokens(text, start=start, end=end, line=line, line_start=line_start)
        _Scanner(stream, result, wanted).message(descriptor, "", None)
        return result
    tokens, comments = tokenize(text)
    result = Locations(line_comments=comments)
    _Scanner(tokens, result).message(descriptor, "", None)
    return result


def wanted_paths(field_paths: Iterable[str]) -> dict[str, str]:
    """What :meth:`Locations.nearest` and a repeated field's first element may look up for
    ``field_paths``: each path, its ``[0]`` element and every ancestor (each mapped to itself,
    so that what is recorded shares the string)."""
    wanted: dict[str, str] = {}
    for path in field_paths:
        first = f"{path}[0]"
        wanted.setdefault(first, first)
        while path and path not in wanted:
            wanted[path] = path
            path = parent_path(path)
    return wanted
