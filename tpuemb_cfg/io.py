"""Reading and writing configurations in text (pbtxt), binary and JSON form.

Everything that reads user input goes through :func:`read_source`, which turns every kind of bad
input into one :class:`~tpuemb_cfg.errors.InputError` with a location: line and column for text and
JSON, a byte offset for binary. Everything that writes goes through :func:`atomic_write_bytes`, so
an interrupted run never leaves a half-written file behind.

Output is byte-identical to what TensorFlow-side tooling writes with protobuf's defaults:
``SerializeToString()``, ``text_format.MessageToString(m)`` and
``json_format.MessageToJson(m, preserving_proto_field_name=True)``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Literal

from google.protobuf import descriptor as _descriptor
from google.protobuf import json_format, text_format
from google.protobuf.message import DecodeError, Message

from tpuemb_cfg.atomic import atomic_output
from tpuemb_cfg.errors import InputError, UsageError
from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
from tpuemb_cfg.protoutil import is_repeated

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


def detect_format(path: str | os.PathLike[str]) -> Format:
    """The format a file name implies; ``-`` (stdin/stdout) is text."""
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
    raise UsageError(
        f"{name}: cannot tell the format from the file name; use one of the extensions "
        ".pbtxt/.textproto/.txtpb (text), .pb/.binpb/.bin (binary), .json (JSON), "
        "or pass the format explicitly (--from/--to)"
    )


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


def _read_bytes(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a configuration file", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None


def _line_col(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    start = text.rfind("\n", 0, index) + 1
    return line, index - start + 1


_PB_LOCATION = re.compile(r"^\s*(\d+):(\d+)\s*:\s*")


def parse_text(text: str, message: Message, path: str) -> None:
    """Parse protobuf text format into ``message``; errors carry the parser's line and column."""
    try:
        text_format.Parse(text, message)
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
            return _line_col(text, match.start())
    return 1, 1


def parse_json(text: str, message: Message, path: str) -> None:
    """Parse protobuf JSON into ``message``; syntax and schema errors carry a line and column."""
    try:
        tree = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path=path, line=exc.lineno,
                         column=exc.colno) from None
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
               end: int | None = None) -> int:
    """Walk protobuf wire data against a descriptor; raise InputError at the first bad byte.

    Stricter than protobuf's own parser in one respect: a known field carrying the wrong wire type
    is an error (protobuf would keep it as an unknown field), which is what random or corrupted
    files almost always produce. Returns the number of known fields found at this level.
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
            check_wire(data, field.message_type, value_at, pos)
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


def parse_bytes(data: bytes, fmt: Format, message: Message, path: str) -> str | None:
    """Parse ``data`` in format ``fmt`` into ``message``; return the decoded text, if any."""
    if fmt == "binary":
        parse_binary(data, message, path)
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x}); is this a binary file? "
            "name binary files .pb/.binpb or pass the format",
            path=path, offset=exc.start) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if fmt == "text":
        parse_text(text, message, path)
    else:
        parse_json(text, message, path)
    return text


def read_source(path: str | os.PathLike[str], format: str | None = None, *,
                message_type: type[Message] = TPUEmbeddingConfiguration) -> Source:
    """Read and parse one file (``-`` for stdin)."""
    name = os.fspath(path)
    fmt = normalize_format(format) if format else detect_format(name)
    data = _read_bytes(name)
    message = message_type()
    shown = "<stdin>" if name == "-" else name
    text = parse_bytes(data, fmt, message, shown)
    return Source(path=shown, format=fmt, data=data, text=text, message=message)


def load(path_or_bytes: str | os.PathLike[str] | bytes, format: str | None = None, *,
         message_type: type[Message] = TPUEmbeddingConfiguration) -> Any:
    """Load a message from a file path (format from its extension), ``-`` (stdin) or bytes.

    Bytes are binary unless ``format`` says otherwise.
    """
    if isinstance(path_or_bytes, bytes | bytearray | memoryview):
        data = bytes(path_or_bytes)
        fmt = normalize_format(format) if format else "binary"
        message = message_type()
        parse_bytes(data, fmt, message, "<bytes>")
        return message
    return read_source(path_or_bytes, format, message_type=message_type).message


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
    rather than dropping them silently this raises InputError naming where they are.
    """
    kind = normalize_format(fmt)
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
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    ``-`` writes to stdout.
    """
    if os.fspath(path) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    with atomic_output(path) as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """UTF-8 version of :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def dump(message: Message, path: str | os.PathLike[str], format: str | None = None) -> None:
    """Write ``message`` to ``path`` (``-`` for stdout), format from the extension unless given."""
    fmt = normalize_format(format) if format else detect_format(path)
    atomic_write_bytes(path, serialize(message, fmt))
