"""Embedding layer of a click-through ranking model, as a tpuemb compile spec.

Compile it (the committed ranking.pbtxt is the result; CI runs the --check form):

    tpuemb compile examples/specs/ranking.py -o examples/specs/ranking.pbtxt
    tpuemb compile examples/specs/ranking.py -o examples/specs/ranking.pbtxt --check

The code is what a TensorFlow model would write with tf.tpu.experimental.embedding; only the
import differs. The training loop sends [lr() for lr in dynamic_learning_rates] with every step,
so each schedule below is one position of that list.
"""

from tpuemb_cfg.embedding import (
    FTRL,
    SGD,
    Adagrad,
    Adam,
    FeatureConfig,
    QuantizationConfig,
    Schedule,
    TableConfig,
)

BATCH = 128  # examples per replica and step

# Learning-rate schedules: zero-argument callables. One object = one dynamic tag, however many
# tables use it.
sparse_warmup = Schedule("sparse_warmup", "warmup_cosine", peak=0.05, warmup_steps=2000,
                         decay_steps=500_000, final=0.005)
adam_rate = Schedule("adam_rate", "adam_bias_correction", learning_rate=0.001,
                     beta1=0.9, beta2=0.999)

# Large id tables share one Adagrad object (one optimizer, one schedule). Gradients are clipped
# to [-1, 1]; weights to [-5, 5]; a small decoupled weight decay keeps rare ids from drifting.
id_optimizer = Adagrad(
    learning_rate=sparse_warmup,
    initial_accumulator_value=0.1,
    clipvalue=1.0,
    clip_weight_min=-5.0,
    clip_weight_max=5.0,
    weight_decay_factor=1e-6,
    multiply_weight_decay_factor_by_learning_rate=True,
)

user = TableConfig(vocabulary_size=5_000_000, dim=64, optimizer=id_optimizer, name="user")
item = TableConfig(vocabulary_size=2_000_000, dim=64, optimizer=id_optimizer, name="item")

# Query tokens: Adam with a bias-corrected rate fed through its own tag.
query_token = TableConfig(
    vocabulary_size=250_000,
    dim=32,
    optimizer=Adam(learning_rate=adam_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-7),
    combiner="sqrtn",
    name="query_token",
)

# The wide part: FTRL with a constant rate and L1/L2, linear slot scaled by the rate.
cross = TableConfig(
    vocabulary_size=1_000_000,
    dim=8,
    optimizer=FTRL(learning_rate=0.02, l1_regularization_strength=0.001,
                   l2_regularization_strength=0.01, multiply_linear_by_learning_rate=True),
    combiner="sum",
    name="cross_features",
)

# Small categorical tables inherit the global optimizer (SGD below, constant rate).
category = TableConfig(vocabulary_size=2_000, dim=16, name="category")
device = TableConfig(vocabulary_size=64, dim=4, name="device")

# Served with 8-bit lookups: train against the quantized values.
price_bucket = TableConfig(
    vocabulary_size=100, dim=8, name="price_bucket",
    quantization_config=QuantizationConfig(num_buckets=256, lower=-2.0, upper=2.0),
)

feature_config = {
    "user_id": FeatureConfig(user, name="user_id"),
    "item_id": FeatureConfig(item, name="item_id"),
    # The last 20 clicked items, kept as a sequence (no combining over it).
    "clicked_items": FeatureConfig(item, max_sequence_length=20, name="clicked_items"),
    "query": FeatureConfig(query_token, name="query"),
    "crosses": FeatureConfig(cross, name="crosses"),
    "context": {
        "category": FeatureConfig(category, name="category"),
        "device": FeatureConfig(device, name="device"),
        "price": FeatureConfig(price_bucket, name="price"),
    },
}

optimizer = SGD(learning_rate=0.1, clipvalue=10.0)

num_hosts = 4
num_replicas = 32
per_replica_batch_size = BATCH
