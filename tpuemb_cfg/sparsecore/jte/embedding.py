"""jax-tpu-embedding 0.2.0's ``embedding`` entry points, in place on the feature specs.

``auto_stack_tables`` and ``prepare_feature_specs_for_training`` convert the specs to a
:class:`SparseCoreConfig`, let :func:`stack_config` decide (the one implementation of the rules),
and write the result back the way the reference does: each table spec gets its
``stacked_table_spec`` and ``setting_in_stack``, each feature spec its ``id_transformation``.
The records written are of the classes of the module that defined the table spec when it has
them (jax-tpu-embedding's objects get jax-tpu-embedding's records), else this package's.

Unlike the reference, a refused call changes nothing: every check runs before the first write.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.sparsecore._args import check_bool, check_int, check_str, found
from tpuemb_cfg.sparsecore.jte import specs as _own
from tpuemb_cfg.sparsecore.jte.convert import (
    _attr,
    feature_specs_to_config,
    leaves,
    sparse_cores_per_device,
    stacking_of,
)
from tpuemb_cfg.sparsecore.jte.specs import DEFAULT_ACTIVATION_MEM_BYTES_LIMIT
from tpuemb_cfg.sparsecore.jte.stacking import stack_config

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from tpuemb_cfg.sparsecore.stacking import Stacking

__all__ = ["PreprocessedInput", "SparseDenseMatmulInput", "SparseDenseMatmulInputStats",
           "auto_stack_tables", "prepare_feature_specs_for_training",
           "preprocess_sparse_dense_matmul_input"]

Limits = Callable[[str, int], int]


def _record(table: Any, name: str) -> Any:
    """Class ``name`` of the module that defined ``table``'s class, else this package's."""
    module = sys.modules.get(type(table).__module__)
    found = getattr(module, name, None) if module is not None else None
    return found if isinstance(found, type) else getattr(_own, name)


def _is_stacked(table: Any) -> bool:
    check = getattr(table, "is_stacked", None)
    if callable(check):
        return bool(check())
    return getattr(table, "stacked_table_spec", None) is not None


def _stacked_into(table: Any) -> str | None:
    """The stack the table's ``setting_in_stack`` names when that is not the table itself."""
    setting = getattr(table, "_setting_in_stack", None) or getattr(table, "setting_in_stack",
                                                                   None)
    name = getattr(setting, "stack_name", None)
    return name if name is not None and name != table.name else None


def _write(specs: list[Any], stacking: Stacking, *, activation_limit: int,
           keep_suggested: bool) -> None:
    """Give every feature of ``stacking`` (``specs[i]`` is ``stacking.features[i]``) its place."""
    n = stacking.num_sparse_cores
    tables = {s.table_spec.name: s.table_spec for s in specs}
    stacked: dict[str, Any] = {}
    for stack in stacking.stacks:
        first = tables[stack.tables[0].name]
        stacked[stack.name] = _record(first, "StackedTableSpec")(
            stack_name=stack.name, stack_vocab_size=stack.padded_vocabulary_size,
            stack_embedding_dim=stack.padded_dim, optimizer=first.optimizer,
            combiner=first.combiner, total_sample_count=stack.total_sample_count,
            max_ids_per_partition=stack.max_ids_per_partition,
            max_unique_ids_per_partition=stack.max_unique_ids_per_partition,
            activation_mem_bytes_limit=activation_limit,
            suggested_coo_buffer_size_per_device=(
                stack.suggested_coo_buffer_size_per_device if keep_suggested else None),
            quantization_config=getattr(first, "quantization_config", None))
    for spec, slot in zip(specs, stacking.features, strict=True):
        table = spec.table_spec
        stack = stacking.stack(slot.stack)
        place = next(t for t in stack.tables if t.name == slot.table)
        table.setting_in_stack = _record(table, "TableSettingInStack")(
            stack_name=stack.name, padded_vocab_size=place.padded_vocabulary_size,
            padded_embedding_dim=place.padded_dim, row_offset_in_shard=place.row_offset_in_shard,
            shard_rotation=place.shard_rotation)
        table.stacked_table_spec = stacked[stack.name]
        spec.id_transformation = _record(table, "FeatureIdTransformation")(
            row_offset=slot.row_offset, col_offset=place.row_offset_in_shard * n,
            col_shift=place.shard_rotation)


