"""keras-rs on each Keras backend: which backend a keras-rs spec runs on, and what keras-rs
0.4.0's JAX backend makes of its tables.

**The backend.** keras-rs' ``DistributedEmbedding`` is the JAX layer when Keras' backend is
``"jax"`` and the TensorFlow layer when it is ``"tensorflow"`` (any other backend has no
SparseCore path). Keras 3 chooses its backend once, at import (``keras/src/backend/config.py``):
the ``KERAS_BACKEND`` environment variable when set and not empty, else the ``"backend"`` of its
configuration file ``keras.json`` in ``$KERAS_HOME`` (else ``~/.keras``, or ``/tmp/.keras`` when
the home directory is not writable; a file that is not JSON is ignored), else ``"tensorflow"``.
tpuemb chooses the same way, except that a spec may name the backend (``keras_backend = "jax"``,
as a training script sets ``os.environ["KERAS_BACKEND"]`` before importing Keras: MLPerf's
``main.py`` does) and a caller may override both (``--keras-backend``, :func:`using_keras_backend`,
or the ``keras_backend`` argument of ``load_sparsecore_spec``).

**JAX** (``keras_rs/src/layers/embedding/jax``, keras-rs 0.4.0 with jax-tpu-embedding 0.2.0):
``DistributedEmbedding.sparsecore_build``

1. converts the SparseCore features (keyed by joined path, sorted, as on TensorFlow) with
   ``config_conversion.keras_to_jte_feature_configs``: a ``FeatureSpec`` named after the
   feature's ``name`` (not its path), with the feature's ``input_shape`` and ``output_shape``
   unchanged (global batch), and one ``TableSpec`` per table *name* (the first table of a name
   wins), carrying the table's ``max_ids_per_partition`` and ``max_unique_ids_per_partition``
   and no suggested buffer size; the table's Keras optimizer becomes jax-tpu-embedding's
   (``keras_to_jte_optimizer``: SGD, Adagrad, Adam, Ftrl);
2. stacks with jax-tpu-embedding's ``auto_stack_tables(feature_specs, global_device_count,
   num_sc_per_device)`` (default limits callables, short stack names, 2 MiB of activations)
   when ``table_stacking="auto"`` (its default), then ``prepare_feature_specs_for_training``;
3. sets each stack's ``max_ids_per_partition`` and ``max_unique_ids_per_partition`` to the
   **largest of its tables' own** (``update_preprocessing_parameters``): a stack of the MLPerf
   tables with 8192 / 4096 each gets 8192 / 4096, where jax-tpu-embedding alone would give 256;
4. preprocesses every batch with ``allow_id_dropping=True`` (``embedding_utils.
   stack_and_shard_samples``), whatever the tables say.

With ``update_stats=True`` the layer also raises the limits to each training batch's own
statistics and preprocesses again; that is not modelled (the limits stay the configured ones).

**TensorFlow** is :mod:`tpuemb_cfg.embedding.keras_rs` (the limits never reach
``TPUEmbeddingV2``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from tpuemb_cfg.algorithms.table import JAX_SPECS, KERAS_NAMES, KERAS_RS_DEFAULT
from tpuemb_cfg.base.sparsecore_defaults import (
    DEFAULT_MAX_IDS_PER_PARTITION,
    DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION,
)
from tpuemb_cfg.embedding import _checks as chk
from tpuemb_cfg.embedding.errors import EmbeddingConfigError
from tpuemb_cfg.embedding.keras_rs import sparsecore_features, to_tpu_optimizer
from tpuemb_cfg.sparsecore import jte
from tpuemb_cfg.sparsecore.config import Origin, SparseCoreConfig
from tpuemb_cfg.sparsecore.topology import Topology

__all__ = ["BACKENDS", "KerasBackend", "choose_backend", "jax_config", "using_keras_backend"]

#: The Keras backends on which keras-rs 0.4.0 places tables on SparseCores.
BACKENDS = ("jax", "tensorflow")
#: Keras 3's backend when nothing names one (``keras/src/backend/config.py``).
KERAS_DEFAULT_BACKEND = "tensorflow"

_OVERRIDE: ContextVar[tuple[str, str] | None] = ContextVar("keras_backend", default=None)


@dataclass(frozen=True)
class KerasBackend:
    """The Keras backend a keras-rs spec runs on, and what chose it (for messages and
    ``tpuemb inspect``: ``"--keras-backend"``, ``"the spec's keras_backend"``,
    ``"KERAS_BACKEND"``, the ``keras.json`` path, ``"Keras' default"``)."""

    name: str
    chosen_by: str


@contextmanager
def using_keras_backend(name: str | None, chosen_by: str = "--keras-backend") -> Iterator[None]:
    """Within the block, every keras-rs spec loaded runs on backend ``name`` (``None``: no
    override). What a command's ``--keras-backend`` does."""
    if name is None:
        yield
        return
    token = _OVERRIDE.set((_checked(name, chosen_by), chosen_by))
    try:
        yield
    finally:
        _OVERRIDE.reset(token)


