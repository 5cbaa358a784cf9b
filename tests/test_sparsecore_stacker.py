"""tpuemb's SparseCoreLayoutStacker and SparseCoreTableLayouts against TensorFlow 2.21.

Expected values were computed by TensorFlow 2.21's own stacker
(``_pywrap_sparse_core_layout.SparseCoreLayoutStacker``), see
``tests/data/sparsecore/PROVENANCE-A.md``:

- the schema: every field's name, number, type, label, packed option and declaration index;
- 300 random table sets: the bytes of ``GetLayouts().SerializeToString(deterministic=True)`` and
  ``text_format.MessageToString`` of the result;
- 29 odd or invalid inputs, each the snippet TensorFlow ran: where TensorFlow printed layouts,
  tpuemb prints the same; where it died (SIGFPE, SIGABRT) or pybind11 raised a TypeError, tpuemb
  raises one clear ValueError or TypeError;
- the default limits TensorFlow's bisection found, probed here at and around each boundary.
"""

from __future__ import annotations

import base64
import gzip
import inspect
import json
import re
from functools import cache
from typing import Any

import pytest
from conftest import DATA
from google.protobuf import descriptor_pb2, text_format

from tpuemb_cfg.proto import sparse_core_layout_pb2 as pb
from tpuemb_cfg.sparsecore import stacker as st
from tpuemb_cfg.sparsecore.stacker import SparseCoreLayoutStacker

SC = DATA / "sparsecore"


@cache
def _cases() -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads(gzip.decompress((SC / "tf_stacker_cases.json.gz")
                                                      .read_bytes()))
    return list(data["cases"])


def _load(name: str) -> Any:
    return json.loads((SC / name).read_text())


# --- item 1: the schema -------------------------------------------------------------------------

_TYPES = {"string": 9, "int32": 5, "int64": 3, "SparseCoreTableLayout": 11}
_LABELS = {"optional": 1, "repeated": 3}


def test_descriptor_is_tensorflows_field_for_field() -> None:
    """Name, number, type, label, the declared ``packed`` option and the declaration order of every
    field, read from the generated file's ``FileDescriptorProto``."""
    schema = _load("sparse_core_layout_fields.json")
    proto = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    assert proto.package == "tpuemb_cfg.proto"
    assert proto.name == "tpuemb_cfg/proto/sparse_core_layout.proto"
    assert proto.syntax == schema["syntax"] == "proto3"
    assert [m.name for m in proto.message_type] == [m["name"] for m in schema["messages"]]
    for ours_message, message in zip(proto.message_type, schema["messages"], strict=True):
        by_declaration = sorted(message["fields"], key=lambda f: f["declaration_index"])
        assert [f.name for f in ours_message.field] == [f["name"] for f in by_declaration]
        for ours, theirs in zip(ours_message.field, by_declaration, strict=True):
            assert ours.number == theirs["number"], ours.name
            assert ours.type == _TYPES[theirs["type"]], ours.name
            assert ours.label == _LABELS[theirs["label"]], ours.name
            assert ours.options.packed == theirs["packed_option"], ours.name
    # fdo_key: declared second, numbered 12
    assert proto.message_type[0].field[1].name == "fdo_key"
    assert proto.message_type[0].field[1].number == 12


