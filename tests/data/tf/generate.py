"""Regenerate the TensorFlow outcomes stored next to this file. RUN ONLY IN A TENSORFLOW VENV.

    /path/to/tf-venv/bin/python tests/data/tf/generate.py   (tensorflow-cpu 2.21, protobuf 6.31.1)

Not a test and never imported by the test suite (pytest collects ``test_*.py`` only); tpuemb does
not depend on TensorFlow. It writes:

- ``utils_cases.json``: TensorFlow 2.21's ``tpu_embedding_v2_utils_test.py``, case by case, plus
  the SparseCore classes (``CustomOptimizer``, ``CustomCombiner``), with TensorFlow's answers;
- ``tpu_cases.json``: the configuration-level cases of TensorFlow's TPU embedding tests
  (``tensorflow/python/tpu/tests/``): the objects each test builds and the configuration (or
  exception) TensorFlow makes of them;
- ``coercion_cases.json``: the Python values of issue 13 (bools as numbers, truth values of
  flags, ints and names for enums, NumPy scalars, odd shapes and names), one per case;
- ``random_cases.json``: 1,200 random constructor and build argument combinations (seed 2026);
- ``random_cases_2.json``: 1,600 more (seed 2027), from larger pools of odd values (NumPy arrays,
  integers beyond float's range, dtype spellings, float dimensions, empty and nested structures);
- ``no_truncate.json``: the 500-table configuration of ``test_no_truncate`` and TensorFlow's text;
- ``user_program.pbtxt`` / ``.binpb``: a configuration with a user-defined optimizer program,
  written by TensorFlow's own message classes (XLA's element types by name).

How a configuration is obtained without a TPU: ``TPUEmbedding`` is constructed under a stand-in
``TPUStrategyV2`` that reports the case's number of hosts, replicas and cores per replica (so the
constructor takes its TPU path: optimizer checks, table names, dynamic learning rates); then its
own ``_get_and_update_output_shapes_from_input`` (what ``build()`` does with
``per_replica_input_shapes`` / ``per_replica_batch_size``) and ``_create_config_proto()`` run.
Everything else is TensorFlow's code, unchanged (``tfside.py``; the random draws are
``random_combinations.py``). The case encoding is ``tests/tfcases.py``.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import numpy as np
from google.protobuf import text_format
from random_combinations import random_case, random_case_round_two
from tensorflow.compiler.xla import xla_data_pb2
from tensorflow.core.protobuf.tpu import (
    optimization_parameters_pb2,
    tpu_embedding_configuration_pb2,
)
from tfside import HERE, info, new, obj, outcome, ref, shape, tup

# -- tpu_embedding_v2_utils_test.py ----------------------------------------------------------------

OPTIMIZERS = ("SGD", "Adagrad", "Adam", "FTRL")


def utils_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    src = "tpu_embedding_v2_utils_test.TPUEmbeddingOptimizerTest"
    for cls in ("Adagrad", "Adam", "FTRL"):
        for i, clip in enumerate((0.0, tup(None, 1.0))):
            cases.append({
                "name": f"grad_clip_with_accumulation_off_{cls}_{i}",
                "source": f"{src}.test_grad_clip_with_accumulation_off",
                "objects": [obj("opt", cls, use_gradient_accumulation=False, clipvalue=clip)],
            })
    checks = [{"kind": "attr:clip_gradient_min", "object": "opt"},
              {"kind": "attr:clip_gradient_max", "object": "opt"}]
    for test, clip in (
        ("test_grad_clip_with_tuple", tup(-1.0, 1.0)),
        ("test_grad_clip_with_single_value", 1.0),
        ("test_grad_clip_with_tuple_and_none", tup(None, 1)),
    ):
        for cls in OPTIMIZERS:
            cases.append({
                "name": f"{test[5:]}_{cls}", "source": f"{src}.{test}",
                "objects": [obj("opt", cls, clipvalue=clip)], "checks": checks,
            })
    for cls in OPTIMIZERS:
        cases.append({
            "name": f"equal_and_hash_function_{cls}",
            "source": f"{src}.test_equal_and_hash_function",
            "objects": [obj("opt1", cls, 0.1), obj("opt2", cls, 0.1), obj("opt3", cls, 0.2)],
            "checks": [
                {"kind": "eq", "object": "opt1", "other": "opt2"},
                {"kind": "hash_eq", "object": "opt1", "other": "opt2"},
                {"kind": "eq", "object": "opt1", "other": "opt3"},
                {"kind": "hash_eq", "object": "opt1", "other": "opt3"},
            ],
        })
    src = "tpu_embedding_v2_utils_test.ConfigTest"
    cases.append({
        "name": "table_config_repr", "source": f"{src}.test_table_config_repr",
        "objects": [obj("table", "TableConfig", vocabulary_size=2, dim=4, combiner="sum",
                        name="table")],
        "checks": [{"kind": "repr", "object": "table"}],
    })
    cases.append({
        "name": "feature_config_repr", "source": f"{src}.test_feature_config_repr",
        "objects": [
            obj("table", "TableConfig", vocabulary_size=2, dim=4, initializer=None,
                combiner="sum", name="table"),
            obj("feature", "FeatureConfig", table=ref("table"), output_shape=shape(16, 4),
                name="feature"),
        ],
        "checks": [{"kind": "repr", "object": "feature"}],
    })
    cases.append({
        "name": "quantization_config_num_buckets",
        "source": f"{src}.test_quantization_config_num_buckets",
        "objects": [obj("q", "QuantizationConfig", 0, -1, 1)],
    })
    cases.append({
        "name": "quantization_config_repr", "source": f"{src}.test_quantization_config_repr",
        "objects": [obj("q", "QuantizationConfig", num_buckets=10, lower=-1.0, upper=1.0)],
        "checks": [{"kind": "repr", "object": "q"}],
    })
    return [outcome(c) for c in cases]


def more_repr_and_equality_cases() -> list[dict[str, Any]]:
    """Beyond TensorFlow's tests: reprs of other shapes, equality across classes and values."""
    cases: list[dict[str, Any]] = []
    for i, out in enumerate((None, shape(), shape(16, None), 16, tup(8, 2))):
        cases.append({
            "name": f"feature_config_repr_shape_{i}", "source": "tpuemb",
            "objects": [
                obj("table", "TableConfig", 5, 3, name="t"),
                obj("feature", "FeatureConfig", ref("table"), 2, False, out, None),
            ],
            "checks": [{"kind": "repr", "object": "feature"}],
        })
    cases.append({
        "name": "table_config_repr_quantized", "source": "tpuemb",
        "objects": [obj("table", "TableConfig", 7, 1, None, None, "sqrtn", None,
                        new("QuantizationConfig", 3, -0.5, 0.5))],
        "checks": [{"kind": "repr", "object": "table"}],
    })
    pairs = [
        ("SGD", [0.1], "SGD", [0.1, True]),
        ("SGD", [0.1], "SGD", [0.1, False]),
        ("SGD", [0.1], "Adagrad", [0.1]),
        ("Adam", [0.1], "Adam", [0.1, 0.9, 0.999, 1e-07, False]),
        ("FTRL", [0.5], "FTRL", [0.5]),
        ("AdagradMomentum", [0.5, 0.9], "AdagradMomentum", [0.5, 0.9]),
        ("AdagradMomentum", [0.5, 0.9], "AdagradMomentum", [0.5, 0.8]),
        ("SGD", [1], "SGD", [1.0]),
        ("SGD", [{"$ref": "f"}], "SGD", [{"$ref": "f"}]),
        ("SGD", [{"$ref": "f"}], "SGD", [{"$ref": "g"}]),
        ("Adagrad", [0.1, 0.1, True, None, None, None, None, None, tup(-1.0, 1.0)],
         "Adagrad", [0.1, 0.1, True, None, None, None, None, None, 1.0]),
    ]
    for i, (c1, a1, c2, a2) in enumerate(pairs):
        cases.append({
            "name": f"optimizer_equality_{i}", "source": "tpuemb",
            "objects": [{"id": "f", "function": 0.5}, {"id": "g", "function": 0.5},
                        obj("a", c1, *a1), obj("b", c2, *a2)],
            "checks": [{"kind": "eq", "object": "a", "other": "b"},
                       {"kind": "eq", "object": "b", "other": "a"},
                       {"kind": "hash_eq", "object": "a", "other": "b"}],
        })
    return [outcome(c) for c in cases]


