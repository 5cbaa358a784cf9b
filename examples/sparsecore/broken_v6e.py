"""A v6e SparseCore configuration with the mistakes ``tpuemb validate`` finds (it must fail).

Each table or setting below shows one SC rule; the comment says which. Validate it::

    tpuemb validate examples/sparsecore/broken_v6e.py        # exit status 1
    tpuemb explain SC001                                    # what a rule checks, and the fix
    tpuemb validate --fix --diff examples/sparsecore/broken_v6e.py   # SC001's key rename

- SC001: the limits are keyed by the table names ``"user"`` and ``"video"``, but TensorFlow
  stacks the two tables as ``"user_video"`` and looks limits up by that name only: both keys
  are ignored and the stack gets 256 (``--fix`` renames them to ``"user_video"``).
- SC002 (info): the other stacks have no limit of their own (256).
- SC005: ``RMSProp`` does not run on SparseCores.
- SC006: ``weight_decay_factor`` makes ``TPUEmbeddingV2`` raise NotImplementedError.
- SC007: a per-replica batch of 127 does not split over v6e's 2 SparseCores per chip.
- SC010: a width of 4 is padded to 8, so half of the ``tags`` table is padding.
- SC011: ``clicks_a`` and ``clicks_b`` are identical but their learning rates are two lambdas,
  which keeps them in separate stacks.
"""

from tpuemb_cfg.embedding import (
    SGD,
    Adagrad,
    FeatureConfig,
    RMSProp,
    SparseCoreEmbeddingConfig,
    TableConfig,
)

topology = "v6e-8"
BATCH = 128

optimizer = Adagrad(learning_rate=0.01)

user = TableConfig(vocabulary_size=2_000_000, dim=64, name="user")
video = TableConfig(vocabulary_size=1_000_000, dim=64, name="video")
ads = TableConfig(vocabulary_size=100_000, dim=32, name="ads",
                  optimizer=RMSProp(learning_rate=0.01))  # SC005
news = TableConfig(vocabulary_size=100_000, dim=16, name="news",
                   optimizer=Adagrad(learning_rate=0.01, weight_decay_factor=1e-5))  # SC006
tags = TableConfig(vocabulary_size=5_000_000, dim=4, name="tags")  # SC010
clicks_a = TableConfig(vocabulary_size=500_000, dim=24, name="clicks_a",
                       optimizer=SGD(learning_rate=lambda: 0.1))
clicks_b = TableConfig(vocabulary_size=500_000, dim=24, name="clicks_b",
                       optimizer=SGD(learning_rate=lambda: 0.1))  # SC011

feature_config = {
    "user": FeatureConfig(user, output_shape=[BATCH]),
    "video": FeatureConfig(video, output_shape=[BATCH]),
    "ads": FeatureConfig(ads, output_shape=[BATCH]),
    "news": FeatureConfig(news, output_shape=[BATCH]),
    "tags": FeatureConfig(tags, output_shape=[127]),  # SC007
    "clicks_a": FeatureConfig(clicks_a, output_shape=[BATCH]),
    "clicks_b": FeatureConfig(clicks_b, output_shape=[BATCH]),
}

sparse_core_config = SparseCoreEmbeddingConfig(
    max_ids_per_table={"user": 1024},  # SC001: the stack is "user_video"
    max_unique_ids_per_table={"video": 512},  # SC001
)
