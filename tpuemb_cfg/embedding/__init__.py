"""TensorFlow 2.21's TPU embedding API (``tf.tpu.experimental.embedding``) in plain Python.

Port a model's embedding configuration by changing the import::

    from tpuemb_cfg.embedding import FeatureConfig, TableConfig, Adagrad, build_config

    table = TableConfig(vocabulary_size=1000, dim=8, optimizer=Adagrad(learning_rate=0.05))
    compiled = build_config({"user": FeatureConfig(table)}, per_replica_batch_size=64)
    compiled.config                  # the TPUEmbeddingConfiguration TensorFlow would build
    compiled.dynamic_learning_rates  # position k = the callable that feeds tag k

``build_config`` produces the same bytes as TensorFlow's ``TPUEmbedding`` for the same objects
(``docs/compile.md``), then validates the result.
"""

from __future__ import annotations

from tpuemb_cfg.embedding.build import CompiledConfig, Feature, TagUse, build_config
from tpuemb_cfg.embedding.custom import CustomCombiner, CustomOptimizer
from tpuemb_cfg.embedding.errors import (
    ConfigValidationError,
    EmbeddingConfigError,
    EmbeddingOverflowError,
    EmbeddingTypeError,
)
from tpuemb_cfg.embedding.extra_optimizers import (
    Adadelta,
    Assign,
    BoundedAdagrad,
    CenteredRMSProp,
    FrequencyAwareAdagrad,
    FrequencyEstimator,
    Lion,
    MDLAdagradLight,
    Momentum,
    OnlineYogi,
    ProximalAdagrad,
    ProximalYogi,
    RMSProp,
)
from tpuemb_cfg.embedding.keras import KerasSchedule, from_keras
from tpuemb_cfg.embedding.optimizers import FTRL, SGD, Adagrad, AdagradMomentum, Adam, Optimizer
from tpuemb_cfg.embedding.schedules import Schedule
from tpuemb_cfg.embedding.sparsecore import SparseCoreEmbeddingConfig
from tpuemb_cfg.embedding.tables import (
    ConstantInitializer,
    FeatureConfig,
    QuantizationConfig,
    RowIdInitializer,
    TableConfig,
    TruncatedNormalInitializer,
)

__all__ = [
    "FTRL",
    "SGD",
    "Adadelta",
    "Adagrad",
    "AdagradMomentum",
    "Adam",
    "Assign",
    "BoundedAdagrad",
    "CenteredRMSProp",
    "CompiledConfig",
    "ConfigValidationError",
    "ConstantInitializer",
    "CustomCombiner",
    "CustomOptimizer",
    "EmbeddingConfigError",
    "EmbeddingOverflowError",
    "EmbeddingTypeError",
    "Feature",
    "FeatureConfig",
    "FrequencyAwareAdagrad",
    "FrequencyEstimator",
    "KerasSchedule",
    "Lion",
    "MDLAdagradLight",
    "Momentum",
    "OnlineYogi",
    "Optimizer",
    "ProximalAdagrad",
    "ProximalYogi",
    "QuantizationConfig",
    "RMSProp",
    "RowIdInitializer",
    "Schedule",
    "SparseCoreEmbeddingConfig",
    "TableConfig",
    "TagUse",
    "TruncatedNormalInitializer",
    "build_config",
    "from_keras",
]
