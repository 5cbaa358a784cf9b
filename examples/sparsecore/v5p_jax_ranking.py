"""A two-tower retrieval model on a TPU v5p-32 slice with jax-tpu-embedding's specs.

v5p-32 is Cloud TPU's accelerator type of 32 TensorCores: 16 v5p chips on 4 hosts, with 4
SparseCores each (N = 64 SparseCores). jax-tpu-embedding's shapes are
global: a batch of 4096 is 256 samples per device, 64 per SparseCore. ``auto_stack_tables``
groups tables by (padded width, optimizer, combiner, quantization) in the order the features
first use them; a stack of several tables takes its limits from the two ``stack_to_*``
callables below (the tables' own limits count only for a table stacked alone).

Validate, compile the stacks, and inspect them::

    tpuemb validate examples/sparsecore/v5p_jax_ranking.py
    tpuemb compile --sparsecore examples/sparsecore/v5p_jax_ranking.py -o layouts.pbtxt
    tpuemb inspect examples/sparsecore/v5p_jax_ranking.py
"""

from tpuemb_cfg.sparsecore.jte import AdagradOptimizerSpec, FeatureSpec, TableSpec

topology = "v5p-32"  # 16 chips (Cloud TPU counts v5p TensorCores)
GLOBAL_BATCH = 4096  # 16 devices x 4 SparseCores x 64

adagrad = AdagradOptimizerSpec(learning_rate=0.05, initial_accumulator_value=0.1)


query = TableSpec(name="query", vocabulary_size=10_000_000, embedding_dim=64,
                  initializer=None, optimizer=adagrad, combiner="sum")
user = TableSpec(name="user", vocabulary_size=50_000_000, embedding_dim=64,
                 initializer=None, optimizer=adagrad, combiner="sum")
# Alone in its stack (another width), so its own limits are kept.
document = TableSpec(name="document", vocabulary_size=80_000_000, embedding_dim=128,
                     initializer=None, optimizer=adagrad, combiner="sum",
                     max_ids_per_partition=512, max_unique_ids_per_partition=512)

feature_specs = {
    name: FeatureSpec(name=name, table_spec=spec, input_shape=[GLOBAL_BATCH, 1],
                      output_shape=[GLOBAL_BATCH, spec.embedding_dim])
    for name, spec in (("query", query), ("user", user), ("document", document))
}


def stack_to_max_ids_per_partition(stack_name: str, samples: int) -> int:
    """The limit of a stack of several tables ('query_user' here)."""
    return 256


def stack_to_max_unique_ids_per_partition(stack_name: str, samples: int) -> int:
    return 256
