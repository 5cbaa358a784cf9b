"""Limits on what tpuemb reads: input size and message nesting, with errors that say how to raise
or respect them.

- **Size.** One input is read in bounded chunks and refused beyond :func:`max_input_bytes`
  (default :data:`DEFAULT_MAX_INPUT`, 256 MiB; environment variable ``TPUEMB_MAX_INPUT`` with a
  size such as ``1G``; ``max_bytes=`` in :func:`tpuemb_cfg.load`). ``/dev/urandom`` or an endless
  pipe stops at the limit instead of filling memory; a too-large regular file is refused from its
  size, before anything is read. The error suggests a value that would admit the file.
- **Nesting.** Messages may nest at most :data:`MAX_DEPTH` levels below the top-level message:
  protobuf reads back at most 100 levels counting the top level in binary and text, and its JSON
  parser one fewer, on upb and the pure-Python runtime alike, so 99 is the deepest depth that
  round-trips in every format. Deeper text or JSON is refused at the line and column of the
  bracket that crosses the limit (a pre-scan, before protobuf's recursive parsers could exhaust
  the stack), deeper binary at the byte offset of the field
  (:func:`tpuemb_cfg.formats.io.check_wire`), and :func:`too_deep_path` lets writers refuse a
  deeper message built in code.

- **Memory.** A simulation refuses to start when its estimate exceeds the memory limit: the one
  given (``--max-memory``, ``max_memory=``), else :data:`MEMORY_SHARE` of the memory available
  (:func:`default_memory_limit`, from ``MemAvailable`` of ``/proc/meminfo``); the refusal
  suggests a limit that would admit the run (:func:`suggest_memory`).

Sizes are read by :func:`tpuemb_cfg.base.units.parse_size` and shown by
:func:`tpuemb_cfg.base.units.format_size`, the one grammar of every option that takes a size.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.base.protoutil import is_repeated
from tpuemb_cfg.base.units import format_size as format_size  # re-exported beside the limits
from tpuemb_cfg.base.units import parse_size

#: Messages may nest this many levels below the top-level message (see the module docstring).
MAX_DEPTH = 99
#: Inputs larger than this are refused unless TPUEMB_MAX_INPUT says otherwise.
DEFAULT_MAX_INPUT = 256 * 2**20
MAX_INPUT_ENV = "TPUEMB_MAX_INPUT"
_CHUNK = 2**20


# --------------------------------------------------------------------------------------------
# Sizes


def suggest_size(size: int) -> str:
    """A round size at least ``size`` to suggest as a limit: the next power of two of MiB."""
    mib = 1
    while mib * 2**20 < size:
        mib *= 2
    return f"{mib // 1024}G" if mib >= 1024 else f"{mib}M"


def max_input_bytes() -> int:
    """The input size limit: ``TPUEMB_MAX_INPUT`` when set, else :data:`DEFAULT_MAX_INPUT`."""
    value = os.environ.get(MAX_INPUT_ENV)
    if not value:
        return DEFAULT_MAX_INPUT
    try:
        return parse_size(value)
    except ValueError as exc:
        raise UsageError(f"{MAX_INPUT_ENV}={value!r}: {exc}") from None


def too_large(path: str, limit: int, size: int | None, *, subject: str = "the file",
              what: str = "a configuration") -> InputError:
    """The error for an input over ``limit``: of ``size`` bytes, or (None) one that goes on."""
    if size is not None:
        return InputError(
            f"{subject} has {size:,} bytes, more than the input limit of {format_size(limit)}; "
            f"if it really is {what}, raise the limit: "
            f"{MAX_INPUT_ENV}={suggest_size(size)}",
            path=path)
    return InputError(
        f"stopped reading after {format_size(limit)} (the input limit) and the input goes on; "
        f"if it really is {what}, raise the limit: "
        f"{MAX_INPUT_ENV}={suggest_size(limit * 2)}",
        path=path)


def read_limited(handle: Any, path: str, limit: int, start: bytes = b"", *,
                 what: str = "a configuration") -> bytes:
    """Read ``handle`` to its end in chunks, refusing to hold more than ``limit`` bytes
    (``start``: bytes already read from it; ``what``: what the input is, for the refusal)."""
    chunks = bytearray(start)
    while True:
        chunk = handle.read(min(_CHUNK, limit + 1 - len(chunks)))
        if not chunk:
            return bytes(chunks)
        chunks += chunk
        if len(chunks) > limit:
            raise too_large(path, limit, None, what=what)


def read_input(path: str, limit: int | None = None, *, what: str = "a configuration") -> bytes:
    """The bytes of file ``path`` (``-``: standard input), at most ``limit`` of them (a pipe or
    a device is read in chunks up to the limit); ``what``: what the input is, for errors."""
    limit = max_input_bytes() if limit is None else limit
    if path == "-":
        return read_limited(sys.stdin.buffer, "<stdin>", limit, what=what)
    with read_errors(path, f"{what} file"), open(path, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return read_limited(handle, path, limit, what=what)
        if info.st_size > limit:
            raise too_large(path, limit, info.st_size, what=what)
        data = handle.read(info.st_size + 1)  # one allocation of the right size
        if len(data) > info.st_size:  # it grows while being read
            return read_limited(handle, path, limit, data, what=what)
        return bytes(data)


@contextmanager
def read_errors(path: str, expected: str, missing: str = "no such file") -> Iterator[None]:
    """Turn an ``OSError`` of reading input ``path`` into an ``InputError`` naming it: ``missing``
    for a file that is not there, "is a directory, expected ``expected``", else the system's
    reason."""
    try:
        yield
    except FileNotFoundError:
        raise InputError(missing, path=path) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, expected {expected}", path=path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(
                "is a loop of symbolic links (following them never reaches a file); point the "
                "link at a real file", path=path) from None
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None


# --------------------------------------------------------------------------------------------
# Memory

#: Without an explicit limit, a run may plan to use this share of the memory available.
MEMORY_SHARE = 0.8


def available_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes of memory available to a new process (``MemAvailable`` of ``/proc/meminfo``; where
    there is none, the free pages ``sysconf`` reports), or None where neither can be read."""
    try:
        with open(meminfo, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if meminfo != "/proc/meminfo":
        return None
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def total_memory() -> int | None:
    """Bytes of physical memory of this machine (``sysconf``), or None where it cannot be read."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def default_memory_limit() -> int | None:
    """The limit of a run given none: :data:`MEMORY_SHARE` of :func:`available_memory` (None,
    no limit, where the available memory cannot be known)."""
    available = available_memory()
    return None if available is None else int(available * MEMORY_SHARE)


def suggest_memory(needed: int) -> str:
    """A ``--max-memory`` value that admits ``needed`` bytes with 10% to spare (the estimate's
    margin): :func:`suggest_size` of 10% more, in ``T`` from 1024G on."""
    size = suggest_size(needed + needed // 10 + 1)
    if size.endswith("G") and int(size[:-1]) >= 1024:
        return f"{int(size[:-1]) // 1024}T"
    return size


# --------------------------------------------------------------------------------------------
# Nesting

# Strings, comments and brackets: all the nesting pre-scan needs to look at. Strings are written
# as unrolled loops, so a multi-megabyte string costs no backtracking memory.
_TEXT_NESTING = re.compile(
    r""""[^"\\\n]*(?:\\.[^"\\\n]*)*"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'|#[^\n]*|[{}<>]"""
)
_JSON_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]]')


