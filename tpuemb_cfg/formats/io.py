"""Reading and writing configurations in text (pbtxt), binary and JSON form.

Everything that reads user input goes through :func:`read_source`, which turns every kind of bad
input into one :class:`~tpuemb_cfg.base.errors.InputError` with a location: line and column for
text and JSON, a byte offset for binary. Everything that writes goes through
:func:`atomic_write_bytes` (:mod:`tpuemb_cfg.formats.atomic`), so an interrupted run never leaves a
half-written file behind.

Two limits (:mod:`tpuemb_cfg.formats.limits`) keep hostile or mistaken input from exhausting memory
or the stack: an input size cap (default 256 MiB, ``TPUEMB_MAX_INPUT``), read in bounded chunks, and
a nesting limit (99 levels below the top-level message, the deepest every protobuf runtime reads
back in every format): deeper input is a parse error at its line and column or byte offset, and
:func:`serialize` refuses to write a deeper message, so nothing tpuemb writes is unreadable.
A file that fails to parse gets a hint when it looks like another format (binary given as text)
or another message (a ``SimulationSpec`` given as a configuration).

Output is byte-identical to what TensorFlow-side tooling writes with protobuf's defaults:
``SerializeToString()``, ``text_format.MessageToString(m)`` and
``json_format.MessageToJson(m, preserving_proto_field_name=True)``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from google.protobuf import descriptor as _descriptor
from google.protobuf import json_format, text_format
from google.protobuf.message import DecodeError, Message

from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.base.protoutil import is_repeated
from tpuemb_cfg.formats import atomic
from tpuemb_cfg.formats.limits import (
    MAX_DEPTH,
    check_json_depth,
    check_text_depth,
    line_col,
    read_input,
    too_deep,
    too_deep_path,
)
from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

Format = Literal["text", "binary", "json"]

TEXT_SUFFIXES = (".pbtxt", ".textproto", ".txtpb", ".txt", ".prototxt")
BINARY_SUFFIXES = (".pb", ".binpb", ".bin")
JSON_SUFFIXES = (".json",)
FORMAT_ALIASES: dict[str, Format] = {
    "text": "text",
    "pbtxt": "text",
    "textproto": "text",
    "binary": "binary",
    "bin": "binary",
    "binpb": "binary",
    "pb": "binary",
    "json": "json",
}

_FD = _descriptor.FieldDescriptor


def normalize_format(name: str) -> Format:
    """Map a user-given format name (``text``, ``pbtxt``, ``binary``, ``json`` ...) to a Format."""
    try:
        return FORMAT_ALIASES[name.lower()]
    except KeyError:
        raise UsageError(
            f"unknown format {name!r}: expected one of text, binary, json"
        ) from None


def _pass(option: str, fmt: str) -> str:
    """How to say "choose format ``fmt``" with ``option`` (``--from``, or ``format=``)."""
    return f"{option}{fmt!r}" if option.endswith("=") else f"{option} {fmt}"


_EXTENSIONS = ".pbtxt/.textproto/.txtpb (text), .pb/.binpb/.bin (binary), .json (JSON)"


def detect_format(path: str | os.PathLike[str], option: str | None = None, *,
                  output: bool = False) -> Format:
    """The format a file name implies; ``-`` (stdin/stdout) is text.

    ``option`` names the way the caller can give the format instead (``--from``, ``--to``,
    ``format=``); when it is None the message only suggests renaming. ``output``: the path is
    one to write (the message then speaks of writing).
    """
    name = os.fspath(path)
    if name == "-":
        return "text"
    lower = name.lower()
    if lower.endswith(TEXT_SUFFIXES):
        return "text"
    if lower.endswith(BINARY_SUFFIXES):
        return "binary"
    if lower.endswith(JSON_SUFFIXES):
        return "json"
    what = "the format to write" if output else "the format"
    found = os.path.splitext(name)[1] or "no extension"
    sniffed = None if output else _sniff(name)
    if not output and lower.endswith((".py", ".toml")):
        stem = os.path.splitext(name)[0]
        raise UsageError(
            f"{name}: a {found} file is a spec (the input of tpuemb compile), not a configuration: "
            f"compile it first (tpuemb compile {name} -o {stem}.pbtxt); tpuemb validate, inspect "
            "and simulate take specs as they are")
    if sniffed is None:
        advice = f"name the file with one of the extensions {_EXTENSIONS}"
        if option:
            advice += f", or pass {_pass(option, 'text|binary|json')}"
    else:
        stem = os.path.splitext(name)[0]
        advice = (f"its content looks like {sniffed}: name it {stem}{_SUFFIX_OF[sniffed]} "
                  f"(extensions: {_EXTENSIONS})")
        if option:
            advice += f", or pass {_pass(option, sniffed.lower())}"
    raise UsageError(f"{name}: cannot tell {what} from the file name ({found}); {advice}")


_SUFFIX_OF: dict[str, str] = {"text": ".pbtxt", "binary": ".binpb", "JSON": ".json"}


def _sniff(path: str) -> str | None:
    """What the first KiB of a file looks like (``text``, ``binary``, ``JSON``), if readable."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(1024)
    except OSError:
        return None
    if not head:
        return None
    if _looks_binary(head):
        return "binary"
    sample = head.decode("utf-8", errors="ignore")  # only a character cut at the end is lost
    return "JSON" if sample.lstrip("\ufeff \t\r\n").startswith("{") else "text"


