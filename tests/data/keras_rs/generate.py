"""Regenerate ``conversions.json`` next to this file. RUN ONLY IN A TENSORFLOW VENV.

    /path/to/tf-venv/bin/python tests/data/keras_rs/generate.py

Needs tensorflow-cpu 2.21 (protobuf 6.31.1), keras 3 and keras-rs 0.4.0. Not a test and never
imported by the suite; tpuemb depends on none of them.

Each case builds keras-rs ``TableConfig``/``FeatureConfig`` objects (``keras_rs.layers``), with
Keras 3 optimizers, optimizer names or ``tf.tpu.experimental.embedding`` optimizers, and runs what
keras-rs' ``DistributedEmbedding`` does on TensorFlow before its ``TPUEmbedding`` exists:

1. its base class flattens the features with ``keras.tree.flatten_with_path``, resolves each
   table's ``placement`` (``"auto"`` is ``"sparsecore"`` on a TPU with SparseCores, the TPUs whose
   embedding layer reads this configuration) and keys the SparseCore features by their path
   joined with ``"."``;
2. ``config_conversion.keras_to_tf_tpu_configuration`` turns them into TensorFlow's objects, and
   ``config_conversion.to_tf_tpu_optimizer`` the layer's ``optimizer``;
3. TensorFlow's ``TPUEmbedding`` builds the configuration under a stand-in TPU strategy
   (``tests/data/tf/tfside.py``), with per-replica input shapes (each feature's ``input_shape``
   with its batch divided by the number of replicas), as the layer's ``build`` passes them.

Stored per case: the objects (JSON, below), and the configuration bytes with the number of
dynamic learning rates, or the exception keras-rs or TensorFlow raised, or that no feature is on
the SparseCore (keras-rs then builds no TPU embedding at all).

Encoding: ``optimizers`` (id -> optimizer), ``tables`` (id -> keras-rs ``TableConfig`` fields,
``optimizer`` being an optimizer id, a name or null), ``features`` (id -> ``FeatureConfig``
fields, ``table`` a table id), ``structure`` (lists and dicts whose leaves are
``{"$feature": id}``), ``optimizer`` (the layer's: an optimizer id, a name or null). An optimizer
is ``{"keras": CLASS, "kwargs": {...}, "schedule": {"class": CLASS, "kwargs": {...}}?,
"class_name": ..., "config": get_config()}`` (a Keras 3 optimizer; ``class_name`` and ``config``
are what tpuemb reads) or ``{"tpu": CLASS, "kwargs": {...}}`` (a
``tf.tpu.experimental.embedding`` optimizer).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tf"))

import keras  # noqa: E402
import keras_rs  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras_rs.src.layers.embedding.tensorflow import config_conversion  # noqa: E402
from tfside import info, tf_build  # noqa: E402


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


def _optimizer(spec: Any, made: dict[str, Any], specs: dict[str, Any]) -> Any:
    """The object an optimizer entry stands for (one object per id, shared)."""
    if spec is None or (isinstance(spec, str) and spec not in specs):
        return spec
    if spec in made:
        return made[spec]
    entry = specs[spec]
    kwargs = dict(entry.get("kwargs", {}))
    if "tpu" in entry:
        made[spec] = getattr(tf.tpu.experimental.embedding, entry["tpu"])(**kwargs)
        return made[spec]
    if "schedule" in entry:
        schedule = entry["schedule"]
        cls = getattr(keras.optimizers.schedules, schedule["class"])
        kwargs["learning_rate"] = cls(**schedule["kwargs"])
    optimizer = getattr(keras.optimizers, entry["keras"])(**kwargs)
    entry["class_name"] = type(optimizer).__name__
    entry["config"] = _json(optimizer.get_config())
    made[spec] = optimizer
    return optimizer


def _objects(case: dict[str, Any]) -> tuple[Any, Any]:
    """The keras-rs feature structure and the layer's optimizer of a case."""
    made: dict[str, Any] = {}
    specs = case.get("optimizers", {})
    tables = {}
    for tid, t in case["tables"].items():
        fields = dict(t)
        if "optimizer" in fields:  # else keras-rs' default, "adam"
            fields["optimizer"] = _optimizer(fields["optimizer"], made, specs)
        tables[tid] = keras_rs.layers.TableConfig(**fields)
    features = {
        fid: keras_rs.layers.FeatureConfig(
            name=f["name"], table=tables[f["table"]], input_shape=tuple(f["input_shape"]),
            output_shape=tuple(f["output_shape"]))
        for fid, f in case["features"].items()
    }

    def build(node: Any) -> Any:
        if isinstance(node, dict) and "$feature" in node:
            return features[node["$feature"]]
        if isinstance(node, dict):
            return {k: build(v) for k, v in node.items()}
        return [build(v) for v in node]

    return build(case["structure"]), _optimizer(case.get("optimizer"), made, specs)