def too_deep(path: str | None, *, line: int | None = None, column: int | None = None,
             offset: int | None = None) -> InputError:
    """The error for input nested deeper than MAX_DEPTH."""
    return InputError(
        f"nested more than {MAX_DEPTH} messages deep: protobuf reads at most {MAX_DEPTH} "
        "levels below the top-level message, so neither TensorFlow nor tpuemb could load this; "
        "flatten the nesting",
        path=path, line=line, column=column, offset=offset)


def line_col(text: str, index: int) -> tuple[int, int]:
    """1-based (line, column) of ``text[index]``."""
    line = text.count("\n", 0, index) + 1
    start = text.rfind("\n", 0, index) + 1
    return line, index - start + 1


def _first_too_deep(text: str, nesting: re.Pattern[str], brackets: str,
                    limit: int) -> int | None:
    """The index in ``text`` of the first opener (``brackets`` is opener and closer pairs, as
    ``nesting`` finds them outside strings and comments) more than ``limit`` levels deep, or
    None; a pre-scan before a recursive parser could exhaust the stack."""
    opens, closes = brackets[0::2], brackets[1::2]
    if sum(text.count(c) for c in opens) <= limit:
        return None
    depth = 0
    for match in nesting.finditer(text):
        char = match.group()
        if char in opens:
            depth += 1
            if depth > limit:
                return match.start()
        elif char in closes:
            depth = max(depth - 1, 0)
    return None