@dataclass
class Source:
    """A parsed input file: where it came from, its raw bytes and the message."""

    path: str
    format: Format
    data: bytes
    text: str | None
    message: Any


# --------------------------------------------------------------------------------------------
# Reading


_PB_LOCATION = re.compile(r"^\s*(\d+):(\d+)\s*:\s*")
def parse_text(text: str, message: Message, path: str) -> None:
    """Parse protobuf text format into ``message``; errors carry the parser's line and column."""
    check_text_depth(text, path)
    try:
        # text_format.Parse would split the text into a list of every line first (for a large
        # file, more memory than the file and its message together); the lines one at a time
        # are parsed identically.
        text_format.ParseLines(_lines(text), message)  # type: ignore[attr-defined]
    except text_format.ParseError as exc:
        detail = _explain(_PB_LOCATION.sub("", str(exc)))
        line = exc.GetLine() if exc.GetLine() is not None else None
        column = exc.GetColumn() if exc.GetColumn() is not None else None
        if line is not None and "should not have multiple" in detail:
            # protobuf points after the repeated value; point at the field name instead
            source_line = text.split("\n")[line - 1]
            column = len(source_line) - len(source_line.lstrip()) + 1
        raise InputError(_tidy(detail), path=path, line=line, column=column) from None
    except (ValueError, TypeError) as exc:  # e.g. out-of-range values caught by the runtime
        raise InputError(_tidy(str(exc)), path=path, line=1, column=1) from None


def _lines(text: str) -> Iterator[str]:
    """``text.split("\\n")``, one line at a time."""
    start = 0
    while True:
        end = text.find("\n", start)
        if end < 0:
            yield text[start:]
            return
        yield text[start:end]
        start = end + 1


def _tidy(message: str) -> str:
    """Drop the internal proto package from protobuf's messages: users know TensorFlow's names.

    Also folds protobuf's multi-line messages into one line.
    """
    message = message.replace("tpuemb_cfg.proto.xla.", "").replace("tpuemb_cfg.proto.", "")
    return " ".join(message.split())


_INT_RANGES = {
    "int32": "-2147483648..2147483647",
    "int64": "-9223372036854775808..9223372036854775807",
}


def _explain(detail: str) -> str:
    """Add what was expected to protobuf's terse text-format messages."""
    enum = re.search(r'Enum type "([\w.]+)" has no value (?:named|with number) (\S+?)\.?$', detail)
    if enum:
        from google.protobuf import descriptor_pool

        try:
            full = enum[1] if enum[1].startswith("tpuemb_cfg.") else "tpuemb_cfg.proto." + enum[1]
            found = descriptor_pool.Default().FindEnumTypeByName(full)
            names = ", ".join(v.name for v in found.values)
            detail += f" Expected one of: {names} (or an enum number)."
        except KeyError:
            pass
    elif "out of range" in detail.lower():
        detail += (f". int32 fields hold {_INT_RANGES['int32']}, int64 fields (vocabulary_size) "
                   f"{_INT_RANGES['int64']}.")
    return detail


