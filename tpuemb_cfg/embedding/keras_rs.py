"""keras-rs' ``TableConfig`` and ``FeatureConfig``, converted as keras-rs' TensorFlow backend does.

keras-rs (``keras_rs.layers.DistributedEmbedding``) describes tables and features with its own
dataclasses: ``TableConfig(name, vocabulary_size, embedding_dim, initializer, optimizer,
combiner, placement, ...)`` and ``FeatureConfig(name, table, input_shape, output_shape)``, whose
shapes are global (the first dimension is the batch over all replicas) and whose output shape
ends with the embedding dimension. On TensorFlow, before ``TPUEmbedding`` sees them, keras-rs:

1. flattens the features (``keras.tree.flatten_with_path``: dict keys sorted, lists in order),
   resolves each table's ``placement`` (``"auto"`` is ``"sparsecore"`` on the TPUs whose embedding
   layer reads a ``TPUEmbeddingConfiguration``; ``"default_device"`` tables are ordinary Keras
   embeddings and get no TPU table) and keys the TPU features by their path joined with ``"."``
   (``{"a": {"x": f}}`` gives ``"a.x"``; ``TPUEmbedding`` then visits these keys sorted as strings,
   so ``"l.10"`` comes before ``"l.2"``);
2. converts each table once (by identity): ``TableConfig(vocabulary_size, dim=embedding_dim,
   initializer, optimizer, combiner, name)``, the optimizer translated by
   ``to_tf_tpu_optimizer`` (:func:`to_tpu_optimizer`);
3. converts each feature: ``FeatureConfig(name, table, output_shape)`` with the output shape
   without its last (embedding) dimension and the batch divided by the number of replicas (it
   must divide; the output shape needs at least two dimensions); no ``max_sequence_length``;
4. translates the layer's own ``optimizer`` (for tables whose optimizer is ``None``) the same way.

The layer's ``build`` then passes per-replica input shapes; here they are each feature's
``input_shape`` with its batch divided by the number of replicas (the last axis says how many ids
a bag holds, which the simulator uses).

keras-rs is never imported: its objects are recognised by their attributes (a feature with
``table``, ``input_shape`` and ``output_shape`` whose table has ``embedding_dim``), like Keras
optimizers are (:mod:`~tpuemb_cfg.embedding.keras`). Initializers do not reach the
configuration; a table keeps its keras-rs initializer (an object, or a Keras name such as
``"glorot_uniform"``) for the executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpuemb_cfg.algorithms.table import KERAS_RS_DEFAULT
from tpuemb_cfg.embedding import _checks as chk
from tpuemb_cfg.embedding import origins
from tpuemb_cfg.embedding.errors import EmbeddingConfigError, EmbeddingTypeError
from tpuemb_cfg.embedding.keras import NAMES, from_keras
from tpuemb_cfg.embedding.optimizers import FTRL, SGD, Adagrad, Adam, Optimizer
from tpuemb_cfg.embedding.tables import FeatureConfig, TableConfig

__all__ = ["convert", "is_feature", "is_table", "source_tables", "to_tpu_optimizer"]

PLACEMENTS = ("auto", "default_device", "sparsecore")
#: The ``tf.tpu.experimental.embedding`` optimizers keras-rs passes through unchanged.
_PASSED = (SGD, Adagrad, Adam, FTRL)


def is_table(value: Any) -> bool:
    """A keras-rs ``TableConfig``, by its attributes (``embedding_dim`` where TensorFlow's has
    ``dim``)."""
    return (not isinstance(value, TableConfig) and hasattr(value, "embedding_dim")
            and hasattr(value, "vocabulary_size"))


def is_feature(value: Any) -> bool:
    """A keras-rs ``FeatureConfig``, by its attributes (``input_shape``, ``output_shape`` and a
    keras-rs table)."""
    return (not isinstance(value, FeatureConfig) and hasattr(value, "input_shape")
            and hasattr(value, "output_shape") and is_table(getattr(value, "table", None)))


def to_tpu_optimizer(optimizer: Any, owner: str) -> Optimizer | None:
    """keras-rs' ``to_tf_tpu_optimizer``: ``None`` stays ``None``; tpuemb's (TensorFlow's)
    ``SGD``, ``Adagrad``, ``Adam`` and ``FTRL`` pass through; a name (``"adam"``) or a Keras
    optimizer (or its dict) is translated by :func:`~tpuemb_cfg.embedding.keras.from_keras`;
    anything else is refused, as keras-rs refuses it."""
    if optimizer is None or isinstance(optimizer, _PASSED):
        return optimizer
    if isinstance(optimizer, Optimizer):
        raise EmbeddingTypeError(
            f"{owner}: optimizer {type(optimizer).__name__} is not one keras-rs passes to "
            f"TensorFlow (SGD, Adagrad, Adam, FTRL); give the table a tpuemb_cfg.embedding "
            f"TableConfig to use it"
        )
    if isinstance(optimizer, str | Mapping) or callable(getattr(optimizer, "get_config", None)):
        try:
            return from_keras(optimizer)
        except EmbeddingConfigError as exc:
            raise type(exc)(f"{owner}: {exc}") from None
    raise EmbeddingTypeError(
        f"{owner}: optimizer {chk.show(optimizer)} ({chk.type_name(optimizer)}) is none of what "
        f"keras-rs takes: a name ({', '.join(repr(n) for n in NAMES)}), a Keras optimizer, or "
        f"tf.tpu.experimental.embedding's SGD, Adagrad, Adam or FTRL"
    )


def _flatten(structure: Any, keys: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """``keras.tree.flatten_with_path``: (key path, leaf) pairs, dict keys sorted."""
    if isinstance(structure, Mapping):
        try:
            order = sorted(structure)
        except TypeError:
            raise EmbeddingTypeError(
                "feature_config: dict keys must be mutually comparable (they are visited in "
                "sorted order); use keys of one type, e.g. all str"
            ) from None
        return [pair for k in order for pair in _flatten(structure[k], (*keys, k))]
    if isinstance(structure, list | tuple):
        return [pair for i, v in enumerate(structure) for pair in _flatten(v, (*keys, i))]
    return [(keys, structure)]


def _shape(value: Any, owner: str, name: str) -> list[Any]:
    if not isinstance(value, list | tuple) or not all(
            d is None or (isinstance(d, int) and not isinstance(d, bool)) for d in value):
        raise EmbeddingTypeError(
            f"{owner}: `{name}` must be a tuple of ints (None for an unknown dimension); "
            f"received {chk.show(value)}"
        )
    return list(value)


def _table(table: Any, owner: str) -> TableConfig:
    initializer = getattr(table, "initializer", None)
    converted = TableConfig(
        vocabulary_size=table.vocabulary_size,
        dim=table.embedding_dim,
        initializer=initializer if callable(initializer) else None,
        optimizer=to_tpu_optimizer(getattr(table, "optimizer", KERAS_RS_DEFAULT), owner),
        combiner=getattr(table, "combiner", "mean"),
        name=table.name,
    )
    if isinstance(initializer, str):  # a Keras name, resolved by the executor
        converted.initializer = initializer
    origins.derive(converted, table)
    return converted


def source_tables(feature_config: Any) -> dict[str, Any]:
    """The keras-rs table of each feature :func:`convert` keeps, by the same key (the joined
    path): where a converted table came from (its own limits, which the conversion drops)."""
    return {".".join(str(k) for k in keys): feature.table
            for keys, feature in _flatten(feature_config)
            if is_feature(feature) and getattr(feature.table, "placement", "auto")
            != "default_device"}


def sparsecore_features(feature_config: Any) -> dict[str, Any]:
    """keras-rs' features placed on the SparseCore, keyed by their joined paths in the order
    keras-rs visits them (sorted as strings), as both backends' base class finds them; a
    ``default_device`` table's features are left out. Raises :class:`EmbeddingConfigError` where
    keras-rs raises ``ValueError``."""
    on_tpu: dict[str, Any] = {}
    for keys, feature in _flatten(feature_config):
        path = ".".join(str(k) for k in keys)
        where = f"feature '{path}'" if path else "the feature"
        if not is_feature(feature):
            raise EmbeddingTypeError(
                f"feature_config: {where} is {chk.show(feature)} ({chk.type_name(feature)}), "
                f"but the others are keras-rs FeatureConfigs; keras-rs takes either its own "
                f"FeatureConfigs or TensorFlow's, not both"
            )
        placement = getattr(feature.table, "placement", "auto")
        if placement not in PLACEMENTS:
            raise EmbeddingConfigError(
                f"{where} (name {feature.name!r}): table placement {placement!r} is not one of "
                f"{', '.join(repr(p) for p in PLACEMENTS)} (keras-rs refuses it)"
            )
        if placement != "default_device":  # "auto" is the SparseCore on these TPUs
            on_tpu[path] = feature
    if not on_tpu:
        raise EmbeddingConfigError(
            "feature_config: every keras-rs table has placement='default_device', so keras-rs "
            "makes ordinary Keras embeddings of them and no TPU embedding configuration; use "
            "placement='auto' or 'sparsecore' for the tables the TPU should hold"
        )
    return {path: on_tpu[path] for path in sorted(on_tpu)}  # keras.tree's dict order


def convert(
    feature_config: Any, optimizer: Any, num_replicas: int
) -> tuple[dict[str, FeatureConfig], Optimizer | None, dict[str, list[Any]]]:
    """keras-rs features as TensorFlow's: the features keyed by their joined paths (only those
    on a TPU table), the layer optimizer translated, and each feature's per-replica input shape
    (see the module docstring). Raises :class:`EmbeddingConfigError` where keras-rs (or the
    ``TableConfig``/``FeatureConfig`` it builds) raises ``ValueError``."""
    tables: dict[int, TableConfig] = {}
    features: dict[str, FeatureConfig] = {}
    input_shapes: dict[str, list[Any]] = {}
    for path, feature in sparsecore_features(feature_config).items():
        owner = f"feature '{path}' (name {feature.name!r})"
        if id(feature.table) not in tables:
            tables[id(feature.table)] = _table(feature.table, f"table {feature.table.name!r}")
        output = _shape(feature.output_shape, owner, "output_shape")
        if len(output) < 2:
            raise EmbeddingConfigError(
                f"{owner}: `output_shape` {tuple(output)} must have at least 2 dimensions, a "
                f"batch dimension and the embedding dimension (keras-rs refuses it)"
            )
        batch, *rest = output[:-1]
        if batch is not None:
            if batch % num_replicas:
                raise EmbeddingConfigError(
                    f"{owner}: the batch size {batch} of `output_shape` {tuple(output)} is not a "
                    f"multiple of the number of replicas {num_replicas} (keras-rs refuses it: "
                    f"its shapes are global, each replica gets batch / replicas)"
                )
            batch //= num_replicas
        features[path] = FeatureConfig(tables[id(feature.table)], output_shape=[batch, *rest],
                                       name=feature.name)
        origins.derive(features[path], feature)
        given = _shape(feature.input_shape, owner, "input_shape")
        if given:
            first = given[0] if given[0] is None else given[0] // num_replicas
            input_shapes[path] = [first, *given[1:]]
        else:
            input_shapes[path] = given
    return features, to_tpu_optimizer(optimizer, "the layer's optimizer"), input_shapes
