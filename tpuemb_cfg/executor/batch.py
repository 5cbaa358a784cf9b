"""One step's input for one feature, and the checks that turn user arrays into trusted ones.

Every error names the replay-contract key of the offending array (``s{step}/f{f}/ids`` ...), in the
library as in the CLI, so a message means the same thing whichever path produced it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import InputError

from .plan import FeaturePlan, Plan, TablePlan
from .replay_keys import FeatureInput

__all__ = [
    "CheckedFeature",
    "FeatureInput",
    "check_batch",
    "check_feature",
    "check_finite",
    "check_gradient",
    "check_learning_rates",
    "key",
]

F32 = np.float32


@dataclass(frozen=True)
class CheckedFeature:
    """A feature input after ``check_batch``: C-contiguous int64 ids/row_splits, float32 weights.

    ``unit_bags``: the input gave no row_splits (one id per bag, so no bag is empty).
    """

    ids: np.ndarray
    row_splits: np.ndarray
    weights: np.ndarray
    unit_bags: bool = False

    @property
    def batch(self) -> int:
        return int(self.row_splits.shape[0] - 1)


def key(step: int, feature: int, name: str) -> str:
    """The replay-contract key of one array."""
    return f"s{step}/f{feature}/{name}"


_INT64_MAX = 2**63 - 1


def _error(message: str, k: str, source: str | None) -> InputError:
    return InputError(message, path=source, key=k)


def _as_array(value: Any, k: str, source: str | None) -> np.ndarray:
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise _error(f"cannot be read as an array ({exc})", k, source) from None


def _integers(value: Any, k: str, source: str | None) -> np.ndarray:
    array = _as_array(value, k, source)
    if array.dtype.kind not in "iu" and not (array.size == 0 and array.dtype.kind == "f"):
        raise _error(
            f"dtype {array.dtype} found, expected int64 (integer ids); cast with .astype(np.int64)",
            k, source,
        )
    if array.ndim != 1:
        raise _error(f"shape {array.shape} found, expected a 1-D array", k, source)
    if array.dtype.kind == "u" and array.dtype.itemsize == 8 and array.size:
        high = int(array.max())  # uint64 above int64's range would wrap to a negative number
        if high > _INT64_MAX:
            raise _error(
                f"value {high} at index {int(np.flatnonzero(array == high)[0])} does not fit "
                f"int64 (at most {_INT64_MAX})", k, source)
    return array.astype(np.int64, order="C", copy=False)  # C order: what the kernels read


def _floats(value: Any, k: str, source: str | None, strict: bool) -> np.ndarray:
    array = _as_array(value, k, source)
    if strict and array.dtype != np.float32:
        raise _error(
            f"dtype {array.dtype} found, expected float32; cast with .astype(np.float32)",
            k, source,
        )
    if array.dtype.kind not in "fiu":
        raise _error(f"dtype {array.dtype} found, expected float32", k, source)
    return array.astype(F32, order="C", copy=False)  # C order: what the kernels read


def _finite(array: np.ndarray, what: str, k: str, source: str | None) -> None:
    bad = ~np.isfinite(array)
    if bad.any():
        where = np.argwhere(bad)[0]
        position = tuple(int(i) for i in where)
        raise _error(
            f"{what} must be finite; found {array[tuple(where)]} at index "
            f"{position[0] if len(position) == 1 else position}",
            k, source,
        )


def _ids(value: Any, table: TablePlan, k: str, source: str | None) -> np.ndarray:
    """The ids as int64, each a row of ``table`` (an id is reported as found: a uint64 id
    beyond int64 is not shown wrapped around)."""
    found = _as_array(value, k, source)
    if found.dtype.kind == "u" and found.ndim == 1 and found.size:
        high = int(found.max())
        if high >= table.vocabulary:
            raise _outside(table, high, int(np.flatnonzero(found == high)[0]), k, source)
    ids = _integers(found, k, source)
    if ids.shape[0] == 0:
        return ids
    low, high = int(ids.min()), int(ids.max())
    if low >= 0 and high < table.vocabulary:
        return ids
    bad = low if low < 0 else high
    raise _outside(table, bad, int(np.flatnonzero(ids == bad)[0]), k, source)


def _outside(table: TablePlan, bad: int, index: int, k: str, source: str | None) -> InputError:
    return _error(
        f"id {bad} at index {index} is outside table {table.name!r}: ids must be in "
        f"[0, {table.vocabulary}) (vocabulary_size {table.vocabulary})",
        k, source,
    )


def _row_splits(value: Any, nnz: int, k: str, source: str | None) -> np.ndarray:
    """The row splits as int64 (``None``: one id per bag): from 0 to ``nnz``, non-decreasing."""
    if value is None:
        return np.arange(nnz + 1, dtype=np.int64)
    row_splits = _integers(value, k, source)
    if row_splits.shape[0] < 1 or row_splits[0] != 0 or row_splits[-1] != nnz:
        raise _error(
            f"row_splits must start at 0 and end at the number of ids ({nnz}); found "
            f"{row_splits[:1].tolist()} ... {row_splits[-1:].tolist()} "
            f"(length {row_splits.shape[0]})",
            k, source,
        )
    steps = np.diff(row_splits)
    if (steps < 0).any():
        position = int(np.flatnonzero(steps < 0)[0])
        raise _error(
            f"row_splits must be non-decreasing; index {position + 1} holds "
            f"{int(row_splits[position + 1])} after {int(row_splits[position])}",
            k, source,
        )
    return row_splits


def _weights(
    value: Any, nnz: int, k_ids: str, k: str, source: str | None, strict: bool
) -> np.ndarray:
    """The weights as float32 (``None``: 1.0), one finite weight per id (key ``k_ids``)."""
    if value is None:
        return np.ones(nnz, dtype=F32)
    weights = _floats(value, k, source, strict)
    if weights.shape != (nnz,):
        raise _error(
            f"shape {weights.shape} found, expected ({nnz},): one weight per id of {k_ids}",
            k, source,
        )
    _finite(weights, "weights", k, source)
    return weights


def check_feature(
    value: FeatureInput | Mapping[str, Any],
    plan: Plan,
    feature: FeaturePlan,
    step: int,
    source: str | None = None,
    strict: bool = False,
) -> CheckedFeature:
    """Check one feature's ids, row_splits and weights against the table; raise ``InputError``.

    ``strict`` (the npz path) requires the exact contract dtypes (float32 weights); the library
    accepts any real array-like and converts it.
    """
    if isinstance(value, Mapping):
        unknown = set(value) - {"ids", "row_splits", "weights", "grad"}
        if unknown:
            raise _error(
                f"unknown entr{'ies' if len(unknown) > 1 else 'y'} {sorted(unknown)}; "
                "a feature input holds ids, row_splits, weights and grad",
                key(step, feature.index, sorted(unknown)[0]), source,
            )
        if "ids" not in value:
            raise _error(
                f"missing: step {step} gives no ids for feature {feature.index} "
                f"({feature.name!r}); every step must give every feature",
                key(step, feature.index, "ids"), source,
            )
        value = FeatureInput(
            value["ids"], value.get("row_splits"), value.get("weights"), value.get("grad")
        )
    table: TablePlan = plan.tables[feature.table]
    k_ids = key(step, feature.index, "ids")
    ids = _ids(value.ids, table, k_ids, source)
    nnz = ids.shape[0]
    row_splits = _row_splits(value.row_splits, nnz, key(step, feature.index, "row_splits"), source)
    weights = _weights(value.weights, nnz, k_ids, key(step, feature.index, "weights"), source,
                       strict)
    return CheckedFeature(ids, row_splits, weights, unit_bags=value.row_splits is None)


def check_batch(
    batch: Sequence[FeatureInput | Mapping[str, Any]],
    plan: Plan,
    step: int,
    source: str | None = None,
    strict: bool = False,
) -> list[CheckedFeature]:
    """Check every feature of one step; the batch must give every feature, in index order."""
    if (isinstance(batch, Mapping) or isinstance(batch, str | bytes)
            or not isinstance(batch, Iterable)):
        raise InputError(
            f"batch: {type(batch).__name__} found; a batch is a sequence with one FeatureInput "
            "(or mapping) per feature, in feature index order", path=source, key=f"s{step}",
        )
    items = list(batch)
    if len(items) != len(plan.features):
        # The key of the first missing (or first extra) feature.
        raise _error(
            f"the batch gives {len(items)} feature(s), the configuration has "
            f"{len(plan.features)}; every step must give every feature",
            key(step, min(len(items), len(plan.features)), "ids"),
            source,
        )
    return [
        check_feature(item, plan, feature, step, source, strict)
        for item, feature in zip(items, plan.features, strict=True)
    ]


def check_gradient(
    value: Any,
    plan: Plan,
    feature: FeaturePlan,
    batch: int,
    step: int,
    source: str | None = None,
    strict: bool = False,
    *,
    finite: bool = True,
) -> np.ndarray:
    """The float32 [batch, dim] gradient of one feature; raise ``InputError`` naming its key.

    ``finite=False`` leaves the NaN/infinity check to the caller (the compiled step makes it
    while it reads the gradient, then calls ``check_finite`` to report it).
    """
    k = key(step, feature.index, "grad")
    if value is None:
        raise _error(
            f"missing: step {step} gives no activation gradient for feature {feature.index} "
            f"({feature.name!r})", k, source,
        )
    grad = _floats(value, k, source, strict)
    expected = (batch, plan.tables[feature.table].dimension)
    if grad.shape != expected:
        raise _error(
            f"shape {grad.shape} found, expected {expected} ([batch, dimension]: {batch} bags "
            f"from {key(step, feature.index, 'row_splits')} or the ids, dimension of table "
            f"{plan.tables[feature.table].name!r})",
            k, source,
        )
    if finite:
        _finite(grad, "gradients", k, source)
    return grad


def check_finite(grad: np.ndarray, step: int, feature: int, source: str | None = None) -> None:
    """Raise ``InputError`` at the first NaN or infinity of feature ``feature``'s gradient."""
    _finite(grad, "gradients", key(step, feature, "grad"), source)


def check_learning_rates(
    value: Any, plan: Plan, step: int, source: str | None = None, strict: bool = False
) -> np.ndarray:
    """The float32 [K] learning-rate list of one step (spec section 9)."""
    k_name = f"s{step}/learning_rates"
    count = plan.num_learning_rates
    if value is None:
        if count:
            raise _error(
                f"missing: the configuration has K = {count} dynamic learning-rate tag(s) "
                f"({plan.describe_tags()}); give {count} float32 value(s) per step",
                k_name, source,
            )
        return np.zeros(0, dtype=F32)
    rates = _floats(value, k_name, source, strict)
    if rates.ndim > 1 or (strict and rates.ndim != 1):
        raise _error(f"shape {rates.shape} found, expected ({count},)", k_name, source)
    rates = rates.reshape(-1)
    if rates.shape[0] != count:
        if count == 0:
            raise _error(
                f"{rates.shape[0]} learning rate(s) given, but K = 0: every table has a "
                "constant learning rate, so no list is expected; remove it",
                k_name, source,
            )
        raise _error(
            f"{rates.shape[0]} learning rate(s) given, expected K = {count} "
            f"({plan.describe_tags()})",
            k_name, source,
        )
    _finite(rates, "learning rates", k_name, source)
    return rates
