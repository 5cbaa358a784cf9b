"""TensorFlow's side of ``tests/tfcases.py``: RUN ONLY IN A TENSORFLOW VENV (see generate.py).

TensorFlow's classes, a ``build`` that runs TensorFlow's own ``TPUEmbedding`` code under a
stand-in TPU strategy, the answers to the cases' checks, and small helpers that write a case's
JSON description.
"""

from __future__ import annotations

import math
import os
import sys
import types
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/, for tfcases

import google.protobuf  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tfcases  # noqa: E402
from absl import logging as absl_logging  # noqa: E402
from tensorflow.python.distribute import tpu_strategy  # noqa: E402
from tensorflow.python.framework.tensor_shape import TensorShape  # noqa: E402
from tensorflow.python.ops import init_ops_v2  # noqa: E402
from tensorflow.python.tpu import tpu_embedding_v2 as v2  # noqa: E402
from tensorflow.python.tpu import tpu_embedding_v2_utils as u  # noqa: E402

absl_logging.set_verbosity(absl_logging.ERROR)

#: The versions that computed the stored outcomes.
info = {"tensorflow": tf.__version__, "protobuf": google.protobuf.__version__}

# -- TensorFlow's side of tfcases.Side -----------------------------------------------------------


class _StandInStrategy(tpu_strategy.TPUStrategyV2):
    """Only what TPUEmbedding reads from a TPU strategy: hosts, replicas, device assignment."""

    def __init__(self, hosts: int, replicas: int, cores: int | None) -> None:  # noqa: D107
        assignment = None if cores is None else types.SimpleNamespace(num_cores_per_replica=cores)
        self._extended = types.SimpleNamespace(
            num_hosts=hosts, _device_assignment=assignment, _replicas=replicas
        )

    @property
    def num_replicas_in_sync(self) -> int:
        return self._extended._replicas


def tf_build(
    feature_config: Any,
    optimizer: Any = None,
    *,
    num_hosts: int = 1,
    num_replicas: int = 1,
    num_cores_per_replica: int | None = None,
    pipeline_execution_with_tensor_core: bool = False,
    per_replica_input_shapes: Any = None,
    per_replica_batch_size: Any = None,
) -> tuple[bytes, list[Any]]:
    strategy = _StandInStrategy(num_hosts, num_replicas, num_cores_per_replica)
    v2.distribute_lib.get_strategy = lambda: strategy
    u.get_list_of_hosts = lambda s: [f"/job:worker/task:{i}/device:CPU:0" for i in range(num_hosts)]
    mid_level = v2.TPUEmbedding(feature_config, optimizer, pipeline_execution_with_tensor_core)
    mid_level._get_and_update_output_shapes_from_input(
        per_replica_input_shapes, per_replica_batch_size
    )
    config = mid_level._create_config_proto()
    return config.SerializeToString(), list(mid_level._dynamic_learning_rates)


def _json(value: Any) -> Any:
    if callable(value):
        return "<callable>"
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": str(value)}
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    if isinstance(value, np.generic):
        return _json(value.item())
    return value


def tf_probe(kind: str, obj: Any, other: Any) -> Any:
    """``tfcases.probe`` on TensorFlow's objects (slots through its private methods)."""
    return tfcases.probe(kind, obj, other, jsonable=_json, slot_names=lambda o: o._slot_names(),
                         slot_initializers=lambda o: o._slot_initializers())


def _tf_computation(name: str) -> Any:
    def computation(*args: Any) -> Any:
        raise AssertionError(f"{name}: never run here")

    computation.__name__ = name
    return computation


TF = tfcases.Side(
    classes={
        name: getattr(u, name)
        for name in (
            "TableConfig", "FeatureConfig", "QuantizationConfig", "RowIdInitializer", "SGD",
            "Adagrad", "AdagradMomentum", "Adam", "FTRL", "CustomOptimizer", "CustomCombiner",
        )
    }
    | {"Constant": init_ops_v2.Constant},
    build=tf_build,
    probe=tf_probe,
    computations={n: _tf_computation(n) for n in ("sgd", "adagrad", "sum", "weighted_sum")},
    shape=TensorShape,
)


# -- helpers to write cases ----------------------------------------------------------------------


def ref(obj_id: str) -> dict[str, str]:
    return {"$ref": obj_id}


def tup(*items: Any) -> dict[str, Any]:
    return {"$tuple": list(items)}


def shape(*dims: Any) -> dict[str, Any]:
    return {"$shape": list(dims)}


def new(cls: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"$new": {"class": cls, "args": list(args), "kwargs": kwargs}}


def obj(obj_id: str, cls: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"id": obj_id, "class": cls, "args": list(args), "kwargs": kwargs}


def outcome(case: dict[str, Any]) -> dict[str, Any]:
    case["expect"] = tfcases.run(case, TF)
    return case