def check_text_depth(text: str, path: str) -> None:
    """Raise InputError at the first ``{``/``<`` of protobuf text that opens a message deeper
    than MAX_DEPTH."""
    at = _first_too_deep(text, _TEXT_NESTING, "{}<>", MAX_DEPTH)
    if at is not None:
        line, column = line_col(text, at)
        raise too_deep(path, line=line, column=column)


def json_too_deep(text: str, limit: int) -> int | None:
    """The index in JSON ``text`` of the first ``{`` or ``[`` that opens a container more than
    ``limit`` levels deep (objects and arrays alike), or None."""
    return _first_too_deep(text, _JSON_NESTING, "{}[]", limit)
    depth = 0
    for match in _JSON_NESTING.finditer(text):
        char = match.group()
        if char in ("{", "["):
            depth += 1
            if depth > limit:
                return match.start()
        elif char in ("}", "]"):
            depth -= 1
    return None


def check_json_depth(text: str, path: str) -> None:
    """Raise InputError where JSON nests objects (messages) deeper than MAX_DEPTH, or arrays
    deeper than any message of that depth needs."""
    if text.count("{") + text.count("[") <= MAX_DEPTH:
        return
    objects = containers = 0
    for match in _JSON_NESTING.finditer(text):
        char = match.group()
        if char == "{":
            objects += 1
            containers += 1
        elif char == "[":
            containers += 1
        elif char == "}":
            objects -= 1
            containers -= 1
        elif char == "]":
            containers -= 1
        else:
            continue
        if objects > MAX_DEPTH + 1 or containers > 2 * MAX_DEPTH + 2:
            line, column = line_col(text, match.start())
            raise too_deep(path, line=line, column=column)


_MESSAGE_TYPES = (10, 11)  # FieldDescriptor.TYPE_GROUP, TYPE_MESSAGE
_STATIC_DEPTH: dict[str, int | None] = {}


def _static_depth(desc: Any, visiting: frozenset[str] = frozenset()) -> int | None:
    """Levels of messages a ``desc`` message can hold below itself; None when it can recurse."""
    full = desc.full_name
    if full in _STATIC_DEPTH:
        return _STATIC_DEPTH[full]
    if full in visiting:
        return None
    deepest: int | None = 0
    for field in desc.fields:
        if field.type not in _MESSAGE_TYPES:
            continue
        below = _static_depth(field.message_type, visiting | {full})
        if below is None:
            deepest = None
            break
        deepest = max(deepest or 0, below + 1)
    _STATIC_DEPTH[full] = deepest
    return deepest


def too_deep_path(message: Any, depth: int = 0, prefix: str = "") -> str | None:
    """The field path of a message nested deeper than MAX_DEPTH in ``message``, or None.

    Only fields whose type can recurse (or reach deep enough) are visited, so a large
    configuration costs a few calls per table.
    """
    for field, value in message.ListFields():
        if field.type not in _MESSAGE_TYPES:
            continue
        below = _static_depth(field.message_type)
        if below is not None and depth + 1 + below <= MAX_DEPTH:
            continue
        path = f"{prefix}.{field.name}" if prefix else field.name
        items = enumerate(value) if is_repeated(field) else [(-1, value)]
        for index, item in items:
            where = f"{path}[{index}]" if index >= 0 else path
            if depth + 1 > MAX_DEPTH:
                return where
            found = too_deep_path(item, depth + 1, where)
            if found is not None:
                return found
    return None
