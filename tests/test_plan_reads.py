"""How ``tpuemb plan`` reads a sample: reads of whole configured batches
(``planner.samples.rows_per_read``) and Parquet list columns taken from Arrow's buffers (sliced
record batches, int32 ids and offsets, null bags on the general path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpuemb_cfg.planner import samples
from tpuemb_cfg.planner.inputs import SampleFeature, SampleSchema, open_sample
from tpuemb_cfg.planner.samples import rows_per_read


def _schema(*bags: int) -> SampleSchema:
    return SampleSchema(tuple(SampleFeature(f"f{i}", "t", 100, b) for i, b in enumerate(bags)))


def test_reads_are_whole_configured_batches() -> None:
    assert samples.ROWS_PER_READ == 8192
    assert rows_per_read(_schema(16_384, 16_384)) == 16_384  # one global batch of MLPerf
    assert rows_per_read(_schema(4)) == 8192  # 2048 batches
    assert rows_per_read(_schema(100)) == 8100  # 81 batches, not 8192 rows
    assert rows_per_read(_schema(4, 8)) == 8192  # batches of different sizes: rows as before


@pytest.mark.parametrize("kind", ["int64", "int32", "large"])
def test_parquet_batches_cut_from_one_row_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 kind: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setattr(samples, "ROWS_PER_READ", 3)  # batches of 2 rows: slices of the group
    bags = [[1, 2], [3], [], [4, 5, 6], [7], [8, 9], [10], [], [11, 12]]
    value = pa.int32() if kind == "int32" else pa.int64()
    listed = pa.large_list(value) if kind == "large" else pa.list_(value)
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"f0": pa.array(bags, listed),
                             "f1": pa.array([[i] for i in range(9)], listed)}), path)
    sample = open_sample(str(path), _schema(2, 2))
    batches = list(sample)
    got = [[b["f0"].values[b["f0"].row_splits[i]:b["f0"].row_splits[i + 1]].tolist()
            for i in range(2)] for b in batches]
    assert got == [bags[0:2], bags[2:4], bags[4:6], bags[6:8]]
    assert all(b["f0"].values.dtype.name == "int64" and b["f0"].row_splits.dtype.name == "int64"
               and b["f0"].row_splits[0] == 0 for b in batches)
    assert sample.stats.leftover_bags == {"f0": 1, "f1": 1}
    # a null bag: the general path, the same bags
    with_null: list[list[int] | None] = [*bags[:2], None, *bags[3:]]
    pq.write_table(pa.table({"f0": pa.array(with_null, listed),
                             "f1": pa.array([[i] for i in range(9)], listed)}), path)
    got = [[b["f0"].values[b["f0"].row_splits[i]:b["f0"].row_splits[i + 1]].tolist()
            for i in range(2)] for b in open_sample(str(path), _schema(2, 2))]
    assert got == [bags[0:2], bags[2:4], bags[4:6], bags[6:8]]


def test_a_sliced_list_column_is_rebased() -> None:
    """An Arrow list array that is a slice of a larger one (its offsets start past 0, its
    values hold the ids of rows outside it): the slice's bags, splits from 0."""
    import pyarrow as pa

    from tpuemb_cfg.planner import inputs

    column = pa.array([[1, 2], [3], [4, 5, 6], [], [7]], pa.list_(pa.int32())).slice(1, 3)
    assert column.offsets.to_numpy()[0] == 2
    batch = inputs._parquet_column(column, SampleFeature("f0", "t", 100, 3), "s.parquet", 10)
    assert batch.values.tolist() == [3, 4, 5, 6] and batch.row_splits.tolist() == [0, 1, 4, 4]
    bad = pa.array([[1], [3], [4, 500]], pa.list_(pa.int64())).slice(1, 2)
    with pytest.raises(samples.SampleError, match="id 500 at row 12 of feature 'f0'"):
        inputs._parquet_column(bad, SampleFeature("f0", "t", 100, 2), "s.parquet", 11)
