"""Any configuration tpuemb reads, as one normalised description with the line of every fact.

``tpuemb diff`` compares two configurations that may be of different kinds: a legacy
``TPUEmbeddingConfiguration`` (text, binary, JSON; a Python or TOML spec, compiled), or a
SparseCore spec of TensorFlow, keras-rs (on either Keras backend) or jax-tpu-embedding (a
``SparseCoreConfig``). :func:`load_facts` reads each into :class:`Facts`: its tables, features,
settings and topology, each an :class:`Entry` of flat, JSON-able fields with the place
(``(path, line, column)``) that sets them.

The fields are named once for every kind, so that two kinds compare where both say something:

- a table: ``vocabulary_size``, ``dim``, ``combiner`` and ``initializer`` (where the source
  says), ``optimizer`` (the proto oneof name), ``optimizer.slots`` (the algorithm table's),
  ``optimizer.<field>`` for each hyper-parameter of the algorithm (the proto field name, as the
  algorithm table names it), TensorFlow's shared optimizer arguments
  (``optimizer.use_gradient_accumulation``, ``optimizer.clip_weight_min`` ...),
  ``optimizer.slot_initial_values`` where known, ``learning_rate`` (a constant, or
  ``"dynamic"``), ``learning_rate.tag`` (legacy), ``learning_rate.schedule`` (the callable's
  description, where the source has it), and SparseCore's per-table limits;
- a feature: ``table`` and its shapes (``input_shape``; SparseCore: ``output_shape``,
  ``ids_per_bag``), whose meaning depends on the API (:attr:`Facts.frame`);
- the settings: the legacy message's (``mode``, ``batch_size_per_tensor_core``,
  ``sharding_strategy``, ``pipeline_execution_with_tensor_core``, ``spmd_sharding.*``), or the
  SparseCore configuration's (``stacking``, ``table_stacking``, ``keras_backend``, TensorFlow's
  ``SparseCoreEmbeddingConfig`` fields with each ``max_ids_per_table["stack"]``,
  jax-tpu-embedding's ``auto_stack_tables`` arguments);
- the topology: ``hosts`` and ``devices`` (legacy: ``num_hosts``, ``num_tensor_cores``), and
  for SparseCore the chip kind, chips and SparseCores (``Topology.as_json``).

Floats are compared as the TPU holds them, in float32, written with the fewest digits that
read back to the same float32 (a text file's ``0.9`` and a spec's ``0.9`` are one value).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import re
import struct
import tempfile
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tpuemb_cfg.algorithms.table import ALGORITHMS, slot_names
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.schema import (
    MODE_NAMES,
    SHARDING_NAMES,
    AccumulationStatus,
    HotIdStatus,
    PackingStatus,
    value_names,
)
from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
from tpuemb_cfg.embedding.spec import read_spec_text
from tpuemb_cfg.embedding.tag_table import describe_callable
from tpuemb_cfg.formats.io import as_config, detect_format, parse_bytes, read_source
from tpuemb_cfg.formats.locations import Locations, parent_path, scan_locations
from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
from tpuemb_cfg.review.record import Location
from tpuemb_cfg.session import is_sparsecore_spec
from tpuemb_cfg.spec_check import compile_spec, is_spec, sparsecore_position

__all__ = ["Entry", "Facts", "load_facts"]

_HOT_ID_NAMES = value_names(HotIdStatus)


@dataclass(frozen=True)
class Entry:
    """One table, feature, the settings or the topology: ``values`` (field -> JSON-able
    value), ``location`` (where the object is built or declared) and ``field_locations`` (where
    a field is written, when that is another place)."""

    name: str
    values: Mapping[str, Any]
    location: Location | None = None
    field_locations: Mapping[str, Location] = field(default_factory=dict)

    def where(self, name: str) -> Location | None:
        """The place that sets field ``name`` (the object's place when the field has none)."""
        return self.field_locations.get(name, self.location)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "values": dict(self.values),
                "location": _location_json(self.location),
                "field_locations": {k: _location_json(v)
                                    for k, v in self.field_locations.items()}}


