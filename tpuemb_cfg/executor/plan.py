"""From a ``TPUEmbeddingConfiguration`` to the executor's plan: what every table and feature does.

The plan is read once from the message and holds only plain Python and NumPy values (float32
scalars for every hyper-parameter the wrappers use), so the step code never touches protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, UsageError
from .optimizers import UNSUPPORTED, OptimizerSpec, get

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
    """Feature ``index`` (replay-contract numbering) looking up table ``table``."""

    index: int
    name: str
    table: int
    input_shape: tuple[int, ...]
    combiner: str


@dataclass(frozen=True)
class TablePlan:
    """Everything the per-row pipeline of spec section 6 needs for one table."""

    index: int
    name: str
    vocabulary: int
    dimension: int
    optimizer: OptimizerSpec
    hyper: Any
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

    @property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(slot.name for slot in self.optimizer.slots)


@dataclass(frozen=True)
class Plan:
    """The whole configuration as the executor uses it."""

    tables: tuple[TablePlan, ...]
    features: tuple[FeaturePlan, ...]
    num_learning_rates: int
    tag_users: Mapping[int, tuple[str, ...]]
    num_cores: int
    num_hosts: int
    mod_sharding: bool
    pipelined: bool
    mode: str

    @property
    def updates(self) -> bool:
        """Whether steps back-propagate and update (every mode but INFERENCE, spec section 2)."""
        return self.mode != "INFERENCE"

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
        """An estimate of the peak bytes of a step: the state, plus for every non-lazy table
        (every row steps) a full-size gradient, the pre-step copy and the optimizer's new
        parameters and slots. Batches and lazy row blocks are small next to the tables and are
        not counted."""
        working = sum(
            t.vocabulary * t.dimension * 4 * (3 + len(t.optimizer.slots))
            for t in self.tables
            if not t.lazy
        )
        return self.state_bytes() + working


def refuse_invalid(config: Any) -> None:
    """Raise ``InputError`` listing the validator's error diagnostics, if it reports any.

    ``config``: what ``tpuemb_cfg.validate`` takes; pass the path of a text file to get the
    first error's line and column and to honour ``# tpuemb: disable=ID`` comments.

    The simulator never runs a configuration TensorFlow would reject. When the validator is not
    installed (a partial checkout), the executor's own checks still apply.
    """
    try:
        from .. import validate
    except ImportError:  # pragma: no cover - the validator ships with the package
        return
    errors = [d for d in validate(config) if getattr(d, "severity", "") == "error"]
    if not errors:
        return
    shown = "; ".join(f"{d.rule} at {d.field_path or '(config)'}: {d.message}" for d in errors[:5])
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    first = errors[0]
    raise InputError(
        f"the configuration has {len(errors)} validation error(s): {shown}{more}; "
        "run `tpuemb validate` for details and fix them before simulating",
        line=getattr(first, "line", None),
        column=getattr(first, "column", None),
    )


def parse_combiners(values: Sequence[str], num_features: int) -> list[str]:
    """The combiner of every feature from ``--combiner NAME`` / ``--combiner F=NAME`` arguments.

    ``NAME`` sets the default (``mean`` when not given); ``F=NAME`` overrides feature index F.
    Raises ``UsageError`` for an unknown name or a feature index out of range.
    """
    default = DEFAULT_COMBINER
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


def build_plan(
    config: Any, combiners: str | Sequence[str] | Mapping[int, str] | None = None
) -> Plan:
    """The plan of ``config`` (a ``TPUEmbeddingConfiguration``), with one combiner per feature.

    Raises ``InputError`` for what the executor cannot run: a table whose optimizer has no public
    equations (naming the table), no optimizer or learning rate, features pointing at no table,
    dynamic tags that are not 0..K-1.
    """
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
        features.append(FeaturePlan(index, name, table, shape, names[index]))
        per_table[table].append(index)

    tag_users: dict[int, list[str]] = {}
    tables: list[TablePlan] = []
    for t, td in enumerate(config.table_descriptor):
        op = td.optimization_parameters
        algorithm = op.WhichOneof("parameters") or ""
        if algorithm in UNSUPPORTED:
            raise InputError(
                f"table {td.name!r} (table_descriptor[{t}]) uses {algorithm}, which cannot be "
                f"simulated: {UNSUPPORTED[algorithm]}"
            )
        try:
            spec = get(algorithm)
        except ValueError as exc:
            raise InputError(f"table {td.name!r} (table_descriptor[{t}]): {exc}") from None
        hyper = getattr(op, algorithm)
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
        if algorithm == "frequency_aware_adagrad":
            counter_tag = int(hyper.step_counter.tag) if hyper.HasField("step_counter") else 0
            tag_users.setdefault(counter_tag, []).append(f"step counter of {td.name!r}")
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
                optimizer=spec,
                hyper=hyper,
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
                lazy=bool(spec.lazy(hyper)),
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
    return Plan(
        tables=tuple(tables),
        features=tuple(features),
        num_learning_rates=k,
        tag_users={tag: tuple(users) for tag, users in tag_users.items()},
        num_cores=max(int(config.num_tensor_cores), 1),
        num_hosts=max(int(config.num_hosts), 1),
        mod_sharding=int(config.sharding_strategy) == _SHARDING_MOD,
        pipelined=bool(config.pipeline_execution_with_tensor_core),
        mode=_MODE_NAMES.get(int(config.mode), str(int(config.mode))),
    )
