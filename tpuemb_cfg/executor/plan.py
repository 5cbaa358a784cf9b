"""From a ``TPUEmbeddingConfiguration`` to the executor's plan: what every table and feature does.

The plan is read once from the message and holds only plain Python and NumPy values: float32
scalars for every hyper-parameter the wrappers use, and each optimizer's hyper-parameters bound
to its float32 NamedTuple (``Optimizer.bind``), so the step code never touches protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import InputError, UsageError
from .optimizers import Optimizer, get, unsupported

__all__ = [
    "COMBINERS",
    "FeaturePlan",
    "Plan",
    "TablePlan",
    "build_plan",
    "parse_combiners",
    "refuse_invalid",
]

COMBINERS = ("sum", "mean", "sqrtn")
DEFAULT_COMBINER = "mean"  # TensorFlow's TableConfig default

# Enum numbers (schema.md section 3), so the plan does not depend on generated enum spellings.
_MODE_INFERENCE = 1
_ACCUMULATION_DISABLED = 2
_SHARDING_MOD = 1
_MODE_NAMES = {0: "UNSPECIFIED", 1: "INFERENCE", 2: "TRAINING", 3: "BACKWARD_PASS_ONLY"}


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
    ``initializer``: the spec's initializer of the table's rows (``executor.initializers
    .TableInit``); None: the default of spec section 11.
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
    initializer: Any = None

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
        from .bags import DISTRIBUTIONS

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

    def memory_estimate(self) -> int:
        """An estimate of the bytes a library ``Executor`` adds to its process: the whole tables
        and slots plus every working array of one synthetic step of the NumPy engine (the
        larger of the two engines') for the configured bags, cores and bag sizes (ids, gains,
        activations, gradients, gathered rows, per-core partials, a non-lazy optimizer's
        full-size arrays). ``executor.memory.estimate`` estimates a whole run (the process, the
        engine in use, the rows touched, the history); ``executor.memory`` has the model."""
        from .memory import library_estimate

        return library_estimate(self).total


def refuse_invalid(config: Any) -> None:
    """Raise ``InputError`` listing the validator's error diagnostics, if it reports any.

    ``config``: what ``tpuemb_cfg.validate`` takes; pass the path of a text file to get the
    first error's line and column and to honour ``# tpuemb: disable=ID`` comments. Prefer
    ``tpuemb_cfg.session.prepare``, which parses, validates and plans a file in one pass.
    """
    from ..session import refuse_errors
    from ..validator import validate

    refuse_errors(validate(config))


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
                    f"--combiner {value!r}: {left!r} is not a feature index; "
                    "use --combiner NAME or --combiner FEATURE_INDEX=NAME"
                ) from None
            if not 0 <= feature < num_features:
                raise UsageError(
                    f"--combiner {value!r}: feature index {feature} is out of range; "
                    f"the configuration has {num_features} feature(s), 0..{num_features - 1}"
                )
        if text not in COMBINERS:
            raise UsageError(
                f"--combiner {value!r}: unknown combiner {text!r}; expected one of "
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


def _limits(message: Any) -> tuple[np.float32 | None, np.float32 | None]:
    lower = np.float32(message.lower.value) if message.HasField("lower") else None
    upper = np.float32(message.upper.value) if message.HasField("upper") else None
    return lower, upper


def _features(config: Any) -> list[tuple[str, int, tuple[int, ...]]]:
    """(name, table, input_shape) per feature in replay-contract order (validation-rules 1.2)."""
    if len(config.feature_descriptor):
        return [
            (fd.name, int(fd.table_id), tuple(int(s) for s in fd.input_shape))
            for fd in config.feature_descriptor
        ]
    batch = int(config.batch_size_per_tensor_core)
    return [
        (f"{td.name}_{k}", t, (batch,))
        for t, td in enumerate(config.table_descriptor)
        for k in range(int(td.num_features))
    ]


def _ids_per_bag(shape: tuple[int, ...]) -> int | None:
    """What a plain configuration says about bag sizes (``executor.bags``): one id per position
    of a multi-dimensional feature, nothing about a ``[batch]`` feature."""
    return 1 if len(shape) > 1 else None


def build_plan(
    config: Any,
    combiners: str | Sequence[str] | Mapping[int, str] | None = None,
    *,
    custom_optimizers: Mapping[str, Any] | None = None,
    custom_combiners: Mapping[int, Any] | None = None,
) -> Plan:
    """The plan of ``config`` (a ``TPUEmbeddingConfiguration``), with one combiner per feature.

    ``custom_optimizers``: table name -> ``CustomOptimizer`` (the table's proto then holds no
    algorithm, as TensorFlow writes it); ``custom_combiners``: feature index ->
    ``CustomCombiner`` (the name ``combiners`` gives that feature is not used). Their callables
    run in the step (``executor.custom``; ``prepare`` passes them from a compiled spec).

    Raises ``InputError`` for what the executor cannot run: a table whose optimizer has no public
    equations (naming the table), no optimizer or learning rate, features pointing at no table,
    dynamic tags that are not 0..K-1, a custom slot initializer that is not a constant or a
    custom combiner that fails its first probe (``executor.custom.CustomError``).
    """
    custom_optimizers = custom_optimizers or {}
    raw_features = _features(config)
    names = _normalise_combiners(combiners, len(raw_features))
    num_tables = len(config.table_descriptor)
    features: list[FeaturePlan] = []
    per_table: dict[int, list[int]] = {t: [] for t in range(num_tables)}
    for index, (name, table, shape) in enumerate(raw_features):
        if not 0 <= table < num_tables:
            raise InputError(
                f"feature_descriptor[{index}] ({name!r}) looks up table_id {table}, but the "
                f"configuration has {num_tables} table(s)"
            )
        features.append(
            FeaturePlan(index, name, table, shape, names[index], ids_per_bag=_ids_per_bag(shape))
        )
        per_table[table].append(index)

    tag_users: dict[int, list[str]] = {}
    tables: list[TablePlan] = []
    for t, td in enumerate(config.table_descriptor):
        op = td.optimization_parameters
        algorithm = op.WhichOneof("parameters") or ""
        custom = custom_optimizers.get(td.name)
        optimizer: Optimizer
        if custom is not None:
            from .custom import optimizer_record

            optimizer, slot_defaults = optimizer_record(td.name, custom, int(td.dimension))
            message, hyper = None, optimizer.bind(None)
        else:
            optimizer, message = _optimizer(td, t, algorithm)
            hyper = optimizer.bind(message)
            slot_defaults = tuple(
                np.float32(slot.initial_value(message)) for slot in optimizer.slots
            )
        which_lr = op.learning_rate.WhichOneof("learning_rate")
        lr_constant: np.float32 | None = None
        lr_tag: int | None = None
        if which_lr == "constant":
            lr_constant = np.float32(op.learning_rate.constant)
        elif which_lr == "dynamic":
            lr_tag = int(op.learning_rate.dynamic.tag)
            tag_users.setdefault(lr_tag, []).append(f"table {td.name!r}")
        else:
            raise InputError(
                f"table {td.name!r} (table_descriptor[{t}]) has no learning rate; set "
                "optimization_parameters.learning_rate.constant or .dynamic"
            )
        for step_input in optimizer.algorithm.step_inputs if custom is None else ():
            tag_users.setdefault(getattr(hyper, step_input.tag), []).append(
                f"{step_input.label} of {td.name!r}"
            )
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
                lr_constant=lr_constant,
                lr_tag=lr_tag,
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
                accumulate=int(op.gradient_accumulation_status) != _ACCUMULATION_DISABLED,
                quantization=quantization,
                lazy=bool(optimizer.lazy(message)),
                features=tuple(per_table[t]),
            )
        )
        if tables[-1].vocabulary < 1 or tables[-1].dimension < 1:
            raise InputError(
                f"table {td.name!r}: vocabulary_size and dimension must be >= 1 "
                f"(found {td.vocabulary_size} and {td.dimension})"
            )

    k = len(tag_users)
    if sorted(tag_users) != list(range(k)):
        raise InputError(
            f"dynamic learning-rate tags must be exactly 0..{k - 1}; found "
            + ", ".join(str(tag) for tag in sorted(tag_users))
        )
    if custom_combiners:
        from .custom import combiner_plan

        for f, combiner in custom_combiners.items():
            feature = features[f]
            record = combiner_plan(feature.name, combiner, tables[feature.table].dimension)
            features[f] = replace(feature, combiner=record.name, custom=record)
    return _mark_custom(Plan(
        tables=tuple(tables),
        features=tuple(features),
        num_learning_rates=k,
        tag_users={tag: tuple(users) for tag, users in tag_users.items()},
        num_cores=max(int(config.num_tensor_cores), 1),
        num_hosts=max(int(config.num_hosts), 1),
        mod_sharding=int(config.sharding_strategy) == _SHARDING_MOD,
        pipelined=bool(config.pipeline_execution_with_tensor_core),
        mode=_MODE_NAMES.get(int(config.mode), str(int(config.mode))),
    ))


def _optimizer(td: Any, t: int, algorithm: str) -> tuple[Optimizer, Any]:
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
    from .custom import OPTIMIZER_NAME

    combined = {f.table for f in plan.features if f.custom is not None}
    tables = tuple(
        replace(t, custom=t.optimizer.name == OPTIMIZER_NAME or t.index in combined)
        for t in plan.tables
    )
    return replace(plan, tables=tables)