@dataclass(frozen=True)
class Facts:
    """A configuration, normalised (module docstring).

    ``kind``: ``"legacy"`` or ``"sparsecore"``; ``api``: ``"legacy"``, ``"tensorflow"``,
    ``"keras_rs"`` or ``"jax"``; ``form``: what was read (``"text"``, ``"binary"``,
    ``"json"``, ``"python spec"``, ``"toml spec"``, ``"message"``, ``"SparseCoreConfig"``).
    ``frame``: what the shapes are relative to (``(api, stacking mode)``): feature shapes are
    compared only between configurations of one frame.
    """

    path: str
    kind: str
    api: str
    form: str
    tables: tuple[Entry, ...]
    features: tuple[Entry, ...]
    settings: Entry
    topology: Entry
    frame: tuple[str, str] = ("legacy", "legacy")

    def describe(self) -> str:
        """``"a legacy TPUEmbeddingConfiguration (text)"``, ``"a SparseCore spec of keras-rs
        (jax backend)"``: the kind in words."""
        if self.kind == "legacy":
            return f"a legacy TPUEmbeddingConfiguration ({self.form})"
        api = {"tensorflow": "TensorFlow (TPUEmbeddingV2)", "keras_rs": "keras-rs",
               "jax": "jax-tpu-embedding"}.get(self.api, self.api)
        backend = self.settings.values.get("keras_backend")
        suffix = f" ({backend} backend)" if backend else ""
        return f"a SparseCore configuration of {api}{suffix}"

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "api": self.api, "form": self.form,
                "description": self.describe(),
                "tables": [t.as_json() for t in self.tables],
                "features": [f.as_json() for f in self.features],
                "settings": self.settings.as_json(), "topology": self.topology.as_json()}


def _location_json(location: Location | None) -> Any:
    return None if location is None else list(location)


# -- values ---------------------------------------------------------------------------------------

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def f32(value: float) -> float | str:
    """``value`` as float32 holds it, with the fewest digits that read back to that float32
    (``0.8999999761581421`` -> ``0.9``); a value beyond float32 or not finite as text."""
    if not math.isfinite(value):
        return str(value)
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return repr(value)
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            return float(text)
    return float(single)


def plain(value: Any) -> Any:
    """``value`` as JSON can hold it: floats in float32 (:func:`f32`), containers as lists and
    dicts, a callable by its description (a schedule's formula, a function's name and line),
    anything else by its ``repr`` without memory addresses (stable between runs)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return f32(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if callable(getattr(value, "describe", None)):  # a schedule: its name and formula
        return describe_callable(value)
    if hasattr(value, "__code__"):
        return _function(value)
    number = getattr(value, "item", None)  # a NumPy scalar
    if callable(number):
        try:
            return plain(number())
        except (TypeError, ValueError):
            pass
    own_repr: Any = type(value).__repr__
    if own_repr is object.__repr__ and isinstance(getattr(value, "__dict__", None), dict):
        fields = ", ".join(f"{k}={json.dumps(plain(v))}" for k, v in vars(value).items()
                           if not k.startswith("_"))
        return f"{type(value).__name__}({fields})"  # an initializer: its class and fields
    return _ADDRESS.sub("", repr(value))


def _function(fn: Any) -> str:
    """``lr (code 1a2b3c4d)``: a function by its name and a digest of its source and of the
    values it closes over and defaults to (``optax.exponential_decay(0.1)`` and ``(0.2)`` are
    one source), so that moving it to another line is not a change and editing it is."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):  # no source to read (a built-in, a lambda typed in a shell)
        return _ADDRESS.sub("", describe_callable(fn))
    bound = [cell.cell_contents for cell in getattr(fn, "__closure__", None) or ()
             if cell.cell_contents is not fn]
    bound.extend(getattr(fn, "__defaults__", None) or ())
    text = "\n".join([source, *(_ADDRESS.sub("", repr(value)) for value in bound)])
    return f"{name} (code {hashlib.sha256(text.encode()).hexdigest()[:8]})"


