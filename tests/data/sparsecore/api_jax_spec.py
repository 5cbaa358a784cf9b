"""A jax-tpu-embedding SparseCore spec (tpuemb's mirror of TableSpec/FeatureSpec)."""
from tpuemb_cfg.sparsecore.jte import (
    AdagradOptimizerSpec,
    FeatureSpec,
    SGDOptimizerSpec,
    TableSpec,
)

a = TableSpec(name="a", vocabulary_size=1000, embedding_dim=16, initializer=None,
              optimizer=AdagradOptimizerSpec(learning_rate=0.1), combiner="sum",
              max_ids_per_partition=100)
b = TableSpec(name="b", vocabulary_size=50, embedding_dim=12, initializer=None,
              optimizer=SGDOptimizerSpec(learning_rate=0.1), combiner="sum")
feature_specs = [
    FeatureSpec(name="fa", table_spec=a, input_shape=(32, 1), output_shape=(32, 16)),
    FeatureSpec(name="fb", table_spec=b, input_shape=(32, 1), output_shape=(32, 12)),
]
global_device_count = 2
num_sc_per_device = 4