# The reference's signature, argument for argument.
def auto_stack_tables(  # noqa: PLR0913
    feature_specs: Any, global_device_count: int, num_sc_per_device: int | str | None = None,
    stack_to_max_ids_per_partition: Limits = _own.get_default_limits,
    stack_to_max_unique_ids_per_partition: Limits = _own.get_default_limits,
    use_short_stack_names: bool = True, *, activation_mem_bytes_limit: int | None = None,
) -> None:
    """Stack the tables of ``feature_specs`` as jax-tpu-embedding 0.2.0 does, in place.

    ``num_sc_per_device``: 2 or 4, or a chip kind (``"v6e"``); ``None`` (the reference's
    default, which asks the TPU) is refused with the fix. A table the specs already place in a
    stack of other tables refuses a second stacking (ValueError), as in the reference; a table
    stacked alone is stacked again.
    """
    specs = leaves(feature_specs)
    config = feature_specs_to_config(
        specs, global_device_count=global_device_count, num_sc_per_device=num_sc_per_device,
        stack_to_max_ids_per_partition=stack_to_max_ids_per_partition,
        stack_to_max_unique_ids_per_partition=stack_to_max_unique_ids_per_partition,
        use_short_stack_names=use_short_stack_names,
        activation_mem_bytes_limit=activation_mem_bytes_limit)
    for spec in specs:
        into = _stacked_into(spec.table_spec)
        if into is not None:
            raise ValueError(f"Table {spec.table_spec.name} is already stacked in group {into}: "
                             "stack fresh TableSpecs (dataclasses.replace) instead")
    stacking = stack_config(config)
    limit = activation_mem_bytes_limit
    _write(specs, stacking, keep_suggested=False,
           activation_limit=DEFAULT_ACTIVATION_MEM_BYTES_LIMIT if limit is None else limit)


def prepare_feature_specs_for_training(feature_specs: Any, global_device_count: int,
                                       num_sc_per_device: int | str | None = None) -> None:
    """Give every feature whose table is not stacked yet a stack of its own table, in place.

    Features of one table are offset in feature-name order; the table's own limits and
    suggested buffer size go into its stack. Features already stacked are left alone.
    """
    sparse_cores_per_device(num_sc_per_device)  # the None / 3 refusals come first, as there
    specs = leaves(feature_specs)
    todo = [s for s in specs if not _is_stacked(_attr(s, "table_spec", "feature spec"))]
    for spec in todo:
        into = _stacked_into(spec.table_spec)
        if into is not None:
            raise ValueError(
                f"Invalid stacking. Table {spec.table_spec.name} has no StackedTableSpec but its "
                f"setting_in_stack names stack {into!r}: build the TableSpec afresh")
    config = feature_specs_to_config(todo, global_device_count=global_device_count,
                                     num_sc_per_device=num_sc_per_device, auto_stack=False)
    _write(todo, stack_config(config), keep_suggested=True,
           activation_limit=DEFAULT_ACTIVATION_MEM_BYTES_LIMIT)


class SparseDenseMatmulInput:
    """The CSR arrays of a batch, per stack name (jax-tpu-embedding's field names)."""

    def __init__(self, lhs_row_pointers: Mapping[str, npt.NDArray[Any]],
                 lhs_embedding_ids: Mapping[str, npt.NDArray[Any]],
                 lhs_sample_ids: Mapping[str, npt.NDArray[Any]],
                 lhs_gains: Mapping[str, npt.NDArray[Any]]) -> None:
        self.lhs_row_pointers = lhs_row_pointers
        self.lhs_embedding_ids = lhs_embedding_ids
        self.lhs_sample_ids = lhs_sample_ids
        self.lhs_gains = lhs_gains


