"""Regenerate ``translations.json`` next to this file. RUN ONLY IN A TENSORFLOW VENV.

    /path/to/tf-venv/bin/python tests/data/keras/generate.py

Needs tensorflow-cpu 2.21, keras 3, tf-keras 2.21, keras-rs 0.4.0 and tensorflow-recommenders
0.7.7 (installed with ``--no-deps``). TFRS wants ``tf.keras`` to be Keras 2, so the script sets
``TF_USE_LEGACY_KERAS=1`` before TensorFlow loads (``import keras`` stays Keras 3). Not a test
and never imported by the suite; tpuemb depends on none of them.

For every case a Keras optimizer is built, then translated by the library its users go through:
legacy ``tf_keras.optimizers.legacy`` optimizers by TFRS's ``translate_keras_optimizer``, Keras 3
optimizers by keras-rs' ``keras_to_tf_tpu_optimizer``. TensorFlow's optimizer then writes its
``OptimizationParameters`` the way ``TPUEmbedding._create_config_proto`` does (the learning rate
first: a callable becomes dynamic tag 0, a number the constant; then
``_set_optimization_parameters``). Stored per case: the optimizer's class name and
``get_config()`` (what tpuemb's ``from_keras`` reads), the bytes TensorFlow wrote, and for a
schedule TensorFlow's learning rate at several global steps (the translated callable evaluated
with the optimizer's ``iterations`` set to the step) - or the exception the translation raised.
Also the optimizer names both libraries accept (``names``) and plain callables as learning rates
(``callables``; see their functions).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import keras  # noqa: E402 - after the environment variable
import numpy as np
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from keras_rs.src.layers.embedding.tensorflow.config_conversion import keras_to_tf_tpu_optimizer
from tensorflow.core.protobuf.tpu import optimization_parameters_pb2
from tensorflow_recommenders.layers.embedding.tpu_embedding_layer import translate_keras_optimizer

HERE = Path(__file__).resolve().parent
STEPS = [0, 1, 2, 10, 99, 100, 101, 150, 200, 201, 250, 333, 500, 999, 1000, 1001, 1500, 5000]

legacy = tf_keras.optimizers.legacy
lsched = tf_keras.optimizers.schedules
k3 = keras.optimizers
ksched = keras.optimizers.schedules


def _json(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _params(tf_optimizer: Any) -> optimization_parameters_pb2.OptimizationParameters:
    params = optimization_parameters_pb2.OptimizationParameters()
    if callable(tf_optimizer.learning_rate):
        params.learning_rate.dynamic.tag = 0
    else:
        params.learning_rate.constant = tf_optimizer.learning_rate
    tf_optimizer._set_optimization_parameters(params)  # noqa: SLF001 - TensorFlow's own writer
    return params


def case(name: str, library: str, make: Any) -> dict[str, Any]:
    optimizer = make()
    translate = translate_keras_optimizer if library == "tfrs" else keras_to_tf_tpu_optimizer
    entry: dict[str, Any] = {
        "name": name,
        "library": library,
        "class_name": type(optimizer).__name__,
        "config": _json(optimizer.get_config()),
    }
    try:
        tf_optimizer = translate(optimizer)
    except ValueError as exc:
        entry["error"] = str(exc)
        return entry
    params = _params(tf_optimizer)
    entry["params_hex"] = params.SerializeToString(deterministic=True).hex()
    entry["params_text"] = text_format.MessageToString(params)
    if callable(tf_optimizer.learning_rate):
        values = []
        for step in STEPS:
            optimizer.iterations.assign(step)
            values.append(float(np.float32(tf_optimizer.learning_rate())))
        entry["learning_rate_at"] = {"steps": STEPS, "values": values}
    return entry


def same_in_both(prefix: str, library: str, optimizers: Any) -> list[dict[str, Any]]:
    """The Adagrad, Adam and FTRL cases built with the same arguments in both libraries
    (``optimizers``: ``tf_keras.optimizers.legacy`` or ``keras.optimizers``)."""
    return [
        case(f"{prefix}_adagrad", library,
             lambda: optimizers.Adagrad(0.1, initial_accumulator_value=0.5)),
        case(f"{prefix}_adam", library,
             lambda: optimizers.Adam(0.002, beta_1=0.8, beta_2=0.99, epsilon=1e-6)),
        case(f"{prefix}_ftrl", library, lambda: optimizers.Ftrl(
            0.03, learning_rate_power=-0.6, initial_accumulator_value=0.2,
            l1_regularization_strength=0.01, l2_regularization_strength=0.02, beta=0.5)),
    ]


def legacy_cases() -> list[dict[str, Any]]:
    def c(name: str, make: Any) -> dict[str, Any]:
        return case(name, "tfrs", make)

    return [
        c("legacy_sgd_default", lambda: legacy.SGD()),
        c("legacy_sgd", lambda: legacy.SGD(learning_rate=0.05)),
        *same_in_both("legacy", "tfrs", legacy),
        c("legacy_sgd_exponential", lambda: legacy.SGD(
            lsched.ExponentialDecay(0.1, 100, 0.96, staircase=True))),
        c("legacy_adagrad_piecewise", lambda: legacy.Adagrad(
            lsched.PiecewiseConstantDecay([100, 200], [0.1, 0.05, 0.01]))),
        c("legacy_adam_polynomial", lambda: legacy.Adam(
            lsched.PolynomialDecay(0.01, 1000, 0.0001, power=2.0))),
        c("legacy_ftrl_inverse_time", lambda: legacy.Ftrl(lsched.InverseTimeDecay(0.1, 100, 0.5))),
        c("legacy_sgd_cosine", lambda: legacy.SGD(lsched.CosineDecay(0.1, 1000, alpha=0.1))),
        c("legacy_sgd_cosine_warmup", lambda: legacy.SGD(
            lsched.CosineDecay(0.0, 500, warmup_target=0.1, warmup_steps=100))),
        c("legacy_adagrad_cosine_restarts", lambda: legacy.Adagrad(
            lsched.CosineDecayRestarts(0.1, 100, t_mul=2.0, m_mul=0.9, alpha=0.01))),
        c("legacy_error_sgd_momentum", lambda: legacy.SGD(0.1, momentum=0.9)),
        c("legacy_error_sgd_nesterov", lambda: legacy.SGD(0.1, nesterov=True)),
        c("legacy_error_clipnorm", lambda: legacy.SGD(0.1, clipnorm=1.0)),
        c("legacy_error_clipvalue", lambda: legacy.Adagrad(0.1, clipvalue=1.0)),
        c("legacy_error_adam_amsgrad", lambda: legacy.Adam(0.1, amsgrad=True)),
        c("legacy_error_adam_decay", lambda: legacy.Adam(0.1, decay=0.01)),
        c("legacy_error_adagrad_epsilon", lambda: legacy.Adagrad(0.1, epsilon=1e-3)),
        c("legacy_error_ftrl_shrinkage", lambda: legacy.Ftrl(
            0.1, l2_shrinkage_regularization_strength=0.1)),
        c("legacy_error_rmsprop", lambda: legacy.RMSprop(0.1)),
        c("legacy_error_new_style", lambda: tf_keras.optimizers.Adam(0.1)),
    ]


def keras3_cases() -> list[dict[str, Any]]:
    def c(name: str, make: Any) -> dict[str, Any]:
        return case(name, "keras_rs", make)

    return [
        c("keras3_sgd", lambda: k3.SGD(0.05)),
        *same_in_both("keras3", "keras_rs", k3),
        c("keras3_adam_weight_decay_clip", lambda: k3.Adam(
            0.001, weight_decay=0.004, clipvalue=1.0, gradient_accumulation_steps=4)),
        c("keras3_adamw", lambda: k3.AdamW(0.001, weight_decay=0.01)),
        c("keras3_sgd_exponential", lambda: k3.SGD(ksched.ExponentialDecay(0.1, 100, 0.5))),
        c("keras3_adagrad_cosine_warmup", lambda: k3.Adagrad(
            ksched.CosineDecay(0.001, 800, alpha=0.05, warmup_target=0.05, warmup_steps=200))),
        c("keras3_adam_piecewise", lambda: k3.Adam(
            ksched.PiecewiseConstantDecay([150, 500, 1000], [0.01, 0.005, 0.001, 0.0005]))),
        c("keras3_ftrl_polynomial_cycle", lambda: k3.Ftrl(
            ksched.PolynomialDecay(0.1, 200, 0.01, power=0.5, cycle=True))),
        c("keras3_sgd_inverse_time", lambda: k3.SGD(
            ksched.InverseTimeDecay(0.2, 100, 0.3, staircase=True))),
        c("keras3_adagrad_cosine_restarts", lambda: k3.Adagrad(
            ksched.CosineDecayRestarts(0.1, 100, t_mul=1.0, m_mul=0.8))),
        c("keras3_error_sgd_momentum", lambda: k3.SGD(0.1, momentum=0.9)),
        c("keras3_error_sgd_nesterov", lambda: k3.SGD(0.1, nesterov=True)),
        c("keras3_error_adam_amsgrad", lambda: k3.Adam(0.1, amsgrad=True)),
        c("keras3_error_adagrad_epsilon", lambda: k3.Adagrad(0.1, epsilon=1e-3)),
        c("keras3_error_ftrl_shrinkage", lambda: k3.Ftrl(
            0.1, l2_shrinkage_regularization_strength=0.1)),
        c("keras3_error_clipnorm", lambda: k3.SGD(0.1, clipnorm=1.0)),
        c("keras3_error_global_clipnorm", lambda: k3.SGD(0.1, global_clipnorm=1.0)),
        c("keras3_error_use_ema", lambda: k3.SGD(0.1, use_ema=True)),
        c("keras3_error_loss_scale", lambda: k3.SGD(0.1, loss_scale_factor=2.0)),
        c("keras3_error_rmsprop", lambda: k3.RMSprop(0.1)),
        c("keras3_error_lion", lambda: k3.Lion(0.1)),
    ]


def name_cases() -> list[dict[str, Any]]:
    """Optimizer names, which TFRS (``_normalize_and_prepare_optimizer``) and keras-rs
    (``to_tf_tpu_optimizer``) turn into ``tf.tpu.experimental.embedding`` optimizers with
    TensorFlow's defaults; other names (upper case too) are refused."""
    from keras_rs.src.layers.embedding.tensorflow.config_conversion import to_tf_tpu_optimizer
    from tensorflow_recommenders.layers.embedding.tpu_embedding_layer import (
        _normalize_and_prepare_optimizer,
    )

    out = []
    for library, translate in (("tfrs", _normalize_and_prepare_optimizer),
                               ("keras_rs", to_tf_tpu_optimizer)):
        for name in ("sgd", "adagrad", "adam", "ftrl", "SGD", "Adam", "rmsprop", "lion", ""):
            entry: dict[str, Any] = {"name": name, "library": library}
            try:
                params = _params(translate(name))
            except ValueError as exc:
                entry["error"] = str(exc)
            else:
                entry["params_hex"] = params.SerializeToString(deterministic=True).hex()
                entry["params_text"] = text_format.MessageToString(params)
            out.append(entry)
    return out


