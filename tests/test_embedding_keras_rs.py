"""keras-rs ``TableConfig``/``FeatureConfig`` objects compiled as keras-rs' TensorFlow backend does.

``tests/data/keras_rs/conversions.json`` holds, per case, keras-rs objects (tables, features,
their structure, Keras optimizers, optimizer names, TensorFlow optimizers, placements) and what
keras-rs 0.4.0 and TensorFlow 2.21 made of them: the configuration bytes and the number of dynamic
learning rates, the exception, or no TPU embedding at all (``tests/data/keras_rs/generate.py``).
The objects here are stand-ins with keras-rs' fields, as tpuemb recognises keras-rs objects by
their attributes (keras-rs is never imported).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tpuemb_cfg.embedding import (
    FTRL,
    SGD,
    Adagrad,
    AdagradMomentum,
    Adam,
    EmbeddingConfigError,
    build_config,
    from_keras,
)
from tpuemb_cfg.embedding import FeatureConfig as TpuembFeature
from tpuemb_cfg.embedding import TableConfig as TpuembTable

DATA = json.loads((Path(__file__).parent / "data" / "keras_rs" / "conversions.json").read_text())
CASES = {case["name"]: case for case in DATA["cases"]}
TPU_CLASSES = {"SGD": SGD, "Adagrad": Adagrad, "Adam": Adam, "FTRL": FTRL,
               "AdagradMomentum": AdagradMomentum}


@dataclass
class TableConfig:
    """keras-rs 0.4.0's ``keras_rs.layers.TableConfig`` fields and defaults (the initializer
    aside: Keras' ``VarianceScaling(mode="fan_out")`` object there)."""

    name: str
    vocabulary_size: int
    embedding_dim: int
    initializer: Any = None
    optimizer: Any = "adam"
    combiner: str = "mean"
    placement: str = "auto"
    max_ids_per_partition: int = 256
    max_unique_ids_per_partition: int = 256


@dataclass
class FeatureConfig:
    """keras-rs 0.4.0's ``keras_rs.layers.FeatureConfig``."""

    name: str
    table: TableConfig
    input_shape: tuple[Any, ...]
    output_shape: tuple[Any, ...]


def objects(case: dict[str, Any]) -> tuple[Any, Any]:
    """The stand-in feature structure and the layer's optimizer of a stored case."""
    made: dict[str, Any] = {}

    def optimizer(spec: Any) -> Any:
        if spec is None or spec not in case.get("optimizers", {}):
            return spec
        if spec not in made:
            entry = case["optimizers"][spec]
            made[spec] = (TPU_CLASSES[entry["tpu"]](**entry["kwargs"]) if "tpu" in entry else
                          {"class_name": entry["class_name"], "config": entry["config"]})
        return made[spec]

    tables = {}
    for tid, t in case["tables"].items():
        fields = dict(t)
        if "optimizer" in fields:
            fields["optimizer"] = optimizer(fields["optimizer"])
        tables[tid] = TableConfig(**fields)
    features = {fid: FeatureConfig(f["name"], tables[f["table"]], tuple(f["input_shape"]),
                                   tuple(f["output_shape"]))
                for fid, f in case["features"].items()}

    def build(node: Any) -> Any:
        if isinstance(node, dict) and "$feature" in node:
            return features[node["$feature"]]
        if isinstance(node, dict):
            return {k: build(v) for k, v in node.items()}
        return [build(v) for v in node]

    return build(case["structure"]), optimizer(case.get("optimizer"))


def compile_case(case: dict[str, Any], validate: bool = False) -> Any:
    structure, optimizer = objects(case)
    return build_config(structure, optimizer, num_hosts=case["num_hosts"],
                        num_replicas=case["num_replicas"], validate=validate)


def test_the_stored_outcomes_are_keras_rs_and_tensorflows() -> None:
    assert DATA["tensorflow"].startswith("2.21.") and DATA["keras_rs"] == "0.4.0"
    built = [c for c in CASES.values() if c["expect"].get("config")]
    refused = [c for c in CASES.values() if not c["expect"]["ok"]]
    assert len(built) >= 15 and len(refused) >= 8


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c["expect"].get("config")))
def test_compiles_to_the_bytes_keras_rs_gives(name: str) -> None:
    case = CASES[name]
    compiled = compile_case(case)
    assert compiled.config.SerializeToString().hex() == case["expect"]["config"]
    assert len(compiled.dynamic_learning_rates) == case["expect"]["dynamic_learning_rates"]


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if not c["expect"]["ok"]))
def test_refuses_what_keras_rs_or_tensorflow_refuses(name: str) -> None:
    case = CASES[name]
    with pytest.raises(Exception) as info:
        compile_case(case)
    classes = {c.__name__ for c in type(info.value).__mro__}
    assert set(case["expect"]["builtin_classes"]) <= classes, (info.value, case["expect"])
    assert isinstance(info.value, EmbeddingConfigError)  # a message, never a crash


def test_no_tpu_table_is_an_error_naming_the_placement() -> None:
    (case,) = [c for c in CASES.values() if c["expect"].get("no_tpu_embedding")]
    with pytest.raises(EmbeddingConfigError, match="placement='default_device'"):
        compile_case(case)


