"""What a SparseCore limit costs before any TPU time: `tpuemb simulate` with id dropping.

Two Adagrad tables of the same width stack into one ("item_user"); the stack's limit of 32
ids per partition is below what a batch of 128 samples of 2 Zipf-distributed users and 2 items
each (dense multi-hot inputs of shape (128, 2)) sends to the busiest partitions, so with id
dropping on some ids never reach a SparseCore:

    tpuemb simulate examples/sparsecore/simulate_jax_limits.py --allow-id-dropping \\
        --compare-dropping --steps 20

prints the ids dropped per stack and table (and per step), then how far the tables and the
activations drift from the same run without limits. Without --allow-id-dropping the first
step that exceeds the limit stops the run with the partition and the limit it needs, as
jax-tpu-embedding aborts there. docs/sparsecore/simulate.md explains the numbers.
"""

from tpuemb_cfg.sparsecore.jte import AdagradOptimizerSpec, FeatureSpec, TableSpec

optimizer = AdagradOptimizerSpec(learning_rate=0.05)
user = TableSpec(name="user", vocabulary_size=10_000, embedding_dim=16, initializer=None,
                 optimizer=optimizer, combiner="mean")
item = TableSpec(name="item", vocabulary_size=2_000, embedding_dim=16, initializer=None,
                 optimizer=optimizer, combiner="mean")
feature_specs = {
    "user": FeatureSpec(name="user", table_spec=user, input_shape=(128, 2),
                        output_shape=(128, 16)),
    "item": FeatureSpec(name="item", table_spec=item, input_shape=(128, 2),
                        output_shape=(128, 16)),
}
global_device_count = 1
num_sc_per_device = 4


def stack_to_max_ids_per_partition(stack_name: str, samples: int) -> int:
    return 32


def stack_to_max_unique_ids_per_partition(stack_name: str, samples: int) -> int:
    return 32
