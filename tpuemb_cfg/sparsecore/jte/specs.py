"""jax-tpu-embedding 0.2.0's specs (``embedding_spec.py``), in plain Python: the names, fields,
defaults and equality stacking depends on, without jax.

- The optimizer specs compare as jax-tpu-embedding's do: two specs are equal when the hashes of
  their hyper-parameter tuples are equal (``(learning_rate, *others)`` in signature order). A
  learning-rate callable hashes by identity, so two distinct schedules keep their tables apart
  even when they compute the same rates. Each class carries the algorithm it runs
  (``algorithm``, from ``algorithms/table.py``'s ``JAX_SPECS``, keyed by the class name).
- :class:`TableSpec` and :class:`FeatureSpec` are mutable like jax-tpu-embedding's: stacking
  writes ``stacked_table_spec``, ``setting_in_stack`` and ``id_transformation`` into them. Once
  a table is stacked, its other fields refuse changes (AttributeError, as the reference does).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from tpuemb_cfg.algorithms.table import ADAM_BETA_1, ADAM_BETA_2, JAX_SPECS
from tpuemb_cfg.base.sparsecore_defaults import (
    ACTIVATION_MEMORY_BYTES_LIMIT,
    DEFAULT_MAX_IDS_PER_PARTITION,
    DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION,
)
from tpuemb_cfg.sparsecore import checks

__all__ = [
    "DEFAULT_ACTIVATION_MEM_BYTES_LIMIT", "DEFAULT_LIMIT", "AdagradMomentumOptimizerSpec",
    "AdagradOptimizerSpec", "AdamOptimizerSpec", "FTRLOptimizerSpec", "FeatureIdTransformation",
    "FeatureSpec", "OptimizerSpec", "QuantizationConfig", "SGDOptimizerSpec", "StackedTableSpec",
    "TableSettingInStack", "TableSpec", "get_default_limits",
]

#: The activation memory (bytes per SparseCore) a stack may reach: 2 MiB.
DEFAULT_ACTIVATION_MEM_BYTES_LIMIT = ACTIVATION_MEMORY_BYTES_LIMIT
#: ``max_ids_per_partition`` and ``max_unique_ids_per_partition`` when nothing else is said.
DEFAULT_LIMIT = DEFAULT_MAX_IDS_PER_PARTITION

#: A limit callable: ``(stack_name, total_sample_count) -> limit``.
LimitsCallable = Callable[[str, int], int]


def get_default_limits(name: str, batch_size: int) -> int:
    """jax-tpu-embedding's default for a multi-table stack's limits: :data:`DEFAULT_LIMIT`
    whatever the stack."""
    del name, batch_size
    return DEFAULT_LIMIT


class OptimizerSpec:
    """An optimizer of a table; subclasses list their hyper-parameters in ``_params``.

    ``algorithm`` is the proto oneof name of what the SparseCore runs; ``short_name()`` the
    reference's own name for it (used in variable names there).
    """

    algorithm: ClassVar[str] = "custom"
    _short_name: ClassVar[str] = "custom"
    #: hyper-parameters after ``learning_rate``: the constructor's, in signature (= hash) order
    _params: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        known = JAX_SPECS.get(cls.__name__)
        if known is not None:
            cls._short_name, cls.algorithm = known
        cls._params = tuple(inspect.signature(cls.__init__).parameters)[2:]

    def __init__(self, learning_rate: Any) -> None:
        self.learning_rate = learning_rate

    def _assign(self, given: dict[str, Any]) -> None:
        """Keep the constructor's arguments (``locals()``) as attributes of the same names,
        each checked: a bool flag ``True`` or ``False``, any other a finite number or a
        callable (TypeError or ValueError naming it)."""
        owner = type(self).__name__
        self.learning_rate = checks.check_rate(owner, "learning_rate", given["learning_rate"])
        defaults = inspect.signature(type(self).__init__).parameters
        for name in self._params:
            value = given[name]
            if isinstance(defaults[name].default, bool):
                checks.flag(owner, name, value)
            else:
                checks.check_rate(owner, name, value)
            setattr(self, name, value)

    def hyperparameters(self) -> dict[str, Any]:
        """Every hyper-parameter by its argument name, ``learning_rate`` first."""
        values = {"learning_rate": self.learning_rate}
        values.update((name, getattr(self, name)) for name in self._params)
        return values

    def short_name(self) -> str:
        return self._short_name

    def __hash__(self) -> int:
        return hash(tuple(self.hyperparameters().values()))

    def __eq__(self, other: object) -> bool:
        # As the reference: equal hashes, whatever the class (hash(-1) == hash(-2) included).
        if not isinstance(other, OptimizerSpec):
            return NotImplemented
        return hash(self) == hash(other)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({args})"


class SGDOptimizerSpec(OptimizerSpec):
    """Plain gradient descent: ``w -= lr * g``; no slot."""

    def __init__(self, learning_rate: Any = 0.001) -> None:
        self._assign(locals())


class AdagradOptimizerSpec(OptimizerSpec):
    """Adagrad: ``a += g^2; w -= lr * g / sqrt(a)``; the accumulator starts at
    ``initial_accumulator_value``."""

    def __init__(self, learning_rate: Any = 0.001,
                 initial_accumulator_value: float = 0.1) -> None:
        self._assign(locals())


class AdamOptimizerSpec(OptimizerSpec):
    """Adam with the bias correction folded into the rate and epsilon (Kingma & Ba, 2.1)."""

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = ADAM_BETA_1,
                 beta_2: float = ADAM_BETA_2, epsilon: float = 1e-8) -> None:
        self._assign(locals())


class AdagradMomentumOptimizerSpec(OptimizerSpec):
    """Adagrad with momentum (and optionally Nesterov), ``exponent`` the accumulator's power."""

    # The reference's signature, argument for argument.
    def __init__(  # noqa: PLR0913
        self, learning_rate: Any = 0.001, momentum: float = 0.9, beta2: float = 1.0,
        epsilon: float = 1e-10, exponent: float = 2.0, use_nesterov: bool = False,
        initial_accumulator_value: float = 0.1, initial_momentum_value: float = 0.0,
    ) -> None:
        self._assign(locals())