def _float32_max_fix(value: Any) -> Any:
    # float32 max prints as 3.4028235e+38, which as a double is a hair above float32 max and is
    # rejected by protobuf's JSON parser although it is the shortest spelling of that float.
    if isinstance(value, float) and 3.4028234663852886e38 < abs(value) <= 3.4028235677973366e38:
        return 3.4028234663852886e38 if value > 0 else -3.4028234663852886e38
    return value


def _fix_json_floats(node: Any, desc: Any) -> None:
    """Snap float32-max spellings in float fields to the exact float32 max (see above)."""
    if not isinstance(node, dict):
        return
    by_name: dict[str, Any] = {}
    for field in desc.fields:
        by_name[field.name] = field
        by_name[field.json_name] = field
    for key, value in list(node.items()):
        field = by_name.get(key)
        if field is None:
            continue
        if field.type == _FD.TYPE_FLOAT:
            if isinstance(value, list):
                node[key] = [_float32_max_fix(v) for v in value]
            else:
                node[key] = _float32_max_fix(value)
        elif field.type == _FD.TYPE_MESSAGE:
            sub = field.message_type
            if sub.full_name == "google.protobuf.FloatValue":
                node[key] = _float32_max_fix(value)
            elif isinstance(value, list):
                for item in value:
                    _fix_json_floats(item, sub)
            else:
                _fix_json_floats(value, sub)


def _json_key_location(text: str, names: list[str]) -> tuple[int, int]:
    for name in names:
        match = re.search(r'"' + re.escape(name) + r'"\s*:', text)
        if match:
            return line_col(text, match.start())
    return 1, 1


def parse_json(text: str, message: Message, path: str) -> None:
    """Parse protobuf JSON into ``message``; syntax and schema errors carry a line and column."""
    check_json_depth(text, path)
    try:
        tree = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise _duplicate_key_error(text, path, exc.key) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path=path, line=exc.lineno,
                         column=exc.colno) from None
    except ValueError:  # an integer too long for Python to convert (over 4,300 digits)
        match = re.search(r"\d{4301,}", text)
        line, column = line_col(text, match.start()) if match else (1, 1)
        digits = len(match.group()) if match else 0
        raise InputError(
            f"a number with {digits:,} digits; the widest integer field (int64) holds 19 digits",
            path=path, line=line, column=column) from None
    if not isinstance(tree, dict):
        found = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(tree), "a number")
        line, column = line_col(text, len(text) - len(text.lstrip()))
        raise InputError(
            f"expected a JSON object {{...}} holding the {message.DESCRIPTOR.name}, found "
            f"{found}", path=path, line=line, column=column)
    _fix_json_floats(tree, message.DESCRIPTOR)
    try:
        json_format.ParseDict(tree, message)
    except json_format.ParseError as exc:
        detail = _tidy(str(exc))
        names = re.findall(r'field named "([^"]+)"', detail)
        names += re.findall(r"parse (\w+) field", detail)
        names += re.findall(r'"(\w+)"', detail)
        line, column = _json_key_location(text, names)
        raise InputError(detail, path=path, line=line, column=column) from None
    except (OverflowError, ValueError) as exc:  # protobuf's int() of an infinite number
        raise _infinite_number(text, path, exc) from None


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: a key given twice in one object is an error, as in
    protobuf's own JSON reader (Python's ``json`` would keep the last value silently)."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return result


# JSON tokens that matter for finding a repeated key: strings, brackets and colons.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:]')


