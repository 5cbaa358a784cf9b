"""The compiled TFRecord reader (``planner.tfrecord_kernels``) against the reference (protobuf's
parser, ``planner.tfrecord.read_tfrecord_reference``): on generated records, canonical and
hostile (truncated varints, wrong wire types, huge lengths, unknown fields, keys twice, bad
CRCs, truncated files), both give the same batches and ignored names, or the same error at the
same record. The records are encoded here by hand from the protobuf wire format, not by
protobuf."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import derandomized, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuemb_cfg.planner import inputs, samples, tfrecord
from tpuemb_cfg.planner.inputs import (
    SampleError,
    SampleFeature,
    SampleSchema,
    masked_crc32c,
    open_sample,
    write_tfrecord,
)

pytest.importorskip("numba")
try:
    from tpuemb_cfg.planner import tfrecord_kernels  # noqa: F401  (numba switched off: skip)
except ImportError:
    pytest.skip("numba is switched off", allow_module_level=True)

SCHEMA = SampleSchema((SampleFeature("f0", "a", 1000, 2), SampleFeature("f1", "b", 50, 2)))
COUNT = examples(150, long=5000)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _len(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def _feature(kind: str, values: list[int]) -> bytes:
    if kind == "packed":
        return _len(3, _len(1, b"".join(_varint(v) for v in values)) if values else b"")
    if kind == "unpacked":
        return _len(3, b"".join(_key(1, 0) + _varint(v) for v in values))
    if kind == "float":
        return _len(2, _len(1, struct.pack(f"<{len(values)}f", *values)))
    if kind == "bytes":
        return _len(1, b"".join(_len(1, str(v).encode()) for v in values))
    return b""  # a Feature without a kind


def _example(entries: list[tuple[str, bytes]]) -> bytes:
    return _len(1, b"".join(_len(1, _len(1, k.encode()) + _len(2, f)) for k, f in entries))


def _frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc32c(length)) + data
            + struct.pack("<I", masked_crc32c(data)))


ids = st.one_of(st.integers(0, 60), st.integers(-3, 1100), st.integers(-(2**63), 2**63 - 1))
kinds = st.sampled_from(["packed"] * 6 + ["unpacked", "float", "bytes", "none"])
entry = st.tuples(st.sampled_from(["f0", "f1", "f0", "f1", "x", "label", "é"]), kinds,
                  st.lists(ids, max_size=5))


@st.composite
def records(draw: Any) -> list[bytes]:
    """Examples whose configured features are mostly int64 lists of small ids, with now and
    then a missing feature, another kind, an extra or repeated key."""
    out = []
    for _ in range(draw(st.integers(1, 9))):
        entries = [("f0", "packed", draw(st.lists(st.integers(0, 999), max_size=4))),
                   ("f1", "packed", draw(st.lists(st.integers(0, 49), max_size=4)))]
        if draw(st.integers(0, 3)) == 0:
            entries += draw(st.lists(entry, max_size=3))
        if draw(st.integers(0, 5)) == 0:
            entries = draw(st.permutations(entries))[:draw(st.integers(0, len(entries)))]
        out.append(_example([(k, _feature(kind, v)) for k, kind, v in entries]))
    return out


def _mutate(data: bytes, how: str, at: int, junk: bytes) -> bytes:
    at %= max(len(data), 1)
    if how == "truncate":
        return data[:at]
    if how == "flip":
        return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:] if data else data
    if how == "insert":
        return data[:at] + junk + data[at:]
    if how == "huge length":
        return _key(1, 2) + _varint(2**62) + data
    if how == "wire type 6":
        return data + _key(1, 6)
    if how == "long varint":  # an int64 list of one eleven-byte varint
        return _example([("f0", _len(3, _len(1, b"\xff" * 10 + b"\x01")))])
    if how == "tenth byte 2":
        return _example([("f0", _len(3, _len(1, b"\xff" * 9 + b"\x02"))), ("f1", b"")])
    if how == "unknown field":
        return data + _key(7, 0) + _varint(at)
    f1 = ("f1", _feature("packed", [at % 50]))
    if how == "truncated varint":  # a packed run whose last varint continues past it
        return _example([("f0", _len(3, _len(1, b"\x05" + bytes([0x80 | at % 128])))), f1])
    if how == "list past its feature":  # an Int64List length beyond the Feature
        return _example([("f0", _key(3, 2) + _varint(5) + _len(1, b"\x01\x02")), f1])
    if how == "int64_list as a varint":  # wire type 0 where a message is
        return _example([("f0", _key(3, 0) + _varint(at)), f1])
    if how == "packed as fixed64":
        return _example([("f0", _len(3, _key(1, 1) + struct.pack("<q", at))), f1])
    return data


HOSTILE = ["truncate", "flip", "insert", "huge length", "wire type 6", "long varint",
           "tenth byte 2", "unknown field", "truncated varint", "list past its feature",
           "int64_list as a varint", "packed as fixed64"]
# half of the files are left whole: the kernels' own decoding is compared as often
mutations = st.tuples(st.sampled_from(["none"] * len(HOSTILE) + HOSTILE),
                      st.integers(0, 10_000), st.binary(min_size=1, max_size=6))


def _outcome(path: Path, reader: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setitem(inputs._READERS, "tfrecord", reader)
    try:
        sample = open_sample(str(path), SCHEMA)
        batches = [{n: (b.values.tolist(), b.row_splits.tolist()) for n, b in batch.items()}
                   for batch in sample]
    except SampleError as exc:
        return "error", str(exc)
    return batches, sorted(sample.stats.ignored), sample.stats.leftover_bags


def _both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    return (_outcome(path, tfrecord.read_tfrecord, monkeypatch),
            _outcome(path, tfrecord.read_tfrecord_reference, monkeypatch))


@settings(max_examples=COUNT, deadline=None, derandomize=derandomized(COUNT),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=records(), mutation=mutations, target=st.integers(0, 100),
       framing=st.sampled_from(["good"] * 9 + ["cut", "crc", "length"]))
def test_compiled_and_reference_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      rows: list[bytes], mutation: tuple[str, int, bytes],
                                      target: int, framing: str) -> None:
    # small windows and reads: records span reads, several windows per file
    monkeypatch.setattr(samples, "ROWS_PER_READ", 3)
    monkeypatch.setattr(tfrecord, "_CHUNK", 37)
    i = target % len(rows)
    rows = [*rows[:i], _mutate(rows[i], *mutation), *rows[i + 1:]]
    data = b"".join(_frame(r) for r in rows)
    cut = mutation[1] % len(data)
    if framing == "cut":
        data = data[:cut]
    elif framing == "crc":
        data = data[:cut] + bytes([data[cut] ^ 0x10]) + data[cut + 1:]
    elif framing == "length":  # a record declaring 2^40 bytes
        length = struct.pack("<Q", 2**40)
        data += length + struct.pack("<I", masked_crc32c(length)) + b"\0" * 8
    path = tmp_path / "s.tfrecord"
    path.write_bytes(data)
    compiled, reference = _both(path, monkeypatch)
    assert compiled == reference


def test_canonical_records_never_reach_protobuf(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow's encoding (protobuf's serializer), an extra float feature, negative and
    64-bit ids: decoded by the kernels alone, as protobuf decodes them."""
    rng = np.random.default_rng(3)
    rows = [{"f0": rng.integers(0, 1000, rng.integers(0, 5)).tolist(),
             "f1": rng.integers(0, 50, rng.integers(0, 5)).tolist(), "label": [1]}
            for _ in range(40)]
    path = tmp_path / "s.tfrecord"
    with open(path, "wb") as handle:
        write_tfrecord(handle, rows)
    calls: list[int] = []
    reference = tfrecord.decode

    def counted(*args: Any) -> Any:
        calls.append(1)
        return reference(*args)

    monkeypatch.setattr(tfrecord, "decode", counted)
    monkeypatch.setattr(samples, "ROWS_PER_READ", 7)
    monkeypatch.setattr(tfrecord, "_CHUNK", 100)
    compiled = _outcome(path, tfrecord.read_tfrecord, monkeypatch)
    assert calls == [] and compiled[1] == ["label"]
    assert compiled[0][0]["f0"] == ([v for r in rows[:2] for v in r["f0"]],
                                    np.cumsum([0, len(rows[0]["f0"]), len(rows[1]["f0"])]).tolist())
    monkeypatch.setattr(tfrecord, "decode", reference)
    assert compiled == _outcome(path, tfrecord.read_tfrecord_reference, monkeypatch)
    # an id of 64 bits (ten-byte varint) is read as protobuf reads it, then refused by range
    path.write_bytes(_frame(_example([("f0", _feature("packed", [2**63 + 5, 1])),
                                      ("f1", _feature("packed", []))])) * 2)
    compiled, reference_outcome = _both(path, monkeypatch)
    assert compiled == reference_outcome
    assert compiled[1].endswith(f"id {-(2**63) + 5} at position 0 of feature 'f0' is outside "
                                "table 'a': ids must be in [0, 1000)")
