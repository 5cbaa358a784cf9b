"""TensorFlow's checkpoint format, read and written by tpuemb (tpuemb_cfg.formats.bundle), against
checkpoints TensorFlow 2.21 wrote and read (tests/data/checkpoints/README.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tpuemb_cfg.base.errors import InputError, OutputError
from tpuemb_cfg.formats import bundle, crc32c, sstable
from tpuemb_cfg.formats.bundle import BundleReader, BundleWriter, write_object_checkpoint
from tpuemb_cfg.formats.ordered_code import decode_slice_key, encode_slice_key
from tpuemb_cfg.model.checkpoint import checkpoint_key
from tpuemb_cfg.proto.tensor_bundle_pb2 import BundleEntryProto, BundleHeaderProto

DATA = Path(__file__).parent / "data" / "checkpoints"
TF = json.loads((DATA / "tf.json").read_text())
OURS = json.loads((DATA / "tpuemb.json").read_text())
CASES = ["mid_level", "sparsecore", "dtypes"]
SUFFIXES = (".index", ".data-00000-of-00001")
WIDE_NAMES = [f"v{i:03d}_" + "x" * 3000 for i in range(100)]


def digest(value: Any) -> str:
    """The generator's digest: C-order bytes, or each string's 8-byte length and bytes."""
    if isinstance(value, list):
        return hashlib.sha256(b"".join(len(i).to_bytes(8, "little") + i for i in value)
                              ).hexdigest()
    return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()


def summary(mapping: dict[str, Any]) -> str:
    lines = "".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(mapping.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def tf_prefix(name: str) -> str:
    return str(DATA / "tf" / name)


def local_values(prefix: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The variables (local name -> value) and scalar strings of a TF2 checkpoint."""
    variables: dict[str, Any] = {}
    strings: dict[str, bytes] = {}
    with BundleReader(prefix) as reader:
        for path, key in reader.variables().items():
            local = path.split("/", 1)[1]
            value = reader.read(key)
            if isinstance(value, list) and reader.entry(key).shape == ():
                strings[local] = value[0]
            elif isinstance(value, list):
                variables[local] = np.array(value, dtype=object)
            else:
                variables[local] = value
    return variables, strings


# --- reading what TensorFlow wrote ---------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_reads_tensorflow_checkpoints_bit_for_bit(name: str) -> None:
    case = TF["cases"][name]
    stored = np.load(DATA / "tf" / f"{name}.npz")
    with BundleReader(tf_prefix(name)) as reader:
        assert sorted(reader.keys()) == sorted(case["shapes"])
        for key in reader.keys():
            entry = reader.entry(key)
            assert list(entry.shape) == case["shapes"][key]
            value = reader.read(key)
            reader.verify(key)
            if key == bundle.OBJECT_GRAPH_KEY:
                assert isinstance(value, list)
                assert hashlib.sha256(value[0]).hexdigest() == case["object_graph_sha256"]
            elif key in case["strings"]:
                assert value == [bytes.fromhex(h) for h in case["strings"][key]]
            else:
                assert isinstance(value, np.ndarray)
                assert value.dtype == stored[key].dtype and value.shape == stored[key].shape
                assert value.tobytes() == stored[key].tobytes()


def test_sparsecore_checkpoint_is_partitioned_and_reads_whole_and_by_rows() -> None:
    stored = np.load(DATA / "tf" / "sparsecore.npz")
    key = checkpoint_key("embedding", "item_user/accumulators")
    with BundleReader(tf_prefix("sparsecore")) as reader:
        entry = reader.entry(key)
        assert entry.sliced and entry.shape == (192, 8)
        # 2 chips: two slices of 96 rows; a row range across the boundary reads both
        assert np.array_equal(reader.read_rows(key, 90, 100), stored[key][90:100])
        assert np.array_equal(reader.read_rows(key, 0, 0), stored[key][:0])
        assert reader.variables() == {
            "embedding/" + n: checkpoint_key("embedding", n)
            for n in ("_sparse_core_table_layouts", "cat", "cat/accumulators", "item_user",
                      "item_user/accumulators")}
        layouts = reader.read(checkpoint_key("embedding", "_sparse_core_table_layouts"))
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

    parsed = SparseCoreTableLayouts.FromString(layouts[0])
    assert [t.table_name for t in parsed.tables] == ["cat", "item", "user"]