class FTRLOptimizerSpec(OptimizerSpec):
    """Follow the regularized leader, with the accumulator and linear slots."""

    # The reference's signature, argument for argument.
    def __init__(  # noqa: PLR0913
        self, learning_rate: Any = 0.01, learning_rate_power: float = -0.5,
        l1_regularization_strength: float = 0.0, l2_regularization_strength: float = 0.0,
        beta: float = 0.0, initial_accumulator_value: float = 0.1,
        initial_linear_value: float = 0.0, multiply_linear_by_learning_rate: bool = False,
    ) -> None:
        self._assign(locals())


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuantizationConfig:
    """A table's quantization: ``num_buckets`` integer buckets over ``[min_value, max_value]``."""

    min_value: float
    max_value: float
    num_buckets: int

    def __post_init__(self) -> None:
        if self.num_buckets < 2:
            raise ValueError(f"num_buckets must be at least 2, got {self.num_buckets}")
        if self.min_value >= self.max_value:
            raise ValueError(f"min_value ({self.min_value}) must be below max_value "
                             f"({self.max_value})")

    def as_tuple(self) -> tuple[float, float, int]:
        return (self.min_value, self.max_value, self.num_buckets)


@dataclasses.dataclass(frozen=True)
class FeatureIdTransformation:
    """How a feature's ids and samples move into its stack: samples by ``row_offset``, ids to
    ``id + col_offset`` with the shards rotated by ``col_shift``."""

    row_offset: int = 0
    col_offset: int = 0
    col_shift: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableSettingInStack:
    """A table's place in its stack: rows ``row_offset_in_shard`` onwards of every shard, shards
    rotated by ``shard_rotation``."""

    stack_name: str
    padded_vocab_size: int
    padded_embedding_dim: int
    row_offset_in_shard: int = 0
    shard_rotation: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackedTableSpec:
    """What the SparseCores hold for a stack, and the limits preprocessing applies to it."""

    stack_name: str
    stack_vocab_size: int
    stack_embedding_dim: int
    optimizer: Any
    combiner: str
    total_sample_count: int
    max_ids_per_partition: int = DEFAULT_MAX_IDS_PER_PARTITION
    max_unique_ids_per_partition: int = DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION
    activation_mem_bytes_limit: int = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT
    suggested_coo_buffer_size_per_device: int | None = None
    quantization_config: Any = None


#: Fields a stacked table may still have written (stacking itself writes them).
_WRITABLE_AFTER_STACKING = frozenset({"_stacked_table_spec", "_setting_in_stack",
                                      "stacked_table_spec", "setting_in_stack"})
_FDO_PARAMS = frozenset({"max_ids_per_partition", "max_unique_ids_per_partition",
                         "suggested_coo_buffer_size_per_device"})


