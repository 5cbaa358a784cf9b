"""SparseCore (TPU v5p, v6e, TPU7x): stacking, limits and host preprocessing, as TensorFlow 2.21
and jax-tpu-embedding 0.2.0 do them, on a CPU.

- ``stacker``: TensorFlow's ``SparseCoreLayoutStacker`` (same constructor, methods, bytes);
- ``jte``: jax-tpu-embedding's ``TableSpec``, ``FeatureSpec``, ``auto_stack_tables``,
  ``prepare_feature_specs_for_training``, ``preprocess_sparse_dense_matmul_input``;
- ``stacking``: the stacking result both produce (:class:`Stacking`);
- ``preprocessing``: ``preprocess``, the host preprocessing of a batch, exact (jax-tpu-embedding)
  or TensorFlow's (``tf_preprocess``);
- ``config``: a SparseCore configuration from any API; ``topology``: chips and SparseCores.

Names load on first use, so importing this package costs nothing.
"""

from __future__ import annotations

from tpuemb_cfg.base.lazy import lazy_exports

# Public name -> defining module (PEP 562 lazy attributes).
_LAZY = {
    "CHIPS": "topology", "Topology": "topology", "parse_topology": "topology",
    "FeatureSlot": "stacking", "Stack": "stacking", "StackedTable": "stacking",
    "Stacking": "stacking",
    "SparseCoreConfig": "config", "SparseCoreFeature": "config", "SparseCoreOptimizer": "config",
    "SparseCoreTable": "config",
    "FeatureSpec": "jte", "TableSpec": "jte", "auto_stack_tables": "jte",
    "prepare_feature_specs_for_training": "jte", "preprocess_sparse_dense_matmul_input": "jte",
    "stack_config": "jte",
    "SparseCoreLayoutStacker": "stacker",
    "AddTableCall": "feed", "layouts_to_stacks": "feed", "stack": "feed",
    "tensorflow_layouts": "feed", "tensorflow_stacker": "feed", "tensorflow_stacker_calls": "feed",
    "preprocess_tensorflow": "tf_preprocess",
    "preprocess": "preprocessing", "SparseCoreInputError": "preprocessing",
    "SparseCoreLimitError": "preprocessing", "SparseCoreBufferError": "preprocessing",
    "SparseCoreUnsupportedError": "preprocessing",
    "PreprocessedBatch": "results", "PreprocessedStack": "results",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