def test_paths_are_joined_and_sorted_as_keras_rs_does() -> None:
    compiled = compile_case(CASES["nested_paths_sorted_as_joined_strings"])
    # "a-b" < "a.x" < "l.0" < "l.1" < "l.10" < "l.11" ... < "l.9": the joined strings sorted.
    assert [f.path for f in compiled.features] == [
        "a-b", "a.x", "l.0", "l.1", "l.10", "l.11", "l.2", "l.3", "l.4", "l.5", "l.6", "l.7",
        "l.8", "l.9"]
    # Tables in order of first use: "a-b" is f1 (table t1), "a.x" f0 (t0), "l.0" f2 (t2).
    assert [t.name for t in compiled.config.table_descriptor] == [
        "table_1", "table_0", "table_2"]


def test_sequence_and_multi_hot_shapes() -> None:
    compiled = compile_case(CASES["sequence_and_multi_hot"])
    by_path = {f.path: f for f in compiled.features}
    # Global batch 256 over 16 replicas; the sequence keeps its axis, the embedding axis goes.
    assert by_path["query"].shape == (16, 20) and by_path["tags"].shape == (16,)
    assert [list(fd.input_shape) for fd in compiled.config.feature_descriptor] == [[16, 20], [16]]
    assert by_path["tags"].ids_per_bag == 5
    assert compiled.combiners == ["sqrtn", "sum"]


def test_the_objects_are_left_alone_and_each_table_converted_once() -> None:
    shared = TableConfig("t", 100, 4, optimizer="sgd")
    features = {"a": FeatureConfig("a", shared, (8, 1), (8, 4)),
                "b": FeatureConfig("b", shared, (8, 1), (8, 4))}
    compiled = build_config(features, num_replicas=2)
    assert len(compiled.config.table_descriptor) == 1
    assert compiled.tables[0].optimizer == SGD() and shared.optimizer == "sgd"
    assert isinstance(compiled.features[0].config, TpuembFeature)


def test_keras_rs_errors_name_the_feature() -> None:
    table = TableConfig("t", 100, 4, optimizer="sgd")
    with pytest.raises(EmbeddingConfigError, match=r"feature 'x' .*multiple of the number of "
                                                   r"replicas 8"):
        build_config({"x": FeatureConfig("x", table, (12, 1), (12, 4))}, num_replicas=8)
    with pytest.raises(EmbeddingConfigError, match="carry their shapes"):
        build_config({"x": FeatureConfig("x", table, (16, 1), (16, 4))}, num_replicas=8,
                     per_replica_batch_size=2)
    mixed = {"x": FeatureConfig("x", table, (16, 1), (16, 4)),
             "y": TpuembFeature(TpuembTable(10, 4, name="u", optimizer=SGD()))}
    with pytest.raises(TypeError, match="not both"):
        build_config(mixed, num_replicas=8)
    with pytest.raises(EmbeddingConfigError, match="unknown optimizer name 'rmsprop'"):
        build_config({"x": FeatureConfig("x", TableConfig("t", 9, 4, optimizer="rmsprop"),
                                         (16, 1), (16, 4))}, num_replicas=8)


def test_a_tensorflow_feature_config_is_named_by_its_module() -> None:
    foreign = type("FeatureConfig", (), {"__module__": "tensorflow.python.tpu.utils"})()
    with pytest.raises(TypeError, match=r"tensorflow\.python\.tpu\.utils\.FeatureConfig"):
        build_config([foreign], per_replica_batch_size=2)


def test_initializers_are_kept_for_the_executor() -> None:
    def ones(shape: Any, dtype: Any = "float32") -> Any:
        raise AssertionError("not called by the compiler")

    named = TableConfig("n", 10, 4, optimizer="sgd", initializer="glorot_uniform")
    called = TableConfig("c", 10, 4, optimizer="sgd", initializer=ones)
    compiled = build_config({"a": FeatureConfig("a", named, (4, 1), (4, 4)),
                             "b": FeatureConfig("b", called, (4, 1), (4, 4))})
    assert [t.initializer for t in compiled.tables] == ["glorot_uniform", ones]


def test_a_spec_file_with_keras_rs_objects_compiles(tmp_path: Path) -> None:
    from tpuemb_cfg.embedding.spec import load_spec

    spec = tmp_path / "model.py"
    spec.write_text(
        "from dataclasses import dataclass, field\n"
        "@dataclass\n"
        "class TableConfig:\n"
        "    name: str\n    vocabulary_size: int\n    embedding_dim: int\n"
        "    optimizer: object = 'adam'\n    combiner: str = 'mean'\n"
        "    placement: str = 'auto'\n"
        "@dataclass\n"
        "class FeatureConfig:\n"
        "    name: str\n    table: TableConfig\n    input_shape: tuple\n    output_shape: tuple\n"
        "user = TableConfig('user', 1000, 16, optimizer='adagrad_0')\n"
        "feature_config = {'user_id': FeatureConfig('user_id', user, (128, 1), (128, 16)),\n"
        "                  'item_id': FeatureConfig('item_id', TableConfig('item', 500, 8,\n"
        "                                           'adagrad_0'), (128, 1), (128, 8))}\n"
        "num_hosts = 2\nnum_replicas = 8\n"
    )
    case = CASES["dict_shared_keras_optimizer"]
    text = spec.read_text().replace("'adagrad_0'", repr(
        {"class_name": case["optimizers"]["adagrad_0"]["class_name"],
         "config": case["optimizers"]["adagrad_0"]["config"]}))
    spec.write_text(text)
    compiled = load_spec(spec).compile()
    expected = compile_case({**case, "features": {k: v for k, v in case["features"].items()
                                                  if k != "h"},
                             "structure": {"user_id": {"$feature": "u"},
                                           "item_id": {"$feature": "i"}}})
    assert compiled.config == expected.config
    assert from_keras("adagrad") == Adagrad()
