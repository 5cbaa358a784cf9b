"""A small ranking model on a TPU v6e slice of 8 chips (16 SparseCores), TensorFlow's
``TPUEmbeddingV2``: the new side of the README's "moved from v5p to v6e" walk-through.

    tpuemb checkpoint reshard ckpt/v5p examples/checkpoints/ranking_v6e.py -o ckpt/v6e
    tpuemb simulate examples/checkpoints/ranking_v6e.py --init ckpt/v6e --steps 5
"""

from tpuemb_cfg.embedding import Adagrad, FeatureConfig, TableConfig

topology = "v6e-8"
BATCH = 64  # per replica
optimizer = Adagrad(learning_rate=0.05, initial_accumulator_value=0.1)

user = TableConfig(vocabulary_size=5_000, dim=16, name="user", combiner="sum")
item = TableConfig(vocabulary_size=3_000, dim=16, name="item", combiner="sum")
category = TableConfig(vocabulary_size=200, dim=8, name="category", combiner="mean")

feature_config = {
    "user": FeatureConfig(user, output_shape=[BATCH]),
    "item": FeatureConfig(item, output_shape=[BATCH]),
    "category": FeatureConfig(category, output_shape=[BATCH]),
}
