"""The random combinations of ``random_cases.json`` (1,200, seed 2026) and
``random_cases_2.json`` (1,600, seed 2027; see generate.py).

Each case builds 1 to 3 optimizers of TensorFlow's five classes, 1 to 3 tables and 1 to 4 features
with a random subset of their arguments, mostly ordinary values and, at a random rate per case,
odd ones (bools, ints, None, NaN, infinities, strings, NumPy scalars, empty containers, plain
objects), in a list or a dict, with random build arguments.

The second round (:data:`ROUND_TWO`, :func:`random_case_round_two`) draws from larger pools of odd
values: NumPy arrays (0-d and 1-d) for numbers, flags and enums, integers beyond float's range,
dtype spellings (``"float"``, ``"half"``, enum numbers, NumPy dtypes and scalars), float and
NumPy dimensions in shapes, odd batch sizes and host counts, and empty or nested feature
structures. The first round's draws are unchanged (same pools, same order of calls).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
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


@dataclass(frozen=True)
class Pools:
    """The values one round draws from (ordinary and odd)."""

    odd_numbers: list[Any]
    odd_flags: list[Any]
    packing: list[Any]
    clipvalues: list[Any]
    table_values: dict[str, tuple[list[Any], list[Any]]] = field(default_factory=dict)
    feature_values: dict[str, tuple[list[Any], list[Any]]] = field(default_factory=dict)


def _argument(rnd: random.Random, name: str, odd: bool, pools: Pools) -> Any:
    if name == "clipvalue":
        return rnd.choice(pools.clipvalues if odd else [None, None, 0.5, tup(-1.0, 1.0)])
    if name == "low_dimensional_packing_status":
        return rnd.choice(pools.packing if odd else [True, False])
    if name == "use_gradient_accumulation" and not odd:
        return rnd.choice([True, True, True, False])
    if name in FLAGS:
        return rnd.choice(pools.odd_flags if odd else [True, False])
    return rnd.choice(pools.odd_numbers if odd else NUMBERS[name])


def _random_optimizer(rnd: random.Random, objects: list[dict[str, Any]], oid: str,
                      odd_rate: float, pools: Pools) -> dict[str, Any]:
    cls = rnd.choice(list(ARGUMENTS))
    kwargs = {}
    for name in ARGUMENTS[cls]:
        if rnd.random() < 0.4:
            kwargs[name] = _argument(rnd, name, rnd.random() < odd_rate, pools)
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


ROUND_ONE = Pools(ODD_NUMBERS, ODD_FLAGS, PACKING, CLIPVALUES, TABLE_VALUES, FEATURE_VALUES)


def _objects(rnd: random.Random, odd_rate: float,
             pools: Pools) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The optimizers, tables and features of one case (their entries, optimizer and feature
    ids)."""
    objects: list[dict[str, Any]] = []
    optimizers = []
    for k in range(rnd.randint(1, 3)):
        objects.append(_random_optimizer(rnd, objects, f"opt_{k}", odd_rate, pools))
        optimizers.append(f"opt_{k}")
    tables = []
    for k in range(rnd.randint(1, 3)):
        kwargs: dict[str, Any] = {}
        for name, (normal, odd) in pools.table_values.items():
            if name in ("vocabulary_size", "dim") or rnd.random() < 0.4:
                kwargs[name] = rnd.choice(odd if rnd.random() < odd_rate / 3 else normal)
        if rnd.random() < 0.7:
            kwargs["optimizer"] = ref(rnd.choice(optimizers))
        objects.append(obj(f"table_{k}", "TableConfig", **kwargs))
        tables.append(f"table_{k}")
    features = []
    for k in range(rnd.randint(1, 4)):
        kwargs = {"table": ref(rnd.choice(tables))}
        for name, (normal, odd) in pools.feature_values.items():
            if rnd.random() < 0.4:
                kwargs[name] = rnd.choice(odd if rnd.random() < odd_rate / 3 else normal)
        objects.append(obj(f"feature_{k}", "FeatureConfig", **kwargs))
        features.append(f"feature_{k}")
    return objects, optimizers, features


def random_case(rnd: random.Random, index: int) -> dict[str, Any]:
    """One case of the first round (``random_cases.json``)."""
    odd_rate = rnd.choice([0.0, 0.0, 0.1, 0.25])
    objects, optimizers, features = _objects(rnd, odd_rate, ROUND_ONE)
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


# -- the second round ------------------------------------------------------------------------------


def np_(kind: str, value: Any) -> dict[str, Any]:
    """``numpy.<kind>(value)``: a scalar type, ``array`` or ``dtype``."""
    return {"$np": [kind, value]}


