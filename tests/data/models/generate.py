"""TensorFlow's bytes for the specs of ``examples/models``. RUN ONLY IN A TENSORFLOW VENV.

    /path/to/tf-venv/bin/python tests/data/models/generate.py

(tensorflow-cpu 2.21, protobuf 6.31.1, keras 3 and keras-rs 0.4.0). Each spec's own text runs
with ``tpuemb_cfg.embedding`` standing for TensorFlow's ``tf.tpu.experimental.embedding`` (and
``from_keras`` for keras-rs' translation of the real Keras optimizer), so the only difference is
the import, as the specs claim; TensorFlow's ``TPUEmbedding`` then builds the configuration as
``tests/data/tf/tfside.py`` does for the other cases. Writes ``NAME.binpb`` next to this file.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent / "tf"))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras_rs.src.layers.embedding.tensorflow.config_conversion import (  # noqa: E402
    keras_to_tf_tpu_optimizer,
)
from tfside import tf_build  # noqa: E402

MODELS = ("dlrm_criteo", "dcnv2_mlperf")


def from_keras(optimizer: dict[str, Any]) -> Any:
    """keras-rs' translation of the Keras optimizer the dict describes."""
    cls = getattr(keras.optimizers, optimizer["class_name"])
    return keras_to_tf_tpu_optimizer(cls.from_config(dict(optimizer["config"])))


def tensorflow_embedding() -> types.ModuleType:
    module = types.ModuleType("tpuemb_cfg.embedding")
    api = tf.tpu.experimental.embedding
    for name in ("SGD", "Adagrad", "Adam", "FTRL", "FeatureConfig", "TableConfig"):
        setattr(module, name, getattr(api, name))
    module.from_keras = from_keras  # type: ignore[attr-defined]
    return module


def main() -> None:
    sys.modules["tpuemb_cfg"] = types.ModuleType("tpuemb_cfg")
    sys.modules["tpuemb_cfg.embedding"] = tensorflow_embedding()
    for model in MODELS:
        namespace: dict[str, Any] = {}
        path = ROOT / "examples" / "models" / f"{model}.py"
        exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102
        arguments = {k: namespace[k] for k in (
            "optimizer", "num_hosts", "num_replicas", "per_replica_input_shapes") if k in namespace}
        # tpuemb takes shapes as lists; TensorFlow's build wants TensorShape objects.
        arguments["per_replica_input_shapes"] = {
            name: tf.TensorShape(shape)
            for name, shape in arguments["per_replica_input_shapes"].items()
        }
        data, _ = tf_build(namespace["feature_config"], **arguments)
        (HERE / f"{model}.binpb").write_bytes(data)
        print(f"wrote {model}.binpb ({len(data)} bytes)")


if __name__ == "__main__":
    main()
