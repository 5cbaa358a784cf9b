"""A SparseCore configuration, whichever API wrote it: plain records the rules, ``compile
--sparsecore``, ``inspect``, ``simulate`` and ``plan`` read.

TensorFlow's ``TPUEmbeddingV2`` (``tpuemb_cfg.embedding.sparsecore``), keras-rs'
``DistributedEmbedding`` with ``placement="sparsecore"`` and jax-tpu-embedding's
``TableSpec``/``FeatureSpec`` (``tpuemb_cfg.sparsecore.jte``) are each converted into one
:class:`SparseCoreConfig`; the conversion keeps what the API would lose (a table's own limits,
the spec line of each object) so a rule can say what went wrong and where.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tpuemb_cfg.algorithms.table import SPARSECORE
from tpuemb_cfg.base.sparsecore_defaults import DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE
from tpuemb_cfg.sparsecore.stacking import Mode
from tpuemb_cfg.sparsecore.topology import Topology

__all__ = ["API", "Origin", "SparseCoreConfig", "SparseCoreFeature", "SparseCoreOptimizer",
           "SparseCoreTable", "ids_per_bag"]

#: Which API the configuration was written with.
API = Literal["tensorflow", "keras_rs", "jax"]

#: The optimizers SparseCores run (proto oneof names); anything else is a finding.
SUPPORTED_ALGORITHMS = SPARSECORE


@dataclass(frozen=True)
class Origin:
    """Where an object was built: a spec file and a 1-based line (``None`` when unknown)."""

    path: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class SparseCoreOptimizer:
    """A table's optimizer, as far as stacking and the SparseCore rules care.

    ``algorithm`` is the proto oneof name (``"adagrad"``) or ``"custom"``; ``hyper`` the
    hyper-parameters by the API's argument names; ``group`` the key two tables must share to be
    stacked (TF: the ``_xxtpuv3internal_`` string; jax: optimizer equality); ``learning_rate``
    the constant rate or the callable (its identity keeps tables apart).
    """

    algorithm: str
    hyper: Mapping[str, Any] = field(default_factory=dict)
    group: str = ""
    learning_rate: Any = None
    weight_decay: bool = False
    source: Any = None  # the API object (TF optimizer, jte OptimizerSpec, Keras optimizer)
    origin: Origin = Origin()


@dataclass(frozen=True)
class SparseCoreTable:
    name: str
    vocabulary_size: int
    dim: int
    optimizer: SparseCoreOptimizer
    combiner: str = "mean"
    quantization: str | None = None  # repr of the quantization config, None without one
    initializer: Any = None
    # jax-tpu-embedding's per-table limits (TableSpec); None for TensorFlow and keras-rs
    max_ids_per_partition: int | None = None
    max_unique_ids_per_partition: int | None = None
    suggested_coo_buffer_size_per_device: int | None = None
    origin: Origin = Origin()


@dataclass(frozen=True)
class SparseCoreFeature:
    """``ids_per_bag``: how many ids one bag (one entry of ``output_shape[:-1]``) holds, from
    the input shape the spec gives (:func:`ids_per_bag`); ``None`` when the spec gives none
    (a TensorFlow ``FeatureConfig`` with an ``output_shape`` alone) or a ragged last axis."""

    name: str  # TF: the flattened path ("user/id"); jax: FeatureSpec.name
    table: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]  # per replica (TF) / global batch (jax), last axis = dim
    origin: Origin = Origin()
    ids_per_bag: int | None = None

    @property
    def samples(self) -> int:
        """Product of ``output_shape[:-1]``: rows this feature contributes per step."""
        n = 1
        for d in self.output_shape[:-1]:
            n *= d
        return n


@dataclass(frozen=True)
class SparseCoreConfig:
    """Everything stacking, the rules and the simulation need, with where it came from."""

    api: API
    mode: Mode
    tables: tuple[SparseCoreTable, ...]
    features: tuple[SparseCoreFeature, ...]
    topology: Topology
    # TensorFlow's SparseCoreEmbeddingConfig (defaults as in TF 2.21)
    disable_table_stacking: bool = False
    max_ids_per_chip_per_sample: int = DEFAULT_MAX_IDS_PER_CHIP_PER_SAMPLE
    max_ids_per_table: Mapping[str, int] | None = None
    max_unique_ids_per_table: Mapping[str, int] | None = None
    allow_id_dropping: bool = False
    initialize_tables_on_host: bool = True
    enable_fast_table_initialization: bool = False
    # jax-tpu-embedding's auto_stack_tables arguments
    activation_mem_bytes_limit: int | None = None
    use_short_stack_names: bool = True
    stack_to_max_ids_per_partition: Any = None  # callable(stack_name, samples) -> int, or None
    stack_to_max_unique_ids_per_partition: Any = None
    # what the API's own conversion lost (keras-rs -> TensorFlow drops the limits)
    limits_dropped_by_conversion: bool = False
    # keras-rs on JAX: each stack's limits are the largest of its tables' own (keras-rs'
    # sparsecore_build), not the stack_to_max_* callables' (embedding/keras_rs_jax.py)
    stack_limits_from_tables: bool = False
    # keras-rs: the Keras backend the spec runs on ("jax" or "tensorflow") and what chose it
    # (the spec, --keras-backend, KERAS_BACKEND, keras.json, Keras' default); None otherwise
    keras_backend: str | None = None
    keras_backend_chosen_by: str = ""
    origin: Origin = Origin()  # the spec
    #: where a top-level setting was assigned in the spec (setting name -> origin)
    setting_origins: Mapping[str, Origin] = field(default_factory=dict)


def ids_per_bag(input_shape: Sequence[int | None] | None,
                output_shape: Sequence[int]) -> int | None:
    """The ids one bag holds, from a feature's input and output shapes (the output's last axis
    is the embedding width; its other axes are the bags). An input one axis longer than the
    bags holds its last axis per bag (a dense multi-hot ``[batch, 26]`` input: 26); an input of
    the bags' own rank holds one id per bag (``[batch]``, or one id per position of a
    ``[batch, length]`` sequence). ``None`` when the input is unknown, ragged (its last axis
    unknown or 0) or of another rank."""
    if input_shape is None:
        return None
    bags = len(output_shape) - 1
    if len(input_shape) == bags:
        return 1
    if len(input_shape) == bags + 1:
        last = input_shape[-1]
        return int(last) if last else None
    return None