def custom_cases() -> list[dict[str, Any]]:
    """TensorFlow 2.21's SparseCore classes: arguments, checks, slots, and the bytes they give
    when (mis)used with the TPUEmbedding configuration writer."""
    opt_checks = [
        {"kind": k, "object": "opt"}
        for k in ("slot_names", "slot_count", "attr:slot_dims", "attr:hyperparameters",
                  "attr:learning_rate", "attr:use_gradient_accumulation",
                  "attr:clip_gradient_min", "attr:low_dimensional_packing_status")
    ]
    comb_checks = [
        {"kind": k, "object": "comb"}
        for k in ("combiner_name", "slot_names", "slot_count", "attr:max_valency",
                  "attr:num_weights", "attr:combiner_weights_learning_rate")
    ]
    table = obj("table", "TableConfig", 16, 4, name="t")
    feature = {"$tuple": [new("FeatureConfig", ref("table"))]}
    cases = [
        {"name": "custom_optimizer_sgd", "objects": [
            {"id": "fn", "computation": "sgd"},
            obj("opt", "CustomOptimizer", ref("fn"), 0.1), table],
         "checks": opt_checks, "feature_config": feature, "optimizer": ref("opt"),
         "build": {"per_replica_batch_size": 8}},
        {"name": "custom_optimizer_adagrad", "objects": [
            {"id": "fn", "computation": "adagrad"},
            obj("opt", "CustomOptimizer", custom_computation=ref("fn"), learning_rate=1.0,
                slot_names=["accumulators"], slot_initializers=[new("Constant", 0.1)],
                hyperparameters=[0.5, 2], slot_dims=[2]),
            table],
         "checks": opt_checks, "feature_config": feature, "optimizer": ref("opt"),
         "build": {"per_replica_batch_size": 8}},
        {"name": "custom_optimizer_dynamic_lr", "objects": [
            {"id": "fn", "computation": "sgd"}, {"id": "lr", "function": 0.25},
            obj("opt", "CustomOptimizer", ref("fn"), ref("lr")), table],
         "checks": opt_checks, "feature_config": feature, "optimizer": ref("opt"),
         "build": {"per_replica_batch_size": 8}},
        {"name": "custom_optimizer_names_without_initializers", "objects": [
            {"id": "fn", "computation": "adagrad"},
            obj("opt", "CustomOptimizer", ref("fn"), 0.1, ["a", "b"], [new("Constant", 0.0)])]},
        {"name": "custom_optimizer_slot_dims_count", "objects": [
            {"id": "fn", "computation": "adagrad"},
            obj("opt", "CustomOptimizer", ref("fn"), 0.1, ["a"], [new("Constant", 0.0)], None,
                [1, 2])]},
        {"name": "custom_optimizer_slot_dim_3", "objects": [
            {"id": "fn", "computation": "adagrad"},
            obj("opt", "CustomOptimizer", ref("fn"), 0.1, ["a"], [new("Constant", 0.0)], None,
                [3])]},
        {"name": "custom_optimizer_equality", "objects": [
            {"id": "fn", "computation": "sgd"},
            obj("a", "CustomOptimizer", ref("fn"), 0.1),
            obj("b", "CustomOptimizer", ref("fn"), 0.1),
            obj("c", "CustomOptimizer", ref("fn"), 0.2)],
         "checks": [{"kind": "eq", "object": "a", "other": "b"},
                    {"kind": "hash_eq", "object": "a", "other": "b"},
                    {"kind": "eq", "object": "a", "other": "c"}]},
        {"name": "custom_combiner_sum", "objects": [
            {"id": "fn", "computation": "sum"},
            obj("comb", "CustomCombiner", ref("fn"), max_valency=16),
            obj("table", "TableConfig", 16, 4, combiner=ref("comb"), name="t")],
         "checks": comb_checks, "feature_config": feature, "optimizer": new("SGD", 0.1),
         "build": {"per_replica_batch_size": 8}},
        {"name": "custom_combiner_weights", "objects": [
            {"id": "fn", "computation": "weighted_sum"},
            obj("comb", "CustomCombiner", ref("fn"), 4, 3, new("Constant", 0.5), 0.05)],
         "checks": comb_checks},
        {"name": "custom_combiner_weights_without_initializer", "objects": [
            {"id": "fn", "computation": "weighted_sum"},
            obj("comb", "CustomCombiner", ref("fn"), 4, 2)]},
        {"name": "table_combiner_not_a_combiner", "objects": [
            obj("table", "TableConfig", 16, 4, combiner=5)]},
    ]
    for case in cases:
        case["source"] = "tensorflow/python/tpu/tpu_embedding_v2_utils.py (SparseCore classes)"
    return [outcome(c) for c in cases]


