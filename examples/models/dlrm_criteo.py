"""DLRM on Criteo Terabyte as TensorFlow Model Garden configures it, as a tpuemb compile spec.

Source: tensorflow/models, official/recommendation/ranking (experiment ``dlrm_criteo``,
``configs/yaml/dlrm_criteo_tpu.yaml``; ``task.py`` builds the embedding layer):

- one table per categorical feature, ``embedding_table_{i}``, ``dim`` = ``embedding_dim`` (64),
  combiner ``mean``, keyed ``str(i)`` in the feature dict;
- ``PartialTPUEmbedding`` with the default ``size_threshold`` of 50,000: only tables with more
  rows than that live on the TPU (8 of the 26); the others are plain Keras embeddings;
- the embedding optimizer is Keras' legacy ``SGD`` (``embedding_optimizer: 'SGD'``) whose rate
  is ``WarmUpAndPolyDecay`` (``common.py``), translated by TFRS into one dynamic learning rate;
- global batch 16,384; each sample has one id per feature (Criteo's features are single-valued).

The topology is the user's choice, not the model's: a TPU v3-8 (one host, eight TensorCores,
2,048 samples each), the slice the Model Garden README sizes for about 96 GB of tables.

    tpuemb compile examples/models/dlrm_criteo.py -o examples/models/dlrm_criteo.pbtxt
    tpuemb validate --tpu v3 --show-derived examples/models/dlrm_criteo.pbtxt
"""

from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig

VOCAB_SIZES = [
    39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208,
    11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36,
]
EMBEDDING_DIM = 64
SIZE_THRESHOLD = 50_000  # ModelConfig.size_threshold: larger tables go to the TPU
GLOBAL_BATCH = 16_384
NUM_HOSTS = 1
NUM_REPLICAS = 8  # TPU v3-8


class WarmUpAndPolyDecay:
    """Model Garden's embedding learning rate, as the zero-argument callable TensorFlow reads
    every step: linear warm-up to ``learning_rate * batch / 2048``, constant, then a polynomial
    decay (exponent ``decay_exp``) to 0.0001, never below 0.01. ``step`` is the global step."""

    def __init__(self, batch_size: int, decay_exp: float = 2.0, learning_rate: float = 1.25,
                 warmup_steps: int = 8000, decay_steps: int = 30000,
                 decay_start_steps: int = 70000) -> None:
        self.peak = learning_rate * batch_size / 2048
        self.decay_exp = decay_exp
        self.warmup_steps = warmup_steps
        self.decay_steps = decay_steps
        self.decay_start_steps = decay_start_steps
        self.step = 0

    def value(self, step: int) -> float:
        if self.warmup_steps == 0:
            return self.peak
        if step < self.warmup_steps:
            rate = step / self.warmup_steps * self.peak
        elif self.decay_steps > 0 and step > self.decay_start_steps:
            done = min(step - self.decay_start_steps, self.decay_steps)
            rate = max(0.0001, self.peak * ((self.decay_steps - done) / self.decay_steps)
                       ** self.decay_exp)
        else:
            rate = self.peak
        return max(0.01, rate)

    def __call__(self) -> float:
        return self.value(self.step)


# The LearningRateConfig defaults of the experiment (learning_rate 1.25, warm-up 8,000 steps,
# decay over 30,000 steps from step 70,000, exponent 2).
optimizer = SGD(learning_rate=WarmUpAndPolyDecay(batch_size=GLOBAL_BATCH))

feature_config = {
    str(i): FeatureConfig(
        TableConfig(vocabulary_size=size, dim=EMBEDDING_DIM, combiner="mean",
                    name=f"embedding_table_{i}"),
    )
    for i, size in enumerate(VOCAB_SIZES)
    if size > SIZE_THRESHOLD
}

num_hosts = NUM_HOSTS
num_replicas = NUM_REPLICAS
# Dense [batch] id tensors: one id per sample and feature.
per_replica_input_shapes = {name: [GLOBAL_BATCH // NUM_REPLICAS] for name in feature_config}
