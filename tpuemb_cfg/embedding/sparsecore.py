"""TensorFlow 2.21's SparseCore API (``TPUEmbeddingV2``) and keras-rs' SparseCore placement,
converted into tpuemb's :class:`~tpuemb_cfg.sparsecore.config.SparseCoreConfig`.

:class:`SparseCoreEmbeddingConfig` takes the arguments of TensorFlow's
``tf.tpu.experimental.embedding.SparseCoreEmbeddingConfig`` with its defaults.
:func:`tensorflow_config` does what ``TPUEmbeddingBase.__init__`` and ``TPUEmbeddingV2.__init__``
do to the feature structure before the stacker sees it:

1. flatten the features (``nest.flatten_with_joined_string_paths``: dict keys sorted, paths joined
   with ``/``);
2. list the tables in order of first use (only used tables), give a table without optimizer the
   global one (none at all is an error), name an unnamed table ``table_<i>`` (``i`` its position in
   that list) and refuse duplicate names - without changing the caller's objects
   (``TPUEmbeddingV2`` works on clones);
3. key each table's stacking group, the string TensorFlow hands ``AddTable``'s ``group``
   (:func:`tpuemb_cfg.embedding.sparsecore_group.group_key`: reproducible, unlike TensorFlow's).

The objects may be tpuemb's (``tpuemb_cfg.embedding``) or TensorFlow's own: they are read by
their attributes (``vocabulary_size``, ``dim``, ``optimizer``, ``name``, ``quantization_config``;
``table``, ``output_shape``), as the rest of :mod:`tpuemb_cfg.embedding` reads foreign objects.

keras-rs (:func:`keras_rs_config`): its TensorFlow backend converts its features as
:mod:`~tpuemb_cfg.embedding.keras_rs` describes, then builds
``SparseCoreEmbeddingConfig(disable_table_stacking=table_stacking is None,
initialize_tables_on_host=False)``: a table's ``max_ids_per_partition`` and
``max_unique_ids_per_partition`` never reach TensorFlow (keras-rs 0.4.0,
``keras_rs/src/layers/embedding/tensorflow/config_conversion.py``; they are left as comments
there). The :class:`SparseCoreConfig` keeps them per table and says they were dropped
(``limits_dropped_by_conversion``), so a rule can report it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.embedding import _checks as chk
from tpuemb_cfg.embedding import keras_rs, keras_rs_jax, origins
from tpuemb_cfg.embedding.build import _input_shapes, build_config
from tpuemb_cfg.embedding.custom import CustomOptimizer
from tpuemb_cfg.embedding.errors import EmbeddingConfigError, EmbeddingTypeError
from tpuemb_cfg.embedding.extra_optimizers import BY_ALGORITHM
from tpuemb_cfg.embedding.keras_rs_jax import choose_backend, using_keras_backend
from tpuemb_cfg.embedding.nest import flatten_with_paths
from tpuemb_cfg.embedding.shapes import to_shape
from tpuemb_cfg.embedding.sparsecore_group import CallableNumbers, group_key
from tpuemb_cfg.embedding.spec import check_spec_file, read_spec_text, run_python_spec
from tpuemb_cfg.sparsecore import jte
from tpuemb_cfg.sparsecore.checks import LimitCallableError, check_config
from tpuemb_cfg.sparsecore.config import (
    Origin,
    SparseCoreConfig,
    SparseCoreFeature,
    SparseCoreOptimizer,
    SparseCoreTable,
    ids_per_bag,
)
from tpuemb_cfg.sparsecore.feed import DEFAULT_MAX_IDS_PER_TABLE
from tpuemb_cfg.sparsecore.topology import DEFAULT_SPARSE_CORES, Topology, parse_topology

if TYPE_CHECKING:
    from tpuemb_cfg.embedding.build import CompiledConfig

__all__ = [
    "Provenance",
    "SparseCoreEmbeddingConfig",
    "SparseCoreSpec",
    "is_sparsecore_spec",
    "keras_rs_config",
    "load_sparsecore_spec",
    "tensorflow_config",
    "to_topology",
]

#: ``TPUEmbeddingV2.DEFAULT_MAX_IDS_PER_TABLE`` and the unique-id default: what a stacked table
#: missing from ``max_ids_per_table`` / ``max_unique_ids_per_table`` gets (with a warning).
DEFAULT_MAX_IDS = DEFAULT_MAX_IDS_PER_TABLE
#: TensorFlow's defaults, kept once: the fields of the configuration record.
_DEFAULT: dict[str, Any] = {f.name: f.default for f in fields(SparseCoreConfig)}


@dataclass(frozen=True)
class SparseCoreEmbeddingConfig:
    """``tf.tpu.experimental.embedding.SparseCoreEmbeddingConfig`` (TensorFlow 2.21): a frozen
    dataclass with the same fields, order and defaults.

    ``max_ids_per_table`` / ``max_unique_ids_per_table`` map **stacked** table names to the most
    ids (unique ids) one SparseCore sends to one partition per step; a stacked table missing from
    them gets 256 (TensorFlow logs a warning). ``initialize_tables_on_host`` builds each table on
    the host before copying it to the TPU (the host must hold the largest table). Unlike
    TensorFlow's, the types are checked here (a flag must be a bool, a limit an int >= 0), so a
    mistake is reported at the spec line that made it rather than deep inside the TPU setup.
    """

    disable_table_stacking: bool = _DEFAULT["disable_table_stacking"]
    max_ids_per_chip_per_sample: int = _DEFAULT["max_ids_per_chip_per_sample"]
    max_ids_per_table: Mapping[str, int] | None = _DEFAULT["max_ids_per_table"]
    max_unique_ids_per_table: Mapping[str, int] | None = _DEFAULT["max_unique_ids_per_table"]
    allow_id_dropping: bool = _DEFAULT["allow_id_dropping"]
    initialize_tables_on_host: bool = _DEFAULT["initialize_tables_on_host"]
    enable_fast_table_initialization: bool = _DEFAULT["enable_fast_table_initialization"]

    def __post_init__(self) -> None:
        origins.record(self)
        owner = "SparseCoreEmbeddingConfig"
        for name in ("disable_table_stacking", "allow_id_dropping", "initialize_tables_on_host",
                     "enable_fast_table_initialization"):
            chk.flag(owner, name, getattr(self, name))
        chk.integer(owner, "max_ids_per_chip_per_sample", self.max_ids_per_chip_per_sample,
                    minimum=0)
        for name in ("max_ids_per_table", "max_unique_ids_per_table"):
            limits = getattr(self, name)
            if limits is None:
                continue
            if not isinstance(limits, Mapping):
                raise chk.fail_type(owner, f"`{name}` must be a dict of stacked table name -> "
                                    f"int, or None; received {chk.show(limits)}")
            for key, value in limits.items():
                if not isinstance(key, str):
                    raise chk.fail_type(owner, f"`{name}` keys must be stacked table names "
                                        f"(str); received {chk.show(key)}")
                chk.integer(owner, f"{name}[{key!r}]", value, minimum=0)


# -- topology -------------------------------------------------------------------------------------


def to_topology(value: Any, owner: str = "topology") -> Topology:
    """A :class:`Topology` from what a spec or caller gives: a ``Topology``, ``"v6e-64"`` (chip
    kind and chip count), or an int (chips of an unknown kind: TensorFlow's warning and 4
    SparseCores per chip, ``sparse_cores_defaulted=True``)."""
    if isinstance(value, Topology):
        return value
    if isinstance(value, str):
        try:
            return parse_topology(value)
        except ValueError as exc:
            raise EmbeddingConfigError(f"{owner}: {exc}") from None
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise EmbeddingConfigError(f"{owner}: the chip count must be at least 1; received "
                                       f"{value}")
        return Topology(chips=value, sparse_cores_per_chip=DEFAULT_SPARSE_CORES,
                        sparse_cores_defaulted=True)
    raise EmbeddingTypeError(
        f"{owner} must be a slice such as 'v6e-64' (chip kind and chips), a "
        f"tpuemb_cfg.sparsecore.Topology, or a chip count (SparseCores per chip unknown: "
        f"{DEFAULT_SPARSE_CORES} assumed, as TensorFlow does); received {chk.show(value)} "
        f"({chk.type_name(value)})"
    )


# -- TensorFlow's objects -------------------------------------------------------------------------


def _algorithm(optimizer: Any) -> str:
    """The proto oneof name of ``optimizer`` (tpuemb's class attribute, or TensorFlow's class
    matched by name to tpuemb's); ``"custom"`` for a custom optimizer; else the class name."""
    if isinstance(optimizer, CustomOptimizer) or type(optimizer).__name__ == "CustomOptimizer":
        return "custom"
    name = getattr(type(optimizer), "algorithm", None)
    if isinstance(name, str):
        return name
    by_class = {cls.__name__: algorithm for algorithm, cls in BY_ALGORITHM.items()}
    return by_class.get(type(optimizer).__name__, type(optimizer).__name__)


def _is_table(value: Any) -> bool:
    return hasattr(value, "vocabulary_size") and hasattr(value, "dim")


def _is_feature(value: Any) -> bool:
    return _is_table(getattr(value, "table", None)) and hasattr(value, "output_shape")


def _tables_in_order(flat: list[tuple[str, Any]]) -> list[Any]:
    tables: list[Any] = []
    seen: set[int] = set()
    for _, feature in flat:
        if id(feature.table) not in seen:
            seen.add(id(feature.table))
            tables.append(feature.table)
    return tables


def _named_tables(tables: list[Any], optimizer: Any) -> list[tuple[str, Any]]:
    """``TPUEmbeddingBase.__init__``'s table pass, without writing into the objects: each
    table's name and optimizer."""
    out: list[tuple[str, Any]] = []
    names: dict[str, int] = {}
    for i, table in enumerate(tables):
        chosen = table.optimizer if table.optimizer is not None else optimizer
        label = f"table {table.name!r}" if table.name is not None else f"table {i} (unnamed)"
        if chosen is None:
            raise EmbeddingConfigError(
                f"{label} has no optimizer: give its TableConfig an `optimizer`, or define a "
                f"global `optimizer` for the tables without one (TensorFlow raises ValueError)"
            )
        name = table.name if table.name is not None else f"table_{i}"
        if not isinstance(name, str):
            raise EmbeddingTypeError(f"{label}: `name` must be a str; received {name!r}")
        if name in names:
            raise EmbeddingConfigError(
                f"tables {names[name]} and {i} (in order of first use) are both named {name!r}; "
                f"table names must be unique - an unnamed table is called table_<position>, "
                f"which can collide with an explicit name"
            )
        names[name] = i
        out.append((name, chosen))
    return out


def _output_shape(path: str, feature: Any) -> tuple[int, ...]:
    owner = f"feature '{path}'" if path else "the feature"
    shape = to_shape(feature.output_shape, owner, "output_shape")
    if shape is None or not shape or any(d is None for d in shape):
        raise EmbeddingConfigError(
            f"{owner}: TPUEmbeddingV2 multiplies out each feature's per-replica `output_shape` "
            f"when it stacks tables, so it must be fully known (e.g. [batch] or [batch, "
            f"sequence]); received {chk.show(feature.output_shape)}"
        )
    return tuple(int(d) for d in shape if d is not None)


def _sparsecore_optimizer(optimizer: Any, quantization: Any, callables: CallableNumbers,
                          origin: Origin) -> SparseCoreOptimizer:
    hyper = {k: v for k, v in vars(optimizer).items() if k != "learning_rate"}
    decay = (getattr(optimizer, "weight_decay_factor", None) is not None
             or getattr(optimizer, "multiply_weight_decay_factor_by_learning_rate", None)
             is not None)
    return SparseCoreOptimizer(
        algorithm=_algorithm(optimizer), hyper=hyper,
        group=group_key(optimizer, quantization, callables),
        learning_rate=getattr(optimizer, "learning_rate", None), weight_decay=decay,
        source=optimizer, origin=origin)


@dataclass(frozen=True)
class Provenance:
    """Where a configuration's objects were built: the spec ``path``, ``place(obj)`` giving the
    (line, column) of an object's constructor call in it (``origins.Origins.place``), and the
    line of each top-level setting the spec assigns (``setting_origins``)."""

    path: str | None = None
    place: Callable[[Any], tuple[int, int] | None] | None = None
    setting_origins: Mapping[str, Origin] = field(default_factory=dict)

    def origin(self, obj: Any, fallback: Origin | None = None) -> Origin:
        """Where ``obj`` was built; else ``fallback``; else the spec without a line."""
        found = self.place(obj) if self.place is not None and obj is not None else None
        if found is not None:
            return Origin(self.path, found[0])
        return fallback if fallback is not None else Origin(self.path, None)


@dataclass(frozen=True)
class _Extras:
    """What keras-rs' conversion adds to TensorFlow's: the api name, the per-replica input
    shapes, each converted table's own limits (by ``id`` of the converted table: limits and
    the keras-rs table) and that the conversion dropped them."""

    api: str = "tensorflow"
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    table_limits: Mapping[int, tuple[int | None, int | None, Any]] = field(default_factory=dict)
    limits_dropped: bool = False


def tensorflow_config(
    feature_config: Any,
    optimizer: Any = None,
    sparse_core_config: Any = None,
    *,
    topology: Any,
    provenance: Provenance | None = None,
    per_replica_input_shapes: Any = None,
) -> SparseCoreConfig:
    """``TPUEmbeddingV2(feature_config, optimizer, sparse_core_config=...)`` on ``topology``
    (``"v6e-64"``, a :class:`Topology`, or a chip count) as a :class:`SparseCoreConfig` (mode and
    api ``"tensorflow"``); ``provenance`` places each record in a spec. Raises
    :class:`EmbeddingConfigError` / :class:`EmbeddingTypeError` where TensorFlow raises
    ``ValueError`` / ``TypeError``. The objects are not changed.
    ``per_replica_input_shapes``: what the model passes to ``build()`` (nested like
    ``feature_config``, or a flat list): each feature's input shape, whose last axis is the
    ids of one bag (``SparseCoreFeature.ids_per_bag``)."""
    extras = _Extras()
    if per_replica_input_shapes is not None:
        extras = _Extras(input_shapes=_given_input_shapes(feature_config,
                                                          per_replica_input_shapes))
    return _convert_tensorflow(feature_config, optimizer, sparse_core_config,
                               to_topology(topology), provenance or Provenance(), extras)


def _given_input_shapes(feature_config: Any, shapes: Any) -> dict[str, tuple[int, ...]]:
    """``per_replica_input_shapes`` by feature path (a ragged axis, ``None``, as 0)."""
    flat = flatten_with_paths(feature_config)
    out = {}
    for (path, _), (_, raw) in zip(flat, _input_shapes(feature_config, shapes, len(flat)),
                                   strict=True):
        shape = to_shape(raw, f"per_replica_input_shapes for feature '{path}'", "shape")
        if shape is None or not shape:
            raise EmbeddingConfigError(
                f"per_replica_input_shapes for feature '{path}': received {chk.show(raw)}; "
                f"expected a shape of known rank such as [batch, ids]")
        out[path] = tuple(int(d) if d is not None else 0 for d in shape)
    return out


def _sparse_core_config(value: Any) -> Any:
    """``sparse_core_config`` as given: a ``SparseCoreEmbeddingConfig`` (tpuemb's or TensorFlow's,
    read by its fields; each field is checked with the rest of the configuration), TensorFlow's
    defaults for ``None``; a TypeError naming the argument for anything else."""
    if value is None:
        return SparseCoreEmbeddingConfig()
    if all(hasattr(value, name) for name in _SC_FIELDS):
        return value
    hint = (" (write SparseCoreEmbeddingConfig(**{...}) for a dict of its arguments)"
            if isinstance(value, Mapping) else "")
    raise EmbeddingTypeError(
        f"sparse_core_config must be a SparseCoreEmbeddingConfig (tpuemb_cfg.embedding's or "
        f"TensorFlow's) or None; received {chk.show(value)} ({chk.type_name(value)}){hint}")


def _check_features(flat: list[tuple[str, Any]]) -> None:
    for path, leaf in flat:
        if not _is_feature(leaf):
            at = f" at '{path}'" if path else ""
            raise EmbeddingTypeError(
                f"feature_config{at}: expected a FeatureConfig (tpuemb_cfg.embedding's or "
                f"TensorFlow's), received {chk.show(leaf)} ({chk.type_name(leaf)})")


def _convert_tensorflow(  # noqa: PLR0913  (the conversion's inputs, each a different kind)
    feature_config: Any, optimizer: Any, sparse_core_config: Any, where: Topology,
    provenance: Provenance, extras: _Extras,
) -> SparseCoreConfig:
    sc = _sparse_core_config(sparse_core_config)
    flat = flatten_with_paths(feature_config)
    _check_features(flat)
    tables = _tables_in_order(flat)
    named = _named_tables(tables, optimizer)
    callables = CallableNumbers()
    global_origin = provenance.setting_origins.get("optimizer", Origin(provenance.path, None))
    records: dict[int, SparseCoreTable] = {}
    for table, (name, chosen) in zip(tables, named, strict=True):
        limits = extras.table_limits.get(id(table), (None, None, None))
        source = limits[2] if limits[2] is not None else table  # keras-rs: its own table
        # An optimizer the spec did not build itself (keras-rs' "sgd") is placed at its table.
        fallback = global_origin if table.optimizer is None else provenance.origin(source)
        combiner = table.combiner if isinstance(table.combiner, str) else "custom"
        quantization = getattr(table, "quantization_config", None)
        records[id(table)] = SparseCoreTable(
            name=name, vocabulary_size=table.vocabulary_size, dim=table.dim,
            optimizer=_sparsecore_optimizer(chosen, quantization, callables,
                                            provenance.origin(chosen, fallback)),
            combiner=combiner,
            quantization=None if quantization is None else repr(quantization),
            initializer=getattr(table, "initializer", None),
            max_ids_per_partition=limits[0], max_unique_ids_per_partition=limits[1],
            origin=provenance.origin(source))
    features = []
    for path, feature in flat:
        table = records[id(feature.table)]
        out = _output_shape(path, feature)
        given = extras.input_shapes.get(path)
        features.append(SparseCoreFeature(
            name=path, table=table.name, input_shape=given if given is not None else out,
            output_shape=(*out, table.dim), origin=provenance.origin(feature),
            ids_per_bag=ids_per_bag(given, (*out, table.dim))))
    return check_config(SparseCoreConfig(
        api=extras.api,  # type: ignore[arg-type]  # "tensorflow" or "keras_rs"
        mode="tensorflow",
        tables=tuple(records[id(t)] for t in tables),
        features=tuple(features),
        topology=where,
        disable_table_stacking=sc.disable_table_stacking,
        max_ids_per_chip_per_sample=sc.max_ids_per_chip_per_sample,
        max_ids_per_table=sc.max_ids_per_table,
        max_unique_ids_per_table=sc.max_unique_ids_per_table,
        allow_id_dropping=sc.allow_id_dropping,
        initialize_tables_on_host=sc.initialize_tables_on_host,
        enable_fast_table_initialization=sc.enable_fast_table_initialization,
        limits_dropped_by_conversion=extras.limits_dropped,
        origin=Origin(provenance.path, None),
        setting_origins=dict(provenance.setting_origins),
    ))


def keras_rs_config(  # noqa: PLR0913  (the layer's arguments, the slice and the backend)
    feature_config: Any,
    optimizer: Any = None,
    *,
    topology: Any,
    table_stacking: Any = "auto",
    provenance: Provenance | None = None,
    keras_backend: str | None = None,
) -> SparseCoreConfig:
    """keras-rs' ``DistributedEmbedding(feature_config, optimizer=..., table_stacking=...)`` with
    SparseCore tables on ``topology``, as keras-rs 0.4.0 runs it on its Keras backend
    (``keras_backend``: ``"jax"`` or ``"tensorflow"``; ``None`` chooses as Keras does,
    :func:`~tpuemb_cfg.embedding.keras_rs_jax.choose_backend`).

    TensorFlow (module docstring): api ``"keras_rs"``, mode ``"tensorflow"``, each table's own
    limits kept beside TensorFlow's defaults, ``limits_dropped_by_conversion=True``. JAX
    (:mod:`~tpuemb_cfg.embedding.keras_rs_jax`): mode ``"jax"``, jax-tpu-embedding's stacking,
    each stack limited by the largest of its tables' limits, ids always dropped."""
    backend = keras_rs_jax.choose_backend(override=keras_backend)
    return _keras_rs_config(feature_config, optimizer, to_topology(topology), table_stacking,
                            provenance or Provenance(), backend)


def _keras_rs_config(  # noqa: PLR0913  (keras_rs_config's arguments, resolved)
    feature_config: Any, optimizer: Any, where: Topology, table_stacking: Any,
    provenance: Provenance, backend: Any,
) -> SparseCoreConfig:

    if backend.name == "jax":
        config = keras_rs_jax.jax_config(feature_config, topology=where,
                                         table_stacking=table_stacking,
                                         origin_of=provenance.origin)
        return replace(config, keras_backend_chosen_by=backend.chosen_by,
                       origin=Origin(provenance.path, None),
                       setting_origins=dict(provenance.setting_origins))
    if table_stacking is None:
        disable = True
    elif table_stacking == "auto":
        disable = False
    else:
        raise EmbeddingConfigError(
            f"table_stacking {table_stacking!r}: keras-rs' TensorFlow backend takes only 'auto' "
            f"(TensorFlow's stacking) or None (no stacking)")
    features, tpu_optimizer, input_shapes = keras_rs.convert(feature_config, optimizer,
                                                             where.num_partitions)
    sources = keras_rs.source_tables(feature_config)
    limits: dict[int, tuple[int | None, int | None, Any]] = {}
    for path, converted in features.items():
        source = sources[path]
        limits[id(converted.table)] = (
            getattr(source, "max_ids_per_partition", DEFAULT_MAX_IDS),
            getattr(source, "max_unique_ids_per_partition", DEFAULT_MAX_IDS),
            source)
    shapes = {path: tuple(int(d) for d in shape) for path, shape in input_shapes.items()
              if shape and all(d is not None for d in shape)}
    extras = _Extras(api="keras_rs", input_shapes=shapes, table_limits=limits,
                     limits_dropped=True)
    sc = SparseCoreEmbeddingConfig(disable_table_stacking=disable,
                                   initialize_tables_on_host=False)
    config = _convert_tensorflow(features, tpu_optimizer, sc, where, provenance, extras)
    return replace(config, keras_backend="tensorflow",
                   keras_backend_chosen_by=backend.chosen_by)


# -- specs ----------------------------------------------------------------------------------------


@dataclass
class SparseCoreSpec:
    """A loaded SparseCore spec.

    ``config``: the SparseCore configuration with the spec line of every table, feature,
    optimizer and top-level setting. ``compiled``: the legacy ``TPUEmbeddingConfiguration`` that
    ``build_config`` makes of the same TensorFlow or keras-rs objects (each table's optimizer
    parameters and combiner, for simulating the tables with the executor); ``None`` for a
    jax-tpu-embedding spec or when ``build_config`` refuses the objects.
    """

    config: SparseCoreConfig
    path: str
    compiled: CompiledConfig | None = None


#: The top-level names that make a Python spec a SparseCore spec.
SPARSECORE_MARKERS = ("sparse_core_config", "feature_specs", "topology")
#: The fields of ``SparseCoreEmbeddingConfig``, placed at its constructor call in the spec.
_SC_FIELDS = ("disable_table_stacking", "max_ids_per_chip_per_sample", "max_ids_per_table",
              "max_unique_ids_per_table", "allow_id_dropping", "initialize_tables_on_host",
              "enable_fast_table_initialization")
#: jax-tpu-embedding's ``auto_stack_tables`` arguments a spec may define.
JAX_ARGUMENTS = ("activation_mem_bytes_limit", "use_short_stack_names",
                 "stack_to_max_ids_per_partition", "stack_to_max_unique_ids_per_partition",
                 "auto_stack")
#: The top-level names a SparseCore spec may define (their lines are kept in
#: ``SparseCoreConfig.setting_origins``).
SETTINGS = ("feature_config", "optimizer", "sparse_core_config", "topology", "num_replicas",
            "per_replica_input_shapes", "table_stacking", "keras_backend", "feature_specs",
            "global_device_count", "num_sc_per_device", *JAX_ARGUMENTS)


def _assignments(text: str) -> dict[str, int]:
    """The line of the last top-level assignment of each name in the Python source ``text``."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    lines: dict[str, int] = {}
    for node in tree.body:
        targets: list[Any] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Name):
                    lines[leaf.id] = node.lineno
    return lines


def _read_text(path: str) -> str:
    return read_spec_text(path)


def is_sparsecore_spec(path: Any) -> bool:
    """Whether ``path`` is a Python spec that assigns ``sparse_core_config``, ``feature_specs`` or
    ``topology`` at its top level (the file is read, not run)."""
    import os

    name = os.fspath(path)
    if not name.endswith(".py") or not os.path.isfile(name):
        return False
    try:
        text = _read_text(name)
    except OSError:
        return False
    return bool(set(_assignments(text)) & set(SPARSECORE_MARKERS))


def _foreign(obj: Any) -> bool:
    """keras-rs' and jax-tpu-embedding's objects, whose constructors cannot call
    :func:`origins.record`: tables (``embedding_dim``), features (``table`` or ``table_spec``)
    and jax-tpu-embedding's optimizer specs."""
    if keras_rs.is_table(obj) or keras_rs.is_feature(obj):
        return True
    if hasattr(obj, "table_spec") and hasattr(obj, "output_shape"):
        return True
    return type(obj).__name__.endswith("OptimizerSpec")


def _spec_topology(namespace: Mapping[str, Any], jax: bool) -> Topology:
    """The spec's ``topology``; for jax-tpu-embedding also ``global_device_count`` and
    ``num_sc_per_device``; for TensorFlow also ``num_replicas`` (chips of an unknown kind)."""
    if "topology" in namespace:
        return to_topology(namespace["topology"])
    if jax and "global_device_count" in namespace and "num_sc_per_device" in namespace:
        devices = chk.integer("spec", "global_device_count", namespace["global_device_count"],
                              minimum=1)
        cores = chk.integer("spec", "num_sc_per_device", namespace["num_sc_per_device"],
                            minimum=1)
        return Topology.from_devices(devices, cores)
    if not jax and "num_replicas" in namespace:
        return to_topology(namespace["num_replicas"], "num_replicas")
    what = ("`topology` (e.g. 'v5p-16'), or `global_device_count` and `num_sc_per_device`"
            if jax else "`topology` (e.g. 'v6e-64': chip kind and chips)")
    raise EmbeddingConfigError(f"a SparseCore spec needs {what}")


def _legacy(namespace: Mapping[str, Any], topology: Topology) -> CompiledConfig | None:
    """``build_config`` on the spec's TensorFlow or keras-rs objects (not validated), or
    ``None`` when it refuses them."""
    try:
        return build_config(namespace["feature_config"], namespace.get("optimizer"),
                            num_hosts=topology.hosts, num_replicas=topology.num_partitions,
                            validate=False)
    except (ValueError, TypeError):
        return None


def _jax_config(namespace: Mapping[str, Any], topology: Topology,
                provenance: Provenance) -> SparseCoreConfig:
    """jax-tpu-embedding's ``feature_specs`` as a :class:`SparseCoreConfig`
    (:func:`tpuemb_cfg.sparsecore.jte.feature_specs_to_config`), each record placed at the spec
    line that built its object."""
    arguments = {k: namespace[k] for k in JAX_ARGUMENTS if k in namespace}
    specs = jte.leaves(namespace["feature_specs"])
    _refuse_repeated(specs)
    converted: SparseCoreConfig = jte.feature_specs_to_config(
        namespace["feature_specs"], global_device_count=topology.devices,
        num_sc_per_device=topology.sparse_cores_per_device, check=False, **arguments)
    config = replace(converted, topology=topology)
    by_feature = {getattr(s, "name", None): s for s in specs}
    by_table = {getattr(s.table_spec, "name", None): s.table_spec
                for s in specs if hasattr(s, "table_spec")}
    tables = []
    for table in config.tables:
        source = by_table.get(table.name)
        optimizer = replace(table.optimizer,
                            origin=provenance.origin(getattr(source, "optimizer", None)))
        tables.append(replace(table, optimizer=optimizer, origin=provenance.origin(source)))
    features = tuple(replace(f, origin=provenance.origin(by_feature.get(f.name)))
                     for f in config.features)
    return check_config(replace(config, tables=tuple(tables), features=features,
                                origin=Origin(provenance.path, None),
                                setting_origins=dict(provenance.setting_origins)))


def _refuse_repeated(specs: list[Any]) -> None:
    """A FeatureSpec listed twice, or two of one name, would be stacked twice and fed one
    input under one name (the batches of a simulation or a plan are keyed by feature name):
    refused, naming it. (jax-tpu-embedding's stacking itself lets names repeat; the library's
    ``jte`` functions still do.)"""
    seen: set[int] = set()
    names: set[Any] = set()
    for spec in specs:
        name = getattr(spec, "name", None)
        if id(spec) in seen:
            raise EmbeddingConfigError(
                f"feature_specs lists the FeatureSpec {name!r} more than once: list each "
                "feature once")
        if isinstance(name, str) and name in names:
            raise EmbeddingConfigError(
                f"feature_specs holds two FeatureSpecs named {name!r}: a spec's features are "
                "fed by name, so each needs its own")
        seen.add(id(spec))
        names.add(name if isinstance(name, str) else None)


def _convert(namespace: Mapping[str, Any], provenance: Provenance, legacy: bool
             ) -> tuple[SparseCoreConfig, CompiledConfig | None]:

    jax = "feature_specs" in namespace
    if jax and "feature_config" in namespace:
        raise EmbeddingConfigError(
            "the spec defines both `feature_config` (TensorFlow's or keras-rs' features) and "
            "`feature_specs` (jax-tpu-embedding's): a spec is written for one API; remove or "
            "rename the one you did not mean")
    topology = _spec_topology(namespace, jax)
    if jax:
        return _jax_config(namespace, topology, provenance), None
    if "feature_config" not in namespace:
        raise EmbeddingConfigError(
            "a SparseCore spec defines `feature_config` (TensorFlow's or keras-rs' "
            "FeatureConfigs) or `feature_specs` (jax-tpu-embedding's FeatureSpecs)")
    feature_config = namespace["feature_config"]
    optimizer = namespace.get("optimizer")
    if any(keras_rs.is_feature(leaf) for _, leaf in flatten_with_paths(feature_config)):
        backend = choose_backend(namespace.get("keras_backend"))
        config = _keras_rs_config(feature_config, optimizer, topology,
                                  namespace.get("table_stacking", "auto"), provenance, backend)
    else:
        config = tensorflow_config(feature_config, optimizer,
                                   namespace.get("sparse_core_config"), topology=topology,
                                   provenance=provenance,
                                   per_replica_input_shapes=namespace.get(
                                       "per_replica_input_shapes"))
    return config, _legacy(namespace, topology) if legacy else None


def _culprit(message: str, assigned: Mapping[str, int]) -> str:
    """The setting a conversion error is about: the first setting the spec assigns that the
    message names (other than the features), else the features."""
    import re

    features = "feature_specs" if "feature_specs" in assigned else "feature_config"
    for setting in SETTINGS:
        if (setting != features and setting in assigned
                and re.search(rf"\b{setting}\b", message)):
            return setting
    return features


def load_sparsecore_spec(path: Any, *, keras_backend: str | None = None,
                         legacy: bool = True) -> SparseCoreSpec:
    """Run the SparseCore spec ``path`` and convert what it defines (docs/sparsecore/apis.md):

    - TensorFlow: ``feature_config``, optional ``optimizer``, ``sparse_core_config`` (a
      :class:`SparseCoreEmbeddingConfig`; TensorFlow's defaults when absent) and ``topology``;
    - keras-rs: ``feature_config`` of keras-rs features, optional ``optimizer``,
      ``table_stacking`` and ``keras_backend`` (``"jax"`` or ``"tensorflow"``: the backend it
      runs on; else Keras' choice, ``keras_rs_jax.choose_backend``; the ``keras_backend``
      argument overrides both), and ``topology``;
    - jax-tpu-embedding: ``feature_specs`` and ``topology`` (or ``global_device_count`` and
      ``num_sc_per_device``), optional ``activation_mem_bytes_limit``,
      ``use_short_stack_names``, ``stack_to_max_ids_per_partition``,
      ``stack_to_max_unique_ids_per_partition``.

    ``legacy=False`` leaves :attr:`SparseCoreSpec.compiled` None (for a caller that needs only
    the SparseCore configuration, such as ``tpuemb plan``: the protobuf message is not loaded).

    Raises :class:`~tpuemb_cfg.base.errors.InputError` with the spec's path and the line of the
    setting at fault (or of the features) when the spec cannot be run or converted."""
    name = check_spec_file(path)
    if not name.endswith(".py"):
        raise InputError("a SparseCore spec is a Python file (.py)", path=name)
    with origins.recording(name, _foreign) as sites:
        namespace = run_python_spec(name)
    lines = _assignments(_read_text(name))
    setting_origins = {key: Origin(name, line) for key, line in lines.items()
                       if key in namespace and key in SETTINGS}
    sc = namespace.get("sparse_core_config")
    placed = sites.place(sc) if sc is not None else None
    if placed is not None or "sparse_core_config" in setting_origins:
        at = (Origin(name, placed[0]) if placed is not None
              else setting_origins["sparse_core_config"])
        setting_origins.update(dict.fromkeys(_SC_FIELDS, at))
    provenance = Provenance(path=name, place=sites.place, setting_origins=setting_origins)

    try:
        with origins.deriving(sites), using_keras_backend(keras_backend, "keras_backend"):
            config, compiled = _convert(namespace, provenance, legacy)
        _call_limits(config)
    except (ValueError, TypeError) as exc:
        message = " ".join(str(exc).split())
        origin = getattr(exc, "origin", None)
        line = (origin.line if isinstance(origin, Origin) and origin.line is not None
                else lines.get(_culprit(message, lines)))
        raise InputError(message, path=name, line=line) from None
    return SparseCoreSpec(config, name, compiled)


def _call_limits(config: SparseCoreConfig) -> None:
    """Call jax's limit callables as stacking will (once per stack), so that one that raises or
    returns a non-int is refused with the spec rather than inside each command; other stacking
    failures are the rules' (SC017)."""
    if config.mode != "jax" or (config.stack_to_max_ids_per_partition is None
                                and config.stack_to_max_unique_ids_per_partition is None):
        return
    try:
        jte.stack_config(config)
    except LimitCallableError:
        raise
    except (ValueError, TypeError):
        pass