def _checked(name: Any, chosen_by: str) -> str:
    if name not in BACKENDS:
        raise EmbeddingConfigError(
            f"keras backend {chk.show(name)} (from {chosen_by}): keras-rs 0.4.0 places tables on "
            f"SparseCores only on the 'jax' and 'tensorflow' backends; choose one of them "
            f"(--keras-backend jax|tensorflow, or keras_backend = \"jax\" in the spec)")
    return str(name)


def _keras_json(environ: Mapping[str, str]) -> str:
    """Where Keras reads ``keras.json`` (``$KERAS_HOME``, else ``~/.keras`` or ``/tmp/.keras``)."""
    if "KERAS_HOME" in environ:
        folder = environ["KERAS_HOME"]
    else:
        home = os.path.expanduser("~")
        folder = os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
    return os.path.expanduser(os.path.join(folder, "keras.json"))


def choose_backend(spec_value: Any = None, *, override: str | None = None,
                   environ: Mapping[str, str] | None = None) -> KerasBackend:
    """The backend a keras-rs spec runs on (module docstring): ``override`` (or the one
    :func:`using_keras_backend` set), else the spec's ``keras_backend`` (``spec_value``), else
    ``KERAS_BACKEND``, else Keras' ``keras.json``, else ``"tensorflow"``. A backend other than
    ``jax`` or ``tensorflow`` is an :class:`EmbeddingConfigError` naming what chose it."""
    if override is not None:
        return KerasBackend(_checked(override, "keras_backend"), "keras_backend")
    active = _OVERRIDE.get()
    if active is not None:
        return KerasBackend(*active)
    if spec_value is not None:
        return KerasBackend(_checked(spec_value, "the spec's keras_backend"),
                            "the spec's keras_backend")
    env = os.environ if environ is None else environ
    if env.get("KERAS_BACKEND"):
        return KerasBackend(_checked(env["KERAS_BACKEND"], "KERAS_BACKEND"), "KERAS_BACKEND")
    path = _keras_json(env)
    try:
        with open(path, encoding="utf-8") as handle:
            settings = json.load(handle)
    except (OSError, ValueError):  # no file, or not JSON: Keras ignores it too
        settings = None
    if isinstance(settings, dict) and "backend" in settings:
        return KerasBackend(_checked(settings["backend"], path), path)
    return KerasBackend(KERAS_DEFAULT_BACKEND, "Keras' default")


# -- JAX ------------------------------------------------------------------------------------------


def _jte_optimizer(optimizer: Any, owner: str) -> Any:
    """``keras_to_jte_optimizer``: the Keras optimizer (or name) as jax-tpu-embedding's spec of
    the same algorithm (``algorithms.table.JAX_SPECS``), with the learning rate and the
    hyper-parameters the spec takes, read through tpuemb's translation of Keras optimizers."""
    import inspect

    if optimizer is None:
        raise EmbeddingConfigError(
            f"{owner}: optimizer is None; keras-rs on JAX converts each table's own optimizer "
            f"and fails on None (an AttributeError in keras_to_jte_optimizer): give the "
            f"TableConfig an optimizer (keras-rs' default is {KERAS_RS_DEFAULT!r})")
    converted = to_tpu_optimizer(optimizer, owner)
    algorithm = getattr(type(converted), "algorithm", None)
    spec_class = next((name for name, (_, alg) in JAX_SPECS.items() if alg == algorithm), None)
    if converted is None or spec_class is None:
        raise EmbeddingConfigError(f"{owner}: optimizer {chk.show(optimizer)} is none of the "
                                   f"Keras optimizers keras-rs converts on JAX "
                                   f"({', '.join(KERAS_NAMES)})")
    cls = getattr(jte, spec_class)
    names = [p for p in inspect.signature(cls).parameters if p != "learning_rate"]
    arguments = {p: getattr(converted, p) for p in names if hasattr(converted, p)}
    return cls(learning_rate=converted.learning_rate, **arguments)