def coercion_cases() -> list[dict[str, Any]]:
    """The Python values of issue 13, one per case: what TensorFlow writes or raises."""
    values = [
        ("learning_rate_true", "SGD", {"learning_rate": True}),
        ("learning_rate_false", "SGD", {"learning_rate": False}),
        ("learning_rate_int", "Adagrad", {"learning_rate": 2}),
        ("learning_rate_numpy", "Adam", {"learning_rate": {"$np": ["float32", 0.25]}}),
        ("learning_rate_string", "SGD", {"learning_rate": "0.1"}),
        ("learning_rate_none", "SGD", {"learning_rate": None}),
        ("learning_rate_huge", "SGD", {"learning_rate": 1e40}),
        ("clipvalue_true", "SGD", {"clipvalue": True}),
        ("clipvalue_bool_tuple", "FTRL", {"clipvalue": tup(False, True)}),
        ("clip_weight_max_true", "SGD", {"clip_weight_max": True}),
        ("momentum_true", "AdagradMomentum", {"momentum": True}),
        ("exponent_true", "AdagradMomentum", {"exponent": True}),
        ("beta2_false", "AdagradMomentum", {"beta2": False}),
        ("beta_1_false", "Adam", {"beta_1": False}),
        ("beta_1_true", "Adam", {"beta_1": True}),
        ("learning_rate_power_true", "FTRL", {"learning_rate_power": True}),
        ("l1_false", "FTRL", {"l1_regularization_strength": False}),
        ("initial_accumulator_true", "Adagrad", {"initial_accumulator_value": True}),
        ("weight_decay_true", "SGD", {"weight_decay_factor": True}),
        ("weight_decay_empty_tuple", "SGD", {"weight_decay_factor": tup()}),
        ("weight_decay_string", "SGD", {"weight_decay_factor": "0.1"}),
        ("multiply_weight_decay_string", "SGD", {"weight_decay_factor": 0.5,
         "multiply_weight_decay_factor_by_learning_rate": "yes"}),
        ("use_nesterov_2", "AdagradMomentum", {"use_nesterov": 2}),
        ("use_nesterov_float", "AdagradMomentum", {"use_nesterov": 1.0}),
        ("use_nesterov_none", "AdagradMomentum", {"use_nesterov": None}),
        ("lazy_adam_none", "Adam", {"lazy_adam": None}),
        ("lazy_adam_string", "Adam", {"lazy_adam": "no"}),
        ("sum_inside_sqrt_0", "Adam", {"sum_inside_sqrt": 0}),
        ("sum_inside_sqrt_none", "Adam", {"sum_inside_sqrt": None}),
        ("sum_inside_sqrt_numpy_bool", "Adam", {"sum_inside_sqrt": {"$np": ["bool_", True]}}),
        ("multiply_linear_2", "FTRL", {"multiply_linear_by_learning_rate": 2}),
        ("allow_zero_accumulator_1", "FTRL", {"allow_zero_accumulator": 1}),
        ("use_gradient_accumulation_none", "SGD", {"use_gradient_accumulation": None}),
        ("use_gradient_accumulation_string", "Adagrad", {"use_gradient_accumulation": "no"}),
        ("packing_2", "SGD", {"low_dimensional_packing_status": 2}),
        ("packing_1", "Adagrad", {"low_dimensional_packing_status": 1}),
        ("packing_0", "SGD", {"low_dimensional_packing_status": 0}),
        ("packing_3", "FTRL", {"low_dimensional_packing_status": 3}),
        ("packing_negative", "SGD", {"low_dimensional_packing_status": -1}),
        ("packing_name", "SGD", {"low_dimensional_packing_status": "DISABLED"}),
        ("packing_yes", "SGD", {"low_dimensional_packing_status": "yes"}),
        ("packing_none", "SGD", {"low_dimensional_packing_status": None}),
        ("packing_float", "SGD", {"low_dimensional_packing_status": 1.0}),
        ("packing_numpy_int", "SGD", {"low_dimensional_packing_status": {"$np": ["int64", 2]}}),
    ]
    cases = []
    for name, cls, kwargs in values:
        cases.append({
            "name": f"coercion_{name}", "source": "issue 13",
            "objects": [obj("opt", cls, **kwargs), obj("table", "TableConfig", 16, 4, name="t")],
            "feature_config": [new("FeatureConfig", ref("table"))], "optimizer": ref("opt"),
            "build": {"per_replica_batch_size": 8},
        })
    features = [
        ("max_sequence_length_true", {"max_sequence_length": True}, {"per_replica_batch_size": 8}),
        ("max_sequence_length_true_input", {"max_sequence_length": True},
         {"per_replica_input_shapes": [shape(8, 3)]}),
        ("output_shape_true_dimension", {"output_shape": [8, True]}, {}),
        ("output_shape_int", {"output_shape": 8}, {}),
        ("output_shape_numpy", {"output_shape": [{"$np": ["int64", 8]}]}, {}),
        ("output_shape_empty", {"output_shape": shape()}, {}),
        ("output_shape_zero", {"output_shape": shape(0)}, {}),
        ("max_sequence_length_numpy", {"max_sequence_length": {"$np": ["int64", 2]}}, {}),
        ("feature_name_zero", {"name": 0}, {"per_replica_batch_size": 8}),
        ("feature_name_int", {"name": 7}, {"per_replica_batch_size": 8}),
    ]
    for name, kwargs, build in features:
        cases.append({
            "name": f"coercion_{name}", "source": "issue 13",
            "objects": [obj("table", "TableConfig", 16, 4, name="t"),
                        obj("feature", "FeatureConfig", ref("table"), **kwargs)],
            "feature_config": [ref("feature")], "optimizer": new("SGD", 0.1), "build": build,
        })
    tables = [
        ("vocabulary_numpy", {"vocabulary_size": {"$np": ["int64", 16]}}),
        ("vocabulary_true", {"vocabulary_size": True}),
        ("dim_float", {"dim": 4.0}),
        ("name_empty", {"name": ""}),
        ("name_int", {"name": 3}),
        ("quantization_bool_bounds", {"quantization_config": new("QuantizationConfig", 3, False,
                                                                 True)}),
        ("quantization_float_buckets", {"quantization_config": new("QuantizationConfig", 3.0, -1.0,
                                                                   1.0)}),
        ("quantization_reversed", {"quantization_config": new("QuantizationConfig", 4, 1.0, -1.0)}),
    ]
    for name, kwargs in tables:
        args = {"vocabulary_size": 16, "dim": 4, "name": "t"} | kwargs
        cases.append({
            "name": f"coercion_table_{name}", "source": "issue 13",
            "objects": [obj("table", "TableConfig", **args)],
            "feature_config": [new("FeatureConfig", ref("table"))], "optimizer": new("SGD", 0.1),
            "build": {"per_replica_batch_size": 8},
        })
    return [outcome(c) for c in cases]


