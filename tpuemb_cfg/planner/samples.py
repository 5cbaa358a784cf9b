"""What a sample of ids for ``tpuemb plan`` is made of, shared by every format's reader
(:mod:`planner.inputs` opens samples; :mod:`planner.tfrecord` reads TFRecord files): a feature's
bags (:class:`FeatureBatch`), the configured features (:class:`SampleSchema`), what was read
(:class:`SampleStats`), bad input (:class:`SampleError`) and the checks every format's ids pass
(:func:`check_batch`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from tpuemb_cfg.base.errors import InputError

__all__ = ["ROWS_PER_READ", "FeatureBatch", "SampleError", "SampleFeature", "SampleSchema",
           "SampleStats", "Tick", "check_batch", "rows_per_read"]

#: Rows a Parquet record batch or a TFRecord window holds (bounded memory), unless one
#: configured batch is more (:func:`rows_per_read`).
ROWS_PER_READ = 8192

#: A reader's progress callback: called with each increment (steps, rows or bytes).
Tick = Callable[[int], None]

class FeatureBatch(NamedTuple):
    """One feature's bags: int64 ids, int64 row splits, float32 weights or None (1.0)."""

    values: np.ndarray
    row_splits: np.ndarray
    weights: np.ndarray | None = None

    @property
    def bags(self) -> int:
        return int(self.row_splits.shape[0] - 1)


@dataclass(frozen=True)
class SampleFeature:
    """A configured feature: its name in the sample, its table, the table's vocabulary (ids
    must be in ``[0, vocabulary)``), the bags of one configured (global) batch and, when the
    configuration says, the ids one bag holds (``ids_per_bag``: a spec's input shape, as
    MLPerf's multi-hot lengths; not checked against the sample, which may hold ragged bags)."""

    name: str
    table: str
    vocabulary: int
    bags: int
    ids_per_bag: int | None = None


@dataclass(frozen=True)
class SampleSchema:
    """The features a sample must give, in configuration order."""

    features: tuple[SampleFeature, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)


class SampleError(InputError):
    """Bad sample input: ``where`` names the key, column or record inside ``path``."""

    def __init__(self, message: str, *, path: str, where: str | None = None) -> None:
        super().__init__(message, path=path)
        self.where = where

    def location(self) -> str:
        path = self.path if self.path is not None else "<input>"
        return path if self.where is None else f"{path}: {self.where}"


@dataclass
class SampleStats:
    """What was read: per feature the sample's bags and ids, the configured batches made, and
    the bags left over at the end (not used)."""

    format: str
    files: tuple[str, ...]
    #: distinct bag counts of the sample's own batches per feature (``B.npz``; rows: empty)
    sample_batch_bags: dict[str, set[int]] = field(default_factory=dict)
    bags_read: dict[str, int] = field(default_factory=dict)
    ids_read: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    leftover_bags: dict[str, int] = field(default_factory=dict)
    rescaled: bool = False
    #: the sample's columns (Parquet), features (TFRecord) or feature indexes (``B.npz``: the
    #: keys ``s{s}/f{i}/...`` past the configured features) that are no configured feature:
    #: not read, listed once in the report
    ignored: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": self.format, "files": list(self.files),
            "sample_batch_bags": {k: sorted(v) for k, v in self.sample_batch_bags.items()},
            "bags_read": dict(self.bags_read), "ids_read": dict(self.ids_read),
            "batches": self.batches, "leftover_bags": dict(self.leftover_bags),
            "rescaled": self.rescaled, "ignored": sorted(self.ignored),
        }


# --- checks shared by every format --------------------------------------------------------------

def check_batch(feature: SampleFeature, values: Any, row_splits: Any, weights: Any, *, path: str,
           where: str, at: Callable[[int], tuple[str, str]] | None = None) -> FeatureBatch:
    """One feature's arrays as a trusted ``FeatureBatch``: integer 1-D ids in the table, row
    splits from 0 to nnz and non-decreasing, finite float32 weights, one per id. ``at(i)``:
    the (where, position) of the bag holding id ``i`` (rows and records; default: ``where``
    and "index i")."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu" and not (values.size == 0 and values.dtype.kind == "f"):
        raise SampleError(f"ids of dtype {values.dtype} found, expected integers (int64)",
                          path=path, where=where)
    if values.ndim != 1:
        raise SampleError(f"ids of shape {values.shape} found, expected a 1-D array",
                          path=path, where=where)
    if values.size:
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= feature.vocabulary:
            bad = low if low < 0 else high
            index = int(np.flatnonzero(values == bad)[0])
            place, position = (where, f"index {index}") if at is None else at(index)
            raise SampleError(
                f"id {bad} at {position} of feature {feature.name!r} is outside table "
                f"{feature.table!r}: ids must be in [0, {feature.vocabulary})",
                path=path, where=place)
    ids = values.astype(np.int64, copy=False)
    nnz = ids.shape[0]
    if row_splits is None:
        splits = np.arange(nnz + 1, dtype=np.int64)
    else:
        splits = np.asarray(row_splits)
        if splits.dtype.kind not in "iu" or splits.ndim != 1:
            raise SampleError(f"row_splits of dtype {splits.dtype}, shape {splits.shape} found, "
                              "expected a 1-D integer array", path=path, where=where)
        splits = splits.astype(np.int64, copy=False)
        if splits.shape[0] < 1 or splits[0] != 0 or splits[-1] != nnz:
            raise SampleError(
                f"row_splits must start at 0 and end at the number of ids ({nnz}); found "
                f"{splits[:1].tolist()} ... {splits[-1:].tolist()} (length {splits.shape[0]})",
                path=path, where=where)
        steps = np.diff(splits)
        if (steps < 0).any():
            i = int(np.flatnonzero(steps < 0)[0]) + 1
            raise SampleError(f"row_splits must be non-decreasing; index {i} holds "
                              f"{int(splits[i])} after {int(splits[i - 1])}",
                              path=path, where=where)
    checked = None
    if weights is not None:
        checked = np.asarray(weights)
        if checked.dtype != np.float32 or checked.shape != (nnz,):
            raise SampleError(f"weights of dtype {checked.dtype}, shape {checked.shape} found, "
                              f"expected float32 ({nnz},): one weight per id",
                              path=path, where=where)
        bad = ~np.isfinite(checked)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SampleError(f"weights must be finite; found {checked[i]} at index {i}",
                              path=path, where=where)
    return FeatureBatch(ids, splits, checked)



def rows_per_read(schema: SampleSchema) -> int:
    """Rows a Parquet record batch or a TFRecord window holds: about :data:`ROWS_PER_READ`, a
    whole number of configured batches when every feature's batch has the same bags (each row
    gives one bag to every feature), so a read is cut into configured batches without copying
    (memory: at most one configured batch, which the planner holds anyway)."""
    bags = {f.bags for f in schema.features}
    if len(bags) != 1:
        return ROWS_PER_READ
    batch = bags.pop()
    return batch * max(1, ROWS_PER_READ // batch) if batch > 0 else ROWS_PER_READ
