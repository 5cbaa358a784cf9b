"""The front door of a SparseCore configuration: every value a spec gives, checked once.

Whichever API wrote it (TensorFlow's ``TPUEmbeddingV2`` objects, keras-rs', jax-tpu-embedding's
specs or tpuemb's mirrors of them), a configuration becomes a
:class:`~tpuemb_cfg.sparsecore.config.SparseCoreConfig`, and :func:`check_config` checks that
record before anything stacks it: each value's type, its range, and that it fits the C++ integer
the references hand it to. Nothing below it (stacking, preprocessing, the rules, the summaries,
the simulation) needs to check again.

- **Counts and dimensions** (an embedding width, a feature's shape and samples, chips,
  SparseCores, the per-partition limits, the COO buffer) are ``int32_t`` in the references' C++
  (TensorFlow's ``SparseCoreLayoutStacker``, jax-tpu-embedding's preprocessing): at most
  2^31 - 1. **Sizes** (a vocabulary, the padded elements of the tables, the activation byte
  limit) are ``int64_t``: at most 2^63 - 1.
- **Integers are integers**: ``True``, ``2.7`` and ``"1000"`` are refused, not read as 1, 2 and
  1000 (a NumPy integer is fine).
- **Names** (tables, features) are ``str`` of at most :data:`NAME_LIMIT` characters: a name
  becomes a key of ``tables.npz``, a zip member whose name must stay below 64 KiB, and a line of
  every report.
- **The limit callables** (jax's ``stack_to_max_ids_per_partition`` and
  ``stack_to_max_unique_ids_per_partition``) must be callable; what they return is checked where
  stacking calls them (:func:`call_limit`): an ``int`` that fits ``int32_t``, and an exception
  they raise is reported naming the callable, the stack and the arguments.

Every error is a :class:`SpecValueError` or :class:`SpecTypeError` (a ``ValueError`` /
``TypeError``) naming the object and the argument, with ``origin``: where the object was built,
when known (the spec loader turns it into the spec's line).

The checks the references' own constructors make are made here too (TensorFlow's ``TableConfig``:
``vocabulary_size`` and ``dim`` positive integers, ``combiner`` one of ``mean``, ``sum``,
``sqrtn``; jax-tpu-embedding's ``QuantizationConfig``: at least 2 buckets, ``min_value <
max_value``), so a spec of foreign objects is held to them as well.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from tpuemb_cfg.base.errors import shown
from tpuemb_cfg.sparsecore.config import (
    Origin,
    SparseCoreConfig,
    SparseCoreFeature,
    SparseCoreOptimizer,
    SparseCoreTable,
)
from tpuemb_cfg.sparsecore.topology import Topology

__all__ = ["COMBINERS", "INT32_MAX", "INT64_MAX", "NAME_LIMIT", "LimitCallableError",
           "SpecTypeError", "SpecValueError", "call_limit", "check_combiner", "check_config",
           "check_layouts", "check_limit", "check_name", "check_quantization",
           "check_rate", "count", "flag", "size"]

#: ``int32_t``'s and ``int64_t``'s largest values.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: The longest table or feature name (characters).
NAME_LIMIT = 1024
#: The combiners SparseCores run (jax-tpu-embedding's ``sum``, ``mean``, ``sqrtn``; TensorFlow's
#: too, which also takes a ``CustomCombiner``: ``"custom"`` in the record).
COMBINERS = ("sum", "mean", "sqrtn")
_WIDTH = {INT32_MAX: "int32_t", INT64_MAX: "int64_t"}


class SpecValueError(ValueError):
    """A value out of its range; ``origin`` is where its object was built (when known)."""

    def __init__(self, message: str, origin: Origin | None = None) -> None:
        super().__init__(message)
        self.origin = origin


class SpecTypeError(TypeError):
    """A value of the wrong type; ``origin`` as for :class:`SpecValueError`."""

    def __init__(self, message: str, origin: Origin | None = None) -> None:
        super().__init__(message)
        self.origin = origin


class LimitCallableError(SpecValueError):
    """A limit callable that raised or returned something other than an int32 count."""


#: A user's value in a message: the package's one value-showing helper.
_show = shown


def integer(owner: str, name: str, value: Any, *, minimum: int, maximum: int,
            origin: Origin | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``: an ``int`` or NumPy integer, not a bool,
    a float or a string; ``maximum`` is the C++ type's limit, named in the message."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise SpecTypeError(f"{owner}: `{name}` must be an int; received {_show(value)} "
                            f"({type(value).__name__})", origin)
    number = operator.index(value)
    if number > maximum:
        width = _WIDTH.get(maximum, f"{maximum:,}")
        raise SpecValueError(f"{owner}: `{name}` {number:,} does not fit a C++ {width} "
                             f"(at most {maximum:,})", origin)
    if number < minimum:
        raise SpecValueError(f"{owner}: `{name}` must be at least {minimum:,}; received "
                             f"{number:,}", origin)
    return number


def count(owner: str, name: str, value: Any, *, minimum: int = 1,
          origin: Origin | None = None) -> int:
    """A count or dimension: an int ``>= minimum`` that fits ``int32_t``."""
    return integer(owner, name, value, minimum=minimum, maximum=INT32_MAX, origin=origin)


def size(owner: str, name: str, value: Any, *, minimum: int = 1,
         origin: Origin | None = None) -> int:
    """A size: an int ``>= minimum`` that fits ``int64_t``."""
    return integer(owner, name, value, minimum=minimum, maximum=INT64_MAX, origin=origin)


def flag(owner: str, name: str, value: Any, origin: Origin | None = None) -> bool:
    """A bool (or the ints 0 and 1, or a NumPy bool)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if hasattr(value, "__index__") and operator.index(value) in (0, 1):
        return bool(operator.index(value))
    raise SpecTypeError(f"{owner}: `{name}` must be True or False; received {_show(value)} "
                        f"({type(value).__name__})", origin)