def test_row_ranges_of_an_unpartitioned_tensor() -> None:
    stored = np.load(DATA / "tf" / "dtypes.npz")
    key = checkpoint_key("embedding", "odd")
    with BundleReader(tf_prefix("dtypes")) as reader:
        assert np.array_equal(reader.read_rows(key, 1, 3), stored[key][1:3])
        with pytest.raises(InputError, match="rows 2:4 are outside"):
            reader.read_rows(key, 2, 4)
        with pytest.raises(InputError, match="string tensor"):
            reader.read_rows(checkpoint_key("embedding", "words"), 0, 1)


def test_slice_keys_as_tensorflow_writes_them() -> None:
    with BundleReader(tf_prefix("sparsecore")) as reader:
        slices = reader._slices  # the decoded keys of TensorFlow's own index
    raw = [k for k, _ in sstable.read_table(
        Path(tf_prefix("sparsecore") + ".index").read_bytes(), "x") if k.startswith(b"\x00")]
    assert len(raw) == sum(len(v) for v in slices.values()) == 8
    for key in raw:
        assert encode_slice_key(*decode_slice_key(key)) == key
    assert decode_slice_key(raw[0])[1] == [(0, 32), (0, 16)]
    for value in (0, 63, 64, -1, -65, 96, 8191, 8192, 2**40, -(2**40)):
        assert decode_slice_key(encode_slice_key("a\x00\xff", [(value, -1)])) == (
            "a\x00\xff", [(value, -1)])


# --- writing TensorFlow's bytes -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mid_level", "dtypes", "wide_index"])
def test_writer_repeats_tensorflows_bytes(name: str, tmp_path: Path) -> None:
    """Every tensor of a TensorFlow checkpoint added in its data order: the same two files."""
    with BundleReader(tf_prefix(name)) as reader:
        entries = sorted((reader.entry(k) for k in reader.keys()), key=lambda e: e.offset)
        with BundleWriter(tmp_path / "copy") as writer:
            for entry in entries:
                value = reader.read(entry.key)
                if isinstance(value, list) and entry.shape == ():
                    writer.add(entry.key, value[0])
                elif isinstance(value, list):
                    writer.add(entry.key, np.array(value, dtype=object).reshape(entry.shape))
                else:
                    writer.add(entry.key, value)
    for suffix in SUFFIXES:
        assert (tmp_path / f"copy{suffix}").read_bytes() == Path(
            tf_prefix(name) + suffix).read_bytes()


@pytest.mark.parametrize("name", ["dtypes", "wide_index"])
def test_object_checkpoint_of_a_module_is_tensorflows(name: str, tmp_path: Path) -> None:
    variables, strings = local_values(tf_prefix(name))
    write_object_checkpoint(tmp_path / name, variables, strings=strings)
    for suffix in SUFFIXES:
        assert (tmp_path / f"{name}{suffix}").read_bytes() == Path(
            tf_prefix(name) + suffix).read_bytes()


# --- what TensorFlow read from tpuemb's checkpoints -----------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_tensorflow_reads_what_tpuemb_writes(name: str, tmp_path: Path) -> None:
    """Today's writer makes the stored files, and TensorFlow read exactly the saved values."""
    variables, strings = local_values(tf_prefix(name))
    write_object_checkpoint(tmp_path / name, variables, strings=strings)
    for suffix in SUFFIXES:
        assert (tmp_path / f"{name}{suffix}").read_bytes() == (
            DATA / "tpuemb" / f"{name}{suffix}").read_bytes()
    case = OURS["cases"][name]
    assert case["same_bytes_as_tensorflow"][".index"] == (name == "dtypes")
    with BundleReader(tf_prefix(name)) as reader:
        expected = {k: digest(reader.read(k)) for k in reader.keys()
                    if k != bundle.OBJECT_GRAPH_KEY}
    assert case["load_checkpoint"] == expected
    for local, value in case["restore"].items():
        assert value == expected[checkpoint_key("embedding", local)]
    assert len(case["restore"]) == len(variables)