# -- the configuration-level cases of TensorFlow's TPU tests ---------------------------------------

TEST_DIR = "tensorflow/python/tpu/tests/"


def _base_objects(**feature_kwargs: Any) -> list[dict[str, Any]]:
    """TPUEmbeddingBaseTest.setUp: tables video (8 x 4, sum) and user (16 x 2, mean)."""
    seq = feature_kwargs.get("max_sequence_length", (0, 0, 0))
    return [
        obj("video", "TableConfig", vocabulary_size=8, dim=4,
            initializer=new("RowIdInitializer"), combiner="sum", name="video"),
        obj("user", "TableConfig", vocabulary_size=16, dim=2,
            initializer=new("RowIdInitializer"), combiner="mean", name="user"),
        obj("watched", "FeatureConfig", table=ref("video"), name="watched",
            max_sequence_length=seq[0]),
        obj("favorited", "FeatureConfig", table=ref("video"), name="favorited",
            max_sequence_length=seq[1]),
        obj("friends", "FeatureConfig", table=ref("user"), name="friends",
            max_sequence_length=seq[2]),
    ]


BASE_FEATURES = tup(ref("watched"), ref("favorited"), ref("friends"))
BASE_OPTIMIZERS = {
    "sgd": new("SGD", learning_rate=0.1),
    "adagrad": new("Adagrad", learning_rate=0.1),
    "adam": new("Adam", learning_rate=0.1),
    "ftrl": new("FTRL", learning_rate=0.1),
    "adagrad_momentum": new("AdagradMomentum", learning_rate=0.1, momentum=0.9,
                            use_nesterov=True, exponent=3.0, epsilon=0.1, beta2=0.9),
}
#: Per-replica input shapes TensorFlow derives at the first enqueue (batch 2 per replica).
ENQUEUED = {
    "sparse": [shape(2, 2), shape(2, 2), shape(2, 3)],
    "ragged": [shape(2, None), shape(2, None), shape(2, None)],
    "dense": [shape(2), shape(2), shape(2)],
    "hd_sparse": [shape(2, 4, 2), shape(2, 4, 2), shape(2, 4, 3)],
    "hd_ragged": [shape(2, 4, None), shape(2, 4, None), shape(2, 4, None)],
}
TPU = {"num_hosts": 1, "num_replicas": 8}


