"""Samples of ids for ``tpuemb plan`` (tpuemb_cfg.planner.inputs): every format, the rescaling
rule, the TFRecord framing against independently computed CRCs, and bad input named at its file,
key, column or record."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from tpuemb_cfg.planner.inputs import (
    SampleError,
    SampleFeature,
    SampleSchema,
    crc32c,
    masked_crc32c,
    open_sample,
    write_tfrecord,
)

SCHEMA = SampleSchema((SampleFeature("f0", "a", 100, 4), SampleFeature("f1", "b", 10, 4)))
# eight rows: f0 bags of 0..2 ids, f1 one id each
ROWS = [
    {"f0": [1, 2], "f1": [3]}, {"f0": [], "f1": [4]}, {"f0": [5], "f1": [5]},
    {"f0": [6, 7, 8], "f1": [6]}, {"f0": [9], "f1": [7]}, {"f0": [10], "f1": [8]},
    {"f0": [11, 12], "f1": [9]}, {"f0": [13], "f1": [0]},
]


def _expected(rows: list[dict[str, list[int]]], name: str, bags: int) -> list[list[list[int]]]:
    """The rows' bags of ``name`` cut into consecutive batches of ``bags`` (leftover dropped)."""
    column = [r[name] for r in rows]
    return [column[i:i + bags] for i in range(0, len(column) - bags + 1, bags)]


def _bags(batch: object) -> list[list[int]]:
    values, splits, _ = batch  # type: ignore[misc]
    return [values[splits[i]:splits[i + 1]].tolist() for i in range(len(splits) - 1)]


def _npz(path: Path, steps: list[list[dict[str, list[int]]]], **extra: np.ndarray) -> None:
    arrays = dict(extra)
    for s, rows in enumerate(steps):
        for f in range(2):
            bags = [r[f"f{f}"] for r in rows]
            arrays[f"s{s}/f{f}/ids"] = np.array(sum(bags, []), dtype=np.int64)
            arrays[f"s{s}/f{f}/row_splits"] = np.cumsum([0] + [len(b) for b in bags])
    np.savez(path, **arrays)


def _parquet(path: Path, rows: list[dict[str, list[int]]], *, scalar_f1: bool = False) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f1 = [r["f1"][0] for r in rows] if scalar_f1 else [r["f1"] for r in rows]
    pq.write_table(pa.table({"f0": pa.array([r["f0"] for r in rows], pa.list_(pa.int64())),
                             "f1": pa.array(f1, pa.int32() if scalar_f1 else None)}), path)


def _read(path: Path | list[Path], schema: SampleSchema = SCHEMA) -> tuple[list, object]:
    sample = open_sample([str(p) for p in path] if isinstance(path, list) else str(path), schema)
    return list(sample), sample.stats


