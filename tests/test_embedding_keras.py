"""``from_keras``: Keras optimizers and schedules translated as TFRS and keras-rs translate them.

``tests/data/keras/translations.json`` holds, per Keras optimizer, its class name and
``get_config()``, and what TensorFlow 2.21 made of it after TFRS (legacy Keras 2 optimizers) or
keras-rs (Keras 3) translated it: the ``OptimizationParameters`` bytes TensorFlow's optimizer
writes, the learning rate at several steps for a schedule, or the error
(``tests/data/keras/generate.py``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tpuemb_cfg.embedding import (
    FTRL,
    SGD,
    Adagrad,
    Adam,
    EmbeddingConfigError,
    KerasSchedule,
    Optimizer,
    from_keras,
)
from tpuemb_cfg.proto.optimization_parameters_pb2 import OptimizationParameters

DATA = json.loads((Path(__file__).parent / "data" / "keras" / "translations.json").read_text())
CASES = {case["name"]: case for case in DATA["cases"]}

#: The Adagrad, Adam and FTRL cases ``generate.py`` builds alike in both libraries
#: (``legacy_NAME`` and ``keras3_NAME``), written by hand.
SAME_IN_BOTH: dict[str, Optimizer] = {
    "adagrad": Adagrad(learning_rate=0.1, initial_accumulator_value=0.5),
    "adam": Adam(learning_rate=0.002, beta_1=0.8, beta_2=0.99, epsilon=1e-6),
    "ftrl": FTRL(learning_rate=0.03, learning_rate_power=-0.6, l1_regularization_strength=0.01,
                 l2_regularization_strength=0.02, beta=0.5, initial_accumulator_value=0.2),
}

#: The optimizer a user would write by hand for each constant-rate case.
HAND_WRITTEN: dict[str, Optimizer] = {
    "legacy_sgd_default": SGD(learning_rate=0.01),
    "legacy_sgd": SGD(learning_rate=0.05),
    "keras3_sgd": SGD(learning_rate=0.05),
    **{f"{prefix}_{name}": optimizer
       for prefix in ("legacy", "keras3") for name, optimizer in SAME_IN_BOTH.items()},
    "keras3_adam_weight_decay_clip": Adam(learning_rate=0.001, weight_decay_factor=0.004,
                                          clipvalue=1.0),
    "keras3_adamw": Adam(learning_rate=0.001, weight_decay_factor=0.01),
}

SCHEDULED = sorted(name for name, case in CASES.items() if "learning_rate_at" in case)
REFUSED = sorted(name for name, case in CASES.items() if "error" in case)


def written(optimizer: Optimizer) -> bytes:
    params = OptimizationParameters()
    optimizer.write(params, lambda fn: 0)  # one dynamic learning rate: tag 0
    return params.SerializeToString(deterministic=True)


class FakeKeras:
    """A stand-in with a Keras optimizer's surface: its class name and ``get_config()``."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config

    def get_config(self) -> dict[str, Any]:
        return dict(self._config)


def fake(class_name: str, config: dict[str, Any]) -> Any:
    return type(class_name, (FakeKeras,), {})(config)


@pytest.mark.parametrize("name", sorted(set(CASES) - set(REFUSED)))
def test_writes_what_tensorflow_writes(name: str) -> None:
    case = CASES[name]
    optimizer = from_keras({"class_name": case["class_name"], "config": case["config"]})
    assert written(optimizer).hex() == case["params_hex"]
    # The same through an object with the optimizer's class name and get_config().
    assert written(from_keras(fake(case["class_name"], case["config"]))).hex() == case[
        "params_hex"]


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_equals_the_hand_written_optimizer(name: str) -> None:
    case = CASES[name]
    optimizer = from_keras({"class_name": case["class_name"], "config": case["config"]})
    assert optimizer == HAND_WRITTEN[name]
    assert written(optimizer) == written(HAND_WRITTEN[name])


@pytest.mark.parametrize("name", SCHEDULED)
def test_schedules_follow_keras(name: str) -> None:
    case = CASES[name]
    optimizer = from_keras({"class_name": case["class_name"], "config": case["config"]})
    schedule = optimizer.learning_rate
    assert isinstance(schedule, KerasSchedule)
    steps, values = case["learning_rate_at"]["steps"], case["learning_rate_at"]["values"]
    # Keras computes in float32: compare to its precision, relative to the schedule's scale.
    scale = max(abs(v) for v in values)
    for step, expected in zip(steps, values, strict=True):
        assert math.isclose(schedule.value(step), expected, rel_tol=1e-5, abs_tol=1e-6 * scale), (
            step)
    schedule.step = steps[-1]
    assert math.isclose(schedule(), values[-1], rel_tol=1e-5, abs_tol=1e-6 * scale)


@pytest.mark.parametrize("name", REFUSED)
def test_refuses_what_tensorflow_refuses(name: str) -> None:
    case = CASES[name]
    with pytest.raises(EmbeddingConfigError) as info:
        from_keras({"class_name": case["class_name"], "config": case["config"]})
    message = str(info.value)
    assert message.startswith(f"Keras {case['class_name']}")
    # The option TensorFlow names is named here too.
    option = next((w.strip("`.") for w in case["error"].split()
                   if w.strip("`.").split(".")[-1] in case["config"]), None)
    if option is not None:
        assert option.split(".")[-1] in message, (message, case["error"])


