"""``build_config``: TensorFlow 2.21's ``TPUEmbedding`` compilation without TensorFlow or a TPU.

The steps of ``compile.md`` section 3, in TensorFlow's order:

1. flatten the features (dict keys sorted) and order the tables by first use;
2. per table: inherit the global optimizer, require an optimizer (CTOR023), default the name to
   ``table_{i}`` and require unique names (CTOR024) - interleaved, first failure wins;
3. number the dynamic learning rates by first appearance of equal callables (tags 0..K-1);
4. resolve every feature's output shape from ``output_shape``, ``per_replica_input_shapes`` or
   ``per_replica_batch_size`` (CTOR025-027);
5. write the proto; then run the validator and raise :class:`ConfigValidationError` on errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.schema import Mode
from tpuemb_cfg.embedding import _checks as chk
from tpuemb_cfg.embedding import keras_rs, pbvalues
from tpuemb_cfg.embedding.bagsizes import ids_per_bag
from tpuemb_cfg.embedding.errors import (
    ConfigValidationError,
    EmbeddingConfigError,
    EmbeddingTypeError,
)
from tpuemb_cfg.embedding.nest import flatten_up_to, flatten_with_paths
from tpuemb_cfg.embedding.optimizers import Optimizer
from tpuemb_cfg.embedding.shapes import (
    Shape,
    format_shape,
    is_fully_defined,
    is_shape_like,
    to_shape,
)
from tpuemb_cfg.embedding.tables import FeatureConfig, TableConfig
from tpuemb_cfg.validation.validator import validate

if TYPE_CHECKING:
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass
class Feature:
    """One flattened feature: its path in the structure, its config and its final shape.

    ``ids_per_bag``: the most ids one bag (one entry of ``shape``) holds, from the input shape
    (``embedding.bagsizes``); ``None`` when the build arguments do not say.
    """

    path: str
    config: FeatureConfig
    table_id: int
    shape: tuple[int, ...]
    ids_per_bag: int | None = None


@dataclass
class TagUse:
    """Which table reads tag ``tag`` and through which argument."""

    table: str
    argument: str  # "learning_rate" or "step_counter"


@dataclass
class CompiledConfig:
    """The result of :func:`build_config`.

    ``dynamic_learning_rates[k]`` is the callable whose value must be sent at position k of the
    learning-rate list every step (tag k); ``tag_uses[k]`` lists the tables reading tag k.
    """

    config: TPUEmbeddingConfiguration
    dynamic_learning_rates: list[Any]
    tables: list[TableConfig]
    features: list[Feature]
    tag_uses: list[list[TagUse]] = field(default_factory=list)

    @property
    def combiners(self) -> list[Any]:
        """Each feature's combiner (its table's: ``'mean'``, ``'sum'``, ``'sqrtn'`` or a
        ``CustomCombiner``), in feature order. The proto has no field for it, so the executor
        takes it from here (``tpuemb_cfg.session``)."""
        return [feature.config.table.combiner for feature in self.features]


def _flatten_features(feature_config: Any) -> list[tuple[str, FeatureConfig]]:
    leaves = flatten_with_paths(feature_config)
    for path, leaf in leaves:
        if not isinstance(leaf, FeatureConfig):
            where = f" at '{path}'" if path else ""
            kind = type(leaf)
            raise EmbeddingTypeError(
                f"feature_config{where}: expected a tpuemb_cfg.embedding.FeatureConfig (or a "
                f"keras-rs one), received {chk.show(leaf)} ({kind.__module__}.{kind.__qualname__});"
                f" feature_config must be FeatureConfigs or dicts, lists and tuples of them"
            )
    # No feature at all ([] or {}) builds, as in TensorFlow: a configuration without tables,
    # which the validator then refuses (TBL001) unless validate=False.
    return leaves


def _order_tables(features: Sequence[tuple[str, FeatureConfig]]) -> list[TableConfig]:
    tables: list[TableConfig] = []
    seen: set[int] = set()
    for _, feature in features:
        if id(feature.table) not in seen:
            seen.add(id(feature.table))
            tables.append(feature.table)
    return tables


def _prepare_tables(tables: list[TableConfig], optimizer: Any) -> None:
    """Inherit the global optimizer, check it, default and check names (3.3), in place."""
    names: dict[str, int] = {}
    for i, table in enumerate(tables):
        if table.optimizer is None:
            table.optimizer = optimizer
        label = f"table {table.name!r}" if table.name is not None else f"table {i} (unnamed)"
        if not isinstance(table.optimizer, Optimizer):
            if table.optimizer is None:
                raise EmbeddingConfigError(
                    f"{label} has no optimizer: give the TableConfig an `optimizer`, or pass a "
                    f"global `optimizer` to build_config for the tables without one"
                )
            raise EmbeddingTypeError(
                f"{label}: `optimizer` must be an optimizer of tpuemb_cfg.embedding (SGD, "
                f"Adagrad, Adam, FTRL, ...); received {chk.show(table.optimizer)} "
                f"({chk.type_name(table.optimizer)})"
            )
        if table.name is None:
            table.name = f"table_{i}"
        if not isinstance(table.name, str):
            raise EmbeddingTypeError(f"{label}: `name` must be a str; received {table.name!r}")
        if table.name in names:
            raise EmbeddingConfigError(
                f"tables {names[table.name]} and {i} (in table order) are both named "
                f"{table.name!r}; table names must be unique - unnamed tables are called "
                f"table_<position>, which can collide with an explicit name"
            )
        names[table.name] = i


def _dynamic_inputs(tables: list[TableConfig]) -> tuple[list[Any], list[list[TagUse]]]:
    """The distinct callables in first-appearance order (3.4) and who reads each."""
    inputs: list[Any] = []
    uses: list[list[TagUse]] = []
    for table in tables:
        assert isinstance(table.optimizer, Optimizer) and isinstance(table.name, str)
        for argument, fn in table.optimizer.dynamic_inputs():
            try:
                hash(fn)
            except TypeError:
                raise EmbeddingTypeError(
                    f"table {table.name!r}: the {argument} callable {chk.show(fn)} is not "
                    f"hashable (it defines __eq__ without __hash__); callables are matched by "
                    f"equality and hash to share a tag - define __hash__ consistently"
                ) from None
            if fn not in inputs:
                inputs.append(fn)
                uses.append([])
            # list.index matches like `in`: the same object, or an equal one (==).
            uses[inputs.index(fn)].append(TagUse(table.name, argument))
    return inputs, uses


# -- output shapes (3.5) -------------------------------------------------------------------------


def _input_shapes(
    feature_config: Any, per_replica_input_shapes: Any, count: int
) -> list[tuple[str, Any]]:
    """The input shapes aligned with the flattened features: nested like ``feature_config``, or
    a flat list in flattening order."""
    nested = flatten_up_to(feature_config, per_replica_input_shapes, is_shape_like)
    if nested is not None:
        return nested
    if (
        isinstance(per_replica_input_shapes, list | tuple)
        and len(per_replica_input_shapes) == count
        and all(is_shape_like(s) for s in per_replica_input_shapes)
    ):
        return [(str(i), s) for i, s in enumerate(per_replica_input_shapes)]
    raise EmbeddingConfigError(
        f"per_replica_input_shapes {chk.show(per_replica_input_shapes)} does not match the "
        f"features: give one shape (a list of ints) per FeatureConfig, either nested exactly "
        f"like feature_config or as a flat list of {count} shapes in the features' order "
        f"(dict keys sorted)"
    )


def _incoming_from_input(feature: FeatureConfig, path: str, raw: Any) -> tuple[int | None, ...]:
    label = f"feature '{path}'" if path else "the feature"
    shape = to_shape(raw, f"per_replica_input_shapes for {label}", "shape")
    if shape is None or len(shape) < 1:
        raise EmbeddingConfigError(
            f"per_replica_input_shapes for {label}: received input shape {format_shape(shape)}; "
            f"its rank must be known and >= 1"
        )
    if (
        len(shape) == 2
        and shape[-1] != 1
        and feature.output_shape is None
        and feature.max_sequence_length > 0
    ):
        shape = (*shape[:-1], feature.max_sequence_length, shape[-1])
    return shape if len(shape) == 1 else shape[:-1]


def _resolve_shapes(
    flat: list[tuple[str, FeatureConfig]],
    feature_config: Any,
    per_replica_input_shapes: Any,
    per_replica_batch_size: Any,
) -> list[tuple[int, ...]]:
    incoming: list[Shape] = [None] * len(flat)
    if isinstance(per_replica_input_shapes, int):  # True too, as in TensorFlow (a batch of 1)
        per_replica_batch_size, per_replica_input_shapes = per_replica_input_shapes, None
    if per_replica_input_shapes is not None:
        shapes = _input_shapes(feature_config, per_replica_input_shapes, len(flat))
        incoming = [
            _incoming_from_input(feature, path, raw)
            for (path, feature), (_, raw) in zip(flat, shapes, strict=True)
        ]
    elif per_replica_batch_size:
        batch = chk.integer("build_config", "per_replica_batch_size", per_replica_batch_size,
                            minimum=1)
        incoming = [
            (batch, f.max_sequence_length)
            if f.max_sequence_length > 0 and f.output_shape is None
            else (batch,)
            for _, f in flat
        ]

    final: list[tuple[int, ...]] = []
    for (path, feature), inc in zip(flat, incoming, strict=True):
        label = f"feature '{path}'" if path else "the feature"
        if feature.name:
            label += f" (name {feature.name!r})"
        # Re-read: the attribute may have been reassigned since construction.
        configured = to_shape(feature.output_shape, label, "output_shape")
        if configured is not None and inc is not None:
            skip = len(inc) in (1, 2) and len(configured) > len(inc)
            if not skip and (
                len(configured) != len(inc)
                or any(
                    a is not None and b is not None and a != 0 and b != 0 and a != b
                    for a, b in zip(configured, inc, strict=True)
                )
            ):
                raise EmbeddingConfigError(
                    f"{label}: inconsistent shapes: FeatureConfig.output_shape is "
                    f"{format_shape(configured)} but the build arguments give "
                    f"{format_shape(inc)}; make them agree or drop one of them"
                )
        shape = configured if configured is not None else inc
        if not is_fully_defined(shape):
            raise EmbeddingConfigError(
                f"{label}: output shape {format_shape(shape)} is not fully defined; set "
                f"FeatureConfig.output_shape or pass per_replica_input_shapes or "
                f"per_replica_batch_size to build_config"
            )
        assert shape is not None
        final.append(tuple(d for d in shape if d is not None))
    return final


# -- the proto -----------------------------------------------------------------------------------


def _write_config(
    tables: list[TableConfig],
    features: list[Feature],
    tag_of: Callable[[Any], int],
    num_hosts: int,
    num_replicas: int,
    num_cores_per_replica: int | None,
    pipeline_execution_with_tensor_core: bool,
) -> TPUEmbeddingConfiguration:
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

    config = TPUEmbeddingConfiguration()
    for table in tables:
        assert isinstance(table.optimizer, Optimizer) and isinstance(table.name, str)
        if int(table.dim) > INT32_MAX or int(table.vocabulary_size) > INT64_MAX:
            raise EmbeddingConfigError(
                f"table {table.name!r}: dim {table.dim} or vocabulary_size "
                f"{table.vocabulary_size} is too large for the proto (dimension is int32, "
                f"vocabulary_size int64)"
            )
        td = config.table_descriptor.add()
        td.name = table.name
        td.vocabulary_size = max(int(table.vocabulary_size), num_hosts)
        td.dimension = int(table.dim)
        params = td.optimization_parameters
        try:
            table.optimizer.write(params, tag_of)
        except EmbeddingConfigError as e:
            raise type(e)(f"table {table.name!r}: {e}") from None
        quant = table.quantization_config
        if quant is not None:
            owner = f"table {table.name!r}: QuantizationConfig"
            sq = params.simulated_quantization
            sq.enabled = True
            sq.num_buckets = pbvalues.to_int(owner, "num_buckets", quant.num_buckets)
            sq.clipping_limits.lower.value = pbvalues.to_float(owner, "lower", quant.lower)
            sq.clipping_limits.upper.value = pbvalues.to_float(owner, "upper", quant.upper)
    # TensorFlow's order (features after tables, then the counts), so that of two values out of
    # range the same one is reported.
    for feature in features:
        fd = config.feature_descriptor.add()
        if feature.config.name:
            fd.name = pbvalues.to_str(f"feature {feature.path!r}", "name", feature.config.name)
        fd.table_id = feature.table_id
        if any(d > INT32_MAX for d in feature.shape):
            raise EmbeddingConfigError(
                f"feature {feature.path!r}: output shape {format_shape(feature.shape)} has a "
                f"dimension above 2^31 - 1, the largest input_shape entry the proto can hold"
            )
        fd.input_shape.extend(int(d) for d in feature.shape)  # True (a dimension of 1) -> 1
    config.mode = Mode.TRAINING  # type: ignore[assignment]
    config.num_hosts = num_hosts
    cores = num_replicas * (num_cores_per_replica or 1)
    if max(num_hosts, cores) > INT32_MAX:
        raise EmbeddingConfigError(
            f"num_hosts {num_hosts} or num_tensor_cores {cores} (num_replicas x "
            f"num_cores_per_replica) exceeds 2^31 - 1, the proto's int32 range"
        )
    config.num_tensor_cores = cores
    if pipeline_execution_with_tensor_core:
        config.pipeline_execution_with_tensor_core = True
    if num_cores_per_replica:
        config.spmd_sharding.enabled = True
        config.spmd_sharding.num_cores_per_replica = num_cores_per_replica
    return config


def _validate(config: TPUEmbeddingConfiguration) -> None:
    """Run the project's validator; raise with every error diagnostic."""
    errors = [d for d in validate(config) if _severity(d) == "error"]
    if errors:
        raise ConfigValidationError(errors)