def _duplicate_key_error(text: str, path: str, key: str) -> InputError:
    """The error for ``key`` given twice in one JSON object, at its second occurrence."""
    objects: list[dict[str, int] | None] = []  # per open bracket: keys seen -> offset, or None
    pending: tuple[str, int] | None = None  # the last string, which a colon makes a key
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in ("{", "["):
            objects.append({} if token == "{" else None)
        elif token in ("}", "]"):
            if objects:
                objects.pop()
        elif token == ":":
            keys = objects[-1] if objects else None
            if pending is not None and keys is not None:
                name, at = pending
                if name in keys:
                    line, column = line_col(text, at)
                    first = line_col(text, keys[name])
                    return InputError(
                        f"key {json.dumps(name)} is given twice in one object (first at "
                        f"{first[0]}:{first[1]}); protobuf's own JSON reader (TensorFlow's) "
                        "refuses this - keep one of them",
                        path=path, line=line, column=column)
                keys[name] = at
        else:
            pending = (json.loads(token), match.start()) if token.startswith('"') else None
            continue
        pending = None
    return InputError(f"key {json.dumps(key)} is given twice in one object; keep one",
                      path=path, line=1, column=1)


# A JSON string (skipped), or a number that may not be finite as a float (group 1).
_NUMBER_OR_STRING = re.compile(r'"(?:\\.|[^"\\])*"|(-?Infinity|NaN|-?\d+(?:\.\d+)?[eE][+-]?\d+)')


def _infinite_number(text: str, path: str | None, exc: Exception) -> InputError:
    """The error for a JSON number no integer or enum field can hold (``1e99999`` is infinite
    once read as a float), at the first such number of ``text`` outside strings (a quoted
    ``"Infinity"`` is a float field's valid value)."""
    for match in _NUMBER_OR_STRING.finditer(text):
        number = match.group(1)
        if number is None:  # a string
            continue
        value = float(number)
        if not math.isfinite(value):
            line, column = line_col(text, match.start())
            what = "not a number" if math.isnan(value) else "infinite"
            return InputError(
                f"number {number[:40]} is {what} as a float; an integer or enum field "
                "takes a whole number (int64 at most), a float field a finite one or \"Infinity\"",
                path=path, line=line, column=column)
    return InputError(f"a number no field can hold ({exc})", path=path, line=1, column=1)


def _read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise InputError("truncated varint", offset=start)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise InputError("varint longer than 10 bytes", offset=start)


_WIRE_NAMES = {0: "varint", 1: "64-bit", 2: "length-delimited", 5: "32-bit"}
_SCALAR_WIRE = {
    _FD.TYPE_DOUBLE: 1, _FD.TYPE_FIXED64: 1, _FD.TYPE_SFIXED64: 1,
    _FD.TYPE_FLOAT: 5, _FD.TYPE_FIXED32: 5, _FD.TYPE_SFIXED32: 5,
    _FD.TYPE_STRING: 2, _FD.TYPE_BYTES: 2, _FD.TYPE_MESSAGE: 2, _FD.TYPE_GROUP: 3,
}


def check_wire(data: bytes, desc: Any, pos: int = 0,
               end: int | None = None, depth: int = 0) -> int:
    """Walk protobuf wire data against a descriptor; raise InputError at the first bad byte.

    Stricter than protobuf's own parser in one respect: a known field carrying the wrong wire type
    is an error (protobuf would keep it as an unknown field), which is what random or corrupted
    files almost always produce. A message nested deeper than MAX_DEPTH is an error too.
    Returns the number of known fields found at this level.
    """
    end = len(data) if end is None else end
    known = 0
    while pos < end:
        key_at = pos
        key, pos = _read_varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise InputError("field number 0 is not valid", offset=key_at)
        if wire not in _WIRE_NAMES:
            raise InputError(f"invalid wire type {wire} (field {number}): not a {desc.name} in "
                             "binary form, or a corrupted file", offset=key_at)
        value_at = pos
        if wire == 0:
            _, pos = _read_varint(data, pos, end)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            length, pos = _read_varint(data, pos, end)
            value_at = pos
            pos += length
        if pos > end:
            raise InputError(
                f"field {number} runs past the end of its message (truncated file?)",
                offset=key_at)
        field = desc.fields_by_number.get(number)
        if field is None:
            continue
        known += 1
        expected = _SCALAR_WIRE.get(field.type, 0)
        packed_ok = is_repeated(field) and expected != 2 and wire == 2
        if wire != expected and not packed_ok:
            raise InputError(
                f"field {field.name} (number {number}) has wire type {_WIRE_NAMES[wire]}, "
                f"expected {_WIRE_NAMES.get(expected, expected)}: not a "
                f"{desc.name} or a corrupted file",
                offset=key_at)
        if field.type == _FD.TYPE_MESSAGE:
            if depth >= MAX_DEPTH:
                raise too_deep("<input>", offset=key_at)
            check_wire(data, field.message_type, value_at, pos, depth + 1)
        elif field.type == _FD.TYPE_STRING:
            try:
                data[value_at:pos].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"field {field.name} is not valid UTF-8",
                                 offset=value_at + exc.start) from None
    return known