@pytest.mark.parametrize("fmt", ["npz", "parquet", "tfrecord"])
def test_each_format_gives_the_rows_in_configured_batches(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"s.{fmt}"
    if fmt == "npz":
        _npz(path, [ROWS[:4], ROWS[4:]])
    elif fmt == "parquet":
        _parquet(path, ROWS)
    else:
        with open(path, "wb") as handle:
            write_tfrecord(handle, ROWS)
    batches, stats = _read(path)
    assert [_bags(b["f0"]) for b in batches] == _expected(ROWS, "f0", 4)
    assert [_bags(b["f1"]) for b in batches] == _expected(ROWS, "f1", 4)
    assert stats.ids_read == {"f0": 11, "f1": 8} and stats.batches == 2
    assert stats.rescaled is False and stats.leftover_bags == {"f0": 0, "f1": 0}


def test_npz_batches_are_split_and_merged_to_the_configured_size(tmp_path: Path) -> None:
    path = tmp_path / "B.npz"
    _npz(path, [ROWS[:3], ROWS[3:8]])  # sample batches of 3 and 5 bags, configured 2
    schema = SampleSchema(tuple(SampleFeature(f.name, f.table, f.vocabulary, 2)
                                for f in SCHEMA.features))
    batches, stats = _read(path, schema)
    assert [_bags(b["f0"]) for b in batches] == _expected(ROWS, "f0", 2)
    assert stats.rescaled and stats.sample_batch_bags == {"f0": {3, 5}, "f1": {3, 5}}
    # configured 3: 8 bags make two batches, 2 bags are left over
    schema3 = SampleSchema(tuple(SampleFeature(f.name, f.table, f.vocabulary, 3)
                                 for f in SCHEMA.features))
    batches, stats = _read(path, schema3)
    assert [_bags(b["f0"]) for b in batches] == [[[1, 2], [], [5]], [[6, 7, 8], [9], [10]]]
    assert stats.leftover_bags == {"f0": 2, "f1": 2}


def test_npz_weights_follow_their_ids_when_batches_are_merged(tmp_path: Path) -> None:
    path = tmp_path / "B.npz"
    arrays = {"s0/f0/ids": np.array([1, 2]), "s0/f0/weights": np.array([0.5, 2.0], np.float32),
              "s1/f0/ids": np.array([3, 4]), "s0/f1/ids": np.array([1, 2]),
              "s1/f1/ids": np.array([3, 4]), "s0/f0/grad": np.zeros((2, 4), np.float32),
              "s1/f1/grad": np.zeros((2, 4), np.float32)}
    np.savez(path, **arrays)
    (batch,), _ = _read(path)
    assert batch["f0"].values.tolist() == [1, 2, 3, 4]
    assert batch["f0"].weights.tolist() == [0.5, 2.0, 1.0, 1.0]
    assert batch["f1"].weights is None


def test_several_parquet_files_are_one_stream_and_integer_columns_are_one_id(
        tmp_path: Path) -> None:
    _parquet(tmp_path / "a.parquet", ROWS[:3], scalar_f1=True)
    _parquet(tmp_path / "b.parquet", ROWS[3:], scalar_f1=True)
    batches, stats = _read([tmp_path / "a.parquet", tmp_path / "b.parquet"])
    assert [_bags(b["f0"]) for b in batches] == _expected(ROWS, "f0", 4)
    assert [_bags(b["f1"]) for b in batches] == _expected(ROWS, "f1", 4)


def test_tfrecord_framing_matches_hand_assembled_bytes() -> None:
    """An Example {features {feature {key "f0" value {int64_list {value: [3, 300]}}}}} assembled
    byte by byte from the protobuf wire format, framed with CRCs from the published CRC-32C
    check value."""
    # CRC-32C check values (RFC 3720 B.4 and the Castagnoli check string)
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA and crc32c(b"\xff" * 32) == 0x62A8AB43
    int64_list = b"\x0a\x03" + bytes([3, 0xAC, 0x02])          # packed [3, 300]
    feature = b"\x1a" + bytes([len(int64_list)]) + int64_list  # Feature.int64_list = 3
    entry = b"\x0a\x02f0" + b"\x12" + bytes([len(feature)]) + feature  # map entry key, value
    features = b"\x0a" + bytes([len(entry)]) + entry           # Features.feature = 1
    example = b"\x0a" + bytes([len(features)]) + features     # Example.features = 1

    def rotate_mask(crc: int) -> int:
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    length = struct.pack("<Q", len(example))
    assert masked_crc32c(length) == rotate_mask(crc32c(length))
    framed = (length + struct.pack("<I", rotate_mask(crc32c(length))) + example
              + struct.pack("<I", rotate_mask(crc32c(example))))
    import io

    out = io.BytesIO()
    write_tfrecord(out, [{"f0": [3, 300]}])
    assert out.getvalue() == framed


def test_tfrecord_hand_assembled_file_is_read(tmp_path: Path) -> None:
    import io

    out = io.BytesIO()
    write_tfrecord(out, [{"f0": [3, 300], "f1": [1]}])
    path = tmp_path / "one.tfrecord"
    path.write_bytes(out.getvalue())
    schema = SampleSchema((SampleFeature("f0", "a", 1000, 1), SampleFeature("f1", "b", 10, 1)))
    (batch,), _ = _read(path, schema)
    assert batch["f0"].values.tolist() == [3, 300] and batch["f1"].row_splits.tolist() == [0, 1]


def _tfrecord(path: Path, rows: list[dict[str, list[int]]]) -> bytes:
    with open(path, "wb") as handle:
        write_tfrecord(handle, rows)
    return path.read_bytes()


def _error(path: Path | list[Path], schema: SampleSchema = SCHEMA) -> str:
    with pytest.raises(SampleError) as info:
        _read(path, schema)
    return str(info.value)


def test_tfrecord_corruption_is_found_at_its_record(tmp_path: Path) -> None:
    path = tmp_path / "s.tfrecord"
    data = bytearray(_tfrecord(path, ROWS))
    first = 12 + struct.unpack("<Q", bytes(data[:8]))[0] + 4  # byte offset of record 1
    data[first + 14] ^= 0x01  # a byte of record 1's data
    path.write_bytes(bytes(data))
    assert _error(path).startswith(f"{path}: record 1 (byte {first}): error: the CRC of the data "
                                   "is 0x")
    path.write_bytes(bytes(_tfrecord(path, ROWS))[:-3])
    assert "record 7" in _error(path) and "truncated" in _error(path)
    path.write_bytes(gzip.compress(_tfrecord(path, ROWS)))
    assert "gzip" in _error(path)
    path.write_bytes(b"hello, this is not a tfrecord file at all")
    assert _error(path).startswith(f"{path}: record 0 (byte 0): error: the CRC of the length")


def test_tfrecord_bad_features(tmp_path: Path) -> None:
    path = tmp_path / "s.tfrecord"
    _tfrecord(path, [*ROWS[:5], {"f0": [1]}, *ROWS[6:]])
    assert "record 5" in _error(path) and "feature 'f1' is missing (the record has f0)" in \
        _error(path)
    _tfrecord(path, [*ROWS[:2], {"f0": [1, 2], "f1": [10]}, *ROWS[3:]])
    message = _error(path)
    assert "id 10 at position 0 of feature 'f1' is outside table 'b': ids must be in [0, 10)" \
        in message and ": record 2 (byte " in message


def test_parquet_bad_input(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"f0": [[1]], "g": [[1]]}), path)
    assert _error(path).startswith(f"{path}: column f1: error: no column 'f1'")
    pq.write_table(pa.table({"f0": [[1]], "f1": pa.array([["x"]])}), path)
    assert "column f1: error: type list<element: string> found, expected list<int64>" in \
        _error(path)
    _parquet(path, [*ROWS[:6], {"f0": [1, 100], "f1": [1]}, ROWS[7]])
    assert _error(path) == (f"{path}: column f0: error: id 100 at row 6 of feature 'f0' is "
                            "outside table 'a': ids must be in [0, 100)")
    pq.write_table(pa.table({"f0": pa.array([[1], [2, None]]), "f1": [[1], [2]]}), path)
    assert "column f0: error: a null id in row 1" in _error(path)


