"""The generated protobuf descriptors, field by field, against the spec (schema.md section 7).

No TensorFlow: the expected values are read from ``shared/spec/schema.md`` itself. The regular
markdown tables (field tables of sections 1-2, the enum summary of section 3, the reserved table of
section 4) are parsed; the few facts the spec gives only in prose (the fields of
``CenteredRmsPropParameters``, which messages have no fields, the counts of section 7, the XLA stub
of section 5 option 2) are transcribed by hand below. Where the spec states a fact twice (reserved
numbers in a message's section and in section 4, enum values in a message's section and in
section 3) the test also checks that both statements agree, so a spec typo cannot hide.

The actual values come from the project's ``FileDescriptorProto``s (from
``FileDescriptor.serialized_pb``) plus the runtime descriptors for what protobuf derives
(``json_name``, presence, packed-ness).

Every comparison collects all mismatches and fails once with the full list.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest
from conftest import DATA, require_data
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FileDescriptor

import tpuemb_cfg
from tpuemb_cfg.proto import hlo_pb2, optimization_parameters_pb2, tpu_embedding_configuration_pb2

SCHEMA_MD = DATA / "spec" / "schema.md"  # a copy of shared/spec/schema.md

PACKAGE = "tpuemb_cfg.proto"
OPT_FILE = "tpuemb_cfg/proto/optimization_parameters.proto"
TEC_FILE = "tpuemb_cfg/proto/tpu_embedding_configuration.proto"
FILES: dict[str, FileDescriptor] = {
    OPT_FILE: optimization_parameters_pb2.DESCRIPTOR,
    TEC_FILE: tpu_embedding_configuration_pb2.DESCRIPTOR,
}

# Section 1.3 / 7: TensorFlow 2.21 calls the message `OptimizerDynamicInput`; the project (and the
# tables of schema.md) call it `DynamicLearningRate`. Any TensorFlow spelling met in the spec is
# mapped to the project's name before comparing.
TF_TO_PROJECT_NAME = {"OptimizerDynamicInput": "DynamicLearningRate"}

# --- Facts the spec gives in prose, transcribed by hand -------------------------------------------

# Sections 1.5, 1.9, 1.23, 1.24, 1.25, 1.28 (bullet), 2.5: "No fields".
FIELDLESS_MESSAGES = frozenset(
    {
        "AdagradParameters",
        "StochasticGradientDescentParameters",
        "AssignParameters",
        "GradientAccumulationStatus",
        "LowDimensionalPackingStatus",
        "StateVariableSpecification.UserDefined",
        "TPUEmbeddingError",
    }
)

# Section 7 counts: (top-level messages, nested messages, top-level enums, nested enums).
EXPECTED_COUNTS = {OPT_FILE: (28, 2, 0, 3), TEC_FILE: (2, 3, 0, 2)}
EXPECTED_TOTAL_MESSAGES = 35
EXPECTED_TOTAL_ENUMS = 5
OPTIMIZATION_PARAMETERS_FIELDS = 28
OPTIMIZATION_PARAMETERS_ONEOF_MEMBERS = 19

# Sections 0, 2.3, 4, 7: the only packed field and the only field option.
ONLY_PACKED = {("TPUEmbeddingConfiguration.FeatureDescriptor", "input_shape")}
ONLY_DEPRECATED = {("FtrlParameters", "allow_zero_accumulator")}

# Top of the spec: the imports of TensorFlow's optimization_parameters.proto are wrappers.proto
# and XLA's hlo.proto; tpu_embedding_configuration.proto imports optimization_parameters.proto.
WRAPPERS_FILE = "google/protobuf/wrappers.proto"
TF_HLO_FILE = "xla/service/hlo.proto"


@dataclass(frozen=True)
class FieldSpec:
    """One field as the spec (or a descriptor) describes it."""

    number: int
    name: str
    type: str  # "float", "int32", "message", "enum", ...
    type_name: str  # message/enum name without the project package; "" for scalars
    label: str  # "singular" or "repeated"
    oneof: str  # "" when not in a oneof
    presence: str  # "explicit", "implicit" or "-"
    wire: str  # "varint", "i32", "i64", "len"
    json: str
    packed: bool = False


# Section 1.15, "Same three fields as RmsPropParameters (1 rho, 2 momentum, 3 epsilon; float,
# singular, implicit, i32; json rho, momentum, epsilon)".
CENTERED_RMS_PROP_FIELDS = {
    n: FieldSpec(n, name, "float", "", "singular", "", "implicit", "i32", name)
    for n, name in ((1, "rho"), (2, "momentum"), (3, "epsilon"))
}


# --- Parsing schema.md ------------------------------------------------------------------------


class SchemaParseError(Exception):
    """schema.md does not have the shape this parser expects (the test fails and says where)."""


@dataclass
class MessageSpec:
    name: str
    file: str
    line: int
    fields: dict[int, FieldSpec] | None = None  # None: no field table in the spec
    prose: list[str] = field(default_factory=list)  # non-table lines of its section


@dataclass
class Spec:
    messages: dict[str, MessageSpec] = field(default_factory=dict)
    enums: dict[str, dict[str, int]] = field(default_factory=dict)  # section 3
    reserved: dict[str, tuple[set[int], set[str]]] = field(default_factory=dict)  # section 4
    enum_prose: dict[str, dict[str, int]] = field(default_factory=dict)  # sections 1-2
    reserved_prose: dict[str, tuple[set[int], set[str]]] = field(default_factory=dict)


_SCALAR_TYPES = {"float", "double", "int32", "int64", "bool", "string", "bytes"}
_ENUM_VALUE = re.compile(r"`(\w+) = (-?\d+)`")
_RESERVED_PROSE = re.compile(
    r"Reserved: numbers? \*\*(?P<nums>\d+(?:, \d+)*)\*\*"
    r"(?:[;,] names? (?P<names>\*\*`\w+`\*\*(?:, \*\*`\w+`\*\*)*))?"
)
_ENUM_PROSE = re.compile(r"Enum `(?P<name>[\w.]+)`: (?P<vals>`\w+ = -?\d+`(?:, `\w+ = -?\d+`)*)")


def _project_name(name: str) -> str:
    return ".".join(TF_TO_PROJECT_NAME.get(part, part) for part in name.split("."))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _unbold(cell: str) -> str:
    return cell.replace("**", "").strip()


def _backticked(cell: str, where: str) -> str:
    m = re.fullmatch(r"`([^`]+)`", _unbold(cell))
    if not m:
        raise SchemaParseError(f"{where}: expected a `name`, found {cell!r}")
    return m.group(1)


def _wire_of(type_: str, label: str, packed: bool) -> str:
    if label == "repeated" and packed:
        return "len"
    if type_ in ("float", "fixed32", "sfixed32"):
        return "i32"
    if type_ in ("double", "fixed64", "sfixed64"):
        return "i64"
    if type_ in ("string", "bytes", "message"):
        return "len"
    return "varint"


def _parse_field_row(header: list[str], row: list[str], msg: MessageSpec, where: str) -> FieldSpec:
    if len(row) != len(header):
        raise SchemaParseError(f"{where}: {len(row)} cells, header has {len(header)}")
    cell = dict(zip(header, row, strict=True))
    prose = " ".join(msg.prose)
    defaults: dict[str, str] = {}
    if "All fields singular, implicit presence" in prose:  # section 1.16's short table
        defaults = {"label": "singular", "presence": "implicit", "oneof": "-"}
    elif "oneof" not in cell:
        defaults = {"oneof": "-"}
    for col, value in defaults.items():
        cell.setdefault(col, value)
    missing = {"#", "name", "type", "label", "oneof", "presence", "wire", "json"} - set(cell)
    if missing:
        raise SchemaParseError(f"{where}: no column(s) {sorted(missing)} and no prose default")

    type_cell = _unbold(cell["type"])
    m = re.fullmatch(r"(message|enum) `([\w.]+)`", type_cell)
    if m:
        type_, type_name = m.group(1), _project_name(m.group(2))
    elif type_cell in _SCALAR_TYPES:
        type_, type_name = type_cell, ""
    else:
        raise SchemaParseError(f"{where}: unknown type {cell['type']!r}")

    label_words = [w.strip() for w in _unbold(cell["label"]).split(",")]
    label, packed = label_words[0], "packed" in label_words[1:]
    if label not in ("singular", "repeated") or set(label_words[1:]) - {"packed"}:
        raise SchemaParseError(f"{where}: unknown label {cell['label']!r}")
    oneof = "" if cell["oneof"] == "-" else _backticked(cell["oneof"], where)
    presence = _unbold(cell["presence"])
    if presence not in ("explicit", "implicit", "-"):
        raise SchemaParseError(f"{where}: unknown presence {cell['presence']!r}")
    return FieldSpec(
        number=int(_unbold(cell["#"])),
        name=_backticked(cell["name"], where),
        type=type_,
        type_name=type_name,
        label=label,
        oneof=oneof,
        presence=presence,
        wire=_unbold(cell["wire"]),
        json=_backticked(cell["json"], where),
        packed=packed,
    )


def parse_schema(text: str) -> Spec:
    """Read the facts of schema.md (see the module docstring for which parts)."""
    spec = Spec()
    file: str | None = None  # project file of the current "## N. `x.proto`" section
    subject: MessageSpec | None = None  # message the following tables/prose belong to
    section = ""  # title of the current "##" section
    lines = text.splitlines()
    i = 0

    def register(name: str, lineno: int) -> MessageSpec:
        assert file is not None
        name = _project_name(name)
        if name in spec.messages:
            raise SchemaParseError(f"schema.md:{lineno}: message {name} declared twice")
        spec.messages[name] = MessageSpec(name, file, lineno)
        return spec.messages[name]

    while i < len(lines):
        line, lineno = lines[i], i + 1
        if line.startswith("## "):
            section, subject = line, None
            m = re.search(r"`(\w+\.proto)`", line)
            file = f"tpuemb_cfg/proto/{m.group(1)}" if m else None
        elif line.startswith("### ") and file is not None:
            subject = register(_backticked(line.split()[2], f"schema.md:{lineno}"), lineno)
        elif (m := re.match(r"- `([\w.]+)`:", line)) and file is not None:
            subject = register(m.group(1), lineno)  # nested message given as a bullet (1.28)
            subject.prose.append(line[m.end() :])
        elif line.startswith("|"):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            header, rows = _cells(lines[start]), [_cells(r) for r in lines[start + 2 : i]]
            _take_table(spec, section, subject, header, rows, start + 1)
            continue
        elif subject is not None:
            subject.prose.append(line)
        i += 1

    for msg in spec.messages.values():
        prose = " ".join(" ".join(msg.prose).split())
        for m in _RESERVED_PROSE.finditer(prose):
            nums = {int(n) for n in m.group("nums").split(", ")}
            names = set(re.findall(r"`(\w+)`", m.group("names") or ""))
            spec.reserved_prose[msg.name] = (nums, names)
        for m in _ENUM_PROSE.finditer(prose):
            values = {k: int(v) for k, v in _ENUM_VALUE.findall(m.group("vals"))}
            spec.enum_prose[_project_name(m.group("name"))] = values
    return spec


def _take_table(
    spec: Spec,
    section: str,
    subject: MessageSpec | None,
    header: list[str],
    rows: list[list[str]],
    lineno: int,
) -> None:
    if header[0] == "#":
        if subject is None:
            raise SchemaParseError(f"schema.md:{lineno}: field table outside a message section")
        if subject.fields is not None:
            raise SchemaParseError(f"schema.md:{lineno}: second field table for {subject.name}")
        subject.fields = {}
        for k, row in enumerate(rows):
            where = f"schema.md:{lineno + 2 + k} ({subject.name})"
            f = _parse_field_row(header, row, subject, where)
            if f.number in subject.fields:
                raise SchemaParseError(f"{where}: field number {f.number} twice")
            subject.fields[f.number] = f
    elif header[:2] == ["enum (full name)", "values"]:
        for row in rows:
            name = _project_name(_backticked(row[0], f"schema.md:{lineno}"))
            spec.enums[name] = {k: int(v) for k, v in _ENUM_VALUE.findall(row[1])}
    elif header == ["message", "reserved numbers", "reserved names"]:
        for row in rows:
            name = _project_name(_backticked(row[0], f"schema.md:{lineno}"))
            nums = set() if row[1] == "-" else {int(n) for n in row[1].split(",")}
            names = set() if row[2] == "-" else set(re.findall(r"`(\w+)`", row[2]))
            spec.reserved[name] = (nums, names)
    else:
        raise SchemaParseError(f"schema.md:{lineno}: table of unknown shape in {section!r}")


# --- Reading the project's descriptors -----------------------------------------------------------


def _file_proto(fd: FileDescriptor) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto.FromString(fd.serialized_pb)


def _walk_messages(
    msgs: list[descriptor_pb2.DescriptorProto], prefix: str = ""
) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto]]:
    for m in msgs:
        name = prefix + m.name
        yield name, m
        yield from _walk_messages(list(m.nested_type), name + ".")


def _strip_package(type_name: str) -> str:
    name = type_name.lstrip(".")
    return name.removeprefix(PACKAGE + ".")


@dataclass
class Actual:
    """The project's messages and enums, named relative to its package, with their file."""

    messages: dict[str, tuple[str, descriptor_pb2.DescriptorProto]]
    enums: dict[str, tuple[str, descriptor_pb2.EnumDescriptorProto]]
    top_level: dict[str, tuple[int, int, int, int]]  # file -> counts as EXPECTED_COUNTS

    def runtime(self, message: str) -> Descriptor:
        return FILES[self.messages[message][0]].pool.FindMessageTypeByName(f"{PACKAGE}.{message}")

    def fields(self, message: str) -> dict[int, FieldSpec]:
        proto = self.messages[message][1]
        runtime = self.runtime(message)
        out: dict[int, FieldSpec] = {}
        for f in proto.field:
            rt = runtime.fields_by_name[f.name]
            type_ = descriptor_pb2.FieldDescriptorProto.Type.Name(f.type).removeprefix("TYPE_")
            label = "repeated" if f.label == f.LABEL_REPEATED else "singular"
            if f.label == f.LABEL_REQUIRED:
                label = "required"
            presence = "-" if label == "repeated" else "explicit" if rt.has_presence else "implicit"
            out[f.number] = FieldSpec(
                number=f.number,
                name=f.name,
                type=type_.lower(),
                type_name=_strip_package(f.type_name) if f.type_name else "",
                label=label,
                oneof=proto.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else "",
                presence=presence,
                wire=_wire_of(type_.lower(), label, rt.is_packed),
                json=rt.json_name,
                packed=rt.is_packed,
            )
        return out