def test_message_built_field_by_field_has_tensorflows_bytes_and_text() -> None:
    """TensorFlow's answer to ``SparseCoreLayoutStacker(2, False, 3)`` with two tables 'a' and
    'b' of 100 x 8 and 16 samples (the ``sparse_cores_three`` case): N = 6, padded height 144
    (a multiple of 48), 144 / 6 = 24 rows per SparseCore, table b at row 24 and rotation
    1 x 6 / 2 = 3, 16 / 3 = 5 samples per SparseCore."""
    case = next(c for c in _load("tf_stacker_errors.json")["cases"]
                if c["name"] == "sparse_cores_three")
    layouts = pb.SparseCoreTableLayouts()
    for name, offset, rotation in (("a", 0, 0), ("b", 24, 3)):
        t = layouts.tables.add()
        t.table_name = name
        t.stacked_table_name = "a_b"
        t.num_sparse_cores = 6
        t.num_partitions = 2
        t.total_rows_per_sparse_core_shard = 48
        t.unsharded_shape.extend([100, 8])
        t.unsharded_padded_shape.extend([144, 8])
        t.sparse_core_shard_row_offset = offset
        t.sparse_core_shard_rotation = rotation
        t.per_sparse_core_batch_size = 5
        t.num_features = 1
    hex_line, text_line = case["stdout_results"]
    assert layouts.SerializeToString(deterministic=True).hex() == hex_line.split(" ", 1)[1]
    assert repr(text_format.MessageToString(layouts)) == text_line.split(" ", 1)[1]


def test_fdo_key_is_written_last_as_field_12() -> None:
    """Python writes fields by number: fdo_key (tag (12 << 3) | 2 = 0x62) after num_features
    (tag (11 << 3) | 0 = 0x58), though it is declared second."""
    t = pb.SparseCoreTableLayout(table_name="a", fdo_key="k", num_features=1)
    assert t.SerializeToString(deterministic=True).hex() == "0a0161" "5801" "62016b"
    assert text_format.MessageToString(t) == 'table_name: "a"\nnum_features: 1\nfdo_key: "k"\n'


# --- item 2: the 300 recorded table sets -------------------------------------------------------

def _run(case: dict[str, Any]) -> pb.SparseCoreTableLayouts:
    s = SparseCoreLayoutStacker(**case["constructor"])
    for method, value in case["setters"]:
        getattr(s, method)(value)
    for table in case["tables"]:
        s.AddTable(**table)
    return s.GetLayouts()


@pytest.mark.parametrize("index", range(300))
def test_recorded_case_bytes_and_text(index: int) -> None:
    case = _cases()[index]
    layouts = _run(case)
    assert layouts.SerializeToString(deterministic=True) == base64.b64decode(case["layouts_b64"])
    assert text_format.MessageToString(layouts) == case["layouts_text"]


def test_recorded_cases_cover_stacking_and_limits() -> None:
    """The 300 cases exercise what they should: multi-table stacks, every limit mode."""
    cases = _cases()
    assert len(cases) == 300
    multi = sum(1 for c in cases if _has_multi_table_stack(c))
    assert multi == 130
    assert len(_ERRORS) == 29
    modes = {tuple(sorted({m for m, _ in c["setters"]})) for c in cases}
    assert ("SetActivationMemoryBytesLimit", "SetVariableShardBytesLimit") in modes


def _has_multi_table_stack(case: dict[str, Any]) -> bool:
    names = re.findall(r'stacked_table_name: "((?:[^"\\]|\\.)*)"', case["layouts_text"])
    return len(names) != len(set(names))


# --- item 2: odd and invalid inputs -------------------------------------------------------------

class _Binding:
    """Stands in for ``tensorflow.python.tpu._pywrap_sparse_core_layout`` in the recorded
    snippets."""

    SparseCoreLayoutStacker = SparseCoreLayoutStacker


def _replay(code: str) -> list[str]:
    """Run TensorFlow's snippet on tpuemb's stacker; ``show`` prints what the recorder printed
    (``SerializeToString()`` hex and the repr of the text format)."""
    printed: list[str] = []

    def show(s: SparseCoreLayoutStacker) -> None:
        r = s.GetLayouts()
        printed.append("RESULT_HEX " + r.SerializeToString().hex())
        printed.append("RESULT_TEXT " + repr(text_format.MessageToString(r)))

    exec(code, {"L": _Binding, "show": show})  # the recorded snippet, our own data file
    return printed


_ERRORS = [c["name"] for c in _load("tf_stacker_errors.json")["cases"]]