def test_npz_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "B.npz"
    _npz(path, [ROWS[:4], ROWS[4:]])
    arrays = dict(np.load(path))
    arrays["s1/f1/ids"] = arrays["s1/f1/ids"] + 7
    np.savez(path, **arrays)
    assert _error(path) == (f"{path}: key s1/f1: error: id 16 at index 2 of feature 'f1' is "
                            "outside table 'b': ids must be in [0, 10)")
    del arrays["s1/f1/ids"]
    np.savez(path, **arrays)
    from tpuemb_cfg.base.errors import InputError

    with pytest.raises(InputError, match="step 1 skips feature 1"):
        open_sample(str(path), SCHEMA)
    arrays = {"s0/f0/ids": np.array([1.5]), "s0/f1/ids": np.array([1])}
    np.savez(path, **arrays)
    assert "key s0/f0: error: ids of dtype float64 found, expected integers" in _error(path)


def test_too_small_a_sample_and_unknown_formats(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    _parquet(path, ROWS[:3])
    assert "gives 3 bag(s) of feature 'f0', fewer than one configured batch of 4" in _error(path)
    from tpuemb_cfg.base.errors import UsageError

    (tmp_path / "s.csv").write_text("1,2\n")
    with pytest.raises(SampleError, match="extension '.csv'"):
        open_sample(str(tmp_path / "s.csv"), SCHEMA)
    with pytest.raises(UsageError, match="2 formats"):
        open_sample([str(path), str(tmp_path / "x.npz")], SCHEMA)


def test_missing_pyarrow_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from tpuemb_cfg.base.errors import UsageError

    path = tmp_path / "s.parquet"
    _parquet(path, ROWS)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(UsageError, match=r"pip install 'tpuemb\[plan\]'"):
        open_sample(str(path), SCHEMA)


def test_progress_counts_the_files(tmp_path: Path) -> None:
    path = tmp_path / "s.tfrecord"
    size = len(_tfrecord(path, ROWS))
    sample = open_sample(str(path), SCHEMA)
    seen: list[int] = []
    sample.on_progress = seen.append
    list(sample)
    assert (sample.progress_unit, sample.progress_total, sum(seen)) == ("bytes", size, size)


def test_a_folder_stands_for_its_sample_files_in_name_order(tmp_path: Path) -> None:
    day = tmp_path / "day"
    day.mkdir()
    _parquet(day / "part-1.parquet", ROWS[3:])
    _parquet(day / "part-0.parquet", ROWS[:3])
    (day / "_SUCCESS").write_text("")
    batches, _ = _read(day)
    assert [_bags(b["f0"]) for b in batches] == _expected(ROWS, "f0", 4)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "a folder without sample files" in _error(empty)
