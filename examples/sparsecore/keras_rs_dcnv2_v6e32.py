"""keras-rs' MLPerf DLRM-DCNv2 on a TPU v6e-32, as its ``DistributedEmbedding`` places it.

Source: keras-team/keras-rs, ``examples/ml_perf`` (``main.py``, ``configs/v6e_32_full_dataset.py``):
the 9 categorical features of MLPerf's multi-hot Criteo with at least ``embedding_threshold``
(21,000) rows, each its own ``keras_rs.layers.TableConfig`` named like the feature (dimension
128, combiner ``sum``, Keras 3 ``Adagrad(learning_rate=0.0034)``, ``placement="sparsecore"``,
``max_ids_per_partition=8192``, ``max_unique_ids_per_partition=4096``) and a
``FeatureConfig`` of the global batch, 16,384 samples (512 per chip on 32 chips). The input
shapes here hold each feature's ``feature_list_length`` ids per sample (MLPerf's multi-hot
lengths, 2 to 100; keras-rs' example writes ``(batch, 1)`` with a note to verify it).

keras-rs is not needed: plain namespaces stand in for ``keras_rs.layers.TableConfig`` and
``FeatureConfig`` (tpuemb recognises keras-rs objects by their fields; with keras-rs installed,
import them from ``keras_rs.layers`` instead). On keras-rs' TensorFlow backend the
tables' own limits never reach TensorFlow (SC004): every stack keeps 256 / 256, which a Zipf
sample exceeds, and ``tpuemb plan`` counts the failed steps::

    python examples/plan/zipf_sample.py examples/sparsecore/keras_rs_dcnv2_v6e32.py \\
        --rows 32768 --max-bag 100 --batch 16384 -o day.npz
    tpuemb plan examples/sparsecore/keras_rs_dcnv2_v6e32.py --ids day.npz --fail-on drops
"""

# keras_rs.layers.TableConfig / FeatureConfig stand-ins: tpuemb reads their fields by name
# (with keras-rs installed: from keras_rs.layers import FeatureConfig, TableConfig).
from types import SimpleNamespace as FeatureConfig
from types import SimpleNamespace as TableConfig

# (feature, vocabulary_size, feature_list_length): the features at or above the threshold.
LARGE = [("0", 40000000, 3), ("1", 39060, 2), ("9", 40000000, 7), ("10", 3067956, 3),
         ("11", 405282, 8), ("19", 40000000, 12), ("20", 40000000, 100),
         ("21", 40000000, 27), ("22", 590152, 10)]
EMBEDDING_DIM = 128
GLOBAL_BATCH = 16_384
# keras.optimizers.Adagrad(learning_rate=0.0034), as its get_config() describes it
ADAGRAD = {"class_name": "Adagrad",
           "config": {"name": "adagrad", "learning_rate": 0.0034,
                      "initial_accumulator_value": 0.1, "epsilon": 1e-07}}

topology = "v6e-32"
feature_config = {}
for name, vocabulary_size, ids_per_sample in LARGE:
    table = TableConfig(name=name, vocabulary_size=vocabulary_size, embedding_dim=EMBEDDING_DIM,
                        optimizer=ADAGRAD, combiner="sum", placement="sparsecore",
                        max_ids_per_partition=8192, max_unique_ids_per_partition=4096)
    feature_config[f"{name}_id"] = FeatureConfig(
        name=name, table=table, input_shape=(GLOBAL_BATCH, ids_per_sample),
        output_shape=(GLOBAL_BATCH, EMBEDDING_DIM))