@pytest.mark.parametrize("name", _ERRORS)
def test_recorded_odd_inputs(name: str) -> None:
    case = next(c for c in _load("tf_stacker_errors.json")["cases"] if c["name"] == name)
    if case["returncode"] == 0:
        assert _replay(case["code"]) == case["stdout_results"]
        return
    if case["killed_by_signal"] == 8:  # SIGFPE: a division by zero partitions or SparseCores
        with pytest.raises(ValueError, match=r"must be non-zero .*SIGFPE.*pass the number of"):
            _replay(case["code"])
    elif case["killed_by_signal"] == 6:  # SIGABRT: a Set* call after AddTable
        method = re.search(r"s\.(Set\w+)\(", case["code"])
        assert method is not None
        with pytest.raises(ValueError, match=rf"{method.group(1)}\(.*\) after AddTable: .*SIGABRT"
                                             r".*call every Set\* method before the first"):
            _replay(case["code"])
    else:  # pybind11's TypeError
        assert case["stderr_messages"][0].startswith("TypeError: ")
        with pytest.raises(TypeError):
            _replay(case["code"])


@pytest.mark.parametrize(("call", "pattern"), [
    (lambda s: s.AddTable("a", 100.0, 8, "g", 16, 1),
     r"table_height must be an integer, got 100\.0 \(float\); pass an int"),
    (lambda s: s.AddTable("a", "100", 8, "g", 16, 1),
     r"table_height must be an integer, got '100' \(str\)"),
    (lambda s: s.AddTable("a", 100, 8, None, 16, 1),
     r"group must be a str, got None \(NoneType\)"),
    (lambda s: s.AddTable("a", 2**63, 8, "g", 16, 1),
     r"table_height = 9223372036854775808 does not fit a C\+\+ int64_t "
     r"\(-9223372036854775808\.\.9223372036854775807\)"),
    (lambda s: s.AddTable(7, 100, 8, "g", 16, 1), r"table_name must be a str, got 7 \(int\)"),
    (lambda s: s.SetStackingEnabled("yes"), r"stacking enabled must be a bool, got 'yes'"),
    (lambda s: s.SetActivationMemoryBytesLimit(1.5),
     r"activation memory bytes limit must be an integer, got 1\.5"),
])
def test_type_errors_name_the_argument_and_the_value(call: Any, pattern: str) -> None:
    with pytest.raises(TypeError, match=pattern):
        call(SparseCoreLayoutStacker(2, False, 4))


def test_constructor_type_errors() -> None:
    with pytest.raises(TypeError, match=r"num_partitions = 2147483648 does not fit a C\+\+ int"):
        SparseCoreLayoutStacker(2**31, False, 4)
    with pytest.raises(TypeError, match=r"disable_table_stacking must be a bool, got \[\]"):
        SparseCoreLayoutStacker(2, [], 4)
    # pybind11 converts None and numbers to bool, and TensorFlow accepts them: so does tpuemb
    for flag, stacked in ((None, True), (0, True), (1, False), (2.5, False)):
        s = SparseCoreLayoutStacker(2, flag, 4)
        s.AddTable("a", 8, 8, "g", 0, 0)
        s.AddTable("b", 8, 8, "g", 0, 0)
        assert (s.GetLayouts().tables[0].stacked_table_name == "a_b") is stacked, flag


def test_product_of_counts_overflowing_to_zero_is_refused() -> None:
    """2^16 x 2^16 = 2^32 wraps to 0 in TensorFlow's 32-bit ``int``: it would divide by zero."""
    with pytest.raises(ValueError, match=r"overflows TensorFlow's 32-bit SparseCore count"):
        SparseCoreLayoutStacker(1 << 16, False, 1 << 16)


def test_empty_table_names_join_as_in_cpp() -> None:
    """C++ adds "_" only after a non-empty prefix: '', 'b' -> 'b'; 'a', '' -> 'a_';
    '', '' -> ''."""
    for names, expected in ((("", "b"), "b"), (("a", ""), "a_"), (("", ""), ""),
                            (("", "", "c"), "c"), (("a", "", "c"), "a__c")):
        s = SparseCoreLayoutStacker(1, False, 1)
        for n in names:
            s.AddTable(n, 8, 8, "g", 0, 0)
        assert {t.stacked_table_name for t in s.GetLayouts().tables} == {expected}