@dataclasses.dataclass(eq=True, unsafe_hash=True, kw_only=True)
class TableSpec:
    """One embedding table: ``vocabulary_size`` rows of ``embedding_dim`` columns.

    The limits are this table's own; stacking keeps them only for a table stacked alone.
    """

    name: str
    vocabulary_size: int
    embedding_dim: int
    initializer: Any
    optimizer: Any
    combiner: str
    max_ids_per_partition: int = DEFAULT_MAX_IDS_PER_PARTITION
    max_unique_ids_per_partition: int = DEFAULT_MAX_UNIQUE_IDS_PER_PARTITION
    suggested_coo_buffer_size_per_device: int | None = None
    quantization_config: Any = None
    _initialized: bool = dataclasses.field(init=False, default=False, compare=False)
    _stacked_table_spec: StackedTableSpec | None = dataclasses.field(default=None, compare=False)
    _setting_in_stack: TableSettingInStack | None = dataclasses.field(default=None,
                                                                      compare=False)

    def __post_init__(self) -> None:
        owner = "TableSpec"
        checks.check_name(owner, "name", self.name)
        owner = f"TableSpec {self.name!r}"
        checks.size(owner, "vocabulary_size", self.vocabulary_size)
        checks.count(owner, "embedding_dim", self.embedding_dim)
        checks.check_combiner(owner, self.combiner)
        for name in ("max_ids_per_partition", "max_unique_ids_per_partition"):
            checks.check_limit(owner, name, getattr(self, name))
        if self.suggested_coo_buffer_size_per_device is not None:
            checks.count(owner, "suggested_coo_buffer_size_per_device",
                         self.suggested_coo_buffer_size_per_device, minimum=0)
        if self._setting_in_stack is None:
            self._setting_in_stack = TableSettingInStack(
                stack_name=self.name, padded_vocab_size=self.vocabulary_size,
                padded_embedding_dim=self.embedding_dim)
        object.__setattr__(self, "_initialized", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if (name not in _WRITABLE_AFTER_STACKING and getattr(self, "_initialized", False)
                and self.is_stacked()):
            if name in _FDO_PARAMS:
                raise AttributeError(
                    f"cannot change {name!r} of TableSpec {self.name!r}: the table is already "
                    f"stacked (into {self.stacked_table_spec.stack_name!r}); change the stack's "
                    "limits with embedding.update_preprocessing_parameters(), as "
                    "jax-tpu-embedding asks")
            raise AttributeError(
                f"cannot change {name!r} of TableSpec {self.name!r}: the table is already "
                "stacked; build a new TableSpec with dataclasses.replace() and its FeatureSpecs, "
                "then stack them again")
        super().__setattr__(name, value)

    def is_stacked(self) -> bool:
        return self._stacked_table_spec is not None

    @property
    def stacked_table_spec(self) -> StackedTableSpec:
        if self._stacked_table_spec is None:
            raise AssertionError(f"Table {self.name} is not stacked.")
        return self._stacked_table_spec

    @stacked_table_spec.setter
    def stacked_table_spec(self, value: StackedTableSpec) -> None:
        self._stacked_table_spec = value

    @property
    def setting_in_stack(self) -> TableSettingInStack:
        assert self._setting_in_stack is not None
        return self._setting_in_stack

    @setting_in_stack.setter
    def setting_in_stack(self, value: TableSettingInStack) -> None:
        self._setting_in_stack = value


@dataclasses.dataclass(eq=True, unsafe_hash=True, kw_only=True)
class FeatureSpec:
    """One feature: ids of ``input_shape`` looked up in ``table_spec``, activations of
    ``output_shape`` (the last axis the embedding dimension)."""

    name: str
    table_spec: Any
    input_shape: Sequence[int]
    output_shape: Sequence[int]
    _id_transformation: FeatureIdTransformation | None = dataclasses.field(default=None,
                                                                           compare=False)

    def __post_init__(self) -> None:
        checks.check_name("FeatureSpec", "name", self.name)
        owner = f"FeatureSpec {self.name!r}"
        if not (hasattr(self.table_spec, "name") and hasattr(self.table_spec, "embedding_dim")):
            raise checks.SpecTypeError(f"{owner}: `table_spec` must be a TableSpec; received "
                                       f"{type(self.table_spec).__name__}")
        for name in ("input_shape", "output_shape"):
            value = getattr(self, name)
            if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
                raise checks.SpecTypeError(f"{owner}: `{name}` must be a sequence of ints; "
                                           f"received {value!r}")
            for i, d in enumerate(value):
                checks.count(owner, f"{name}[{i}]", d)

    @property
    def id_transformation(self) -> FeatureIdTransformation:
        if self._id_transformation is None:
            raise AssertionError(f"feature {self.name} has no id transformation: call "
                                 "prepare_feature_specs_for_training first")
        return self._id_transformation

    @id_transformation.setter
    def id_transformation(self, value: FeatureIdTransformation) -> None:
        self._id_transformation = value
