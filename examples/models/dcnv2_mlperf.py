"""DLRM-DCNv2 for MLPerf (multi-hot Criteo) as keras-rs configures it, as a tpuemb compile spec.

Source: keras-team/keras-rs, examples/ml_perf (``main.py``, ``configs/v6e_16_full_dataset.py``):

- the 26 categorical features of MLPerf's multi-hot Criteo, with their vocabularies and the
  number of ids each sample holds (``feature_list_length``, 1 to 100);
- features with at least ``embedding_threshold`` (21,000) rows get a distributed table named like
  the feature (9 of them); the others are plain Keras embeddings;
- ``embedding_dim`` 128, combiner ``sum``, Keras 3 ``Adagrad(learning_rate=0.0034)`` per table,
  which keras-rs translates for TensorFlow (``from_keras`` below does the same);
- global batch 16,384 on a TPU v6e-16: 4 hosts of 4 chips, 1,024 samples per chip.

Each sample holds exactly ``feature_list_length`` ids (MLPerf's dense multi-hot inputs), so the
input shape of a feature is ``[1024, feature_list_length]``; keras-rs' own example passes
``(batch, 1)`` with a note that this is to be verified. Its tables need about 73 GiB per host:

    tpuemb compile examples/models/dcnv2_mlperf.py -o examples/models/dcnv2_mlperf.pbtxt
    tpuemb validate --tpu v6e --show-derived examples/models/dcnv2_mlperf.pbtxt
"""

from tpuemb_cfg.embedding import FeatureConfig, TableConfig, from_keras

# (name, vocabulary_size, feature_list_length) of categorical features 14..39.
LOOKUP = [
    ("0", 40000000, 3), ("1", 39060, 2), ("2", 17295, 1), ("3", 7424, 2), ("4", 20265, 6),
    ("5", 3, 1), ("6", 7122, 1), ("7", 1543, 1), ("8", 63, 1), ("9", 40000000, 7),
    ("10", 3067956, 3), ("11", 405282, 8), ("12", 10, 1), ("13", 2209, 6), ("14", 11938, 9),
    ("15", 155, 5), ("16", 4, 1), ("17", 976, 1), ("18", 14, 1), ("19", 40000000, 12),
    ("20", 40000000, 100), ("21", 40000000, 27), ("22", 590152, 10), ("23", 12973, 3),
    ("24", 108, 1), ("25", 36, 1),
]
EMBEDDING_DIM = 128
EMBEDDING_THRESHOLD = 21_000
LEARNING_RATE = 0.0034
GLOBAL_BATCH = 16_384
NUM_HOSTS = 4
NUM_REPLICAS = 16  # TPU v6e-16

# What keras.optimizers.Adagrad(learning_rate=0.0034).get_config() returns (Keras 3.15), so the
# spec runs without Keras; from_keras accepts the optimizer object itself just as well.
ADAGRAD_CONFIG = {
    "name": "adagrad", "learning_rate": LEARNING_RATE, "weight_decay": None, "clipnorm": None,
    "global_clipnorm": None, "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
    "ema_overwrite_frequency": None, "loss_scale_factor": None,
    "gradient_accumulation_steps": None, "initial_accumulator_value": 0.1, "epsilon": 1e-07,
}

feature_config = {}
per_replica_input_shapes = {}
for name, vocabulary_size, ids_per_sample in LOOKUP:
    if vocabulary_size < EMBEDDING_THRESHOLD:
        continue  # a dense Keras embedding, not a TPU table
    table = TableConfig(
        vocabulary_size=vocabulary_size,
        dim=EMBEDDING_DIM,
        optimizer=from_keras({"class_name": "Adagrad", "config": ADAGRAD_CONFIG}),
        combiner="sum",
        name=name,
    )
    feature_config[f"{name}_id"] = FeatureConfig(table, name=name)
    per_replica_input_shapes[f"{name}_id"] = [GLOBAL_BATCH // NUM_REPLICAS, ids_per_sample]

num_hosts = NUM_HOSTS
num_replicas = NUM_REPLICAS