def check_name(owner: str, name: str, value: Any, origin: Origin | None = None) -> str:
    """A table's or feature's name: a ``str`` of at most :data:`NAME_LIMIT` characters."""
    if not isinstance(value, str):
        raise SpecTypeError(f"{owner}: `{name}` must be a str; received {_show(value)} "
                            f"({type(value).__name__})", origin)
    if len(value) > NAME_LIMIT:
        raise SpecValueError(f"{owner}: `{name}` has {len(value):,} characters, more than the "
                             f"{NAME_LIMIT:,} a name may have ({value[:24]!r}...)", origin)
    return value


def check_combiner(owner: str, value: Any, allowed: tuple[str, ...] = COMBINERS,
                   origin: Origin | None = None) -> str:
    """A table's combiner: one of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise SpecValueError(f"{owner}: `combiner` must be one of {', '.join(allowed)}; "
                             f"received {_show(value)}", origin)
    return value


def check_quantization(owner: str, value: Any) -> None:
    """A jax table's ``quantization_config`` (``None``, or ``min_value``, ``max_value`` and
    ``num_buckets``): jax-tpu-embedding's own ``QuantizationConfig`` refuses fewer than 2
    buckets and ``min_value >= max_value``; a foreign object is held to the same."""
    if value is None:
        return
    try:
        low, high, buckets = value.min_value, value.max_value, value.num_buckets
    except AttributeError:
        raise SpecTypeError(f"{owner}: `quantization_config` must be a QuantizationConfig "
                            f"(min_value, max_value, num_buckets) or None; received "
                            f"{_show(value)}") from None
    count(owner, "quantization_config.num_buckets", buckets, minimum=2)
    check_rate(owner, "quantization_config.min_value", low)
    check_rate(owner, "quantization_config.max_value", high)
    if callable(low) or callable(high) or not float(low) < float(high):
        raise SpecValueError(f"{owner}: `quantization_config` needs min_value < max_value "
                             f"(numbers); received {low!r} and {high!r}")


def check_limit(owner: str, name: str, value: Any, origin: Origin | None = None) -> int:
    """A per-partition limit: an int that fits ``int32_t`` (0 and below are SC015's)."""
    return integer(owner, name, value, minimum=-INT32_MAX - 1, maximum=INT32_MAX,
                   origin=origin)


def check_rate(owner: str, name: str, value: Any, origin: Origin | None = None) -> Any:
    """A learning rate or hyper-parameter: a finite real number, or a callable (a schedule)."""
    if callable(value):
        return value
    number = (isinstance(value, numbers.Real) or (hasattr(value, "__float__")
                                                  and getattr(value, "ndim", 0) == 0))
    if number and not isinstance(value, bool | str | bytes):  # a NumPy or jax scalar too
        if not math.isfinite(float(value)):
            raise SpecValueError(f"{owner}: `{name}` must be a finite number; received "
                                 f"{value!r}", origin)
        return value
    raise SpecTypeError(f"{owner}: `{name}` must be a number or a callable (a schedule); "
                        f"received {_show(value)} ({type(value).__name__})", origin)


def _limit_callable(name: str, value: Any, origin: Origin | None) -> Any:
    if value is None or callable(value):
        return value
    raise SpecTypeError(f"`{name}` must be a callable (stack_name, total_sample_count) -> int, "
                        f"or None; received {_show(value)} ({type(value).__name__})", origin)


def call_limit(name: str, fn: Callable[[str, int], Any], stack: str, samples: int,
               origin: Origin | None = None) -> int:
    """``fn(stack, samples)``, the limit callable ``name``: an int that fits ``int32_t`` (0 and
    negative limits are the rules' to report, SC015). :class:`LimitCallableError` naming the
    callable, the stack and the arguments when it raises or returns anything else."""
    call = f"{name}({stack!r}, {samples})"
    try:
        value = fn(stack, samples)
    except Exception as exc:  # noqa: BLE001 - the user's callable: any failure is one message
        raise LimitCallableError(f"{call} raised {type(exc).__name__}: {exc}", origin) from None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise LimitCallableError(f"{call} returned {_show(value)} ({type(value).__name__}); it "
                                 "must return an int (the stack's limit, e.g. 256)", origin)
    number = operator.index(value)
    if not -INT32_MAX - 1 <= number <= INT32_MAX:
        raise LimitCallableError(f"{call} returned {number:,}, which does not fit a C++ "
                                 "int32_t", origin)
    return number


# -- the record -----------------------------------------------------------------------------------


def _topology(topology: Any, origin: Origin | None) -> Topology:
    if not isinstance(topology, Topology):
        raise SpecTypeError(f"`topology` must be a tpuemb_cfg.sparsecore.Topology; received "
                            f"{_show(topology)}", origin)
    owner = "topology"
    chips = count(owner, "chips (devices)", topology.chips, origin=origin)
    cores = count(owner, "SparseCores per chip", topology.sparse_cores_per_chip, origin=origin)
    hosts = count(owner, "hosts", topology.hosts, origin=origin)
    if chips * cores > INT32_MAX:
        raise SpecValueError(f"topology: {chips:,} chips x {cores} SparseCores = "
                             f"{chips * cores:,} SparseCores, which does not fit a C++ int32_t",
                             origin)
    return replace(topology, chips=chips, sparse_cores_per_chip=cores, hosts=hosts)


def _optimizer(owner: str, optimizer: SparseCoreOptimizer, jax: bool) -> SparseCoreOptimizer:
    where = optimizer.origin if optimizer.origin.line is not None else None
    label = f"{owner} optimizer"
    if optimizer.source is None and optimizer.learning_rate is None:
        return optimizer  # a record built by hand without its API object: no rate to check
    rate = check_rate(label, "learning_rate", optimizer.learning_rate, where)
    if jax:  # jax-tpu-embedding's specs: every hyper-parameter a number, a bool or a callable
        for key, value in optimizer.hyper.items():
            if not isinstance(value, bool):
                check_rate(label, key, value, where)
    return replace(optimizer, learning_rate=rate)


def _table(table: SparseCoreTable, n: int, jax: bool) -> SparseCoreTable:
    origin = table.origin if table.origin.line is not None else None
    name = check_name("table", "name", table.name, origin)
    owner = f"table {name!r}"
    vocabulary = size(owner, "vocabulary_size", table.vocabulary_size, origin=origin)
    dim = count(owner, "embedding_dim" if jax else "dim", table.dim, origin=origin)
    check_combiner(owner, table.combiner, COMBINERS if jax else (*COMBINERS, "custom"), origin)
    padded = -(-vocabulary // (8 * n)) * (8 * n) * (-(-dim // 8) * 8)
    if padded > INT64_MAX:
        raise SpecValueError(f"{owner}: {vocabulary:,} rows x {dim:,} columns, padded for {n:,} "
                             f"SparseCores, are {padded:,} elements, which does not fit a C++ "
                             "int64_t", origin)
    limits: dict[str, Any] = {}
    for key in ("max_ids_per_partition", "max_unique_ids_per_partition"):
        value = getattr(table, key)
        limits[key] = None if value is None else check_limit(owner, key, value, origin)
    buffer = table.suggested_coo_buffer_size_per_device
    if buffer is not None:
        buffer = count(owner, "suggested_coo_buffer_size_per_device", buffer, minimum=0,
                       origin=origin)
    return replace(table, name=name, vocabulary_size=vocabulary, dim=dim,
                   optimizer=_optimizer(owner, table.optimizer, jax),
                   suggested_coo_buffer_size_per_device=buffer, **limits)


def _shape(owner: str, name: str, value: Any, origin: Origin | None, *,
           ragged: bool = False) -> tuple[int, ...]:
    """A shape of positive dimensions; with ``ragged``, an axis after the batch may be 0 (an
    input's ragged axis, as the spec readers record ``None``)."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise SpecTypeError(f"{owner}: `{name}` must be a sequence of ints; received "
                            f"{_show(value)}", origin)
    dims = tuple(count(owner, f"{name}[{i}]", d, minimum=0 if ragged and i else 1,
                       origin=origin) for i, d in enumerate(value))
    if not dims:
        raise SpecValueError(f"{owner}: `{name}` is empty; it starts with the batch size",
                             origin)
    return dims


def _feature(feature: SparseCoreFeature, tables: set[str]) -> SparseCoreFeature:
    origin = feature.origin if feature.origin.line is not None else None
    name = check_name("feature", "name", feature.name, origin)
    owner = f"feature {name!r}"
    checked = replace(feature, name=name,
                      input_shape=_shape(owner, "input_shape", feature.input_shape, origin,
                                         ragged=True),
                      output_shape=_shape(owner, "output_shape", feature.output_shape, origin))
    count(owner, "samples (the product of output_shape[:-1])", checked.samples, origin=origin)
    if feature.table not in tables:
        raise SpecValueError(f"{owner} uses table {feature.table!r}, which the configuration "
                             f"does not define; known tables: {_show(sorted(tables))}", origin)
    return checked


def _per_table(name: str, value: Any, origin: Origin | None) -> Mapping[str, int] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SpecTypeError(f"`{name}` must be a dict of stacked table name -> int, or None; "
                            f"received {_show(value)} ({type(value).__name__})", origin)
    out: dict[str, int] = {}
    for key, limit in value.items():
        if not isinstance(key, str):  # a stacked name: as long as its tables' names joined
            raise SpecTypeError(f"`{name}` keys must be stacked table names (str); received "
                                f"{_show(key)} ({type(key).__name__})", origin)
        out[key] = count(name, f"[{key!r}]", limit, minimum=0, origin=origin)
    return out


def check_config(config: SparseCoreConfig) -> SparseCoreConfig:
    """``config`` with every value checked (module docstring) and written as its plain type
    (ints as ``int``, flags as ``bool``, shapes as tuples). Raises :class:`SpecTypeError` /
    :class:`SpecValueError` naming the object and the argument."""
    if not isinstance(config, SparseCoreConfig):
        raise SpecTypeError(f"expected a SparseCoreConfig; received {type(config).__name__}")
    settings = config.setting_origins

    def at(*names: str) -> Origin | None:
        return next((settings[n] for n in names if n in settings), None)

    jax = config.mode == "jax"
    topology = _topology(config.topology, at("topology", "global_device_count", "num_replicas"))
    n = topology.num_sparse_cores
    tables = tuple(_table(t, n, jax) for t in config.tables)
    total = sum(-(-t.vocabulary_size // (8 * n)) * (8 * n) * (-(-t.dim // 8) * 8) for t in tables)
    if total > INT64_MAX:
        raise SpecValueError(f"the tables, padded for {n:,} SparseCores, hold {total:,} "
                             "elements together, which does not fit a C++ int64_t",
                             at("feature_specs", "feature_config"))
    names = {t.name for t in tables}
    features = tuple(_feature(f, names) for f in config.features)
    owner = "spec" if jax else "sparse_core_config"
    flags: dict[str, Any] = {key: flag(owner, key, getattr(config, key), at(key))
             for key in ("disable_table_stacking", "allow_id_dropping",
                         "initialize_tables_on_host", "enable_fast_table_initialization",
                         "use_short_stack_names", "limits_dropped_by_conversion")}
    limit = config.activation_mem_bytes_limit
    if limit is not None:
        limit = size("spec", "activation_mem_bytes_limit", limit, minimum=0,
                     origin=at("activation_mem_bytes_limit"))
    return replace(
        config, topology=topology, tables=tables, features=features,
        max_ids_per_chip_per_sample=count(
            "sparse_core_config", "max_ids_per_chip_per_sample",
            config.max_ids_per_chip_per_sample, minimum=0,
            origin=at("max_ids_per_chip_per_sample")),
        max_ids_per_table=_per_table("max_ids_per_table", config.max_ids_per_table,
                                     at("max_ids_per_table")),
        max_unique_ids_per_table=_per_table("max_unique_ids_per_table",
                                            config.max_unique_ids_per_table,
                                            at("max_unique_ids_per_table")),
        activation_mem_bytes_limit=limit,
        stack_to_max_ids_per_partition=_limit_callable(
            "stack_to_max_ids_per_partition", config.stack_to_max_ids_per_partition,
            at("stack_to_max_ids_per_partition")),
        stack_to_max_unique_ids_per_partition=_limit_callable(
            "stack_to_max_unique_ids_per_partition",
            config.stack_to_max_unique_ids_per_partition,
            at("stack_to_max_unique_ids_per_partition")),
        **flags)


# -- a layouts file -------------------------------------------------------------------------------


def check_layouts(layouts: Any) -> None:
    """A ``SparseCoreTableLayouts`` message as ``tpuemb inspect`` reads one (``compile
    --sparsecore``'s output, or TensorFlow's): every table with both shapes of two positive
    dimensions (the padded no smaller), its name, and one slice (SparseCores and chips, at least
    one each, the SparseCores a multiple of the chips) for all. SpecValueError naming the table
    and the field otherwise."""
    slice_of: tuple[int, int] | None = None
    for i, layout in enumerate(layouts.tables):
        check_name(f"tables[{i}]", "table_name", layout.table_name)
        owner = f"table {layout.table_name!r} (tables[{i}])"
        check_name(owner, "stacked_table_name", layout.stacked_table_name)
        for field in ("unsharded_shape", "unsharded_padded_shape"):
            shape = list(getattr(layout, field))
            if len(shape) != 2 or min(shape) < 1:
                raise SpecValueError(f"{owner}: `{field}` must be [rows, columns], both at least "
                                     f"1; found {shape}")
        if any(p < s for p, s in zip(layout.unsharded_padded_shape, layout.unsharded_shape,
                                     strict=True)):
            raise SpecValueError(f"{owner}: `unsharded_padded_shape` "
                                 f"{list(layout.unsharded_padded_shape)} is smaller than "
                                 f"`unsharded_shape` {list(layout.unsharded_shape)}")
        for field in ("total_rows_per_sparse_core_shard", "sparse_core_shard_row_offset",
                      "sparse_core_shard_rotation", "per_sparse_core_batch_size",
                      "num_features"):
            if getattr(layout, field) < 0:
                raise SpecValueError(f"{owner}: `{field}` must be at least 0; found "
                                     f"{getattr(layout, field)}")
        cores, chips = layout.num_sparse_cores, layout.num_partitions
        if cores < 1 or chips < 1 or cores % chips:
            raise SpecValueError(f"{owner}: {cores} SparseCores on {chips} chips (num_sparse_cores"
                                 ", num_partitions): both must be at least 1, the SparseCores a "
                                 "multiple of the chips")
        if slice_of is not None and (cores, chips) != slice_of:
            raise SpecValueError(f"{owner}: {cores} SparseCores on {chips} chips, where the "
                                 f"tables before it have {slice_of[0]} on {slice_of[1]}")
        slice_of = (cores, chips)