def _decays(table: Any) -> bool:
    """Whether the table's Keras optimizer sets weight decay, which keras-rs on JAX drops
    (``keras_to_jte_optimizer`` does not read ``weight_decay``): a rule reports it."""
    converted = to_tpu_optimizer(getattr(table, "optimizer", KERAS_RS_DEFAULT),
                                 f"table {table.name!r}")
    return getattr(converted, "weight_decay_factor", None) is not None


def _shape(value: Any, owner: str, name: str) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not value or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value):
        raise EmbeddingConfigError(
            f"{owner}: `{name}` must be fully known positive ints (jax-tpu-embedding stacks "
            f"by the global batch it gives); received {chk.show(value)}")
    return tuple(value)


def jax_feature_specs(feature_config: Any) -> list[Any]:
    """``keras_to_jte_feature_configs`` on the SparseCore features (module docstring, step 1),
    as :mod:`tpuemb_cfg.sparsecore.jte` specs in the order keras-rs flattens them."""

    tables: dict[str, Any] = {}
    specs = []
    for path, feature in sparsecore_features(feature_config).items():
        owner = f"feature '{path}' (name {feature.name!r})"
        table = feature.table
        if table.name not in tables:  # keras-rs keys its table specs by name: the first wins
            where = f"table {table.name!r}"
            tables[table.name] = jte.TableSpec(
                name=table.name, vocabulary_size=int(table.vocabulary_size),
                embedding_dim=int(table.embedding_dim), initializer=None,
                optimizer=_jte_optimizer(getattr(table, "optimizer", KERAS_RS_DEFAULT), where),
                combiner=getattr(table, "combiner", "mean"),
                max_ids_per_partition=int(getattr(table, "max_ids_per_partition",
                                                  DEFAULT_MAX_IDS_PER_PARTITION)),
                max_unique_ids_per_partition=int(
                    getattr(table, "max_unique_ids_per_partition",
                            DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION)))
        specs.append(jte.FeatureSpec(
            name=feature.name, table_spec=tables[table.name],
            input_shape=_shape(feature.input_shape, owner, "input_shape"),
            output_shape=_shape(feature.output_shape, owner, "output_shape")))
    return specs


def jax_config(feature_config: Any, *, topology: Topology, table_stacking: Any = "auto",
               origin_of: Callable[[Any], Origin] | None = None) -> SparseCoreConfig:
    """keras-rs 0.4.0's ``DistributedEmbedding(feature_config, table_stacking=...)`` on the JAX
    backend on ``topology``, as a :class:`SparseCoreConfig` (api ``"keras_rs"``, mode
    ``"jax"``, ``keras_backend="jax"``, ``stack_limits_from_tables``, ``allow_id_dropping``):
    the module docstring's steps 1-4. ``origin_of(obj)`` places a keras-rs object in its
    spec. ``table_stacking`` is ``"auto"`` or ``None`` (explicit lists of table names are not
    modelled)."""
    from dataclasses import replace

    if table_stacking not in ("auto", None):
        raise EmbeddingConfigError(
            f"table_stacking {chk.show(table_stacking)}: tpuemb models keras-rs' 'auto' "
            f"(jax-tpu-embedding's auto_stack_tables) and None (no stacking) on JAX; lists of "
            f"table names (stack_tables) are not modelled")
    place = origin_of if origin_of is not None else (lambda _obj: Origin())
    sources = sparsecore_features(feature_config)
    try:
        converted = jte.feature_specs_to_config(
            jax_feature_specs(feature_config), global_device_count=topology.devices,
            num_sc_per_device=topology.sparse_cores_per_device,
            auto_stack=table_stacking == "auto")
    except ValueError as exc:
        raise EmbeddingConfigError(str(exc)) from None
    first_table: dict[str, Any] = {}
    by_name: dict[str, Any] = {}
    for feature in sources.values():
        first_table.setdefault(feature.table.name, feature.table)
        by_name.setdefault(feature.name, feature)
    tables = tuple(replace(t, origin=place(first_table.get(t.name)), optimizer=replace(
        t.optimizer, origin=place(first_table.get(t.name)),
        weight_decay=_decays(first_table[t.name]))) for t in converted.tables)
    features = tuple(replace(f, origin=place(by_name.get(f.name))) for f in converted.features)
    return replace(converted, api="keras_rs", tables=tables, features=features,
                   topology=topology, allow_id_dropping=True, stack_limits_from_tables=True,
                   keras_backend="jax")