#: TensorFlow's shared optimizer arguments (``embedding.optimizers``) as the facts name them,
#: each with the field of ``OptimizationParameters`` that holds it.
_SHARED = {
    "optimizer.use_gradient_accumulation": "gradient_accumulation_status",
    "optimizer.clip_weight_min": "clipping_limits.lower",
    "optimizer.clip_weight_max": "clipping_limits.upper",
    "optimizer.clip_gradient_min": "gradient_clipping_limits.lower",
    "optimizer.clip_gradient_max": "gradient_clipping_limits.upper",
    "optimizer.weight_decay_factor": "weight_decay_factor",
    "optimizer.multiply_weight_decay_factor_by_learning_rate":
        "multiply_weight_decay_factor_by_learning_rate",
    "optimizer.low_dimensional_packing": "low_dimensional_packing_status",
}


def _hyper_fields(algorithm: str | None) -> tuple[tuple[str, str, bool], ...]:
    """(proto field, constructor argument, negated) of each hyper-parameter of ``algorithm``."""
    entry = ALGORITHMS.get(algorithm or "")
    if entry is None:
        return ()
    return tuple((h.field, h.arg, h.negated) for h in entry.hyper)


def _slots(algorithm: str | None) -> list[str]:
    return list(slot_names(algorithm)) if algorithm else []


# -- legacy ---------------------------------------------------------------------------------------


@dataclass
class _Placer:
    """Field path of the message -> place in the file (text files and compiled specs)."""

    path: str
    locations: Locations | None = None

    def __call__(self, field_path: str) -> Location | None:
        if self.locations is None:
            return None
        probe = field_path
        while probe:
            found = self.locations.get(probe)
            if found is not None:
                return (self.path, found[0], found[1])
            probe = parent_path(probe)
        return None


def _limits(limits: Any) -> tuple[Any, Any]:
    lower = plain(limits.lower.value) if limits.HasField("lower") else None
    upper = plain(limits.upper.value) if limits.HasField("upper") else None
    return lower, upper


def _legacy_table(td: Any, extra: Any, schedules: Mapping[int, str], base: str,
                  place: _Placer) -> tuple[dict[str, Any], dict[str, Location]]:
    """The fields of ``table_descriptor[i]`` (``base``) and the place of each; ``extra``: the
    spec's ``TableConfig`` of a compiled spec (combiner, initializer, slot values)."""
    op = td.optimization_parameters
    algorithm = op.WhichOneof("parameters") if td.HasField("optimization_parameters") else None
    params = f"{base}.optimization_parameters"
    values: dict[str, Any] = {"vocabulary_size": td.vocabulary_size, "dim": td.dimension,
                              "num_features": td.num_features}
    paths = {"vocabulary_size": f"{base}.vocabulary_size", "dim": f"{base}.dimension",
             "num_features": f"{base}.num_features"}
    if extra is not None:
        values["combiner"] = plain(extra.combiner)
        values["initializer"] = plain(extra.initializer)
    values["optimizer"] = algorithm
    paths["optimizer"] = f"{params}.{algorithm}" if algorithm else params
    values["optimizer.slots"] = _slots(algorithm)
    paths["optimizer.slots"] = paths["optimizer"]
    message = getattr(op, algorithm) if algorithm else None
    for name, _, _ in _hyper_fields(algorithm):
        values[f"optimizer.{name}"] = plain(getattr(message, name))
        paths[f"optimizer.{name}"] = f"{params}.{algorithm}.{name}"
    weight, gradient = _limits(op.clipping_limits), _limits(op.gradient_clipping_limits)
    values.update({
        "optimizer.use_gradient_accumulation": op.gradient_accumulation_status in (
            AccumulationStatus.UNSPECIFIED, AccumulationStatus.ENABLED),
        "optimizer.clip_weight_min": weight[0], "optimizer.clip_weight_max": weight[1],
        "optimizer.clip_gradient_min": gradient[0], "optimizer.clip_gradient_max": gradient[1],
        "optimizer.weight_decay_factor": plain(op.weight_decay_factor),
        "optimizer.multiply_weight_decay_factor_by_learning_rate":
            op.multiply_weight_decay_factor_by_learning_rate,
        "optimizer.low_dimensional_packing":
            op.low_dimensional_packing_status == PackingStatus.ENABLED,
        "optimizer.hot_id_replication": _HOT_ID_NAMES.get(
            op.hot_id_replication_configuration.status,
            str(op.hot_id_replication_configuration.status)),
    })
    paths.update({key: f"{params}.{where}" for key, where in _SHARED.items()})
    paths["optimizer.hot_id_replication"] = f"{params}.hot_id_replication_configuration"
    initial = getattr(getattr(extra, "optimizer", None), "slot_initial_values", None)
    if callable(initial):
        values["optimizer.slot_initial_values"] = plain(dict(initial()))
    quantization = op.simulated_quantization
    values["quantization"] = ({"num_buckets": quantization.num_buckets,
                               "lower": _limits(quantization.clipping_limits)[0],
                               "upper": _limits(quantization.clipping_limits)[1]}
                              if quantization.enabled else None)
    paths["quantization"] = f"{params}.simulated_quantization"
    rate = op.learning_rate
    which = rate.WhichOneof("learning_rate")
    values["learning_rate"] = (plain(rate.constant) if which == "constant"
                               else "dynamic" if which == "dynamic" else None)
    values["learning_rate.tag"] = rate.dynamic.tag if which == "dynamic" else None
    if extra is not None:
        values["learning_rate.schedule"] = (schedules.get(rate.dynamic.tag)
                                            if which == "dynamic" else None)
    paths["learning_rate"] = f"{params}.learning_rate"
    paths["learning_rate.tag"] = f"{params}.learning_rate.dynamic.tag"
    paths["learning_rate.schedule"] = paths["learning_rate"]
    places = {key: p for key, where in paths.items() if (p := place(where)) is not None}
    return values, places


