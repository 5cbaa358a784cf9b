"""The per-table legacy configuration the executor runs for a SparseCore configuration.

The executor already computes every optimizer exactly (spec ``optimizers.md``); a SparseCore
applies the same arithmetic with a few differences of semantics, which this module writes into
the message so that the executor needs no SparseCore branch:

- **one update per row per step**: every device's gradients of a row are summed before the
  optimizer runs once (gradient accumulation ENABLED; TensorCores are the chips of the slice),
  no pipelining (the staleness of ``TPUEmbeddingV2``'s pipelining is not simulated);
- **lazy**: the SparseCore kernels update the rows present in the step's COO buffers only, so
  an optimizer's non-lazy flag is cleared;
- **TensorFlow** (``TPUEmbeddingV2``, and keras-rs through it): the five SparseCore builders of
  TensorFlow 2.21 (``tpu_embedding_v3.py``, ``apply_gradients``) pass the learning rate and the
  algorithm's hyper-parameters and nothing else, so gradient clipping and weight clipping are
  dropped (each listed in :attr:`SparseCoreMessage.notes`), and weight decay is refused, as
  ``TPUEmbeddingV2.__init__`` raises ``NotImplementedError`` for it;
- **jax-tpu-embedding**: the message is built from the ``SparseCoreConfig`` (its optimizer
  specs' arguments carry TensorFlow's names, so each maps onto the algorithm table's
  ``Hyper.arg``), slots start at the optimizer spec's initial values (its Adagrad-momentum
  accumulator starts at 0.1, TensorFlow's at 0), and an optimizer whose rate carries a bias
  correction is refused: jax-tpu-embedding's Adam corrects the rate *and* scales epsilon by
  ``sqrt(1 - beta2^t)`` every step, which no fixed epsilon reproduces (docs/sparsecore/simulate.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.schema import AccumulationStatus, Mode

from ...algorithms.base import REQUIRED
from ...algorithms.table import SPARSECORE, get
from ...executor.rates import tag_rates
from ...proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
from ...sparsecore.config import SparseCoreConfig, SparseCoreTable

if TYPE_CHECKING:
    from ...executor.prepared import Prepared

__all__ = ["SparseCoreMessage", "jax_message", "sparsecore_message", "with_spec_values"]

#: jax-tpu-embedding's initial-slot arguments -> the executor's slot names.
_INITIAL_SLOTS = {
    "initial_accumulator_value": "accumulators",
    "initial_momentum_value": "momenta",
    "initial_linear_value": "linears",
}


@dataclass
class SparseCoreMessage:
    """The legacy message for the executor, the initial value of each slot that differs from
    the executor's default (table -> slot -> value), the learning-rate callables of its dynamic
    tags (tag k: ``rate_callables[k]``) and what was left out (one sentence each)."""

    message: TPUEmbeddingConfiguration
    slot_values: dict[str, dict[str, float]] = field(default_factory=dict)
    rate_callables: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def sparsecore_message(legacy: Any, config: SparseCoreConfig) -> SparseCoreMessage:
    """A copy of ``legacy`` (the ``TPUEmbeddingConfiguration`` a TensorFlow or keras-rs spec
    compiles to; features in ``config.features`` order) with the SparseCore semantics of the
    module docstring. ``InputError`` for weight decay, an algorithm SparseCores do not run, or
    features that do not match ``config``'s."""
    message = TPUEmbeddingConfiguration()
    message.CopyFrom(legacy)
    out = SparseCoreMessage(message)
    _match_features(message, config)
    for td in message.table_descriptor:
        params = td.optimization_parameters
        if params.weight_decay_factor != 0 or params.multiply_weight_decay_factor_by_learning_rate:
            raise InputError(
                f"table {td.name!r}: weight decay (weight_decay_factor="
                f"{params.weight_decay_factor:g}) is not supported on SparseCores: TensorFlow's "
                "TPUEmbeddingV2 raises NotImplementedError for it; remove weight_decay_factor "
                "and multiply_weight_decay_factor_by_learning_rate from the optimizer")
        fields: Any = params  # the field names below are the message's own
        for name, what in (("clipping_limits", "weight clipping"),
                           ("gradient_clipping_limits", "gradient clipping")):
            if fields.HasField(name):
                out.notes.append(
                    f"table {td.name!r}: {what} ignored: TensorFlow's TPUEmbeddingV2 does not "
                    "pass it to its SparseCore kernels")
                fields.ClearField(name)
    _sparsecore_semantics(message, config)
    return out


