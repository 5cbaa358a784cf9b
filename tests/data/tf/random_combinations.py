"""The 1,200 random combinations of ``random_cases.json`` (seed 2026; see generate.py).

Each case builds 1 to 3 optimizers of TensorFlow's five classes, 1 to 3 tables and 1 to 4 features
with a random subset of their arguments, mostly ordinary values and, at a random rate per case,
odd ones (bools, ints, None, NaN, infinities, strings, NumPy scalars, empty containers, plain
objects), in a list or a dict, with random build arguments.
"""

from __future__ import annotations

import random
from typing import Any

from tfside import new, obj, outcome, ref, shape, tup

# -- random combinations ---------------------------------------------------------------------------

NAN = {"$float": "nan"}
INF = {"$float": "inf"}
ODD_NUMBERS = [True, False, None, NAN, INF, "0.5", "a", 0, -1, 1e40, {"$np": ["float32", 0.25]},
               {"$np": ["int64", 2]}, [], tup(), {"$object": None}, 2**40]
ODD_FLAGS = [0, 1, 2, -1, None, "yes", "", 1.0, 0.0, [], {"$np": ["bool_", True]}]
PACKING = [True, False, 0, 1, 2, 3, -1, None, "yes", "ENABLED", "DISABLED", 1.0, 2**40]
CLIPVALUES = [None, 0.5, 1, 0, True, tup(-1.0, 1.0), tup(None, 2.0), tup(None, None), tup(1.0),
              tup(1, 2, 3), [-1, 1], "a", tup(True, "x"), NAN, -0.5]
NUMBERS = {
    "learning_rate": [0.1, 0.01, 1, 0.0, 0.5],
    "clip_weight_min": [None, -1.0, 0.0, -0.5],
    "clip_weight_max": [None, 1.0, 0.0, 2],
    "weight_decay_factor": [None, 0.0, 0.1, 1e-4],
    "initial_accumulator_value": [0.1, 1.0, 0.001],
    "momentum": [0.0, 0.9, 0.5],
    "exponent": [2, 3.0, 0.5],
    "beta2": [1, 0.9, 0.999],
    "epsilon": [1e-10, 1e-07, 0.1],
    "beta_1": [0.9, 0.0, 0.5],
    "beta_2": [0.999, 0.9, 0.0],
    "learning_rate_power": [-0.5, 0.0, -0.25],
    "l1_regularization_strength": [0.0, 0.01],
    "l2_regularization_strength": [0.0, 1.0],
    "beta": [0.0, 0.5],
}
FLAGS = ("use_gradient_accumulation", "multiply_weight_decay_factor_by_learning_rate",
         "use_nesterov", "lazy_adam", "sum_inside_sqrt", "multiply_linear_by_learning_rate",
         "allow_zero_accumulator")
ARGUMENTS = {
    "SGD": ["learning_rate", "use_gradient_accumulation", "clip_weight_min", "clip_weight_max",
            "weight_decay_factor", "multiply_weight_decay_factor_by_learning_rate", "clipvalue",
            "low_dimensional_packing_status"],
    "Adagrad": ["learning_rate", "initial_accumulator_value", "use_gradient_accumulation",
                "clip_weight_min", "clip_weight_max", "weight_decay_factor",
                "multiply_weight_decay_factor_by_learning_rate", "clipvalue",
                "low_dimensional_packing_status"],
    "AdagradMomentum": ["learning_rate", "momentum", "use_nesterov", "exponent", "beta2",
                        "epsilon", "use_gradient_accumulation", "clip_weight_min",
                        "clip_weight_max", "weight_decay_factor",
                        "multiply_weight_decay_factor_by_learning_rate", "clipvalue",
                        "low_dimensional_packing_status"],
    "Adam": ["learning_rate", "beta_1", "beta_2", "epsilon", "lazy_adam", "sum_inside_sqrt",
             "use_gradient_accumulation", "clip_weight_min", "clip_weight_max",
             "weight_decay_factor", "multiply_weight_decay_factor_by_learning_rate", "clipvalue",
             "low_dimensional_packing_status"],
    "FTRL": ["learning_rate", "learning_rate_power", "l1_regularization_strength",
             "l2_regularization_strength", "beta", "initial_accumulator_value",
             "use_gradient_accumulation", "clip_weight_min", "clip_weight_max",
             "weight_decay_factor", "multiply_weight_decay_factor_by_learning_rate", "clipvalue",
             "multiply_linear_by_learning_rate", "allow_zero_accumulator",
             "low_dimensional_packing_status"],
}


def _argument(rnd: random.Random, name: str, odd: bool) -> Any:
    if name == "clipvalue":
        return rnd.choice(CLIPVALUES if odd else [None, None, 0.5, tup(-1.0, 1.0)])
    if name == "low_dimensional_packing_status":
        return rnd.choice(PACKING if odd else [True, False])
    if name == "use_gradient_accumulation" and not odd:
        return rnd.choice([True, True, True, False])
    if name in FLAGS:
        return rnd.choice(ODD_FLAGS if odd else [True, False])
    return rnd.choice(ODD_NUMBERS if odd else NUMBERS[name])