def _tpu_case(name: str, source: str, objects: list[dict[str, Any]], features: Any,
              optimizer: Any, **build: Any) -> dict[str, Any]:
    return {"name": name, "source": TEST_DIR + source, "objects": objects,
            "feature_config": features, "optimizer": optimizer, "build": TPU | build}


def tpu_cases() -> list[dict[str, Any]]:
    cases = []
    for opt_name, opt in BASE_OPTIMIZERS.items():
        for kind, shapes in ENQUEUED.items():
            cases.append(_tpu_case(
                f"correctness_{kind}_{opt_name}",
                "tpu_embedding_v2_correctness_*_test.py (TPUEmbeddingCorrectnessBaseTest)",
                _base_objects(), BASE_FEATURES, opt, per_replica_input_shapes=shapes))
    cases.append(_tpu_case(
        "correctness_sequence_embeddings",
        "tpu_embedding_v2_correctness_sequence_feature_test.py test_sequence_embeddings",
        _base_objects(max_sequence_length=(2, 2, 3)), BASE_FEATURES,
        new("SGD", learning_rate=0.1), per_replica_batch_size=2))
    cases.append(_tpu_case(
        "tables_with_same_name", "tpu_embedding_v2_invalid_input_test.py",
        [], tup(new("FeatureConfig", table=new("TableConfig", name="table", vocabulary_size=4,
                                                  dim=2), name="watched"),
                new("FeatureConfig", table=new("TableConfig", name="table", vocabulary_size=4,
                                                  dim=2), name="favorited")),
        new("SGD", learning_rate=0.1)))
    cases.append(_tpu_case(
        "pass_non_tensor_to_apply_gradients", "tpu_embedding_v2_invalid_input_test.py",
        _base_objects(), BASE_FEATURES, BASE_OPTIMIZERS["sgd"], per_replica_input_shapes=64))
    cases.append(_tpu_case(
        "unsupported_optimizer", "tpu_embedding_v2_optimizer_test.py",
        _base_objects(), BASE_FEATURES, {"$object": None}))
    lr_objects = [{"id": "lr_function", "function": 1.0}]
    cases.append(_tpu_case(
        "variable_learning_rate", "tpu_embedding_v2_optimizer_test.py",
        lr_objects + [obj("table", "TableConfig", vocabulary_size=8, dim=4, combiner="sum",
                          name="table")],
        {"feature": new("FeatureConfig", table=ref("table"), name="feature")},
        new("SGD", learning_rate=ref("lr_function")),
        per_replica_input_shapes={"feature": shape(1, 1)}))
    for test in ("test_optimizer_with_slot_creation_fn",
                 "test_optimizer_with_slot_creation_fn_non_partial"):
        cases.append(_tpu_case(
            test[5:], "tpu_embedding_v2_optimizer_test.py " + test,
            [{"id": "slot_fn", "function": None}] + _base_objects(), BASE_FEATURES,
            new("Adagrad", learning_rate=0.1, slot_variable_creation_fn=ref("slot_fn")),
            per_replica_input_shapes=2))
    cases.append(_tpu_case(
        "multiple_creation", "tpu_embedding_v2_initialization_test.py",
        _base_objects()[:2],
        new("FeatureConfig", table=ref("user"), name="friends", max_sequence_length=2),
        new("SGD", learning_rate=0.1), per_replica_input_shapes=64))
    rng = np.random.default_rng(30)
    dims = [int(d) for d in rng.integers(1, 128, size=30)]
    vocabs = [int(v) for v in rng.integers(100, 1000, size=30)]
    for test, dynamic in (("tpu_embedding_v2_initialization_test.py", True),
                          ("tpu_embedding_v2_valid_input_test.py", False)):
        objects: list[dict[str, Any]] = []
        features = []
        for i, (dim, vocab) in enumerate(zip(dims, vocabs, strict=True)):
            opt = None
            if dynamic and dim % 2 == 0:
                objects.append({"id": f"lr_{i}", "function": 1.0})
                opt = new("Adagrad", learning_rate=ref(f"lr_{i}"))
            features.append(new("FeatureConfig", table=new(
                "TableConfig", vocabulary_size=vocab, dim=dim, optimizer=opt,
                name=f"table{i}"), output_shape=shape(128)))
        cases.append(_tpu_case(
            f"same_config_different_instantiations_{'dynamic' if dynamic else 'constant'}",
            test, objects, features, new("Adagrad", learning_rate=0.1)))
    cases.append(_tpu_case(
        "learning_rate_tag_order", "tpu_embedding_v2_initialization_test.py",
        [{"id": "lr", "function": 1.0}, obj("opt", "Adagrad", learning_rate=ref("lr"))],
        [new("FeatureConfig", table=new("TableConfig", vocabulary_size=100, dim=128,
                                        optimizer=ref("opt")), output_shape=shape(128))],
        ref("opt")))
    cases.append(_tpu_case(
        "pass_none_to_apply_gradients", "tpu_embedding_v2_valid_input_test.py",
        _base_objects(), BASE_FEATURES, BASE_OPTIMIZERS["sgd"],
        per_replica_input_shapes=ENQUEUED["sparse"]))
    for kind in ("sparse", "ragged"):
        cases.append(_tpu_case(
            f"missing_feature_{kind}", "tpu_embedding_v2_valid_input_test.py",
            _base_objects()[:1], new("FeatureConfig", table=ref("video"), name="watched"),
            new("SGD", learning_rate=0.1), per_replica_input_shapes=ENQUEUED[kind][0]))
    seq3 = {"max_sequence_length": (3, 3, 3)}
    for name, shapes in (
        ("sequence_feature_sparse", [shape(2, 3, 2), shape(2, 3, 2), shape(2, 3, 3)]),
        ("sequence_feature_ragged", [shape(2, 3, None)] * 3),
        ("sequence_feature_with_build_updated_shape",
         [shape(2, 3, 2), shape(2, 3, 2), shape(2, 3, 3)]),
        ("sequence_feature_with_build", ENQUEUED["sparse"]),
    ):
        cases.append(_tpu_case(
            name, "tpu_embedding_v2_sequence_feature_test.py", _base_objects(**seq3),
            BASE_FEATURES, BASE_OPTIMIZERS["sgd"], per_replica_input_shapes=shapes))

    def with_output_shape(out: Any) -> list[dict[str, Any]]:
        objects = _base_objects()
        for entry in objects[2:]:
            entry["kwargs"]["output_shape"] = out
        return objects

    for name, out, shapes in (
        ("build_incorrect_output_shapes", shape(2, 4), [shape(1, 1, 1)] * 3),
        ("enqueue_incorrect_shape_feature", shape(1, 1), [shape(1, 1, 1)] * 3),
        ("not_fully_defined_output_shapes_in_feature_config", None, None),
        ("not_fully_defined_output_shapes_for_build", None, [shape(1, None, None)] * 3),
        ("output_shapes_priority_over_feature_config_and_build", shape(2, 4),
         [shape(2, None, None)] * 3),
    ):
        source = ("tpu_embedding_v2_hd_valid_input_test.py" if "priority" in name
                  else "tpu_embedding_v2_hd_invalid_input_test.py")
        cases.append(_tpu_case(name, source, with_output_shape(out), BASE_FEATURES,
                               BASE_OPTIMIZERS["sgd"], per_replica_input_shapes=shapes))
    for name, shapes in (
        ("enqueue_dense_sparse_ragged", [shape(2, 4, 1), shape(2, 4, 2), shape(2, 4, 3)]),
        ("different_input_shapes", [shape(1, 3, 1), shape(2, 4, 2), shape(2, 4, 3)]),
    ):
        cases.append(_tpu_case(name, "tpu_embedding_v2_hd_valid_input_test.py",
                               _base_objects(), BASE_FEATURES, BASE_OPTIMIZERS["sgd"],
                               per_replica_input_shapes=shapes))
    table = obj("table", "TableConfig", vocabulary_size=8, dim=4,
                initializer=new("RowIdInitializer"), combiner="sum", name="table")
    feature = tup(new("FeatureConfig", table=ref("table"), name="feature"))
    cases.append(_tpu_case("checkpoint_save_retrieves", "tpu_embedding_v2_checkpoint_test.py",
                           [table], feature, new("SGD", learning_rate=0.1),
                           per_replica_input_shapes=64))
    module_table = dict(table, kwargs=dict(table["kwargs"], vocabulary_size=16))
    cases.append(_tpu_case("checkpoint_restore_before_variable_creation",
                           "tpu_embedding_v2_checkpoint_test.py", [module_table], feature,
                           new("SGD"), per_replica_input_shapes=64))
    for cls in OPTIMIZERS:
        cases.append(_tpu_case(
            f"checkpoint_variable_names_{cls}", "tpu_embedding_v2_checkpoint_test.py",
            [table], feature, new(cls, learning_rate=0.1), per_replica_input_shapes=64))
    cases.append(_tpu_case(
        "spmd_training", "tpu_embedding_v2_mp_strategy_test.py", lr_objects + [
            obj("table", "TableConfig", vocabulary_size=2, dim=4, combiner="sum", name="table")],
        {"feature": new("FeatureConfig", table=ref("table"), name="feature")},
        new("SGD", learning_rate=ref("lr_function")), num_replicas=1, num_cores_per_replica=2,
        per_replica_input_shapes={"feature": shape(1, 1)}))
    return [outcome(c) for c in cases]