def jax_message(config: SparseCoreConfig) -> SparseCoreMessage:
    """The legacy message of a jax-tpu-embedding configuration: one table per ``TableSpec``
    and one feature per ``FeatureSpec`` (input shape ``output_shape[:-1]``), each optimizer
    spec mapped onto the algorithm of the same maths (module docstring)."""
    message = TPUEmbeddingConfiguration()
    out = SparseCoreMessage(message)
    index: dict[str, int] = {}
    rates: dict[int, int] = {}  # id(callable) -> tag
    for table in config.tables:
        index[table.name] = len(message.table_descriptor)
        td = message.table_descriptor.add(name=table.name, vocabulary_size=table.vocabulary_size,
                                          dimension=table.dim)
        _jax_optimizer(td.optimization_parameters, table, out, rates)
    for feature in config.features:
        if feature.table not in index:
            raise InputError(f"feature {feature.name!r} looks up table {feature.table!r}, which "
                             "the configuration does not define")
        fd = message.feature_descriptor.add(name=feature.name, table_id=index[feature.table])
        fd.input_shape.extend(feature.output_shape[:-1] or (1,))
    _sparsecore_semantics(message, config)
    return out


def _jax_optimizer(params: Any, table: SparseCoreTable, out: SparseCoreMessage,
                   rates: dict[int, int]) -> None:
    optimizer = table.optimizer
    name = optimizer.algorithm
    _require_sparsecore(table.name, name)
    algorithm = get(name)
    if algorithm.learning_rate == "bias_corrected":
        raise InputError(
            f"table {table.name!r}: jax-tpu-embedding's {name} is not simulated: it corrects the "
            "bias of the learning rate and scales epsilon by sqrt(1 - beta_2^t) at every step "
            "(embedding_spec.py get_hyperparameters), which the executor's fixed epsilon "
            "cannot reproduce; simulate the table with another optimizer, or its TensorFlow "
            "spec (TPUEmbeddingV2 applies no bias correction)")
    if table.quantization is not None:
        raise InputError(f"table {table.name!r}: quantization ({table.quantization}) is not "
                         "simulated for jax-tpu-embedding specs")
    message = getattr(params, name)
    message.SetInParent()
    source = optimizer.source
    for hyper in algorithm.hyper:
        if hyper.negated or not hyper.bound:
            continue
        value = _argument(optimizer.hyper, source, hyper.arg)
        if value is None and hyper.default is not REQUIRED:
            value = hyper.default  # an argument the record omits: TensorFlow's default
        if value is not None:
            setattr(message, hyper.field, bool(value) if hyper.kind == "bool" else float(value))
    for argument, slot in _INITIAL_SLOTS.items():
        value = _argument(optimizer.hyper, source, argument)
        if value is not None and slot in algorithm.slot_names:
            out.slot_values.setdefault(table.name, {})[slot] = float(value)
    lr = optimizer.learning_rate if optimizer.learning_rate is not None else _argument(
        optimizer.hyper, source, "learning_rate")
    if callable(lr):
        tag = rates.setdefault(id(lr), len(rates))
        if tag == len(out.rate_callables):
            out.rate_callables.append(lr)
        params.learning_rate.dynamic.tag = tag
    elif lr is None or not math.isfinite(float(lr)):
        raise InputError(f"table {table.name!r}: learning rate {lr!r} found, expected a finite "
                         "number or a callable of the step")
    else:
        params.learning_rate.constant = float(lr)


