"""jax-tpu-embedding 0.2.0's stacking API, mirrored in plain Python (no jax, no TPU).

The names and behaviour of ``jax_tpu_embedding.sparsecore.lib.nn.embedding`` and
``embedding_spec``: build :class:`TableSpec` and :class:`FeatureSpec`, call
:func:`auto_stack_tables` and/or :func:`prepare_feature_specs_for_training`, read the stacks
from the specs, or preprocess a batch with :func:`preprocess_sparse_dense_matmul_input`. The
functions take jax-tpu-embedding's own spec objects as well.

For tpuemb's own records: :func:`stack_config` stacks a :class:`SparseCoreConfig` in ``jax``
mode; :func:`feature_specs_to_config` and :func:`stacking_of` convert specs (docs/sparsecore/
stacking-jax.md).
"""

from tpuemb_cfg.sparsecore.jte.convert import (
    describe_optimizer,
    feature_specs_to_config,
    leaves,
    sparse_cores_per_device,
    stacking_of,
)
from tpuemb_cfg.sparsecore.jte.embedding import (
    PreprocessedInput,
    SparseDenseMatmulInput,
    SparseDenseMatmulInputStats,
    auto_stack_tables,
    prepare_feature_specs_for_training,
    preprocess_sparse_dense_matmul_input,
)
from tpuemb_cfg.sparsecore.jte.specs import (
    DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
    AdagradMomentumOptimizerSpec,
    AdagradOptimizerSpec,
    AdamOptimizerSpec,
    FeatureIdTransformation,
    FeatureSpec,
    FTRLOptimizerSpec,
    OptimizerSpec,
    QuantizationConfig,
    SGDOptimizerSpec,
    StackedTableSpec,
    TableSettingInStack,
    TableSpec,
    get_default_limits,
)
from tpuemb_cfg.sparsecore.jte.stacking import stack_config, stack_name

__all__ = [
    "DEFAULT_ACTIVATION_MEM_BYTES_LIMIT", "AdagradMomentumOptimizerSpec", "AdagradOptimizerSpec",
    "AdamOptimizerSpec", "FTRLOptimizerSpec", "FeatureIdTransformation", "FeatureSpec",
    "OptimizerSpec", "PreprocessedInput", "QuantizationConfig", "SGDOptimizerSpec",
    "SparseDenseMatmulInput", "SparseDenseMatmulInputStats", "StackedTableSpec",
    "TableSettingInStack", "TableSpec", "auto_stack_tables", "describe_optimizer",
    "feature_specs_to_config", "get_default_limits", "leaves", "prepare_feature_specs_for_training",
    "preprocess_sparse_dense_matmul_input", "sparse_cores_per_device", "stack_config",
    "stack_name", "stacking_of",
]