def read_actual() -> Actual:
    messages: dict[str, tuple[str, descriptor_pb2.DescriptorProto]] = {}
    enums: dict[str, tuple[str, descriptor_pb2.EnumDescriptorProto]] = {}
    counts: dict[str, tuple[int, int, int, int]] = {}
    for fname, fd in FILES.items():
        fp = _file_proto(fd)
        nested_msgs = nested_enums = 0
        for name, m in _walk_messages(list(fp.message_type)):
            messages[name] = (fname, m)
            nested_msgs += "." in name
            for e in m.enum_type:
                enums[f"{name}.{e.name}"] = (fname, e)
                nested_enums += 1
        for e in fp.enum_type:
            enums[e.name] = (fname, e)
        counts[fname] = (len(fp.message_type), nested_msgs, len(fp.enum_type), nested_enums)
    return Actual(messages, enums, counts)


# --- Comparisons (pure functions, so that the test below can prove they catch mismatches) --------


def compare_fields(
    message: str, expected: dict[int, FieldSpec], actual: dict[int, FieldSpec]
) -> list[str]:
    problems = []
    for n in sorted(expected.keys() - actual.keys()):
        problems.append(f"{message}: field {n} `{expected[n].name}` is missing ({expected[n]})")
    for n in sorted(actual.keys() - expected.keys()):
        problems.append(f"{message}: field {n} `{actual[n].name}` is not in schema.md")
    for n in sorted(expected.keys() & actual.keys()):
        exp, act = expected[n], actual[n]
        for attr in FieldSpec.__dataclass_fields__:
            if getattr(exp, attr) != getattr(act, attr):
                problems.append(
                    f"{message}.{exp.name} (field {n}): {attr} is {getattr(act, attr)!r}, "
                    f"schema.md says {getattr(exp, attr)!r}"
                )
    return problems