def _random_optimizer(rnd: random.Random, objects: list[dict[str, Any]], oid: str,
                      odd_rate: float) -> dict[str, Any]:
    cls = rnd.choice(list(ARGUMENTS))
    kwargs = {}
    for name in ARGUMENTS[cls]:
        if rnd.random() < 0.4:
            kwargs[name] = _argument(rnd, name, rnd.random() < odd_rate)
    if rnd.random() < 0.15:
        objects.append({"id": f"{oid}_lr", "function": 0.125})
        kwargs["learning_rate"] = ref(f"{oid}_lr")
    return {"id": oid, "class": cls, "args": [], "kwargs": kwargs}


TABLE_VALUES = {
    "vocabulary_size": ([1, 3, 8, 100], [True, 0, -1, 2.0, "8", None, {"$np": ["int64", 8]},
                                         2**40, 2**63]),
    "dim": ([1, 2, 4, 16], [True, 0, 2.0, 2**31, None]),
    "combiner": (["mean", "sum", "sqrtn"], ["max", None, 1]),
    "name": ([None, "a", "b", "table_0", "table_1"], ["", 5]),
    "dtype": (["float32"], ["int32", "float16"]),
    "initializer": ([None, new("RowIdInitializer", 2)], ["zeros"]),
    "quantization_config": ([None, new("QuantizationConfig", 4, -1.0, 1.0)],
                            [new("QuantizationConfig", 1, 0.0, 1.0),
                             new("QuantizationConfig", 2.5, 0.0, 1.0),
                             new("QuantizationConfig", 3, "a", 1.0),
                             new("QuantizationConfig", True, 0.0, 1.0),
                             new("QuantizationConfig", 4, 1.0, -1.0)]),
}
FEATURE_VALUES = {
    "max_sequence_length": ([0, 0, 3], [True, -1, 2.0, None]),
    "output_shape": ([None, None, shape(16), shape(16, 4)],
                     [shape(), shape(0), shape(16, None), 16, tup(8, 2), [True], [-1], [1.5]]),
    "validate_weights_and_indices": ([True, False], [1, None]),
    "name": ([None, "f", ""], [5]),
}
INPUT_SHAPES = [shape(16), shape(16, 1), shape(16, 7), shape(16, 5, 2), shape(16, None),
                shape(8, 3)]


def random_case(rnd: random.Random, index: int) -> dict[str, Any]:
    odd_rate = rnd.choice([0.0, 0.0, 0.1, 0.25])
    objects: list[dict[str, Any]] = []
    optimizers = []
    for k in range(rnd.randint(1, 3)):
        objects.append(_random_optimizer(rnd, objects, f"opt_{k}", odd_rate))
        optimizers.append(f"opt_{k}")
    tables = []
    for k in range(rnd.randint(1, 3)):
        kwargs: dict[str, Any] = {}
        for name, (normal, odd) in TABLE_VALUES.items():
            if name in ("vocabulary_size", "dim") or rnd.random() < 0.4:
                kwargs[name] = rnd.choice(odd if rnd.random() < odd_rate / 3 else normal)
        if rnd.random() < 0.7:
            kwargs["optimizer"] = ref(rnd.choice(optimizers))
        objects.append(obj(f"table_{k}", "TableConfig", **kwargs))
        tables.append(f"table_{k}")
    features = []
    for k in range(rnd.randint(1, 4)):
        kwargs = {"table": ref(rnd.choice(tables))}
        for name, (normal, odd) in FEATURE_VALUES.items():
            if rnd.random() < 0.4:
                kwargs[name] = rnd.choice(odd if rnd.random() < odd_rate / 3 else normal)
        objects.append(obj(f"feature_{k}", "FeatureConfig", **kwargs))
        features.append(f"feature_{k}")
    if rnd.random() < 0.5:
        structure: Any = [ref(f) for f in features]
    else:
        structure = {f"k{rnd.randint(0, 99)}_{i}": ref(f) for i, f in enumerate(features)}
    build: dict[str, Any] = {
        "num_hosts": rnd.choice([1, 1, 2, 4]),
        "num_replicas": rnd.choice([1, 2, 8]),
    }
    if rnd.random() < 0.2:
        build["num_cores_per_replica"] = rnd.choice([1, 2, 0])
    if rnd.random() < 0.1:
        build["pipeline_execution_with_tensor_core"] = True
    how = rnd.random()
    if how < 0.4:
        build["per_replica_batch_size"] = rnd.choice([16, 16, 1, 0])
    elif how < 0.8:
        shapes = [rnd.choice(INPUT_SHAPES) for _ in features]
        if isinstance(structure, dict):
            build["per_replica_input_shapes"] = dict(zip(structure, shapes, strict=True))
        else:
            build["per_replica_input_shapes"] = shapes
    elif how < 0.95:
        build["per_replica_input_shapes"] = 16
    case = {"name": f"random_{index:04d}", "objects": objects, "feature_config": structure,
            "build": build}
    if rnd.random() < 0.9:
        case["optimizer"] = ref(rnd.choice(optimizers))
    return outcome(case)