@dataclass
class PreprocessedInput:
    """The preprocessed batch: the CSR arrays and ``num_minibatches`` per local device."""

    sparse_dense_matmul_input: SparseDenseMatmulInput
    num_minibatches: npt.NDArray[Any]

    @property
    def lhs_row_pointers(self) -> Mapping[str, npt.NDArray[Any]]:
        return self.sparse_dense_matmul_input.lhs_row_pointers

    @property
    def lhs_embedding_ids(self) -> Mapping[str, npt.NDArray[Any]]:
        return self.sparse_dense_matmul_input.lhs_embedding_ids

    @property
    def lhs_sample_ids(self) -> Mapping[str, npt.NDArray[Any]]:
        return self.sparse_dense_matmul_input.lhs_sample_ids

    @property
    def lhs_gains(self) -> Mapping[str, npt.NDArray[Any]]:
        return self.sparse_dense_matmul_input.lhs_gains


@dataclass
class SparseDenseMatmulInputStats:
    """Per stack name, flat like the reference's: ``max_ids_per_partition`` and
    ``max_unique_ids_per_partition`` of length local devices x N, ``required_buffer_size_per_sc``
    of length local devices x SparseCores per device, and the dropped id count."""

    max_ids_per_partition: dict[str, npt.NDArray[np.int32]]
    max_unique_ids_per_partition: dict[str, npt.NDArray[np.int32]]
    required_buffer_size_per_sc: dict[str, npt.NDArray[np.int32]] = field(default_factory=dict)
    id_drop_counters: dict[str, int] = field(default_factory=dict)


def _rows(value: Any, name: str, what: str) -> list[Any]:
    """The rows of a ragged ``value`` (each row an array), or a TypeError naming ``what``."""
    import numpy as np

    if not isinstance(value, str | bytes):
        try:
            return [np.asarray(r).reshape(-1) for r in value]
        except TypeError:
            pass
    raise TypeError(f"preprocess_sparse_dense_matmul_input(): {what} of feature {name!r} must "
                    f"be a [batch, k] array or one array per row, got {found(value)}")


def _ids(value: Any, name: str) -> Any:
    """A feature's ids as ``preprocess`` takes them: a dense ``[batch, k]`` array stays; the
    reference's ragged form (a 1-D object array, or a list, of per-row id arrays) becomes
    ``(values, row_splits)``."""
    import numpy as np

    if isinstance(value, tuple):
        return value
    if isinstance(value, np.ndarray) and value.dtype != object:
        return value
    try:
        dense = np.asarray(value)
    except ValueError:  # rows of different lengths
        dense = None
    if dense is not None and dense.dtype != object and dense.ndim == 2:
        return dense
    parts = _rows(value, name, "the ids")
    filled = [p for p in parts if p.size]
    dtype = np.result_type(*filled) if filled else np.dtype(np.int64)
    splits = np.cumsum([0] + [p.size for p in parts], dtype=np.int64)
    values = np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)
    return values, splits


def _weights(value: Any, ids: Any, name: str) -> Any:
    """Weights laid out as :func:`_ids` laid out the ids (``None``: all 1)."""
    import numpy as np

    if value is None or not isinstance(ids, tuple) or isinstance(value, tuple):
        return value
    parts = [p.astype(np.float32) for p in _rows(value, name, "the weights")]
    return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), ids[1]