def _unique(name: str, seen: set[str], fallback: str) -> str:
    """``name``, or ``fallback`` when it is empty or taken (the validator reports those)."""
    key = name if name and name not in seen else fallback
    seen.add(key)
    return key


def _legacy_facts(config: TPUEmbeddingConfiguration, path: str, form: str,
                  place: _Placer, compiled: Any = None) -> Facts:
    by_name = {t.name: t for t in getattr(compiled, "tables", ())}
    schedules: dict[int, str] = {}
    for tag, fn in enumerate(getattr(compiled, "dynamic_learning_rates", ())):
        schedules[tag] = plain(fn)
    tables = []
    seen: set[str] = set()
    for i, td in enumerate(config.table_descriptor):
        base = f"table_descriptor[{i}]"
        extra = by_name.get(td.name) if compiled is not None else None
        values, places = _legacy_table(td, extra, schedules, base, place)
        tables.append(Entry(_unique(td.name, seen, base), values, place(base), places))
    features = []
    seen = set()
    specs = list(getattr(compiled, "features", ()))
    for j, fd in enumerate(config.feature_descriptor):
        base = f"feature_descriptor[{j}]"
        table = (tables[fd.table_id].name if 0 <= fd.table_id < len(tables)
                 else f"table_id {fd.table_id}")
        values = {"table": table, "input_shape": list(fd.input_shape)}
        if j < len(specs):
            values["ids_per_bag"] = specs[j].ids_per_bag
            values["max_sequence_length"] = getattr(specs[j].config, "max_sequence_length", None)
        places = {k: p for k, where in (("table", f"{base}.table_id"),
                                        ("input_shape", f"{base}.input_shape"))
                  if (p := place(where)) is not None}
        features.append(Entry(_unique(fd.name, seen, base), values, place(base), places))
    spmd = config.spmd_sharding
    settings = {
        "mode": MODE_NAMES.get(config.mode, str(config.mode)),
        "batch_size_per_tensor_core": config.batch_size_per_tensor_core,
        "sharding_strategy": SHARDING_NAMES.get(config.sharding_strategy,
                                                str(config.sharding_strategy)),
        "pipeline_execution_with_tensor_core": config.pipeline_execution_with_tensor_core,
        "spmd_sharding.enabled": spmd.enabled,
        "spmd_sharding.num_cores_per_replica": spmd.num_cores_per_replica,
        "spmd_sharding.use_manual_partitioning": spmd.use_manual_partitioning,
        "spmd_sharding.use_shardy_partitioner": spmd.use_shardy_partitioner,
    }
    setting_places = {k: p for k in settings if (p := place(k)) is not None}
    topology_places = {k: p for k, where in (("hosts", "num_hosts"),
                                             ("devices", "num_tensor_cores"))
                       if (p := place(where)) is not None}
    return Facts(
        path=path, kind="legacy", api="legacy", form=form, tables=tuple(tables),
        features=tuple(features), settings=Entry("settings", settings, None, setting_places),
        topology=Entry("topology", {"hosts": config.num_hosts,
                                    "devices": config.num_tensor_cores}, None, topology_places))


