"""Embedding layer of a DLRM-style ranking model trained with Model Garden's warm-up schedule.

Model Garden's DLRM (official/recommendation/ranking) gives its embedding tables SGD with
``WarmUpAndPolyDecay``: a linear warm-up to ``learning_rate * batch_size / 2048``, that rate until
``decay_start_steps``, then a polynomial decay (never below 0.01). TFRS turns the Keras optimizer
into the TPU one; ``from_keras`` does the same here, from the configuration Keras serializes.
The steps are shortened so that a short run sees the warm-up, the plateau and the decay:

    tpuemb simulate examples/specs/dlrm_warmup.py --steps 300

runs the schedule at every step (the summary shows the rate each step got) and starts each
table from its initializer: ``user`` from a narrow truncated normal (deviation 0.02 instead of
TableConfig's 1/sqrt(dim)), ``ad_bias`` from zeros. Compiled (the committed dlrm_warmup.pbtxt):

    tpuemb compile examples/specs/dlrm_warmup.py -o examples/specs/dlrm_warmup.pbtxt
"""

from tpuemb_cfg.embedding import (
    Adagrad,
    ConstantInitializer,
    FeatureConfig,
    TableConfig,
    TruncatedNormalInitializer,
    from_keras,
)

num_replicas = 8
per_replica_batch_size = 64

# What Model Garden's task builds: a legacy Keras SGD whose learning rate is the schedule
# (registered by Model Garden as RANKING>WarmUpAndPolyDecay), translated as TFRS translates it.
# batch_size is the global batch: 8 replicas x 64 = 512, so the peak rate is 0.4 * 512 / 2048.
optimizer = from_keras({
    "class_name": "SGD",
    "config": {
        "learning_rate": {
            "class_name": "RANKING>WarmUpAndPolyDecay",
            "config": {"batch_size": num_replicas * per_replica_batch_size, "decay_exp": 2.0,
                       "learning_rate": 0.4, "warmup_steps": 100, "decay_steps": 120,
                       "decay_start_steps": 150},
        },
        "decay": 0.0, "momentum": 0.0, "nesterov": False,
    },
})

# The id tables take the global optimizer above (one schedule, one dynamic tag, two tables).
user = TableConfig(vocabulary_size=200_000, dim=16, name="user",
                   initializer=TruncatedNormalInitializer(mean=0.0, stddev=0.02))
item = TableConfig(vocabulary_size=100_000, dim=16, name="item")

# A per-ad bias, as a wide model learns it: zeros at first, its own constant-rate Adagrad with
# clipped gradients and a small weight decay.
ad_bias = TableConfig(
    vocabulary_size=50_000,
    dim=1,
    name="ad_bias",
    initializer=ConstantInitializer(0.0),
    optimizer=Adagrad(learning_rate=0.05, clipvalue=1.0, weight_decay_factor=1e-6),
    combiner="sum",
)

feature_config = {
    "user_id": FeatureConfig(user, name="user_id"),
    "item_id": FeatureConfig(item, name="item_id"),
    "ad_id": FeatureConfig(ad_bias, name="ad_id"),
}