def parse_binary(data: bytes, message: Message, path: str) -> None:
    """Parse protobuf wire data; a truncated, random or foreign file is an error with an offset."""
    try:
        known = check_wire(data, message.DESCRIPTOR)
    except InputError as exc:
        exc.path = path
        raise
    if data and not known:
        raise InputError(
            f"no field of {message.DESCRIPTOR.name} found in {len(data)} bytes: not a "
            f"{message.DESCRIPTOR.name} in binary form (wrong file or format?)",
            path=path, offset=0)
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise InputError(f"cannot decode binary protobuf: {exc}", path=path, offset=0) from None


def parse_bytes(data: bytes, fmt: Format, message: Message, path: str, *,
                option: str | None = None, explicit: bool = False) -> str | None:
    """Parse ``data`` in format ``fmt`` into ``message``; return the decoded text, if any.

    ``option`` (``--from``, ``format=``) and ``explicit`` (the format was given rather than
    taken from the extension) shape the hint added when the bytes look like another format or
    another message type.
    """
    try:
        return _parse_bytes(data, fmt, message, path)
    except InputError as exc:
        hint = _hint(data, fmt, type(message), path, option, explicit)
        if hint:
            exc.message = exc.message.rstrip(".") + hint
        raise
    except RecursionError:  # a last line of defence: the depth checks run first
        raise too_deep(path) from None
    except (ValueError, TypeError, OverflowError) as exc:  # the runtime's own checks, unforeseen
        raise InputError(f"cannot read as {fmt}: {_tidy(str(exc))}", path=path) from None
    except MemoryError:
        raise InputError(
            f"not enough memory to parse {len(data):,} bytes of {fmt}; free memory or split "
            "the configuration", path=path) from None


def _parse_bytes(data: bytes, fmt: Format, message: Message, path: str) -> str | None:
    if fmt == "binary":
        parse_binary(data, message, path)
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot appear in text",
            path=path, offset=exc.start) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if fmt == "text":
        parse_text(text, message, path)
    else:
        parse_json(text, message, path)
    return text


# Other messages a file given as one may really be: (module, class, how to describe it).
_LOOKALIKES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "tpuemb_cfg.proto.TPUEmbeddingConfiguration": (
        ("tpuemb_cfg.proto.simulation_pb2", "SimulationSpec",
         "a SimulationSpec (the --spec file of `tpuemb simulate`)"),
    ),
    "tpuemb_cfg.proto.SimulationSpec": (
        ("tpuemb_cfg.proto.tpu_embedding_configuration_pb2", "TPUEmbeddingConfiguration",
         "a TPUEmbeddingConfiguration (the CONFIG argument of `tpuemb simulate`)"),
    ),
}


def _parses_as(data: bytes, fmt: Format, message_type: type[Message]) -> bool:
    """Whether ``data`` is a non-empty ``message_type`` in format ``fmt``."""
    candidate = message_type()
    try:
        _parse_bytes(data, fmt, candidate, "<probe>")
    except (InputError, RecursionError):
        return False
    return bool(candidate.ListFields())


def _looks_binary(data: bytes) -> bool:
    return any(byte < 0x20 and byte not in b"\t\n\r\f\v" for byte in data[:4096]) or (
        _not_utf8(data[:4096]))


def _not_utf8(sample: bytes) -> bool:
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(sample) - 4
    return False