# The reference's signature, argument for argument (without its all_reduce_interface).
def preprocess_sparse_dense_matmul_input(  # noqa: PLR0913
    features: Any, features_weights: Any, feature_specs: Any, local_device_count: int,
    global_device_count: int, *, num_sc_per_device: int | str | None = None,
    sharding_strategy: str = "MOD", has_leading_dimension: bool = False,
    allow_id_dropping: bool = False, batch_number: int = 0, enable_minibatching: bool = False,
) -> tuple[PreprocessedInput, SparseDenseMatmulInputStats]:
    """Preprocess one batch for stacked ``feature_specs`` as jax-tpu-embedding does, with
    tpuemb's preprocessing (``tpuemb_cfg.sparsecore.preprocess``).

    ``features`` and ``features_weights`` (``None``: weights 1) have the specs' structure.
    Only the ``MOD`` sharding exists; ``batch_number`` only names the batch in the reference's
    logs; minibatching is refused (tpuemb preprocesses one bucket per SparseCore).
    """
    import numpy as np

    from tpuemb_cfg.sparsecore.preprocessing import preprocess

    function = "preprocess_sparse_dense_matmul_input"
    check_int(function, "local_device_count", local_device_count, minimum=1)
    check_int(function, "global_device_count", global_device_count, minimum=1)
    check_str(function, "sharding_strategy", sharding_strategy, ("MOD",))
    for name, flag in (("has_leading_dimension", has_leading_dimension),
                       ("allow_id_dropping", allow_id_dropping),
                       ("enable_minibatching", enable_minibatching)):
        check_bool(function, name, flag)
    nsc, _ = sparse_cores_per_device(num_sc_per_device)
    if sharding_strategy.upper() != "MOD":
        raise ValueError(f"Unsupported sharding strategy: {sharding_strategy!r}; only 'MOD' "
                         "exists (jax-tpu-embedding 0.2.0)")
    if enable_minibatching:
        raise ValueError("enable_minibatching=True is not simulated by tpuemb: pass False "
                         "(the statistics and drops without minibatching)")
    del batch_number
    specs = leaves(feature_specs)
    ids = leaves(features)
    weights = None if features_weights is None else leaves(features_weights)
    if len(ids) != len(specs) or (weights is not None and len(weights) != len(specs)):
        raise ValueError(f"features ({len(ids)} leaves) and features_weights must have the "
                         f"structure of feature_specs ({len(specs)} leaves)")
    stacking = stacking_of(specs, global_device_count=global_device_count, num_sc_per_device=nsc)
    names = [s.name for s in specs]
    rows = [_ids(x, n) for x, n in zip(ids, names, strict=True)]
    batch = preprocess(
        stacking, dict(zip(names, rows, strict=True)),
        None if weights is None else {
            n: _weights(w, r, n) for n, w, r in zip(names, weights, rows, strict=True)},
        local_devices=local_device_count, global_devices=global_device_count,
        sparse_cores_per_device=nsc, allow_id_dropping=allow_id_dropping,
        has_leading_dimension=has_leading_dimension)

    def shaped(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return a if has_leading_dimension else a.reshape(-1)

    out = batch.stacks
    csr = SparseDenseMatmulInput(
        {k: shaped(s.row_pointers) for k, s in out.items()},
        {k: shaped(s.embedding_ids) for k, s in out.items()},
        {k: shaped(s.sample_ids) for k, s in out.items()},
        {k: shaped(s.gains) for k, s in out.items()})
    minibatches: npt.NDArray[Any] = np.full(local_device_count, batch.num_minibatches)
    if has_leading_dimension:
        minibatches = minibatches.reshape(local_device_count, 1)
    stats = SparseDenseMatmulInputStats(
        max_ids_per_partition={k: s.max_ids_per_partition.reshape(-1) for k, s in out.items()},
        max_unique_ids_per_partition={k: s.max_unique_ids_per_partition.reshape(-1)
                                      for k, s in out.items()},
        required_buffer_size_per_sc={k: s.required_buffer_size_per_sc.reshape(-1)
                                     for k, s in out.items()},
        id_drop_counters={k: s.id_drop_count for k, s in out.items()})
    return PreprocessedInput(csr, minibatches), stats