def test_tensorflow_read_the_wide_index() -> None:
    expected = {checkpoint_key("embedding", n): digest(np.float32(i) / np.float32(3))
                for i, n in enumerate(WIDE_NAMES)}
    case = OURS["cases"]["wide_index"]
    assert case["load_checkpoint"] == summary(expected)
    assert case["restore"] == summary({n: expected[checkpoint_key("embedding", n)]
                                       for n in WIDE_NAMES})
    assert case["same_bytes_as_tensorflow"] == {".index": True, ".data-00000-of-00001": True}
    with BundleReader(tf_prefix("wide_index")) as reader:
        assert {k: digest(reader.read(k)) for k in reader.keys()
                if k != bundle.OBJECT_GRAPH_KEY} == expected


# --- round trips and streaming -------------------------------------------------------------------

def test_round_trip_and_streaming_larger_than_a_chunk(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "CHUNK_BYTES", 64)
    table = np.arange(50 * 6, dtype=np.float32).reshape(50, 6) / 7
    chunks = (table[i:i + 7] for i in range(0, 50, 7))
    with BundleWriter(tmp_path / "streamed") as writer:
        writer.add_rows("t", table.shape, table.dtype, chunks)
        writer.add("ids", np.arange(5, dtype=np.int64))
        writer.add("s", [b"a", b"", b"ccc"])
    with BundleWriter(tmp_path / "whole") as writer:
        writer.add("t", table)
        writer.add("ids", np.arange(5, dtype=np.int64))
        writer.add("s", [b"a", b"", b"ccc"])
    for suffix in SUFFIXES:
        assert (tmp_path / f"streamed{suffix}").read_bytes() == (
            tmp_path / f"whole{suffix}").read_bytes()
    with BundleReader(tmp_path / "streamed") as reader:
        assert reader.keys() == ["ids", "s", "t"]
        assert np.array_equal(reader.read("t"), table)
        assert np.array_equal(reader.read_rows("t", 13, 41), table[13:41])
        reader.verify("t")
        assert reader.read("s") == [b"a", b"", b"ccc"]
        assert reader.object_graph() is None and reader.variables() == {}
        entry = reader.entry("t")
    assert entry.size == table.nbytes and crc32c.unmask(entry.crc32c) == crc32c.crc32c(
        table.tobytes())


def test_add_rows_refuses_chunks_that_do_not_make_the_shape(tmp_path: Path) -> None:
    message = "hold 12 bytes, its shape \\(4, 3\\) of float32 takes 48"
    with pytest.raises(ValueError, match=message), BundleWriter(tmp_path / "short") as writer:
        writer.add_rows("t", (4, 3), np.float32, [np.zeros((4, 3), np.float32)[:1]])
    assert list(tmp_path.iterdir()) == []


def test_crc32c_known_values_and_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    assert crc32c.unmask(crc32c.mask(0xE3069283)) == 0xE3069283
    data = np.random.default_rng(3).integers(0, 256, 20000, dtype=np.uint8).tobytes()
    compiled = crc32c.crc32c(data)
    assert crc32c.crc32c(data[7000:], crc32c.crc32c(data[:7000])) == compiled
    monkeypatch.setattr(crc32c, "_kernel", False)  # the byte-at-a-time path
    assert crc32c.crc32c(data) == compiled


# --- hostile inputs -----------------------------------------------------------------------------

def copy_case(tmp_path: Path, name: str = "dtypes") -> str:
    for suffix in SUFFIXES:
        shutil.copy(tf_prefix(name) + suffix, tmp_path / f"{name}{suffix}")
    return str(tmp_path / name)


def read_everything(prefix: str) -> None:
    with BundleReader(prefix) as reader:
        for key in reader.keys():
            reader.read(key)


def flip(path: str, offset: int) -> None:
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0x40
    Path(path).write_bytes(bytes(data))


def forged_index(prefix: str, entries: dict[str, BundleEntryProto], shards: int = 1) -> None:
    header = BundleHeaderProto(num_shards=shards)
    header.version.producer = 1
    table = [(b"", header.SerializeToString())] + sorted(
        (k.encode(), v.SerializeToString()) for k, v in entries.items())
    Path(prefix + ".index").write_bytes(sstable.build_table(table))