def keras_rs_build(case: dict[str, Any]) -> dict[str, Any]:
    """What keras-rs and TensorFlow make of a case (see the module docstring)."""
    num_hosts, num_replicas = case["num_hosts"], case["num_replicas"]
    try:
        structure, layer_optimizer = _objects(case)
        sparsecore: dict[str, Any] = {}
        for path, feature in keras.tree.flatten_with_path(structure):
            placement = feature.table.placement
            if placement == "auto":
                placement = "sparsecore"  # has_sparsecores() on a TPU with SparseCores
            joined = ".".join(str(e) for e in path)
            if placement not in ("auto", "default_device", "sparsecore"):
                raise ValueError(f"Feature '{joined}' with name '{feature.name}' has "
                                 f"unsupported placement '{placement}'.")
            if placement == "sparsecore":
                sparsecore[joined] = feature
        if not sparsecore:
            return {"ok": True, "no_tpu_embedding": True}
        tf_features, _ = config_conversion.keras_to_tf_tpu_configuration(
            sparsecore, "auto", num_replicas)
        tf_optimizer = config_conversion.to_tf_tpu_optimizer(layer_optimizer)
        shapes = {
            path: tf.TensorShape([None if f.input_shape[0] is None
                                  else f.input_shape[0] // num_replicas, *f.input_shape[1:]])
            for path, f in sparsecore.items()
        }
        config, rates = tf_build(tf_features, tf_optimizer, num_hosts=num_hosts,
                                 num_replicas=num_replicas, per_replica_input_shapes=shapes)
    except Exception as e:  # noqa: BLE001 - the outcome is the exception
        return {
            "ok": False, "exception": type(e).__name__,
            "builtin_classes": [c.__name__ for c in type(e).__mro__
                                if c.__module__ == "builtins"
                                and c not in (BaseException, Exception, object)],
            "message": str(e)[:300],
        }
    return {"ok": True, "config": config.hex(), "dynamic_learning_rates": len(rates)}


# -- the cases -------------------------------------------------------------------------------------


def table(name: str, vocabulary_size: int, embedding_dim: int, optimizer: Any = "adam",
          **fields: Any) -> dict[str, Any]:
    return {"name": name, "vocabulary_size": vocabulary_size, "embedding_dim": embedding_dim,
            "optimizer": optimizer, **fields}


def feature(name: str, table_id: str, input_shape: list[Any],
            output_shape: list[Any]) -> dict[str, Any]:
    return {"name": name, "table": table_id, "input_shape": input_shape,
            "output_shape": output_shape}


def f(fid: str) -> dict[str, str]:
    return {"$feature": fid}


ADAGRAD = {"keras": "Adagrad", "kwargs": {"learning_rate": 0.05}}
SCHEDULED = {"keras": "SGD", "schedule": {"class": "ExponentialDecay", "kwargs": {
    "initial_learning_rate": 0.1, "decay_steps": 100, "decay_rate": 0.5}}}


def cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def case(name: str, tables: dict[str, Any], features: dict[str, Any], structure: Any,
             num_hosts: int = 1, num_replicas: int = 8, **extra: Any) -> None:
        out.append({"name": name, "tables": tables, "features": features,
                    "structure": structure, "num_hosts": num_hosts,
                    "num_replicas": num_replicas, **extra})

    two = {"user": table("user", 1000, 16, "adagrad_0"), "item": table("item", 500, 8, "adagrad_0")}
    case("dict_shared_keras_optimizer", two, {
        "u": feature("user_id", "user", [128, 1], [128, 16]),
        "i": feature("item_id", "item", [128, 1], [128, 8]),
        "h": feature("history", "item", [128, 1], [128, 8]),
    }, {"user_id": f("u"), "item_id": f("i"), "history": f("h")}, num_hosts=2,
        optimizers={"adagrad_0": ADAGRAD})
    for name in ("sgd", "adagrad", "adam", "ftrl"):
        case(f"optimizer_name_{name}", {"t": table("t", 64, 4, name)},
             {"a": feature("a", "t", [16, 1], [16, 4])}, {"a": f("a")}, num_replicas=2)
    case("default_optimizer_is_adam", {"t": {"name": "t", "vocabulary_size": 64,
                                             "embedding_dim": 4}},
         {"a": feature("a", "t", [32], [32, 4])}, {"a": f("a")}, num_replicas=4)
    case("unknown_optimizer_name", {"t": table("t", 64, 4, "rmsprop")},
         {"a": feature("a", "t", [16, 1], [16, 4])}, {"a": f("a")})
    case("keras_rmsprop_refused", {"t": table("t", 64, 4, "rms")},
         {"a": feature("a", "t", [16, 1], [16, 4])}, {"a": f("a")},
         optimizers={"rms": {"keras": "RMSprop", "kwargs": {"learning_rate": 0.1}}})
    case("tpu_optimizer_passes_through", {"t": table("t", 64, 4, "tpu")},
         {"a": feature("a", "t", [16, 1], [16, 4])}, {"a": f("a")},
         optimizers={"tpu": {"tpu": "Adagrad", "kwargs": {
             "learning_rate": 0.3, "initial_accumulator_value": 0.5}}})
    case("tpu_optimizer_other_refused", {"t": table("t", 64, 4, "tpu")},
         {"a": feature("a", "t", [16, 1], [16, 4])}, {"a": f("a")},
         optimizers={"tpu": {"tpu": "AdagradMomentum", "kwargs": {"learning_rate": 0.3}}})
    # Paths joined with "." and then sorted as strings: "l.10" < "l.2", "a-b" < "a.x".
    many = {f"f{i}": feature(f"n{i}", f"t{i % 3}", [64, 1], [64, 4]) for i in range(14)}
    case("nested_paths_sorted_as_joined_strings",
         {f"t{k}": table(f"table_{k}", 100 + k, 4, "sgd") for k in range(3)}, many,
         {"a": {"x": f("f0")}, "a-b": f("f1"), "l": [f(f"f{i}") for i in range(2, 14)]},
         num_hosts=4)
    case("list_structure", {"t": table("t", 10, 2, "sgd"), "s": table("s", 20, 2, "ftrl")},
         {"a": feature("a", "s", [16, 1], [16, 2]), "b": feature("b", "t", [16, 1], [16, 2])},
         [f("a"), f("b")], num_replicas=2)
    case("single_feature", {"t": table("t", 10, 2, "sgd")},
         {"a": feature("a", "t", [16, 1], [16, 2])}, f("a"), num_replicas=2)
    case("sequence_and_multi_hot", {
        "words": table("words", 30000, 32, "adagrad_0", combiner="sqrtn"),
        "tags": table("tags", 700, 8, "adagrad_0", combiner="sum"),
    }, {
        "q": feature("query", "words", [256, 20], [256, 20, 32]),
        "t": feature("tags", "tags", [256, 5], [256, 8]),
    }, {"query": f("q"), "tags": f("t")}, num_hosts=2, num_replicas=16,
        optimizers={"adagrad_0": ADAGRAD})
    case("placement_default_device_left_out", {
        "big": table("big", 100000, 16, "sgd", placement="sparsecore"),
        "small": table("small", 50, 16, "sgd", placement="default_device"),
        "auto": table("auto", 2000, 16, "adagrad", placement="auto"),
    }, {
        "b": feature("b", "big", [64, 1], [64, 16]),
        "s": feature("s", "small", [64, 1], [64, 16]),
        "a": feature("a", "auto", [64, 1], [64, 16]),
    }, {"s": f("s"), "b": f("b"), "a": f("a")}, num_replicas=4)
    case("all_default_device", {"small": table("small", 50, 16, "sgd",
                                               placement="default_device")},
         {"s": feature("s", "small", [64, 1], [64, 16])}, {"s": f("s")})
    case("unsupported_placement", {"t": table("t", 50, 16, "sgd", placement="cpu")},
         {"s": feature("s", "t", [64, 1], [64, 16])}, {"s": f("s")})
    case("schedule_gives_each_table_a_tag", {
        "a": table("a", 100, 4, "sched"), "b": table("b", 100, 4, "sched"),
    }, {"x": feature("x", "a", [32, 1], [32, 4]), "y": feature("y", "b", [32, 1], [32, 4])},
        {"x": f("x"), "y": f("y")}, num_replicas=2, optimizers={"sched": SCHEDULED})
    case("weight_decay_clipvalue_accumulation", {"t": table("t", 100, 4, "adam")},
         {"x": feature("x", "t", [32, 1], [32, 4])}, {"x": f("x")}, num_replicas=2,
         optimizers={"adam": {"keras": "Adam", "kwargs": {
             "learning_rate": 0.002, "weight_decay": 0.004, "clipvalue": 1.0,
             "gradient_accumulation_steps": 4}}})
    case("layer_optimizer_for_tables_without", {
        "a": table("a", 100, 4, None), "b": table("b", 100, 4, "ftrl"),
    }, {"x": feature("x", "a", [32, 1], [32, 4]), "y": feature("y", "b", [32, 1], [32, 4])},
        {"x": f("x"), "y": f("y")}, num_replicas=2, optimizer="sgd_0",
        optimizers={"sgd_0": {"keras": "SGD", "kwargs": {"learning_rate": 0.05}}})
    case("layer_optimizer_name", {"a": table("a", 100, 4, None)},
         {"x": feature("x", "a", [32, 1], [32, 4])}, {"x": f("x")}, num_replicas=2,
         optimizer="adagrad")
    case("output_shape_rank_one", {"t": table("t", 10, 2, "sgd")},
         {"a": feature("a", "t", [16], [16])}, {"a": f("a")}, num_replicas=2)
    case("batch_not_divisible", {"t": table("t", 10, 2, "sgd")},
         {"a": feature("a", "t", [12, 1], [12, 2])}, {"a": f("a")}, num_replicas=8)
    case("unknown_batch", {"t": table("t", 10, 2, "sgd")},
         {"a": feature("a", "t", [None, 1], [None, 2])}, {"a": f("a")}, num_replicas=2)
    case("same_name_twice", {"t": table("t", 10, 2, "sgd"), "u": table("t", 10, 2, "sgd")},
         {"a": feature("a", "t", [16, 1], [16, 2]), "b": feature("b", "u", [16, 1], [16, 2])},
         {"a": f("a"), "b": f("b")}, num_replicas=2)
    case("bad_combiner", {"t": table("t", 10, 2, "sgd", combiner="max")},
         {"a": feature("a", "t", [16, 1], [16, 2])}, {"a": f("a")}, num_replicas=2)
    case("small_vocabulary_padded_to_hosts", {"t": table("t", 3, 2, "sgd")},
         {"a": feature("a", "t", [16, 1], [16, 2])}, {"a": f("a")}, num_hosts=4,
         num_replicas=2)
    for c in out:
        c["expect"] = keras_rs_build(c)
    return out


def main() -> None:
    document = {
        "generated_by": "tests/data/keras_rs/generate.py",
        **info, "keras": keras.__version__, "keras_rs": keras_rs.__version__,
        "cases": cases(),
    }
    out = HERE / "conversions.json"
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {out}: {len(document['cases'])} cases")


if __name__ == "__main__":
    main()