# -- text and user-defined programs -------------------------------------------------------------


def no_truncate() -> dict[str, Any]:
    """ConfigTest... TPUEmbeddingConfigurationTest.test_no_truncate's configuration and what
    TensorFlow prints for it (log_tpu_embedding_configuration logs str(config) line by line)."""
    config = tpu_embedding_configuration_pb2.TPUEmbeddingConfiguration()
    for i in range(500):
        td = config.table_descriptor.add()
        td.name = f"table_{i}"
        td.vocabulary_size = i
    config.num_hosts = 2
    config.num_tensor_cores = 4
    config.batch_size_per_tensor_core = 128
    text = str(config)
    return {
        "source": "tpu_embedding_v2_utils_test.TPUEmbeddingConfigurationTest.test_no_truncate",
        "config": config.SerializeToString().hex(),
        "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "text_lines": len(text.splitlines()),
        "longest_line": max(len(line) for line in text.splitlines()),
        "truncate_length": 14937,
    }


def user_program() -> tpu_embedding_configuration_pb2.TPUEmbeddingConfiguration:
    """A table whose optimizer is a user-defined program: (gradient, weight, accumulator,
    learning rate) -> (weight, accumulator), element types written by name."""
    config = tpu_embedding_configuration_pb2.TPUEmbeddingConfiguration()
    td = config.table_descriptor.add()
    td.name = "user_program"
    td.vocabulary_size = 1024
    td.dimension = 8
    params = td.optimization_parameters
    params.learning_rate.dynamic.tag = 0
    enabled = optimization_parameters_pb2.GradientAccumulationStatus.ENABLED
    params.gradient_accumulation_status = enabled
    program = params.user_defined_program.program
    program.name = "adagrad_update"
    program.entry_computation_name = "adagrad_update.7"
    signature = program.host_program_shape
    for name, dims in (("gradient", [8]), ("weight", [8]), ("accumulator", [8]),
                       ("learning_rate", [])):
        p = signature.parameters.add()
        p.element_type = xla_data_pb2.F32
        p.dimensions.extend(dims)
        p.is_dynamic_dimension.extend([False] * len(dims))
        signature.parameter_names.append(name)
    signature.result.element_type = xla_data_pb2.TUPLE
    for _ in range(2):
        r = signature.result.tuple_shapes.add()
        r.element_type = xla_data_pb2.F32
        r.dimensions.append(8)
        r.is_dynamic_dimension.append(False)
    second = config.table_descriptor.add()
    second.name = "bf16_counts"
    second.vocabulary_size = 64
    second.dimension = 4
    p2 = second.optimization_parameters
    p2.learning_rate.constant = 0.5
    p2.gradient_accumulation_status = enabled
    prog2 = p2.user_defined_program.program
    prog2.name = "counts"
    for element in (xla_data_pb2.BF16, xla_data_pb2.S32, xla_data_pb2.PRED):
        prog2.host_program_shape.parameters.add().element_type = element
    prog2.host_program_shape.result.element_type = xla_data_pb2.TUPLE
    for element in (xla_data_pb2.BF16, xla_data_pb2.S32):
        prog2.host_program_shape.result.tuple_shapes.add().element_type = element
    config.mode = tpu_embedding_configuration_pb2.TPUEmbeddingConfiguration.TRAINING
    config.num_hosts = 1
    config.num_tensor_cores = 8
    for table_id in (0, 1):
        fd = config.feature_descriptor.add()
        fd.table_id = table_id
        fd.input_shape.append(16)
    return config