def callable_cases() -> list[dict[str, Any]]:
    """Plain callables as learning rates. TFRS reads the rate from ``get_config()``, which calls
    the callable: a Python number becomes a constant rate, a tensor a dynamic one (a new
    callable). keras-rs keeps a Keras 3 optimizer's callable (dynamic; ``config`` is null:
    Keras 3 would serialize the lambda's bytecode). ``returns`` is what the callable returns
    (``"float"`` or ``"tensor"``) and ``value`` its value; a tensor in ``config`` is written
    ``{"$tensor": value}``."""
    out = []
    for name, library, make, returns, value in (
        ("legacy_sgd_callable_float", "tfrs", lambda: legacy.SGD(lambda: 0.05), "float", 0.05),
        ("legacy_adam_callable_float", "tfrs",
         lambda: legacy.Adam(lambda: 0.25, beta_1=0.5), "float", 0.25),
        ("legacy_adagrad_callable_tensor", "tfrs",
         lambda: legacy.Adagrad(lambda: tf.constant(0.07)), "tensor", 0.07),
        ("keras3_sgd_callable", "keras_rs", lambda: k3.SGD(lambda: 0.05), "float", 0.05),
    ):
        optimizer = make()
        translate = translate_keras_optimizer if library == "tfrs" else keras_to_tf_tpu_optimizer
        config = None  # Keras 3 serializes a lambda as its bytecode: not stored
        if library == "tfrs":
            config = {k: ({"$tensor": float(v.numpy())} if tf.is_tensor(v) else v)
                      for k, v in optimizer.get_config().items()}
        tf_optimizer = translate(optimizer)
        params = _params(tf_optimizer)
        out.append({
            "name": name, "library": library, "class_name": type(optimizer).__name__,
            "config": _json(config), "returns": returns, "value": value,
            "dynamic": callable(tf_optimizer.learning_rate),
            "params_hex": params.SerializeToString(deterministic=True).hex(),
            "params_text": text_format.MessageToString(params),
        })
    return out


def main() -> None:
    document = {
        "generator": {
            "tensorflow": tf.__version__, "keras": keras.__version__,
            "tf_keras": tf_keras.__version__, "keras_rs": "0.4.0",
            "tensorflow_recommenders": "0.7.7",
        },
        "cases": legacy_cases() + keras3_cases(),
        "names": name_cases(),
        "callables": callable_cases(),
    }
    out = HERE / "translations.json"
    out.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    print(f"wrote {out}: {len(document['cases'])} cases, {len(document['names'])} names, "
          f"{len(document['callables'])} callables")


if __name__ == "__main__":
    main()