def _hint(data: bytes, fmt: Format, message_type: type[Message], path: str, option: str | None,
          explicit: bool) -> str:
    """What the bytes look like when they failed to parse as ``fmt``: a hint, or ``""``."""
    name: str = message_type.DESCRIPTOR.name
    if fmt != "binary" and _looks_binary(data) and _parses_as(data, "binary", message_type):
        return "; the file looks like a binary " + name + _choose("binary", path, option, explicit)
    if fmt == "binary" and not _looks_binary(data):
        for other in ("text", "json"):
            if _parses_as(data, other, message_type):
                return (f"; the file looks like {name} in {other} format"
                        + _choose(other, path, option, explicit))
    for module_name, class_name, description in _LOOKALIKES.get(
            message_type.DESCRIPTOR.full_name, ()):
        import importlib

        other_type = getattr(importlib.import_module(module_name), class_name)
        if _parses_as(data, fmt, other_type):
            return f"; the file looks like {description}, not a {name}"
    if fmt != "binary" and _looks_binary(data):
        return "; if it is binary protobuf," + _choose("binary", path, option, explicit)[1:]
    return ""


def _choose(fmt: str, path: str, option: str | None, explicit: bool) -> str:
    """``: pass --from binary`` / ``: name it x.binpb`` - how to read the file as ``fmt``."""
    suffix = {"binary": ".binpb", "text": ".pbtxt", "json": ".json"}[fmt]
    if option and explicit:
        return f": pass {_pass(option, fmt)} instead"
    rename = f"name it {os.path.splitext(os.path.basename(path))[0]}{suffix}"
    if path in ("<stdin>", "<bytes>", "<probe>"):
        if option:
            return f": pass {_pass(option, fmt)}"
        if path == "<stdin>":
            return (f": standard input is read as text; save it as a {suffix} file and pass "
                    "its name")
        return ""
    if option:
        return f": {rename} or pass {_pass(option, fmt)}"
    return f": {rename} (the extension decides the format)"


def read_source(path: str | os.PathLike[str], format: str | None = None, *,
                message_type: type[Message] = TPUEmbeddingConfiguration,
                format_option: str | None = None, max_bytes: int | None = None) -> Source:
    """Read and parse one file (``-`` for stdin).

    ``format_option``: how the caller lets the user choose the input format (``--from``), named
    in hints; None when there is no such option. ``max_bytes``: the size limit (default
    :func:`max_input_bytes`).
    """
    name = os.fspath(path)
    if name != "-" and not os.path.lexists(name):
        raise InputError("no such file", path=name)
    if name != "-" and os.path.isdir(name):
        raise InputError(
            "is a directory, expected a configuration file; name the files in it instead "
            f"(e.g. {os.path.join(name, '*.pbtxt')})", path=name)
    fmt = normalize_format(format) if format else detect_format(name, format_option)
    data = read_input(name, max_bytes)
    message = message_type()
    shown = "<stdin>" if name == "-" else name
    text = parse_bytes(data, fmt, message, shown, option=format_option, explicit=bool(format))
    return Source(path=shown, format=fmt, data=data, text=text, message=message)


_M = TypeVar("_M", bound=Message)


@overload
def load(path_or_bytes: str | os.PathLike[str] | bytes, format: str | None = None, *,
         max_bytes: int | None = None) -> TPUEmbeddingConfiguration: ...


@overload
def load(path_or_bytes: str | os.PathLike[str] | bytes, format: str | None = None, *,
         message_type: type[_M], max_bytes: int | None = None) -> _M: ...


def load(path_or_bytes: str | os.PathLike[str] | bytes, format: str | None = None, *,
         message_type: type[Message] = TPUEmbeddingConfiguration,
         max_bytes: int | None = None) -> Message:
    """Load a message from a file path (format from its extension), ``-`` (stdin) or bytes.

    Bytes are binary unless ``format`` says otherwise. Errors are :class:`InputError`;
    ``max_bytes`` overrides the input size limit (``TPUEMB_MAX_INPUT``, default 256 MiB).
    """
    if isinstance(path_or_bytes, bytes | bytearray | memoryview):
        data = bytes(path_or_bytes)
        fmt = normalize_format(format) if format else "binary"
        message = message_type()
        parse_bytes(data, fmt, message, "<bytes>", option="format=", explicit=bool(format))
        return message
    loaded: Message = read_source(path_or_bytes, format, message_type=message_type,
                                  format_option="format=", max_bytes=max_bytes).message
    return loaded