def test_group_order_is_bytewise_and_width_numeric() -> None:
    """Groups sort by (padded width as a number, group bytes): width 16 after width 8 although
    '16' < '8' as text; 'B' (0x42) before 'a' (0x61); 'é' (0xc3 0xa9) after 'z' (0x7a)."""
    s = SparseCoreLayoutStacker(1, False, 1)
    for name, width, group in (("w16", 16, "a"), ("e", 8, "é"), ("z", 8, "z"), ("lo", 8, "a"),
                               ("up", 8, "B")):
        s.AddTable(name, 8, width, group, 0, 0)
    assert [t.table_name for t in s.GetLayouts().tables] == ["up", "lo", "z", "e", "w16"]


def test_get_layouts_returns_a_fresh_message_each_time() -> None:
    s = SparseCoreLayoutStacker(1, False, 1)
    s.AddTable("a", 8, 8, "g", 0, 0)
    first = s.GetLayouts()
    first.tables[0].table_name = "changed"
    assert s.GetLayouts().tables[0].table_name == "a"


def test_signatures_are_tensorflows() -> None:
    """Argument names as pybind11 prints them (Set* take one positional ``arg0``); tpuemb's
    one addition is the keyword-only ``tf_version`` of the constructor."""
    sigs = _load("tf_stacker_defaults.json")["signatures"]
    for method, text in sigs.items():
        if method == "GetLayouts":
            continue
        theirs = re.findall(r"(\w+): [\w.:]+", text.split("(", 1)[1])[1:]  # after self
        parameters = inspect.signature(getattr(SparseCoreLayoutStacker, method)).parameters
        ours = [name for name, p in parameters.items() if p.kind != p.KEYWORD_ONLY][1:]
        assert ours == theirs, method
    keyword_only = [name for name, p in inspect.signature(SparseCoreLayoutStacker).parameters
                    .items() if p.kind == p.KEYWORD_ONLY]
    assert keyword_only == ["tf_version"]


# --- item 2: the default limits, at and around each boundary -------------------------------------

def _stacks(ha: int, hb: int, width: int, sa: int, sb: int, *, limits_off: bool = False) -> bool:
    """Whether table b joins table a's stack (one chip, one SparseCore: N = 1)."""
    s = SparseCoreLayoutStacker(1, False, 1)
    if limits_off:
        s.SetActivationMemoryBytesLimit(0)
        s.SetVariableShardBytesLimit(0)
    s.AddTable("a", ha, width, "g", sa, 1)
    s.AddTable("b", hb, width, "g", sb, 1)
    return s.GetLayouts().tables[0].stacked_table_name == "a_b"


def test_default_limits_are_tensorflows() -> None:
    conclusion = _load("tf_stacker_defaults.json")["conclusion"]
    assert st.ACTIVATION_MEMORY_BYTES_LIMIT == conclusion["activation_memory_bytes_limit"]
    assert st.VARIABLE_SHARD_BYTES_LIMIT == conclusion["variable_shard_bytes_limit"]
    assert st.STACKED_ROW_LIMIT == conclusion["row_limit"] == 2**31 - 1


def test_activation_boundary() -> None:
    """Width 8, one SparseCore: 4 x 8 = 32 bytes per sample. 65535 samples = 2,097,120 bytes
    stacks (TensorFlow's largest stacking total); 65536 = 2,097,152 = the limit is refused."""
    probed = _load("tf_stacker_defaults.json")["probed_activation_limit"]
    assert 32 * 65535 == probed["largest_stacking_total_bytes"]
    assert 32 * 65536 == probed["smallest_refused_total_bytes"]
    assert _stacks(8, 8, 8, 0, 65535)
    assert not _stacks(8, 8, 8, 0, 65536)
    assert not _stacks(8, 8, 8, 0, 65537)
    assert _stacks(8, 8, 8, 65534, 1)  # the stack's total counts, not the table's alone