BIG = 10**400  # an int no float holds
ROUND_TWO = replace(
    ROUND_ONE,
    odd_numbers=ODD_NUMBERS + [
        np_("array", 0.1), np_("array", [0.5]), np_("array", 2), BIG, -BIG, np_("float64", 0.5),
        np_("int32", 3), {"$float": "-inf"}, 1e-45, 3.5e38,
    ],
    odd_flags=ODD_FLAGS + [
        np_("array", True), np_("array", 1), np_("array", 0), np_("int64", 0), np_("bool_", False),
        2**40, BIG, np_("float32", 1.0),
    ],
    packing=PACKING + [
        np_("array", 1), np_("array", True), np_("int64", 2), np_("array", 1.0), "UNSPECIFIED",
        "enabled", BIG, 2**31, -(2**31) - 1,
    ],
    clipvalues=CLIPVALUES + [
        np_("array", 1.0), tup(np_("array", -1.0), 1.0), tup(-1, np_("array", [1.0])), BIG,
        tup(-BIG, None), np_("float32", 0.5), [0.5], tup(2.0, -2.0),
    ],
    table_values=TABLE_VALUES | {
        "vocabulary_size": (TABLE_VALUES["vocabulary_size"][0],
                            TABLE_VALUES["vocabulary_size"][1] + [BIG, np_("array", 8), 8.0]),
        "dim": (TABLE_VALUES["dim"][0],
                TABLE_VALUES["dim"][1] + [np_("int32", 4), BIG, np_("array", 4)]),
        "combiner": (TABLE_VALUES["combiner"][0],
                     TABLE_VALUES["combiner"][1] + ["Mean", "", np_("str_", "sum")]),
        "name": (TABLE_VALUES["name"][0], TABLE_VALUES["name"][1] + [np_("str_", "c")]),
        "dtype": (["float32", "float32", "int32"],
                  ["float16", "float", "double", "half", "int", "float64", "float32_ref",
                   "Float32", np_("dtype", "float32"), np_("dtype", "int32"),
                   np_("dtype", "float64"), None, 1, 3, 2, True, 1.0, np_("float32", 0.5),
                   np_("float32", 2.0), np_("int32", 1), np_("array", 0.5)]),
        "quantization_config": (
            TABLE_VALUES["quantization_config"][0],
            TABLE_VALUES["quantization_config"][1] + [
                new("QuantizationConfig", np_("array", 4), 0.0, 1.0),
                new("QuantizationConfig", 4, BIG, 1.0),
                new("QuantizationConfig", 4, np_("array", -1.0), 1.0),
                new("QuantizationConfig", np_("int64", 4), -1.0, 1.0),
            ]),
    },
    feature_values=FEATURE_VALUES | {
        "max_sequence_length": (FEATURE_VALUES["max_sequence_length"][0],
                                FEATURE_VALUES["max_sequence_length"][1] + [
                                    np_("int64", 3), 3.0, BIG]),
        "output_shape": (FEATURE_VALUES["output_shape"][0],
                         FEATURE_VALUES["output_shape"][1] + [
                             shape(16.0), shape(16, 2.5), tup(16.0,), [np_("int64", 16)],
                             shape(np_("int64", 16), 4), [np_("array", 16)], shape(BIG)]),
    },
)
ODD_INPUT_SHAPES = [shape(16.0), shape(16, 2.5), shape(16, np_("int64", 3)), shape(), shape(0),
                    shape(16.0, 1), shape(np_("array", 16))]
ODD_BATCH_SIZES = [16.0, np_("int64", 16), True, -1, None, np_("array", 16), BIG]


def _structure(rnd: random.Random, features: list[str]) -> Any:
    """A list, a tuple, a dict or a dict of dicts of the features; now and then empty."""
    if rnd.random() < 0.03:
        return rnd.choice([[], {}, tup()])
    how = rnd.random()
    if how < 0.35:
        return [ref(f) for f in features]
    if how < 0.45:
        return tup(*(ref(f) for f in features))
    if how < 0.85:
        return {f"k{rnd.randint(0, 99)}_{i}": ref(f) for i, f in enumerate(features)}
    nested: dict[str, dict[str, Any]] = {}
    for i, f in enumerate(features):
        nested.setdefault(f"g{i % 2}", {})[f"k{i}"] = ref(f)
    return nested


def _shapes_like(structure: Any, shapes: list[Any]) -> Any:
    """``shapes`` nested like ``structure`` (a dict whose leaves are the features, in order)."""
    it = iter(shapes)

    def walk(node: Any) -> Any:
        if isinstance(node, dict) and "$ref" not in node:
            return {k: walk(v) for k, v in node.items()}
        return next(it)

    return walk(structure)


def random_case_round_two(rnd: random.Random, index: int) -> dict[str, Any]:
    """One case of the second round (``random_cases_2.json``)."""
    odd_rate = rnd.choice([0.0, 0.1, 0.25, 0.4])
    objects, optimizers, features = _objects(rnd, odd_rate, ROUND_TWO)
    structure = _structure(rnd, features)
    odd_build = rnd.random() < odd_rate / 3
    # Hosts and replicas are facts of the TPU system (TensorFlow reads them from its strategy,
    # here a stand-in), never a user's argument: ordinary values only.
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
        build["per_replica_batch_size"] = rnd.choice(
            ODD_BATCH_SIZES if odd_build else [16, 16, 1, 0])
    elif how < 0.8:
        shapes = [rnd.choice(ODD_INPUT_SHAPES if rnd.random() < odd_rate / 3 else INPUT_SHAPES)
                  for _ in features]
        if isinstance(structure, dict) and "$tuple" not in structure and rnd.random() < 0.7:
            build["per_replica_input_shapes"] = _shapes_like(structure, shapes)
        else:
            build["per_replica_input_shapes"] = shapes
    elif how < 0.95:
        build["per_replica_input_shapes"] = rnd.choice(
            ODD_BATCH_SIZES if odd_build else [16])
    case = {"name": f"random2_{index:04d}", "objects": objects, "feature_config": structure,
            "build": build}
    if rnd.random() < 0.9:
        case["optimizer"] = ref(rnd.choice(optimizers))
    return outcome(case)
