"""A small ranking model on a TPU v5p slice of 2 chips (8 SparseCores), TensorFlow's
``TPUEmbeddingV2``: the checkpoint's side of the README's "moved from v5p to v6e" walk-through.

    tpuemb simulate examples/checkpoints/ranking_v5p.py --steps 5 --tables all --out-dir v5p-run
    tpuemb checkpoint export v5p-run/tables.npz examples/checkpoints/ranking_v5p.py -o ckpt/v5p
"""

from tpuemb_cfg.embedding import Adagrad, FeatureConfig, TableConfig

topology = "v5p:2"
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