# -- SparseCore -----------------------------------------------------------------------------------

#: ``SparseCoreEmbeddingConfig``'s fields (TensorFlow's stacking), placed at its call.
_TF_SETTINGS = ("max_ids_per_chip_per_sample", "allow_id_dropping", "initialize_tables_on_host",
                "enable_fast_table_initialization")
_TF_LIMITS = ("max_ids_per_table", "max_unique_ids_per_table")
#: ``auto_stack_tables``' arguments (jax-tpu-embedding's stacking), placed at their assignment.
_JAX_SETTINGS = ("activation_mem_bytes_limit", "use_short_stack_names",
                 "stack_to_max_ids_per_partition", "stack_to_max_unique_ids_per_partition")
_TABLE_LIMITS = ("max_ids_per_partition", "max_unique_ids_per_partition",
                 "suggested_coo_buffer_size_per_device")


def _sparsecore_optimizer(table: Any) -> dict[str, Any]:
    optimizer = table.optimizer
    algorithm = optimizer.algorithm
    hyper = dict(optimizer.hyper)
    values: dict[str, Any] = {"optimizer": algorithm, "optimizer.slots": _slots(algorithm)}
    for name, argument, negated in _hyper_fields(algorithm):
        if argument in hyper:
            value = hyper[argument]
            values[f"optimizer.{name}"] = plain(not value if negated else value)
    if "use_gradient_accumulation" in hyper:  # TensorFlow's and keras-rs' optimizers
        values["optimizer.use_gradient_accumulation"] = bool(hyper["use_gradient_accumulation"])
        for key in ("clip_weight_min", "clip_weight_max", "clip_gradient_min",
                    "clip_gradient_max"):
            values[f"optimizer.{key}"] = plain(hyper.get(key))
        values["optimizer.weight_decay_factor"] = plain(
            float(hyper.get("weight_decay_factor") or 0.0))
        values["optimizer.multiply_weight_decay_factor_by_learning_rate"] = bool(
            hyper.get("multiply_weight_decay_factor_by_learning_rate"))
        packing = hyper.get("low_dimensional_packing_status")
        values["optimizer.low_dimensional_packing"] = (  # True, 1, "ENABLED" (to_enum's)
            packing == PackingStatus.ENABLED or str(packing).upper().endswith("ENABLED"))
    slots = values["optimizer.slots"]
    if slots and hyper.get("initial_accumulator_value") is not None:
        initial = dict.fromkeys(slots, 0.0)
        initial[slots[0]] = hyper["initial_accumulator_value"]
        values["optimizer.slot_initial_values"] = plain(initial)
    rate = optimizer.learning_rate
    if callable(rate):
        values["learning_rate"] = "dynamic"
        values["learning_rate.schedule"] = plain(rate)
    else:
        values["learning_rate"] = plain(rate)
        values["learning_rate.schedule"] = None
    return values