def compare_reserved(
    message: str, expected: tuple[set[int], set[str]], proto: descriptor_pb2.DescriptorProto
) -> list[str]:
    problems = []
    numbers: set[int] = set()
    for r in proto.reserved_range:  # DescriptorProto ranges are [start, end)
        if r.end != r.start + 1:
            problems.append(f"{message}: reserved range [{r.start}, {r.end}) is not one number")
        numbers.update(range(r.start, r.end))
    names = set(proto.reserved_name)
    if numbers != expected[0]:
        problems.append(
            f"{message}: reserved numbers are {sorted(numbers)}, "
            f"schema.md says {sorted(expected[0])}"
        )
    if names != expected[1]:
        problems.append(
            f"{message}: reserved names are {sorted(names)}, schema.md says {sorted(expected[1])}"
        )
    return problems


def compare_enum(message: str, expected: dict[str, int], actual: dict[str, int]) -> list[str]:
    if expected == actual:
        return []
    return [f"enum {message}: values are {actual}, schema.md says {expected}"]


def _fail(problems: list[str], what: str) -> None:
    if problems:
        pytest.fail(
            f"{len(problems)} mismatch(es) in {what}:\n  " + "\n  ".join(problems), pytrace=False
        )


# --- Fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec() -> Spec:
    require_data(SCHEMA_MD)
    return parse_schema(SCHEMA_MD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def actual() -> Actual:
    return read_actual()


def expected_fields(spec: Spec, message: str) -> dict[int, FieldSpec]:
    """The spec's fields of a message ({} for the hand-listed field-less ones)."""
    if message == "CenteredRmsPropParameters":
        return CENTERED_RMS_PROP_FIELDS
    if message in FIELDLESS_MESSAGES:
        return {}
    fields = spec.messages[message].fields
    assert fields is not None, f"schema.md has no field table for {message}"
    return fields


# --- The spec itself: parsed completely and consistent with itself -------------------------------


def test_spec_parsed_completely(spec: Spec) -> None:
    """The parser found every message, table, enum and reserved entry section 7 announces."""
    problems = []
    if len(spec.messages) != EXPECTED_TOTAL_MESSAGES:
        problems.append(f"parsed {len(spec.messages)} messages, section 7 says 35")
    if len(spec.enums) != EXPECTED_TOTAL_ENUMS:
        problems.append(f"parsed {len(spec.enums)} enums in section 3, section 7 says 5")
    for name, msg in spec.messages.items():
        has_table = msg.fields is not None
        prose_only = name in FIELDLESS_MESSAGES or name == "CenteredRmsPropParameters"
        if has_table == prose_only:
            problems.append(f"{name} (schema.md:{msg.line}): field table found: {has_table}")
    for name in FIELDLESS_MESSAGES | {"CenteredRmsPropParameters"}:
        if name not in spec.messages:
            problems.append(f"hand-listed message {name} is not a section of schema.md")
    for name in spec.enums:
        if name.rsplit(".", 1)[0] not in spec.messages:
            problems.append(f"enum {name} is not nested in a message of schema.md")
    for name in spec.reserved:
        if name not in spec.messages:
            problems.append(f"section 4 names an unknown message {name}")
    for fname, counts in EXPECTED_COUNTS.items():
        msgs = [n for n, m in spec.messages.items() if m.file == fname]
        parsed = (sum("." not in n for n in msgs), sum("." in n for n in msgs))
        if parsed != counts[:2]:
            problems.append(f"{fname}: parsed (top, nested) messages {parsed}, section 7 {counts}")
    op = expected_fields(spec, "OptimizationParameters")
    in_oneof = [f for f in op.values() if f.oneof == "parameters"]
    if (len(op), len(in_oneof)) != (
        OPTIMIZATION_PARAMETERS_FIELDS,
        OPTIMIZATION_PARAMETERS_ONEOF_MEMBERS,
    ):
        problems.append(f"OptimizationParameters table: {len(op)} fields, {len(in_oneof)} in oneof")
    packed = {
        (m, f.name) for m in spec.messages for f in expected_fields(spec, m).values() if f.packed
    }
    if packed != ONLY_PACKED:
        problems.append(f"packed fields in the tables: {packed}, section 0 says {ONLY_PACKED}")
    _fail(problems, "parsing schema.md")


def test_spec_consistent_with_itself(spec: Spec) -> None:
    """Reserved lists and enum values stated twice in schema.md agree; field rows are sane."""
    problems = []
    # Every message section's "Reserved: ..." sentence equals its row in section 4 (the nested
    # StateVariableSpecification.UserDefined states it in lower case and only in section 4).
    for name, value in spec.reserved_prose.items():
        if spec.reserved.get(name) != value:
            problems.append(
                f"{name}: its section reserves {value}, section 4 {spec.reserved.get(name)}"
            )
    for name in spec.reserved.keys() - spec.reserved_prose.keys():
        if name != "StateVariableSpecification.UserDefined":
            problems.append(f"{name}: reserved in section 4 only")
    for name in sorted(spec.enum_prose.keys() | spec.enums.keys()):
        if spec.enum_prose.get(name) != spec.enums.get(name):
            problems.append(
                f"enum {name}: sections 1-2 say {spec.enum_prose.get(name)}, "
                f"section 3 says {spec.enums.get(name)}"
            )
    if expected_fields(spec, "RmsPropParameters") != CENTERED_RMS_PROP_FIELDS:
        problems.append("CenteredRmsPropParameters is 'the same three fields' as RmsPropParameters")
    for name in spec.messages:
        for f in expected_fields(spec, name).values():
            if f.wire != _wire_of(f.type, f.label, f.packed):
                problems.append(f"{name}.{f.name}: wire {f.wire} does not fit type {f.type}")
            want = (
                "-"
                if f.label == "repeated"
                else ("explicit" if f.type == "message" or f.oneof else "implicit")
            )
            if f.presence != want:
                problems.append(f"{name}.{f.name}: presence {f.presence}, proto3 gives {want}")
    _fail(problems, "schema.md itself")


# --- The project's descriptors against the spec -------------------------------------------------


def test_files_are_the_projects_own() -> None:
    """Own file paths and package (never tensorflow's), proto3, no file options, the imports."""
    problems = []
    for fname, fd in FILES.items():
        fp = _file_proto(fd)
        if fd.name != fname or fp.name != fname:
            problems.append(f"file is named {fd.name!r}, expected {fname!r}")
        if fp.package != PACKAGE:
            problems.append(f"{fname}: package {fp.package!r}, expected {PACKAGE!r}")
        if fp.name.startswith("tensorflow/") or fp.package.startswith("tensorflow"):
            problems.append(f"{fname}: uses TensorFlow's file name or package")
        if fp.syntax != "proto3":
            problems.append(f"{fname}: syntax {fp.syntax!r}, schema.md says proto3")
        if fp.HasField("options"):
            problems.append(f"{fname}: has file options {fp.options}, TensorFlow's file has none")
    hlo = hlo_pb2.DESCRIPTOR
    expected_deps = {
        OPT_FILE: [WRAPPERS_FILE, hlo.name],
        TEC_FILE: [OPT_FILE],
    }
    for fname, deps in expected_deps.items():
        found = sorted(d.name for d in FILES[fname].dependencies)
        if found != sorted(deps):
            problems.append(f"{fname}: imports {found}, expected {sorted(deps)}")
    # Section 5: the XLA stub must not take XLA's own file name or package.
    if hlo.name == TF_HLO_FILE or hlo.package == "xla" or not hlo.package.startswith(PACKAGE):
        problems.append(f"XLA stub registers {hlo.name!r} / package {hlo.package!r}")
    _fail(problems, "file identity")


def test_message_and_enum_inventory(spec: Spec, actual: Actual) -> None:
    """The same 35 messages and 5 enums, nested the same way, in the same files."""
    problems = []
    expected_msgs = {n: m.file for n, m in spec.messages.items()}
    found_msgs = {n: f for n, (f, _) in actual.messages.items()}
    for n in sorted(expected_msgs.keys() - found_msgs.keys()):
        problems.append(f"message {n} missing (schema.md: in {expected_msgs[n]})")
    for n in sorted(found_msgs.keys() - expected_msgs.keys()):
        problems.append(f"message {n} (in {found_msgs[n]}) is not in schema.md")
    for n in sorted(expected_msgs.keys() & found_msgs.keys()):
        if expected_msgs[n] != found_msgs[n]:
            problems.append(f"message {n} is in {found_msgs[n]}, expected {expected_msgs[n]}")
    for n in sorted(spec.enums.keys() ^ actual.enums.keys()):
        problems.append(f"enum {n}: in schema.md {n in spec.enums}, in protos {n in actual.enums}")
    for fname, counts in EXPECTED_COUNTS.items():
        if actual.top_level[fname] != counts:
            problems.append(
                f"{fname}: (top messages, nested messages, top enums, nested enums) = "
                f"{actual.top_level[fname]}, section 7 says {counts}"
            )
    if (len(actual.messages), len(actual.enums)) != (EXPECTED_TOTAL_MESSAGES, EXPECTED_TOTAL_ENUMS):
        problems.append(f"{len(actual.messages)} messages, {len(actual.enums)} enums; want 35, 5")
    _fail(problems, "the message/enum inventory")


def test_fields_match_schema(spec: Spec, actual: Actual) -> None:
    """Number, name, type, type name, label, oneof, presence, wire, json_name, packed-ness."""
    problems = []
    for name in sorted(spec.messages.keys() & actual.messages.keys()):
        problems += compare_fields(name, expected_fields(spec, name), actual.fields(name))
    _fail(problems, "fields")


def test_optimization_parameters_oneof(actual: Actual) -> None:
    fields = actual.fields("OptimizationParameters")
    in_oneof = sorted(n for n, f in fields.items() if f.oneof == "parameters")
    assert len(fields) == OPTIMIZATION_PARAMETERS_FIELDS
    assert len(in_oneof) == OPTIMIZATION_PARAMETERS_ONEOF_MEMBERS
    # Section 1.27: "numbers 3-6, 8-12, 14, 19-21, 23-26, 29, 30".
    assert in_oneof == [3, 4, 5, 6, 8, 9, 10, 11, 12, 14, 19, 20, 21, 23, 24, 25, 26, 29, 30]
    oneofs = actual.messages["OptimizationParameters"][1].oneof_decl
    assert [o.name for o in oneofs] == ["parameters"]


def test_reserved_match_schema(spec: Spec, actual: Actual) -> None:
    """Section 4 lists all reserved numbers and names; every other message reserves nothing."""
    problems = []
    for name in sorted(actual.messages):
        expected = spec.reserved.get(name, (set(), set()))
        problems += compare_reserved(name, expected, actual.messages[name][1])
    _fail(problems, "reserved numbers/names")


def test_enums_match_schema(spec: Spec, actual: Actual) -> None:
    """Section 3: (name, number) pairs; no allow_alias, no reserved values, no options."""
    problems = []
    for name in sorted(spec.enums.keys() & actual.enums.keys()):
        proto = actual.enums[name][1]
        problems += compare_enum(name, spec.enums[name], {v.name: v.number for v in proto.value})
        if proto.HasField("options") or proto.reserved_range or proto.reserved_name:
            problems.append(f"enum {name}: has options or reserved values, schema.md says none")
    _fail(problems, "enums")


def test_field_options(actual: Actual) -> None:
    """Only allow_zero_accumulator has an option (deprecated); only input_shape is packed, by
    the proto3 default rather than an explicit option; nothing uses the proto3 `optional`."""
    problems = []
    deprecated, packed = set(), set()
    for name, (_, proto) in actual.messages.items():
        runtime = actual.runtime(name)
        for f in proto.field:
            key = (name, f.name)
            if f.options.deprecated:
                deprecated.add(key)
            if f.HasField("options") and key not in ONLY_DEPRECATED:
                problems.append(f"{name}.{f.name}: unexpected options {f.options}")
            if f.options.HasField("packed"):
                problems.append(f"{name}.{f.name}: explicit packed option (TensorFlow has none)")
            if f.proto3_optional:
                problems.append(f"{name}.{f.name}: declared `optional` (TensorFlow does not)")
            if runtime.fields_by_name[f.name].is_packed:
                packed.add(key)
        if proto.HasField("options"):
            problems.append(f"message {name}: has options {proto.options}")
    for name, fname in ONLY_DEPRECATED:
        opts = actual.messages[name][1].field
        listed = [f.options.ListFields() for f in opts if f.name == fname]
        if len(listed) != 1 or [(d.name, v) for d, v in listed[0]] != [("deprecated", True)]:
            problems.append(f"{name}.{fname}: options {listed}, expected only deprecated = true")
    if deprecated != ONLY_DEPRECATED:
        problems.append(f"deprecated fields {sorted(deprecated)}, expected {ONLY_DEPRECATED}")
    if packed != ONLY_PACKED:
        problems.append(f"packed fields {sorted(packed)}, expected {sorted(ONLY_PACKED)}")
    _fail(problems, "field options")


def test_input_shape_is_packed_on_the_wire() -> None:
    # Field 10 (feature_descriptor, len) = key 0x52, length 4; inside it field 3 (input_shape)
    # packed = key 0x1a, length 2, varints 1 and 2. Unpacked would be 18 01 18 02.
    config = tpuemb_cfg.TPUEmbeddingConfiguration(feature_descriptor=[{"input_shape": [1, 2]}])
    assert config.SerializeToString() == bytes.fromhex("52 04 1a 02 01 02")


def test_user_defined_program_is_the_partial_xla_stub(actual: Actual) -> None:
    """Section 5 option 2: the HLO messages and fields the validator needs, XLA's numbers."""
    program = actual.runtime("UserDefinedProgramParameters").fields_by_name["program"]
    assert program.message_type is not None, "program is not message-typed"
    assert program.message_type.full_name == f"{PACKAGE}.xla.HloModuleProto"
    assert program.message_type.file.name == hlo_pb2.DESCRIPTOR.name
    # (number, name, type, type name, label) transcribed from section 5, option 2.
    expected = {
        "HloModuleProto": {
            (1, "name", "string", "", "singular"),
            (2, "entry_computation_name", "string", "", "singular"),
            (4, "host_program_shape", "message", "xla.ProgramShapeProto", "singular"),
        },
        "ProgramShapeProto": {
            (1, "parameters", "message", "xla.ShapeProto", "repeated"),
            (2, "result", "message", "xla.ShapeProto", "singular"),
            (3, "parameter_names", "string", "", "repeated"),
        },
        "ShapeProto": {
            (3, "dimensions", "int64", "", "repeated"),
            (4, "tuple_shapes", "message", "xla.ShapeProto", "repeated"),
            (6, "is_dynamic_dimension", "bool", "", "repeated"),
        },
    }
    problems = []
    pool = hlo_pb2.DESCRIPTOR.pool
    for msg, want in expected.items():
        desc = pool.FindMessageTypeByName(f"{PACKAGE}.xla.{msg}")
        proto = descriptor_pb2.DescriptorProto()
        desc.CopyToProto(proto)
        found = {
            (
                f.number,
                f.name,
                descriptor_pb2.FieldDescriptorProto.Type.Name(f.type).removeprefix("TYPE_").lower(),
                _strip_package(f.type_name) if f.type_name else "",
                "repeated" if f.label == f.LABEL_REPEATED else "singular",
            )
            for f in proto.field
            if not (msg == "ShapeProto" and f.number == 2)
        }
        if found != want:
            problems.append(f"xla.{msg}: missing {want - found}, not in section 5 {found - want}")
    element_type = pool.FindMessageTypeByName(f"{PACKAGE}.xla.ShapeProto").fields_by_name.get(
        "element_type"
    )
    if element_type is None or element_type.number != 2:
        problems.append("xla.ShapeProto.element_type = 2 is missing")
    elif element_type.enum_type is not None:  # a project enum: F32 must be 11
        f32 = element_type.enum_type.values_by_name.get("F32")
        if f32 is None or f32.number != 11:
            problems.append("xla.ShapeProto.element_type enum lacks F32 = 11")
    elif element_type.type != element_type.TYPE_INT32:
        problems.append("xla.ShapeProto.element_type is neither int32 nor an enum")
    shape = pool.FindMessageTypeByName(f"{PACKAGE}.xla.ShapeProto")
    for name in ("dimensions", "is_dynamic_dimension"):
        if not shape.fields_by_name[name].is_packed:
            problems.append(f"xla.ShapeProto.{name} is not packed")
    _fail(problems, "the XLA stub")


# --- The comparisons catch mismatches (altered copies of real expected values) -----------------


def test_comparisons_report_every_mismatch(spec: Spec, actual: Actual) -> None:
    expected = dict(expected_fields(spec, "FtrlParameters"))
    expected[7] = replace(expected[7], name="betta", json="betta")
    expected[3] = replace(expected[3], label="repeated", oneof="parameters")
    expected[99] = replace(expected[1], number=99)
    del expected[8]
    problems = compare_fields("FtrlParameters", expected, actual.fields("FtrlParameters"))
    text = "\n".join(problems)
    assert len(problems) == 6, text
    for needle in (
        "FtrlParameters.betta (field 7): name is 'beta', schema.md says 'betta'",
        "FtrlParameters.betta (field 7): json is 'beta'",
        "FtrlParameters.lr_power (field 3): label is 'singular', schema.md says 'repeated'",
        "FtrlParameters.lr_power (field 3): oneof is ''",
        "field 99 `l1` is missing",
        "field 8 `allow_zero_accumulator` is not in schema.md",
    ):
        assert needle in text

    proto = actual.messages["AdamParameters"][1]
    problems = compare_reserved("AdamParameters", ({6, 9}, {"initial_m"}), proto)
    assert problems == [
        "AdamParameters: reserved numbers are [6, 7], schema.md says [6, 9]",
        "AdamParameters: reserved names are ['initial_m', 'initial_v'], "
        "schema.md says ['initial_m']",
    ]
    assert compare_enum("E", {"A": 0, "B": 2}, {"A": 0, "B": 1}) != []

    with pytest.raises(pytest.fail.Exception, match="2 mismatch"):
        _fail(["a", "b"], "x")


def test_parser_rejects_a_malformed_table() -> None:
    text = (
        "## 1. `optimization_parameters.proto`\n### 1.1 `M`\n"
        "| # | name | type | label | presence | wire | json |\n|---|---|---|---|---|---|---|\n"
        "| 1 | `x` | float32 | singular | implicit | i32 | `x` |\n"
    )
    with pytest.raises(SchemaParseError, match=r"schema.md:5 \(M\): unknown type 'float32'"):
        parse_schema(text)