def entry_of(dtype: int, shape: list[int], offset: int, size: int) -> BundleEntryProto:
    entry = BundleEntryProto(dtype=dtype, offset=offset, size=size)  # type: ignore[arg-type]
    for dim in shape:
        entry.shape.dim.add(size=dim)
    return entry


def test_hostile_index_files(tmp_path: Path) -> None:
    prefix = copy_case(tmp_path)
    index = prefix + ".index"
    good = Path(index).read_bytes()
    cases = [
        (good[:-10], "bad magic number"),
        (good[:30], "shorter than a table's 48-byte footer"),
        (b"", "shorter than a table's 48-byte footer"),
        (good[:-8] + b"\x00" * 8, "bad magic number"),
        (good[:100] + bytes([good[100] ^ 1]) + good[101:], "CRC-32C does not match"),
    ]
    for data, message in cases:
        Path(index).write_bytes(data)
        with pytest.raises(InputError, match=message) as caught:
            read_everything(prefix)
        assert str(caught.value).startswith(index)
    os.remove(index)
    with pytest.raises(InputError, match="index file is missing"):
        BundleReader(prefix)


def test_hostile_data_files(tmp_path: Path) -> None:
    prefix = copy_case(tmp_path)
    data = prefix + ".data-00000-of-00001"
    key = checkpoint_key("embedding", "odd")
    with BundleReader(prefix) as reader:
        entry = reader.entry(key)
    flip(data, entry.offset + 5)
    with pytest.raises(InputError, match="does not match its CRC-32C") as caught:
        with BundleReader(prefix) as reader:
            reader.read(key)
    assert str(caught.value).startswith(f"{data}: byte {entry.offset}") and key in str(caught.value)
    with pytest.raises(InputError, match="does not match its CRC-32C"), \
            BundleReader(prefix) as reader:
        reader.verify(key)
    Path(data).write_bytes(Path(data).read_bytes()[:entry.offset + 3])
    with pytest.raises(InputError, match="past the end of its .*truncated"), \
            BundleReader(prefix) as reader:
        reader.read(key)
    os.remove(data)
    with pytest.raises(InputError, match="missing data shard 0 of 1") as caught, \
            BundleReader(prefix) as reader:
        reader.read(key)
    assert str(caught.value).startswith(data)


def test_hostile_string_tensor(tmp_path: Path) -> None:
    prefix = copy_case(tmp_path)
    key = checkpoint_key("embedding", "words")
    with BundleReader(prefix) as reader:
        entry = reader.entry(key)
    flip(prefix + ".data-00000-of-00001", entry.offset)  # the first length
    with pytest.raises(InputError, match="lengths of the string tensor .* do not match"), \
            BundleReader(prefix) as reader:
        reader.read(key)


@pytest.mark.parametrize(("entry", "message"), [
    (entry_of(1, [2**40, 2**40], 0, 16), "takes 4835703278458516698824704"),
    (entry_of(1, [2, 2], 0, 15), "says 15 bytes"),
    (entry_of(1, [-1, 2], 0, 0), "invalid shape"),
    (entry_of(21, [1], 0, 8), "DT_VARIANT, which tpuemb does not read"),
    (entry_of(1, [2, 2], 10**12, 16), "lies past the end"),
    (entry_of(7, [100], 0, 10), "at least 104"),
])
def test_forged_entries(tmp_path: Path, entry: BundleEntryProto, message: str) -> None:
    prefix = str(tmp_path / "forged")
    Path(prefix + ".data-00000-of-00001").write_bytes(bytes(64))
    forged_index(prefix, {"t": entry})
    with pytest.raises(InputError, match=message) as caught:
        read_everything(prefix)
    assert "'t'" in str(caught.value)