def _sparsecore_facts(config: Any, path: str, form: str, text: str | None,
                      spec_path: str | None) -> Facts:
    """``spec_path``: the file the origins name (a temporary copy of a file read from git);
    places are reported under ``path``."""

    def place(field_path: str) -> Location | None:
        if text is None:
            return None
        found = sparsecore_position(config, field_path, spec_path, text)
        return None if found is None else (path, found[0], found[1])

    features_setting = place("feature_specs" if config.api == "jax" else "feature_config")
    tables = []
    for table in config.tables:
        key = f"tables[{json.dumps(table.name)}]"
        values: dict[str, Any] = {"vocabulary_size": table.vocabulary_size, "dim": table.dim,
                                  "combiner": table.combiner}
        if table.initializer is not None:
            values["initializer"] = plain(table.initializer)
        values.update(_sparsecore_optimizer(table))
        values["quantization"] = table.quantization
        for limit in _TABLE_LIMITS:
            values[limit] = getattr(table, limit)
        where = place(key) or features_setting
        optimizer_place = place(f"{key}.optimizer") or where
        places = {k: optimizer_place for k in values
                  if k.startswith(("optimizer", "learning_rate")) and optimizer_place}
        tables.append(Entry(table.name, values, where, places))
    features = []
    for feature in config.features:
        values = {"table": feature.table, "input_shape": list(feature.input_shape),
                  "output_shape": list(feature.output_shape),
                  "ids_per_bag": feature.ids_per_bag}
        where = place(f"features[{json.dumps(feature.name)}]") or features_setting
        features.append(Entry(feature.name, values, where))
    settings: dict[str, Any] = {"stacking": config.mode,
                                "table_stacking": not config.disable_table_stacking}
    setting_places: dict[str, Location | None] = {}
    if config.keras_backend is not None:
        settings["keras_backend"] = config.keras_backend
    if config.api == "keras_rs":
        settings["limits_dropped_by_conversion"] = config.limits_dropped_by_conversion
        settings["stack_limits_from_tables"] = config.stack_limits_from_tables
    if config.mode == "tensorflow":
        for name in _TF_SETTINGS:
            settings[name] = plain(getattr(config, name))
            setting_places[name] = place(f"sparse_core_config.{name}")
        for name in _TF_LIMITS:
            for stack, limit in (getattr(config, name) or {}).items():
                key = f"{name}[{json.dumps(stack)}]"
                settings[key] = limit
                setting_places[key] = place(f"sparse_core_config.{key}")
    else:
        for name in _JAX_SETTINGS:
            settings[name] = plain(getattr(config, name))
            setting_places[name] = place(name)
    for name in ("table_stacking", "keras_backend", "stacking"):
        setting_places[name] = place(
            "sparse_core_config.disable_table_stacking" if name == "table_stacking"
            and config.api == "tensorflow" else name)
    placed = {k: v for k, v in setting_places.items() if v is not None}
    topology = config.topology.as_json()
    topology_place = place("topology")
    return Facts(
        path=path, kind="sparsecore", api=config.api, form=form, tables=tuple(tables),
        features=tuple(features),
        settings=Entry("settings", settings, features_setting, placed),
        topology=Entry("topology", topology, topology_place),
        frame=(config.api, config.mode))


# -- reading --------------------------------------------------------------------------------------


def load_facts(source: Any, *, name: str | None = None,
               keras_backend: str | None = None) -> Facts:
    """The facts of ``source``:

    - a path: a configuration file (text, binary or JSON by its extension), a legacy spec
      (``.py``/``.toml``, compiled as ``tpuemb compile`` does) or a SparseCore spec;
    - bytes with ``name``, the name to show (``"HEAD:config.pbtxt"``; its extension decides the
      format, as a path's does): a file read from git. A spec is run from a copy in a private
      temporary folder, and every place and error names ``name``;
    - a ``TPUEmbeddingConfiguration`` (tpuemb's or TensorFlow's), what ``build_config`` returns,
      a ``SparseCoreConfig`` or what ``load_sparsecore_spec`` returns (``name``: the path to
      show; default: the spec the configuration names, else ``"<message>"``);
    - :class:`Facts` (returned as it is).

    ``keras_backend``: the Keras backend a keras-rs spec runs on (``"jax"`` or
    ``"tensorflow"``; default: the spec's ``keras_backend``, else Keras' choice). Bad input is
    one :class:`InputError` with the path (and line) at fault.
    """
    if isinstance(source, Facts):
        return source
    if isinstance(source, bytes | bytearray | memoryview):
        if not name:
            raise InputError("bytes need the name to show (name=, e.g. 'HEAD:config.pbtxt')")
        return _from_bytes(bytes(source), name, keras_backend)
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        return _from_path(path, name or path, keras_backend)
    if type(source).__name__ == "SparseCoreConfig":
        return _sparsecore_object(source, None, name)
    if type(getattr(source, "config", None)).__name__ == "SparseCoreConfig":  # a SparseCoreSpec
        return _sparsecore_object(source.config, getattr(source, "path", None), name)
    if all(hasattr(source, a) for a in ("config", "features", "combiners")):  # CompiledConfig
        return _legacy_facts(source.config, name or "<message>", "message", _Placer(""),
                             source)
    try:
        config = as_config(source)
    except TypeError as exc:
        raise InputError(f"cannot read configuration facts: {exc}", path=name) from None
    return _legacy_facts(config, name or "<message>", "message", _Placer(""))


