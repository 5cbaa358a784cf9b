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
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tpuemb_cfg.protoutil import is_repeated

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


class Token(NamedTuple):
    kind: str
    text: str
    line: int
    column: int


def tokenize(text: str) -> tuple[list[Token], dict[int, list[str]]]:
    """Split text into tokens (comments and white space dropped) and comments by line."""
    tokens: list[Token] = []
    append = tokens.append
    comments: dict[int, list[str]] = {}
    line, line_start = 1, 0
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind is None:  # trailing white space
            continue
        if kind == "nl":
            line += 1
            line_start = match.end()
            continue
        value = match.group(kind)
        if kind == "comment":
            comments.setdefault(line, []).append(value[1:])
        else:
            append(Token(kind, value, line, match.end() - len(value) - line_start + 1))
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
    def __init__(self, tokens: list[Token], result: Locations) -> None:
        self.tokens = tokens
        self.pos = 0
        self.result = result

    def peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> Token | None:
        token = self.peek()
        self.pos += 1
        return token

    def record(self, path: str, token: Token) -> None:
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
                self.pos += 1
                return
            if token.text in (",", ";"):
                self.pos += 1
                continue
            self.pos += 1
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
                self.pos += 1
                nxt = self.peek()
            if nxt is not None and nxt.text == "[":
                self.pos += 1
                self.list_value(base, sub, counts, name, token)
                continue
            if nxt is not None and nxt.kind == "ident" and nxt.text.startswith("["):
                # `field: [ENUM_VALUE]`, a one-element list that reads like an extension name
                self.pos += 1
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
                self.pos += 1
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
                self.pos += 1
                return
            if token.text == ",":
                self.pos += 1
                continue
            index = counts.get(name, 0)
            counts[name] = index + 1
            path = f"{base}[{index}]"
            if first:
                self.record(base, name_token)
                first = False
            if token.text in ("{", "<"):
                self.pos += 1
                self.record(path, token)
                self.message(sub, path, "}" if token.text == "{" else ">")
            else:
                self.record(path, token)
                self.scalar()


def scan_locations(text: str, descriptor: Any) -> Locations:
    """Positions of every field occurrence in ``text`` (a message of type ``descriptor``)."""
    tokens, comments = tokenize(text)
    result = Locations(line_comments=comments)
    _Scanner(tokens, result).message(descriptor, "", None)
    return result