def _severity(diagnostic: Any) -> str:
    severity = diagnostic.severity
    return str(getattr(severity, "value", severity)).lower()


def build_config(  # noqa: PLR0913  (TensorFlow's signature: TPUEmbedding's and build's arguments)
    feature_config: Any,
    optimizer: Optimizer | Any = None,
    *,
    num_hosts: int = 1,
    num_replicas: int = 1,
    num_cores_per_replica: int | None = None,
    pipeline_execution_with_tensor_core: bool = False,
    per_replica_input_shapes: Any = None,
    per_replica_batch_size: int | None = None,
    validate: bool = True,
) -> CompiledConfig:
    """Compile features, tables and optimizers into TensorFlow 2.21's ``TPUEmbeddingConfiguration``.

    The arguments are those of ``TPUEmbedding(feature_config, optimizer,
    pipeline_execution_with_tensor_core)`` and ``TPUEmbedding.build(per_replica_input_shapes,
    per_replica_batch_size)`` plus the facts a TPU strategy supplies (``num_hosts``,
    ``num_replicas``, ``num_cores_per_replica``; see ``docs/compile.md``). Shapes are lists of
    ints (``None`` for unknown dimensions); ``per_replica_input_shapes`` nests like
    ``feature_config`` or is a flat list in the features' order, or an int (the batch size).

    Like TensorFlow, this sets ``optimizer`` and ``name`` on the ``TableConfig`` objects that
    have none. ``validate=False`` skips the final validation (the bytes are the same).

    ``feature_config`` may instead hold keras-rs ``FeatureConfig`` objects (recognised by their
    attributes; :mod:`~tpuemb_cfg.embedding.keras_rs`): they are converted as keras-rs'
    TensorFlow backend converts them, with ``num_replicas`` dividing their global batch, and
    ``optimizer`` is then the layer's (anything keras-rs takes: a name, a Keras optimizer, one
    of tpuemb's SGD, Adagrad, Adam, FTRL). Their shapes come from the features, so
    ``per_replica_input_shapes`` and ``per_replica_batch_size`` must be left out.

    Raises :class:`EmbeddingConfigError` (a ``ValueError``; :class:`EmbeddingTypeError` is also a
    ``TypeError``) for what TensorFlow rejects, and :class:`ConfigValidationError` with every
    error diagnostic when the validator rejects the result.
    """
    hosts = chk.integer("build_config", "num_hosts", num_hosts, minimum=1)
    replicas = chk.integer("build_config", "num_replicas", num_replicas, minimum=1)
    cores = None
    if num_cores_per_replica is not None:
        cores = chk.integer("build_config", "num_cores_per_replica", num_cores_per_replica,
                            minimum=0)

    if any(keras_rs.is_feature(leaf) for _, leaf in flatten_with_paths(feature_config)):
        if per_replica_input_shapes is not None or per_replica_batch_size is not None:
            raise EmbeddingConfigError(
                "keras-rs FeatureConfigs carry their shapes (input_shape, output_shape, global "
                "batch): leave per_replica_input_shapes and per_replica_batch_size out"
            )
        feature_config, optimizer, per_replica_input_shapes = keras_rs.convert(
            feature_config, optimizer, replicas)
    flat = _flatten_features(feature_config)
    tables = _order_tables(flat)
    _prepare_tables(tables, optimizer)
    inputs, uses = _dynamic_inputs(tables)
    shapes = _resolve_shapes(flat, feature_config, per_replica_input_shapes, per_replica_batch_size)

    given = per_replica_input_shapes is not None and (
        not isinstance(per_replica_input_shapes, int) or isinstance(per_replica_input_shapes, bool)
    )
    bags = ids_per_bag(
        flat,
        _input_shapes(feature_config, per_replica_input_shapes, len(flat)) if given else None,
    )
    table_ids = {id(t): i for i, t in enumerate(tables)}
    features = [
        Feature(path, f, table_ids[id(f.table)], shape, bag)
        for (path, f), shape, bag in zip(flat, shapes, bags, strict=True)
    ]
    config = _write_config(
        tables,
        features,
        inputs.index,
        hosts,
        replicas,
        cores,
        bool(pipeline_execution_with_tensor_core),
    )
    if validate:
        _validate(config)
    return CompiledConfig(config, inputs, tables, features, uses)