def _sparsecore_object(config: Any, spec: str | None, name: str | None) -> Facts:
    origin = spec or getattr(config.origin, "path", None)
    text = None
    if origin is not None:
        try:
            text = read_spec_text(origin)
        except OSError:
            text = None
    return _sparsecore_facts(config, name or origin or "<SparseCoreConfig>",
                             "SparseCoreConfig", text, origin)


def _from_path(path: str, shown: str, keras_backend: str | None) -> Facts:
    """A file on disk; places and errors name ``shown``."""
    try:
        return _read_path(path, shown, keras_backend)
    except InputError as exc:
        if path != shown:
            _rename(exc, path, shown)
        raise


def _read_path(path: str, shown: str, keras_backend: str | None) -> Facts:
    if is_spec(path):
        if is_sparsecore_spec(path):
            spec = load_sparsecore_spec(path, keras_backend=keras_backend, legacy=False)
            return _sparsecore_facts(spec.config, shown, "python spec", read_spec_text(path),
                                     path)
        compiled = compile_spec(path)
        form = "toml spec" if path.endswith(".toml") else "python spec"
        return _legacy_facts(compiled.compiled.config, shown, form,
                             _Placer(shown, compiled.locations), compiled.compiled)
    parsed = read_source(path)
    return _parsed_facts(parsed.message, parsed.text, shown, parsed.format)


def _parsed_facts(message: TPUEmbeddingConfiguration, text: str | None, shown: str,
                  form: str) -> Facts:
    locations = (scan_locations(text, TPUEmbeddingConfiguration.DESCRIPTOR)
                 if text is not None and form == "text" else None)
    return _legacy_facts(message, shown, form, _Placer(shown, locations))


def _from_bytes(data: bytes, shown: str, keras_backend: str | None) -> Facts:
    """A file read from git as bytes: a configuration is parsed from the bytes; a spec is run
    from a copy named like it in a private temporary folder."""
    base = os.path.basename(shown.rsplit(":", 1)[-1]) or "config"
    if is_spec(base):
        with tempfile.TemporaryDirectory(prefix="tpuemb-diff-") as folder:
            copy = os.path.join(folder, base)
            with open(copy, "wb") as handle:
                handle.write(data)
            facts = _from_path(copy, shown, keras_backend)
        return _renamed_facts(facts, copy, shown)
    fmt = detect_format(base)
    message = TPUEmbeddingConfiguration()
    text = parse_bytes(data, fmt, message, shown)
    return _parsed_facts(message, text, shown, fmt)


def _rename(exc: InputError, path: str, shown: str) -> None:
    """``exc`` naming ``shown`` where it names the temporary ``path``."""
    if exc.path is None or exc.path == path or os.path.abspath(exc.path) == \
            os.path.abspath(path):
        exc.path = shown
    exc.message = exc.message.replace(path, shown)
    exc.args = (exc.message,)


def _renamed_facts(facts: Facts, path: str, shown: str) -> Facts:
    """``facts`` with every place and text naming the temporary ``path`` naming ``shown``."""

    def text(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(path, shown)
        if isinstance(value, list):
            return [text(v) for v in value]
        if isinstance(value, dict):
            return {k: text(v) for k, v in value.items()}
        return value

    def where(location: Location | None) -> Location | None:
        return None if location is None else (shown, location[1], location[2])

    def entry(e: Entry) -> Entry:
        return replace(e, values={k: text(v) for k, v in e.values.items()},
                       location=where(e.location),
                       field_locations={k: (shown, v[1], v[2])
                                        for k, v in e.field_locations.items()})

    def remap(entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
        return tuple(map(entry, entries))

    return replace(facts, path=shown, tables=remap(facts.tables),
                   features=remap(facts.features), settings=entry(facts.settings),
                   topology=entry(facts.topology))
