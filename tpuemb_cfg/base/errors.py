"""Exceptions that carry a location a user can act on.

Every error about user input is an :class:`InputError`; its ``str()`` is the one line the CLI prints
(``FILE:LINE:COL: error: ...``) before exiting with status 2. An output that cannot be written is
an :class:`OutputError` (an ``InputError`` naming the output path), also exit status 2.

A message names a library function's parameter as :func:`parameter` marks it: ``str()`` shows
the parameter's name (``workers``), and a caller with its own names for the parameters (the CLI:
``--workers``) shows its spelling instead (:meth:`TpuembError.spelled`).

Values quoted in messages are shortened (:func:`shorten_quoted`): a configuration may hold a
multi-megabyte string, and a message must stay one readable line however large the value is.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Mapping
from typing import Any

#: Messages up to this many characters are left as they are.
SHORT_MESSAGE = 1000
#: In a longer message, quoted values longer than this many characters are shortened.
QUOTE_LIMIT = 64
#: Characters of a shortened value that are kept.
QUOTE_KEEP = 24
#: Unquoted runs without white space longer than this are shortened too.
RUN_LIMIT = 200
#: A message longer than this (after shortening values) is cut in the middle.
MESSAGE_LIMIT = 4000

# Every quoted span, short ones included, so that quotes pair up from the left: the closing quote
# of one value is never taken for the opening quote of a long "value" made of prose.
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_LONG_RUN = re.compile(f"[^\\s'\"]{{{RUN_LIMIT + 1},}}")
# A parameter's name marked inside a message (:func:`parameter`).
_MARK = "\x1f"
_MARKED = re.compile(f"{_MARK}([a-z_][a-z0-9_]*){_MARK}")


def parameter(name: str) -> str:
    """``name``, a parameter of a library function, marked inside an error message: the error's
    ``str()`` shows ``name``, :meth:`TpuembError.spelled` the caller's spelling of it."""
    return f"{_MARK}{name}{_MARK}"


def shown(value: Any, limit: int = 80, *, abbreviate: bool = True, ellipsis: str = "...") -> str:
    """A short ``repr`` of a value a user gave, for a message: containers to a few levels and
    items (never a RecursionError, however deep or self-referring), a huge int by its digits,
    at most ``limit`` characters (the end cut and marked with ``ellipsis``), and the type's name
    where the value's own ``repr`` fails.

    ``abbreviate=False``: the value's whole ``repr``, only its end cut at ``limit`` (for a
    scalar shown as written, :func:`described`). The one value-showing helper of the package:
    ``embedding.pbvalues.show``, ``embedding._checks.show`` and ``sparsecore.checks._show``
    are this function."""
    if abbreviate and isinstance(value, int) and not isinstance(value, bool) \
            and abs(value) >= 10**40:
        digits = len(str(abs(value)))
        return f"{'-' if value < 0 else ''}{str(abs(value))[:6]}... (an int of {digits} digits)"
    try:
        if abbreviate:
            short = reprlib.Repr()  # (keyword arguments only from Python 3.12)
            short.maxlevel, short.maxlist, short.maxtuple, short.maxdict, short.maxset = (
                4, 6, 6, 4, 6)
            short.maxstring = short.maxother = short.maxlong = limit
            text = short.repr(value)
        else:
            text = repr(value)
    except Exception:  # a user's __repr__ that raises (or an int too long to write)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - len(ellipsis)] + ellipsis


def described(value: Any, limit: int = 40) -> str:
    """What ``value`` is, for a message: ``None``, ``a SparseCoreConfig``, ``an int (64)`` - a
    scalar (bool, int, float, str, a NumPy value) with its :func:`shown` ``repr`` of at most
    ``limit`` characters (``sparsecore._args.found``)."""
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    if isinstance(value, bool | int | float | str) or type(value).__module__ == "numpy":
        return f"{article} {name} ({shown(value, limit, abbreviate=False, ellipsis='…')})"
    return f"{article} {name}"