def test_forged_headers_and_shards(tmp_path: Path) -> None:
    prefix = str(tmp_path / "forged")
    entry = entry_of(1, [1], 0, 4)
    entry.shard_id = 3
    forged_index(prefix, {"t": entry}, shards=2)
    with pytest.raises(InputError, match="points to shard 3"):
        read_everything(prefix)
    forged_index(prefix, {"t": entry}, shards=0)
    with pytest.raises(InputError, match="0 data shards"):
        read_everything(prefix)
    Path(prefix + ".index").write_bytes(sstable.build_table([(b"", b"\xff\xff")]))
    with pytest.raises(InputError, match="not a BundleHeaderProto"):
        read_everything(prefix)
    Path(prefix + ".index").write_bytes(sstable.build_table([(b"a", b"")]))
    with pytest.raises(InputError, match="no header entry"):
        read_everything(prefix)
    header = BundleHeaderProto(num_shards=1, endianness=BundleHeaderProto.BIG)
    Path(prefix + ".index").write_bytes(sstable.build_table([(b"", header.SerializeToString())]))
    with pytest.raises(InputError, match="big-endian"):
        read_everything(prefix)


def test_partitioned_tensor_missing_a_slice(tmp_path: Path) -> None:
    prefix = copy_case(tmp_path, "sparsecore")
    table = sstable.read_table(Path(prefix + ".index").read_bytes(), "x")
    kept = [(k, v) for k, v in table if k != next(k for k, _ in table if k.startswith(b"\x00"))]
    Path(prefix + ".index").write_bytes(sstable.build_table(kept))
    with pytest.raises(InputError, match="slices hold 512 of its 1024 elements"):
        read_everything(prefix)


def test_table_blocks_and_separators() -> None:
    entries = [(f"k{i:05d}".encode() + b"y" * 300, bytes([i % 256]) * 50) for i in range(2000)]
    data = sstable.build_table(entries)
    assert sstable.read_table(data, "x") == entries
    with pytest.raises(ValueError, match="must increase"):
        sstable.build_table([(b"b", b""), (b"a", b"")])
    trailer = struct.unpack_from("<Q", data, len(data) - 8)[0]
    assert trailer == sstable.MAGIC


# --- atomic writes --------------------------------------------------------------------------------

def test_nothing_left_after_an_error_or_ctrl_c(tmp_path: Path) -> None:
    def chunks() -> Any:
        yield np.zeros((2, 3), np.float32)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), BundleWriter(tmp_path / "ck") as writer:
        writer.add("a", np.ones(3, np.float32))
        writer.add_rows("b", (4, 3), np.float32, chunks())
    with pytest.raises(RuntimeError), BundleWriter(tmp_path / "ck") as writer:
        writer.add("a", np.ones(3, np.float32))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_existing_checkpoint_replaced_whole(tmp_path: Path) -> None:
    write_object_checkpoint(tmp_path / "ck", {"t": np.zeros((2, 2), np.float32)})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(RuntimeError), BundleWriter(tmp_path / "ck") as writer:
        writer.add("t", np.ones(3, np.float32))
        raise RuntimeError("boom")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    write_object_checkpoint(tmp_path / "ck", {"t": np.ones((2, 2), np.float32)})
    with BundleReader(tmp_path / "ck") as reader:
        assert np.array_equal(reader.read(checkpoint_key("embedding", "t")), np.ones((2, 2)))


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_planted_symlink_is_not_followed(tmp_path: Path, suffix: str) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    (tmp_path / f"ck{suffix}").symlink_to(victim)
    with pytest.raises(OutputError, match="symbolic link"):
        write_object_checkpoint(tmp_path / "ck", {"t": np.zeros(2, np.float32)})
    assert victim.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["victim", f"ck{suffix}"])


def test_never_over_an_input(tmp_path: Path) -> None:
    prefix = copy_case(tmp_path)
    from tpuemb_cfg.base.errors import UsageError

    with pytest.raises(UsageError, match="same file as the input"):
        BundleWriter(prefix, inputs=[prefix + ".index"])


def snapshot(prefix: str) -> dict[str, bytes]:
    with BundleReader(prefix) as reader:
        out = {}
        for key in reader.keys():
            value = reader.read(key)
            out[key] = b"".join(value) if isinstance(value, list) else value.tobytes()
        return out