def test_subclass_and_class_name_argument() -> None:
    adam = CASES["keras3_adam"]
    subclass = type("MyAdam", (type("Adam", (FakeKeras,), {}),), {})(adam["config"])
    assert written(from_keras(subclass)).hex() == adam["params_hex"]
    plain = from_keras(CASES["legacy_adagrad"]["config"])  # legacy writes name "Adagrad"
    assert plain == HAND_WRITTEN["legacy_adagrad"]
    config = dict(adam["config"], name="my_embedding_optimizer")
    assert from_keras(config, class_name="Adam") == HAND_WRITTEN["keras3_adam"]
    with pytest.raises(EmbeddingConfigError, match="does not say which optimizer"):
        from_keras({"learning_rate": 0.1})


def test_schedule_objects_and_callables() -> None:
    class ExponentialDecay:
        def __init__(self) -> None:
            self.config = {"initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5}

        def get_config(self) -> dict[str, Any]:
            return dict(self.config)

        def __call__(self, step: int) -> float:
            raise AssertionError("a built-in schedule is computed, not called")

    class WarmUp:  # a user's own schedule class: called with the step, as Keras would
        def get_config(self) -> dict[str, Any]:
            return {"peak": 2.0}

        def __call__(self, step: int) -> float:
            return min(step / 10, 1.0) * 2.0

    for schedule, at_20 in ((ExponentialDecay(), 0.025), (WarmUp(), 2.0)):
        optimizer = fake("SGD", {"name": "SGD", "learning_rate": 0.5, "decay": 0.0,
                                 "momentum": 0.0, "nesterov": False})
        optimizer._hyper = {"learning_rate": schedule}
        lr = from_keras(optimizer).learning_rate
        # float32, as TensorFlow computes a built-in schedule (0.025 is 0.0250000004)
        assert isinstance(lr, KerasSchedule) and math.isclose(lr.value(20), at_20,
                                                              rel_tol=1e-7)

    def rate() -> float:
        return 0.3

    keras3 = fake("SGD", {"name": "sgd", "learning_rate": 0.5, "use_ema": False,
                          "momentum": 0.0, "nesterov": False})
    keras3._learning_rate = rate
    assert from_keras(keras3).learning_rate is rate


def test_what_is_not_a_keras_optimizer() -> None:
    with pytest.raises(TypeError, match="expected a Keras optimizer"):
        from_keras(0.1)
    with pytest.raises(EmbeddingConfigError, match="not one of Keras' built-in schedules"):
        from_keras({"class_name": "SGD", "config": {
            "learning_rate": {"class_name": "MySchedule", "config": {}}, "decay": 0.0,
            "momentum": 0.0, "nesterov": False}})


NAMES = DATA["names"]
CALLABLES = {case["name"]: case for case in DATA["callables"]}


@pytest.mark.parametrize("case", NAMES, ids=lambda c: f"{c['library']}-{c['name'] or 'empty'}")
def test_optimizer_names_as_tfrs_and_keras_rs_take_them(case: dict[str, Any]) -> None:
    if "error" in case:
        with pytest.raises(EmbeddingConfigError, match=f"unknown optimizer name {case['name']!r}"):
            from_keras(case["name"])
        return
    assert written(from_keras(case["name"])).hex() == case["params_hex"]


def test_a_tpuemb_optimizer_passes_through() -> None:
    optimizer = Adam(learning_rate=0.5)
    assert from_keras(optimizer) is optimizer


class Tensor:
    """A stand-in for ``tf.Tensor``: recognised by its class name and module."""

    __module__ = "tensorflow.python.framework.tensor"

    def __init__(self, value: float) -> None:
        self.value = value


def legacy_with_callable(case: dict[str, Any], fn: Any) -> Any:
    """A legacy optimizer whose learning rate is ``fn``: ``get_config()`` has called it, as
    legacy Keras' does (``_serialize_hyperparameter``)."""
    config = dict(case["config"])
    if isinstance(config["learning_rate"], dict):  # {"$tensor": value}
        config["learning_rate"] = Tensor(config["learning_rate"]["$tensor"])
    optimizer = fake(case["class_name"], config)
    optimizer._hyper = {"learning_rate": fn}
    return optimizer


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_a_callable_learning_rate_as_tfrs_and_keras_rs_translate_it(name: str) -> None:
    case = CALLABLES[name]

    def rate() -> Any:
        return Tensor(case["value"]) if case["returns"] == "tensor" else case["value"]

    if case["library"] == "tfrs":
        optimizer = from_keras(legacy_with_callable(case, rate))
    else:  # Keras 3: keras-rs reads the callable from _learning_rate
        keras3 = fake(case["class_name"], {"name": "sgd", "learning_rate": 0.01,
                                           "use_ema": False, "momentum": 0.0,
                                           "nesterov": False})
        keras3._learning_rate = rate
        optimizer = from_keras(keras3)
    assert callable(optimizer.learning_rate) == case["dynamic"]
    assert written(optimizer).hex() == case["params_hex"]
    if case["dynamic"] and case["library"] == "tfrs":
        # TFRS's own callable (its own tag), which still calls the user's.
        assert optimizer.learning_rate is not rate
        assert optimizer.learning_rate().value == case["value"]