def printable(text: str, keep: str = "", *, json: bool = False) -> str:
    """``text`` as it may be printed on a terminal: every character ``str.isprintable`` refuses
    (C0 controls such as ESC and BEL, DEL, the C1 controls U+0080-U+009F such as the one-byte
    CSI U+009B and OSC U+009D, line breaks, bidirectional overrides and isolates) written as
    Python writes it in a ``repr`` (``\\x1b``, ``\\x9b``, ``\\n``, ``\\u202e``), the rest
    unchanged; the characters in ``keep`` (``"\\n"`` for a text of several lines) are left as
    they are. With ``json``, ``text`` is JSON (``json.dumps``' output) and each such character
    becomes ``\\uXXXX``: the same document, with the true names, safe to show.

    A name in a configuration, a path or an option value is the user's data, not instructions
    to the terminal: a table called ``"\\x1b]0;owned\\x07"`` must not retitle the window or
    hide the lines around it. Every output that shows such text passes it through here: the
    CLI's errors, warnings, notes and progress lines, and every text report (``tpuemb inspect``,
    ``validate``'s text and GitHub formats, ``simulate``, ``plan``); JSON and SARIF keep the
    true names, escaped by ``json`` (and here, with ``json``, for what ``json`` leaves raw).
    """
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable() or char in keep:
            out.append(char)
        elif json:
            units = char.encode("utf-16-be")
            out.extend(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
        else:
            out.append(repr(char)[1:-1])
    return "".join(out)


def printable_json(document: Any, **options: Any) -> str:
    """``json.dumps(document, ensure_ascii=False, **options)`` with what ``json`` leaves raw
    that a terminal could act on (C1 controls, bidirectional overrides) as ``\\uXXXX``
    (:func:`printable`): the true names, safe to show."""
    import json

    text = json.dumps(document, ensure_ascii=False, **options)
    return printable(text, keep="\n", json=True)


def printable_values(value: Any) -> Any:
    """``value`` (a JSON-like summary) with :func:`printable` applied to every string in it,
    keys included."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_values(k): printable_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(printable_values(v) for v in value)
    return value


def shorten_quoted(text: str) -> str:
    """``text`` with every long quoted value (and every very long word) shortened.

    A message of up to :data:`SHORT_MESSAGE` characters is returned unchanged (the common case
    costs a length check). In a longer one, ``name 'aaaa…(5 MB)…'`` becomes
    ``name 'aaaaaaaaaaaaaaaaaaaaaaaa…' (5,000,000 characters)``, and what is still longer than
    :data:`MESSAGE_LIMIT` is cut in the middle.
    """
    if len(text) <= SHORT_MESSAGE:
        return text

    def quoted(match: re.Match[str]) -> str:
        span = match.group(0)
        if len(span) - 2 <= QUOTE_LIMIT:
            return span
        mark = span[0]
        return f"{mark}{span[1:QUOTE_KEEP + 1]}…{mark} ({len(span) - 2:,} characters)"

    def run(match: re.Match[str]) -> str:
        body = match.group(0)
        return f"{body[:QUOTE_KEEP]}… ({len(body):,} characters)"

    text = _LONG_RUN.sub(run, _QUOTED.sub(quoted, text))
    if len(text) > MESSAGE_LIMIT:
        head, tail = MESSAGE_LIMIT * 3 // 4, MESSAGE_LIMIT // 8
        text = f"{text[:head]} … [{len(text) - head - tail:,} characters left out] … {text[-tail:]}"
    return text


class TpuembError(Exception):
    """Base class of every error tpuemb raises on purpose."""

    def __str__(self) -> str:
        return self.spelled({})

    def spelled(self, names: Mapping[str, str]) -> str:
        """The message with each parameter it names (:func:`parameter`) written as ``names``
        spells it; a parameter ``names`` does not hold keeps its own name."""
        return _MARKED.sub(lambda m: names.get(m[1], m[1]), self._text())

    @property
    def parameters(self) -> tuple[str, ...]:
        """The parameters the message names, in order of first mention."""
        return tuple(dict.fromkeys(_MARKED.findall(self._text())))

    def _text(self) -> str:
        return super().__str__()


class InputError(TpuembError):
    """A file, byte string or array that cannot be used, with where and why.

    ``line`` and ``column`` are 1-based positions in a text file; ``offset`` is a byte offset in a
    binary file; ``key`` names an entry of an .npz archive or a JSON/TOML key.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
        offset: int | None = None,
        key: str | None = None,
    ) -> None:
        message = shorten_quoted(message)
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.column = column
        self.offset = offset
        self.key = key

    def location(self) -> str:
        where = self.path if self.path is not None else "<input>"
        if self.line is not None:
            return f"{where}:{self.line}:{self.column if self.column is not None else 1}"
        if self.offset is not None:
            return f"{where}: byte {self.offset}"
        if self.key is not None:
            return f"{where}: key {self.key}"
        return where

    def _text(self) -> str:
        return f"{self.location()}: error: {self.message}"


class OutputError(InputError):
    """An output that cannot be written (missing or read-only folder, full disk, ...).

    ``path`` is the output's path; the message says what the operating system reported and what
    to do. An ``InputError`` subclass so that every caller handling bad files handles it too.
    """


class UsageError(TpuembError):
    """Options that do not fit together or name something that does not exist."""


class NumericalError(TpuembError):
    """A step's numbers left float32's range: an update made a table's parameters infinite or
    NaN, or a synthetic run's activations overflowed. The message names the step, the table (or
    feature) and the cause, usually a learning rate too large; ``parameter`` names the argument
    that supplied it (``learning_rates``, ``learning_rate``, ``schedules``; None when the
    configuration holds it), for the caller to name its own option, ``value`` the learning rate
    and ``table`` the table."""

    def __init__(self, message: str, *, parameter: str | None = None,
                 value: float | None = None, table: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value
        self.table = table