def unread_bytes(index: bytes) -> set[int]:
    """The index bytes no reader looks at: the footer's zero padding after its two handles."""
    footer = len(index) - sstable.FOOTER_SIZE
    pos = footer
    for _ in range(4):
        _, pos = sstable.read_varint(index, pos, len(index))
    return set(range(pos, footer + 40))


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_every_flipped_byte_and_every_truncation_is_one_input_error(tmp_path: Path,
                                                                    suffix: str) -> None:
    """Each byte of the index / data file flipped, and the file cut at every length: one
    InputError naming the file, or for a byte nothing reads the same tensors."""
    prefix = copy_case(tmp_path, "mid_level")
    path = prefix + suffix
    good = Path(path).read_bytes()
    expected = snapshot(prefix)
    step = 1 if suffix == ".index" else 7
    unread = unread_bytes(good) if suffix == ".index" else set()
    variants = [(i, good[:i] + bytes([good[i] ^ 0x41]) + good[i + 1:])
                for i in range(0, len(good), step)]
    variants += [(-1, good[:n]) for n in range(0, len(good), step)]
    for where, data in variants:
        Path(path).write_bytes(data)
        try:
            got = snapshot(prefix)
        except InputError as exc:
            assert str(exc).startswith(path), str(exc)
            assert where not in unread
            continue
        assert where in unread and got == expected


def test_writer_takes_any_byte_order_and_refuses_what_tensorflow_cannot_hold(
        tmp_path: Path) -> None:
    big = np.arange(6, dtype=">f4").reshape(2, 3)
    with BundleWriter(tmp_path / "ck") as writer:
        writer.add("big", big)
        with pytest.raises(ValueError, match="dtype object"):
            writer.add("fixed", np.array([b"a\x00"]))
        with pytest.raises(ValueError, match="no TensorFlow DataType"):
            writer.add("when", np.array(["2020-01-01"], dtype="datetime64[D]"))
        with pytest.raises(ValueError, match="added already"):
            writer.add("big", big)
        with pytest.raises(ValueError, match="elements must be bytes"):
            writer.add("words", ["text"])  # type: ignore[list-item]
    with BundleReader(tmp_path / "ck") as reader:
        assert reader.keys() == ["big"]
        value = reader.read("big")
        assert isinstance(value, np.ndarray) and value.dtype == np.dtype("<f4")
        assert np.array_equal(value, big)


def test_a_tensor_cut_short_abandons_the_write(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nothing was written"), \
            BundleWriter(tmp_path / "ck") as writer:
        with pytest.raises(ValueError, match="does not fit rows"):  # nothing written yet
            writer.add_rows("a", (2, 3), np.float32, [np.zeros((2, 4), np.float32)])
        writer.add("b", np.ones(2, np.float32))
        with pytest.raises(ValueError, match="does not fit rows"):
            writer.add_rows("c", (4, 3), np.float32, [np.zeros((2, 3), np.float32),
                                                      np.zeros((2, 4), np.float32)])
        assert list(tmp_path.iterdir()) == []
        with pytest.raises(ValueError, match="abandoned after an error"):
            writer.add("d", np.ones(2, np.float32))
    assert list(tmp_path.iterdir()) == []


def test_object_checkpoint_streamed_and_nested(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "CHUNK_BYTES", 32)
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    write_object_checkpoint(
        tmp_path / "ck", {"t.v1": iter([table[:3], table[3:]]), "t.v1/slot": table * 2},
        object_path="model/embedding", strings={"_sparse_core_table_layouts": b"\x0a\x00"},
        shapes={"t.v1": ((10, 4), np.float32)})
    with BundleReader(tmp_path / "ck") as reader:
        found = reader.variables()
        assert found == {
            "model/embedding/t.v1": "model/embedding/t..v1/.ATTRIBUTES/VARIABLE_VALUE",
            "model/embedding/t.v1/slot": "model/embedding/t..v1.Sslot/.ATTRIBUTES/VARIABLE_VALUE",
            "model/embedding/_sparse_core_table_layouts":
                "model/embedding/_sparse_core_table_layouts/.ATTRIBUTES/VARIABLE_VALUE"}
        assert np.array_equal(reader.read(found["model/embedding/t.v1"]), table)
        assert np.array_equal(reader.read_rows(found["model/embedding/t.v1/slot"], 2, 9),
                              table[2:9] * 2)
        assert reader.read(found["model/embedding/_sparse_core_table_layouts"]) == [b"\x0a\x00"]
        graph = reader.object_graph()
    assert [c.local_name for c in graph.nodes[0].children] == ["model"]
    assert all(node.has_checkpoint_values.value for node in graph.nodes)