def test_shard_boundary() -> None:
    """Width 512: 4 x 512 = 2048 bytes per row. Table a has 8 rows; b of 1,048,560 rows makes
    2048 x 1,048,568 = 2,147,467,264 bytes (stacks); b of 1,048,561 rows pads to 1,048,568:
    2048 x 1,048,576 = 2^31 bytes = the limit (refused)."""
    probed = _load("tf_stacker_defaults.json")["probed_variable_shard_limit"]
    assert 2048 * (8 + 1_048_560) == probed["largest_stacking_total_bytes"]
    assert 2048 * (8 + 1_048_568) == probed["smallest_refused_total_bytes"]
    assert _stacks(8, 1_048_560, 512, 0, 0)
    assert not _stacks(8, 1_048_561, 512, 0, 0)
    assert not _stacks(8, 1_048_568, 512, 0, 0)


def test_row_boundary_applies_with_the_other_limits_off() -> None:
    """8 + 2^31 - 16 = 2^31 - 8 padded rows stack; 8 + 2^31 - 8 = 2^31 >= 2^31 - 1 is refused
    (padded totals are multiples of 8, so 2^31 - 1 itself is never reached)."""
    probed = _load("tf_stacker_defaults.json")["probed_row_limit"]
    assert 8 + (2**31 - 16) == probed["largest_stacking_total_padded_rows"]
    assert 8 + (2**31 - 8) == probed["smallest_refused_total_padded_rows"]
    assert _stacks(8, 2**31 - 16, 8, 0, 0, limits_off=True)
    assert not _stacks(8, 2**31 - 15, 8, 0, 0, limits_off=True)


@pytest.mark.parametrize(("limit", "samples", "stacked"), [
    (64, 1, True),     # 32 + 0 < 64
    (64, 2, False),    # 64 >= 64: refused at equality
    (0, 10**9, True),  # 0: no activation limit
    (-1, 0, False),    # 0 >= -1: a negative limit refuses every join
])
def test_activation_limit_setter(limit: int, samples: int, stacked: bool) -> None:
    s = SparseCoreLayoutStacker(1, False, 1)
    s.SetActivationMemoryBytesLimit(limit)
    s.AddTable("a", 8, 8, "g", 0, 0)
    s.AddTable("b", 8, 8, "g", samples, 0)
    assert (s.GetLayouts().tables[0].stacked_table_name == "a_b") is stacked


@pytest.mark.parametrize(("limit", "stacked"), [
    (513, True),   # 256 + 256 = 512 < 513
    (512, False),  # refused at equality
    (0, True),     # off
    (-5, False),   # negative: refuses
])
def test_shard_limit_setter(limit: int, stacked: bool) -> None:
    """8 rows x width 8 x 4 bytes = 256 shard bytes per table (one chip)."""
    s = SparseCoreLayoutStacker(1, False, 1)
    s.SetVariableShardBytesLimit(limit)
    s.AddTable("a", 8, 8, "g", 0, 0)
    s.AddTable("b", 8, 8, "g", 0, 0)
    assert (s.GetLayouts().tables[0].stacked_table_name == "a_b") is stacked


def test_negative_values_use_cpp_division() -> None:
    """C++ truncates toward zero: -7 samples / 2 SparseCores = -3 (Python's -7 // 2 is -4);
    height -5 pads to -5 + 16 - (-5 % 16 = -5) = 16 (8N = 16 with N = 2)."""
    s = SparseCoreLayoutStacker(1, False, 2)
    s.AddTable("a", -5, 8, "g", -7, 0)
    t = s.GetLayouts().tables[0]
    assert t.per_sparse_core_batch_size == -3
    assert list(t.unsharded_padded_shape) == [16, 8]
    assert t.total_rows_per_sparse_core_shard == 8