def as_config(obj: Any) -> TPUEmbeddingConfiguration:
    """Return a tpuemb ``TPUEmbeddingConfiguration`` for ``obj``.

    Accepts tpuemb's message (returned as is), TensorFlow's own ``TPUEmbeddingConfiguration``
    (or any protobuf message of the same wire format: converted through its bytes), a path or bytes.
    """
    if isinstance(obj, TPUEmbeddingConfiguration):
        return obj
    if isinstance(obj, Message) or hasattr(obj, "SerializeToString"):
        name = getattr(getattr(obj, "DESCRIPTOR", None), "name", "")
        if name and name != "TPUEmbeddingConfiguration":
            raise TypeError(f"expected a TPUEmbeddingConfiguration message, got {name}")
        config = TPUEmbeddingConfiguration()
        config.ParseFromString(obj.SerializeToString())
        return config
    if isinstance(obj, str | os.PathLike | bytes | bytearray | memoryview):
        result: TPUEmbeddingConfiguration = load(obj if not isinstance(obj, bytearray | memoryview)
                                                 else bytes(obj))
        return result
    raise TypeError(
        "expected a TPUEmbeddingConfiguration (tpuemb's or TensorFlow's), a path or bytes, "
        f"got {type(obj).__name__}")


# --------------------------------------------------------------------------------------------
# Writing


def unknown_field_paths(message: Message, prefix: str = "") -> list[str]:
    """Field paths of every (sub)message that holds unknown fields."""
    from google.protobuf import unknown_fields

    found: list[str] = []
    if len(unknown_fields.UnknownFieldSet(message)):
        found.append(prefix or "<root>")
    for field, value in message.ListFields():
        if field.type != _FD.TYPE_MESSAGE:
            continue
        path = f"{prefix}.{field.name}" if prefix else field.name
        if is_repeated(field):
            for i, item in enumerate(value):
                found += unknown_field_paths(item, f"{path}[{i}]")
        else:
            found += unknown_field_paths(value, path)
    return found


def serialize(message: Message, fmt: str) -> bytes:
    """The bytes of ``message`` in format ``fmt``, as TensorFlow-side tooling writes them.

    Text and JSON cannot carry unknown fields (e.g. the body of a user-defined HLO program);
    rather than dropping them silently this raises InputError naming where they are. A message
    nested deeper than MAX_DEPTH is refused too: no protobuf runtime could read it back.
    """
    kind = normalize_format(fmt)
    deep = too_deep_path(message)
    if deep is not None:
        parts = deep.split(".")
        shown = ".".join(parts[:3]) + f". ... .{parts[-1]}" if len(parts) > 6 else deep
        raise InputError(
            f"cannot write {kind}: the message nests more than {MAX_DEPTH} levels deep "
            f"({shown}, level {len(parts)}); protobuf could not read the file back - flatten "
            "the nesting")
    if kind == "binary":
        return message.SerializeToString()
    lost = unknown_field_paths(message)
    if lost:
        raise InputError(
            f"cannot write {kind}: the message holds fields this schema does not declare at "
            f"{', '.join(lost[:5])} (e.g. an HLO program body, or fields from a newer "
            "TensorFlow); text and JSON would drop them. Keep the binary format for this file.")
    if kind == "text":
        return text_format.MessageToString(message).encode("utf-8")
    return json_format.MessageToJson(message, preserving_proto_field_name=True).encode("utf-8")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`tpuemb_cfg.formats.atomic.write_bytes`).

    ``-`` writes to stdout; a symbolic link is written through; an OS error is an OutputError.
    """
    atomic.write_bytes(path, data)


def dump(message: Message, path: str | os.PathLike[str], format: str | None = None) -> None:
    """Write ``message`` to ``path`` (``-`` for stdout), format from the extension unless given.

    The file is replaced atomically; a symbolic link is written through. Errors: UsageError for
    an unknown extension, InputError for a message no format can hold, OutputError when the file
    cannot be written.
    """
    fmt = normalize_format(format) if format else detect_format(path, "format=", output=True)
    try:
        data = serialize(message, fmt)
    except InputError as exc:
        exc.path = exc.path or os.fspath(path)
        raise
    atomic.check_outputs([path])
    atomic_write_bytes(path, data)