def _argument(hyper: Any, source: Any, name: str) -> Any:
    """An optimizer argument: from the record's ``hyper``, else the API object's attribute."""
    if name in hyper:
        return hyper[name]
    return getattr(source, name, None)


def _require_sparsecore(table: str, name: str) -> None:
    if name in ("", "custom"):
        raise InputError(f"table {table!r}: a custom optimizer is not simulated on SparseCores; "
                         f"use one of {', '.join(SPARSECORE)}")
    if name not in SPARSECORE:
        raise InputError(
            f"table {table!r}: optimizer {name!r} does not run on SparseCores; expected one of "
            f"{', '.join(SPARSECORE)}")


def _match_features(message: TPUEmbeddingConfiguration, config: SparseCoreConfig) -> None:
    """The legacy message's features are ``config.features``, in the same order and tables."""
    tables = [td.name for td in message.table_descriptor]
    found = [tables[fd.table_id] if 0 <= fd.table_id < len(tables) else "?"
             for fd in message.feature_descriptor]
    expected = [f.table for f in config.features]
    if found != expected:
        raise InputError(
            f"the compiled configuration's features look up tables {found}, the SparseCore "
            f"configuration's {expected}; they must be the same features in the same order")


def _sparsecore_semantics(message: TPUEmbeddingConfiguration, config: SparseCoreConfig) -> None:
    """TRAINING, one update per row and step (accumulation ENABLED, every device a TensorCore,
    one host), no pipelining, lazy updates; every algorithm one SparseCores run. A step is the
    slice's batch: TensorFlow's output shapes are per replica (each device's share), jax's are
    global, so each device's share is the global batch over the devices."""
    message.mode = Mode.TRAINING  # type: ignore[assignment]
    devices = config.topology.num_partitions
    message.num_tensor_cores = devices
    message.num_hosts = 1
    message.pipeline_execution_with_tensor_core = False
    for fd, feature in zip(message.feature_descriptor, config.features, strict=True):
        shape = feature.output_shape[:-1] or (1,)
        if config.mode == "jax":
            shape = (_per_device(feature.name, shape[0], devices), *shape[1:])
        del fd.input_shape[:]
        fd.input_shape.extend(shape)
    for td in message.table_descriptor:
        params = td.optimization_parameters
        name = params.WhichOneof("parameters") or ""
        _require_sparsecore(td.name, name)
        params.gradient_accumulation_status = AccumulationStatus.ENABLED  # type: ignore[assignment]
        flag = get(name).non_lazy_flag
        if flag is not None:
            setattr(getattr(params, name), flag, False)



def _per_device(feature: str, batch: int, devices: int) -> int:
    """A jax feature's global batch over the devices; ``InputError`` when it does not split
    (jax-tpu-embedding's preprocessing aborts too: rule SC007)."""
    if batch % devices:
        raise InputError(
            f"feature {feature!r}: global batch {batch} (output_shape[0]) over {devices} "
            f"devices is not a whole number per device (jax-tpu-embedding's preprocessing "
            f"aborts; rule SC007): use a batch that is a multiple of {devices}")
    return batch // devices


def with_spec_values(prepared: Prepared, record: SparseCoreMessage) -> Prepared:
    """``prepared`` (the plan of ``record.message``) with the slots' initial values of
    ``record.slot_values`` and the learning-rate callables of its dynamic tags."""
    import numpy as np

    plan = prepared.plan
    tables = tuple(
        replace(t, slot_defaults=tuple(
            np.float32(record.slot_values[t.name].get(name, default))
            for name, default in zip(t.slot_names, t.slot_defaults, strict=True)))
        if t.name in record.slot_values else t
        for t in plan.tables)
    plan = replace(plan, tables=tables)
    if record.rate_callables:
        sources = [getattr(fn, "__qualname__", type(fn).__name__) for fn in record.rate_callables]
        plan = replace(plan, tag_rates=tag_rates(record.rate_callables, sources))
    return replace(prepared, plan=plan)
