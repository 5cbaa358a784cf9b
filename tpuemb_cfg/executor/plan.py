"""From a ``TPUEmbeddingConfiguration`` to the executor's plan: what every table and feature does.

The plan is read once from the message and holds only plain Python and NumPy values: float32
scalars for every hyper-parameter the wrappers use, and each optimizer's hyper-parameters bound
to its float32 NamedTuple (``Optimizer.bind``), so the step code never touches protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.base.errors import parameter as arg
from tpuemb_cfg.base.schema import COMBINERS, MODE_NAMES, ShardingStrategy
from tpuemb_cfg.model.derived import Derived, derive

from ..model import TableInit
from .custom import OPTIMIZER_NAME, combiner_plan, optimizer_record
from .optimizers import Optimizer, get, unsupported

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ..proto.optimization_parameters_pb2 import ClippingLimits
    from ..proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration

__all__ = [
    "COMBINERS",
    "DISTRIBUTIONS",
    "FeaturePlan",
    "Plan",
    "TablePlan",
    "build_plan",
    "parse_combiners",
]

#: The synthetic bag-size distributions (``executor.bags``; ``Plan.with_bags``).
DISTRIBUTIONS = ("auto", "fixed", "uniform")

DEFAULT_COMBINER = "mean"  # TensorFlow's TableConfig default


@dataclass(frozen=True)
class FeaturePlan:
    """Feature ``index`` (replay-contract numbering) looking up table ``table``.

    ``ids_per_bag``: the most ids one bag holds, when the configuration says (``None``: it does
    not); ``bag_sizes``: how synthetic data draws bag sizes (``executor.bags``); ``custom``: a
    ``CustomCombiner``'s record (``executor.custom.CombinerPlan``; ``combiner`` is then its
    name), else None.
    """

    index: int
    name: str
    table: int
    input_shape: tuple[int, ...]
    combiner: str
    ids_per_bag: int | None = None
    bag_sizes: str = "auto"
    custom: Any = None


@dataclass(frozen=True)
class TablePlan:
    """Everything the per-row pipeline of spec section 6 needs for one table.

    ``hyper``: the optimizer's bound hyper-parameters (its ``hyper`` NamedTuple);
    ``slot_defaults``: the float32 initial value of each slot, in state order (spec section 11).
    ``custom``: the table runs a Python callable (a ``CustomOptimizer``, then ``optimizer`` is
    an ``executor.custom.CustomUpdate``, or a feature's ``CustomCombiner``): the NumPy path.
    ``initializer``: the spec's initializer of the table's rows (``model.TableInit``); None:
    the default of spec section 11.
    """

    index: int
    name: str
    vocabulary: int
    dimension: int
    optimizer: Optimizer
    hyper: Any
    slot_defaults: tuple[np.float32, ...]
    lr_constant: np.float32 | None
    lr_tag: int | None
    clip_weights: tuple[np.float32 | None, np.float32 | None] | None
    clip_gradients: tuple[np.float32 | None, np.float32 | None] | None
    weight_decay: np.float32
    decay_by_lr: bool
    accumulate: bool
    quantization: tuple[np.float32, np.float32, int] | None
    lazy: bool
    features: tuple[int, ...]
    custom: bool = False
    initializer: TableInit | None = None

    @property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(slot.name for slot in self.optimizer.slots)


@dataclass(frozen=True)
class Plan:
    """The whole configuration as the executor uses it.

    ``tag_rates``: a compiled spec's learning-rate callables, one ``executor.rates.TagRate``
    per dynamic tag in tag order (empty for a plain configuration: the caller sends the rates).
    """

    tables: tuple[TablePlan, ...]
    features: tuple[FeaturePlan, ...]
    num_learning_rates: int
    tag_users: Mapping[int, tuple[str, ...]]
    num_cores: int
    num_hosts: int
    mod_sharding: bool
    pipelined: bool
    mode: str
    tag_rates: tuple[Any, ...] = ()

    @property
    def updates(self) -> bool:
        """Whether steps back-propagate and update (every mode but INFERENCE, spec section 2)."""
        return self.mode != "INFERENCE"

    def with_combiners(
        self, combiners: str | Sequence[str] | Mapping[int, str] | None
    ) -> Plan:
        """This plan with other combiners (as for ``build_plan``); nothing else is rebuilt. A
        feature with a ``CustomCombiner`` keeps it where a list gives its own name
        (``str(combiner)``, what ``features[i].combiner`` says)."""
        kept: dict[int, FeaturePlan] = {}
        if combiners is not None and not isinstance(combiners, str | Mapping):
            given = list(combiners)
            kept = {
                f.index: f for f, name in zip(self.features, given, strict=False)
                if f.custom is not None and name == f.combiner
            }
            combiners = ["sum" if i in kept else n for i, n in enumerate(given)]
        names = _normalise_combiners(combiners, len(self.features))
        features = tuple(
            kept.get(feature.index) or replace(feature, combiner=name, custom=None)
            for feature, name in zip(self.features, names, strict=True)
        )
        return _mark_custom(replace(self, features=features))

    def with_bags(
        self, ids_per_bag: Sequence[int | None] | None = None, bag_sizes: str | None = None
    ) -> Plan:
        """This plan with other bag sizes: ``ids_per_bag`` one per feature (a compiled spec's),
        ``bag_sizes`` the synthetic distribution for every feature (``executor.bags``)."""
        if bag_sizes is not None and bag_sizes not in DISTRIBUTIONS:
            raise UsageError(
                f"unknown bag-size distribution {bag_sizes!r}; expected one of "
                + ", ".join(DISTRIBUTIONS)
            )
        counts = (
            [f.ids_per_bag for f in self.features] if ids_per_bag is None else list(ids_per_bag)
        )
        if len(counts) != len(self.features):
            raise UsageError(
                f"{len(counts)} bag size(s) given for {len(self.features)} feature(s)"
            )
        features = tuple(
            replace(f, ids_per_bag=n, bag_sizes=bag_sizes or f.bag_sizes)
            for f, n in zip(self.features, counts, strict=True)
        )
        return replace(self, features=features)

    def describe_tags(self) -> str:
        """``tag 0: tables 'a', 'b'; tag 1: step counter of 'c'`` for error messages."""
        if not self.tag_users:
            return "no table has a dynamic learning rate"
        return "; ".join(
            f"tag {tag}: {', '.join(users)}" for tag, users in sorted(self.tag_users.items())
        )

    def state_bytes(self) -> int:
        """Bytes of every table and slot the executor holds (float32)."""
        return sum(
            t.vocabulary * t.dimension * 4 * (1 + len(t.optimizer.slots)) for t in self.tables
        )


def parse_combiners(
    values: Sequence[str], num_features: int, base: Sequence[str] | None = None
) -> list[str]:
    """The combiner of every feature from ``--combiner NAME`` / ``--combiner F=NAME`` arguments.

    ``NAME`` sets every feature; ``F=NAME`` overrides feature index F; the others keep ``base``
    (one name per feature, a compiled spec's), else ``mean``. Raises ``UsageError`` for an
    unknown name or a feature index out of range.
    """
    default: str | None = None if base is not None else DEFAULT_COMBINER
    overrides: dict[int, str] = {}
    for value in values:
        text = value.strip()
        feature: int | None = None
        if "=" in text:
            left, _, text = text.partition("=")
            try:
                feature = int(left)
            except ValueError:
                raise UsageError(
                    f"{arg('combiners')} {value!r}: {left!r} is not a feature index; "
                    f"use {arg('combiners')} NAME or {arg('combiners')} FEATURE_INDEX=NAME"
                ) from None
            if not 0 <= feature < num_features:
                raise UsageError(
                    f"{arg('combiners')} {value!r}: feature index {feature} is out of range; "
                    f"the configuration has {num_features} feature(s), 0..{num_features - 1}"
                )
        if text not in COMBINERS:
            raise UsageError(
                f"{arg('combiners')} {value!r}: unknown combiner {text!r}; expected one of "
                + ", ".join(COMBINERS)
            )
        if feature is None:
            default = text
        else:
            overrides[feature] = text
    if default is None:
        assert base is not None
        return [overrides.get(f, base[f]) for f in range(num_features)]
    return [overrides.get(f, default) for f in range(num_features)]


def _normalise_combiners(
    combiners: str | Sequence[str] | Mapping[int, str] | None, num_features: int
) -> list[str]:
    if combiners is None:
        return [DEFAULT_COMBINER] * num_features
    if isinstance(combiners, str):
        return parse_combiners([combiners], num_features)
    if isinstance(combiners, Mapping):
        return parse_combiners([f"{f}={name}" for f, name in combiners.items()], num_features)
    names = list(combiners)
    if len(names) != num_features:
        raise UsageError(
            f"{len(names)} combiner(s) given for {num_features} feature(s); give one per feature "
            "or a mapping {feature_index: name}"
        )
    return parse_combiners([f"{f}={name}" for f, name in enumerate(names)], num_features)


def _limits(message: ClippingLimits) -> tuple[np.float32 | None, np.float32 | None]:
    lower = np.float32(message.lower.value) if message.HasField("lower") else None
    upper = np.float32(message.upper.value) if message.HasField("upper") else None
    return lower, upper


def _features(
    config: TPUEmbeddingConfiguration, derived: Derived
) -> list[tuple[str, int, tuple[int, ...]]]:
    """(name, table, input_shape) per feature in replay-contract order: the effective features
    the validator derived (validation-rules 1.2); a legacy table's ``num_features`` features,
    ``NAME_k`` of shape ``[batch]``."""
    if derived.style == "feature":
        return [(f.name, f.table_id, f.input_shape) for f in derived.features]
    return [
        (f"{td.name}_{k}", t, (derived.batch_size,))
        for t, td in enumerate(config.table_descriptor)
        for k in range(derived.num_features[t])
    ]


def _tag_users(config: TPUEmbeddingConfiguration, derived: Derived) -> dict[int, tuple[str, ...]]:
    """tag -> who reads it (``table 'a'``, ``step counter of 'c'``), in the validator's order of
    the tag uses (validation-rules 1.3)."""
    users: dict[int, list[str]] = {}
    for use in derived.tag_uses:
        name = config.table_descriptor[use.table].name
        users.setdefault(use.tag, []).append(
            f"table {name!r}" if use.kind == "learning_rate"
            else f"{use.kind.replace('_', ' ')} of {name!r}"
        )
    return {tag: tuple(names) for tag, names in users.items()}


def _ids_per_bag(shape: tuple[int, ...]) -> int | None:
    """What a plain configuration says about bag sizes (``executor.bags``): one id per position
    of a multi-dimensional feature, nothing about a ``[batch]`` feature."""
    return 1 if len(shape) > 1 else None


def build_plan(
    config: TPUEmbeddingConfiguration,
    combiners: str | Sequence[str] | Mapping[int, str] | None = None,
    *,
    derived: Derived | None = None,
    custom_optimizers: Mapping[str, Any] | None = None,
    custom_combiners: Mapping[int, Any] | None = None,
) -> Plan:
    """The plan of ``config`` (a ``TPUEmbeddingConfiguration``), with one combiner per feature.

    ``derived``: the quantities the validator derived from ``config`` (``tpuemb_cfg.model.derived``:
    the effective features, the tag uses, accumulation; derived here when not given). The
    configuration is expected to be valid (``session.prepare`` refuses the validator's errors
    first); what the validator checks is not checked again.

    ``custom_optimizers``: table name -> ``CustomOptimizer`` (the table's proto then holds no
    algorithm, as TensorFlow writes it); ``custom_combiners``: feature index ->
    ``CustomCombiner`` (the name ``combiners`` gives that feature is not used). Their callables
    run in the step (``executor.custom``; ``prepare`` passes them from a compiled spec).

    Raises ``InputError`` for what the executor cannot run: a table whose optimizer has no public
    equations (naming the table), a simulated quantization without a usable range, a custom
    slot initializer that is not a constant or a custom combiner that fails its first probe
    (``executor.custom.CustomError``).
    """
    if derived is None:
        derived = derive(config)
    custom_optimizers = custom_optimizers or {}
    raw_features = _features(config, derived)
    names = _normalise_combiners(combiners, len(raw_features))
    features: list[FeaturePlan] = []
    per_table: dict[int, list[int]] = {t: [] for t in range(len(config.table_descriptor))}
    for index, (name, table, shape) in enumerate(raw_features):
        features.append(
            FeaturePlan(index, name, table, shape, names[index], ids_per_bag=_ids_per_bag(shape))
        )
        per_table[table].append(index)

    tables: list[TablePlan] = []
    for t, td in enumerate(config.table_descriptor):
        op = td.optimization_parameters
        custom = custom_optimizers.get(td.name)
        optimizer: Optimizer
        if custom is not None:
            optimizer, slot_defaults = optimizer_record(td.name, custom, int(td.dimension))
            message, hyper = None, optimizer.bind(None)
        else:
            optimizer, message = _optimizer(td, t, derived.algorithms[t] or "")
            hyper = optimizer.bind(message)
            slot_defaults = tuple(
                np.float32(slot.initial_value(message)) for slot in optimizer.slots
            )
        which_lr = op.learning_rate.WhichOneof("learning_rate")
        quantization = None
        sq = op.simulated_quantization
        if op.HasField("simulated_quantization") and sq.enabled:
            lower, upper = _limits(sq.clipping_limits)
            if lower is None or upper is None or not lower < upper or sq.num_buckets < 2:
                raise InputError(
                    f"table {td.name!r}: simulated_quantization needs clipping_limits with "
                    "lower < upper and num_buckets >= 2"
                )
            quantization = (lower, upper, int(sq.num_buckets))
        tables.append(
            TablePlan(
                index=t,
                name=td.name,
                vocabulary=int(td.vocabulary_size),
                dimension=int(td.dimension),
                optimizer=optimizer,
                hyper=hyper,
                slot_defaults=slot_defaults,
                lr_constant=(
                    np.float32(op.learning_rate.constant) if which_lr == "constant" else None
                ),
                lr_tag=int(op.learning_rate.dynamic.tag) if which_lr == "dynamic" else None,
                clip_weights=(
                    _limits(op.clipping_limits) if op.HasField("clipping_limits") else None
                ),
                clip_gradients=(
                    _limits(op.gradient_clipping_limits)
                    if op.HasField("gradient_clipping_limits")
                    else None
                ),
                weight_decay=np.float32(op.weight_decay_factor),
                decay_by_lr=bool(op.multiply_weight_decay_factor_by_learning_rate),
                accumulate=derived.accumulation[t],
                quantization=quantization,
                lazy=bool(optimizer.lazy(message)),
                features=tuple(per_table[t]),
            )
        )

    if custom_combiners:
        for f, combiner in custom_combiners.items():
            feature = features[f]
            record = combiner_plan(feature.name, combiner, tables[feature.table].dimension)
            features[f] = replace(feature, combiner=record.name, custom=record)
    return _mark_custom(Plan(
        tables=tuple(tables),
        features=tuple(features),
        num_learning_rates=derived.k,
        tag_users=_tag_users(config, derived),
        num_cores=max(int(config.num_tensor_cores), 1),
        num_hosts=max(int(config.num_hosts), 1),
        mod_sharding=int(config.sharding_strategy) == ShardingStrategy.MOD,
        pipelined=bool(config.pipeline_execution_with_tensor_core),
        mode=MODE_NAMES.get(int(config.mode), str(int(config.mode))),
    ))


def _optimizer(
    td: TPUEmbeddingConfiguration.TableDescriptor, t: int, algorithm: str
) -> tuple[Optimizer, Message]:
    """The registered optimizer of table descriptor ``td`` (index ``t``) and its message."""
    reason = unsupported(algorithm)
    if reason is not None:
        raise InputError(
            f"table {td.name!r} (table_descriptor[{t}]) uses {algorithm}, which cannot be "
            f"simulated: {reason}"
        )
    try:
        optimizer = get(algorithm)
    except ValueError as exc:
        raise InputError(f"table {td.name!r} (table_descriptor[{t}]): {exc}") from None
    return optimizer, getattr(td.optimization_parameters, algorithm)


def _mark_custom(plan: Plan) -> Plan:
    """``plan`` with ``TablePlan.custom`` set on the tables that run a Python callable."""
    combined = {f.table for f in plan.features if f.custom is not None}
    tables = tuple(
        replace(t, custom=t.optimizer.name == OPTIMIZER_NAME or t.index in combined)
        for t in plan.tables
    )
    return replace(plan, tables=tables)