def main() -> None:
    assert info["tensorflow"].startswith("2.21"), info

    def write(name: str, cases: Any, **extra: Any) -> None:
        """One case per line, so that a regeneration's diff shows the cases that changed."""
        head = json.dumps({"generated_by": "tests/data/tf/generate.py"} | info | extra)
        lines = ",\n".join(json.dumps(case) for case in cases)
        (HERE / name).write_text(head[:-1] + ', "cases": [\n' + lines + "\n]}\n")

    write("coercion_cases.json", coercion_cases())
    write("utils_cases.json", utils_cases() + more_repr_and_equality_cases() + custom_cases(),
          not_ported={
              "TPUEmbeddingUtilityFunctionTest.test_sort_device_spec_strings":
                  "sorts TPU device names of a TPUStrategy; tpuemb has no devices",
          })
    write("tpu_cases.json", tpu_cases())
    rnd = random.Random(2026)
    write("random_cases.json", [random_case(rnd, i) for i in range(1200)], seed=2026)
    rnd = random.Random(2027)
    write("random_cases_2.json", [random_case_round_two(rnd, i) for i in range(1600)], seed=2027)
    (HERE / "no_truncate.json").write_text(json.dumps(info | no_truncate(), indent=1) + "\n")
    config = user_program()
    (HERE / "user_program.pbtxt").write_text(text_format.MessageToString(config))
    (HERE / "user_program.binpb").write_bytes(config.SerializeToString())


if __name__ == "__main__":
    main()
