"""Parquet metadata for ``tpuemb plan``'s samples (:mod:`planner.inputs` reads the data): the
decoded size of a row group's columns before any is read, where a row group is, and which column
of a row group cannot be read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["bad_column", "row_group_bytes", "row_group_place"]


def row_group_bytes(metadata: Any, group: int, names: Sequence[str]) -> int:
    """The bytes the configured columns of row group ``group`` take once decoded, from the
    file's metadata (nothing read): 8 per value (int64 ids) and 8 per row (a bag's offset),
    or the declared uncompressed size of the column chunk where that is larger."""
    top = [metadata.schema.column(i).path.split(".")[0] for i in range(metadata.num_columns)]
    info = metadata.row_group(group)
    total = 0
    for i, name in enumerate(top):
        if name in names:
            chunk = info.column(i)
            total += max(8 * (int(chunk.num_values) + int(info.num_rows)),
                         int(chunk.total_uncompressed_size))
    return total


def bad_column(handle: Any, group: int, names: Sequence[str], rows: int) -> str | None:
    """The first column of ``names`` that cannot be read in row group ``group`` (each read
    alone, ``rows`` rows at a time), or None."""
    import pyarrow as pa

    for name in names:
        try:
            for _ in handle.iter_batches(batch_size=rows, row_groups=[group],
                                         columns=[name]):
                pass
        except (OSError, pa.ArrowException):
            return name
    return None


def row_group_place(metadata: Any, group: int, first: int) -> str:
    """Where row group ``group`` of a file (its first row: ``first``) is."""
    return f"row group {group} (rows {first} to {first + metadata.row_group(group).num_rows - 1})"
