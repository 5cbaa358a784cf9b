"""The SparseCore API mirrors (``tpuemb_cfg.embedding.sparsecore``), ``compile --sparsecore`` and
``inspect`` of SparseCore specs.

The TensorFlow cases are the 30 configurations TensorFlow 2.21's own ``TPUEmbeddingV2`` code fed
to its stacker (``tests/data/sparsecore/api_tf_feed.json``, PROVENANCE-D.md): each is rebuilt
with tpuemb's classes as ``scripts/gen_tf_feed.py`` built it with TensorFlow's, converted, and
compared call by call. TensorFlow's group strings depend on ``PYTHONHASHSEED`` (the data was
recorded with 0), so groups are compared as a partition of the tables, and the layouts byte for
byte wherever their order does not depend on the group strings.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import partition, run_cli

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.embedding import (
    FTRL,
    SGD,
    Adagrad,
    AdagradMomentum,
    Adam,
    FeatureConfig,
    QuantizationConfig,
    SparseCoreEmbeddingConfig,
    TableConfig,
)
from tpuemb_cfg.embedding.sparsecore import (
    is_sparsecore_spec,
    load_sparsecore_spec,
    tensorflow_config,
)
from tpuemb_cfg.embedding.sparsecore_group import group_key, optimizer_key
from tpuemb_cfg.sparsecore.topology import Topology

DATA = Path(__file__).parent / "data" / "sparsecore"
FEED = json.loads((DATA / "api_tf_feed.json").read_text())["cases"]


# -- the recorded TensorFlow feeds ---------------------------------------------------------------


def _optimizer(description: str, shared: Adagrad) -> Any:
    """The optimizer ``gen_tf_feed.py`` describes (its ``make_optimizer`` and modes)."""
    if description.startswith("shared"):
        return shared
    if description.startswith("None"):
        return None
    if description == "new Adagrad(0.1) object":
        return Adagrad(learning_rate=0.1)
    if description == "new Adagrad(0.05)":
        return Adagrad(learning_rate=0.05)
    if description.startswith("new Adagrad(lambda"):
        return Adagrad(learning_rate=lambda: 0.1)
    kind = re.fullmatch(r"new (\w+)\(0\.1\)", description)
    assert kind, description
    return {
        "sgd": lambda: SGD(learning_rate=0.1),
        "adam": lambda: Adam(learning_rate=0.1),
        "ftrl": lambda: FTRL(learning_rate=0.1),
        "adagrad_momentum": lambda: AdagradMomentum(learning_rate=0.1, momentum=0.9),
    }[kind.group(1)]()


def _quantization(text: str | None) -> QuantizationConfig | None:
    if text is None:
        return None
    buckets = re.search(r"num_buckets=(\d+)", text)
    assert buckets
    return QuantizationConfig(num_buckets=int(buckets.group(1)), lower=-1.0, upper=1.0)


def _feed_case(case: dict[str, Any]) -> Any:
    """The case's configuration, built with tpuemb's classes, converted."""
    shared = Adagrad(learning_rate=0.1)
    tables = [
        TableConfig(vocabulary_size=t["vocabulary_size"], dim=t["dim"],
                    optimizer=_optimizer(t["optimizer"], shared),
                    quantization_config=_quantization(t["quantization"]), name=t["name"],
                    combiner=t["combiner"])
        for t in case["tables"]
    ]
    features = {f["key"]: FeatureConfig(tables[f["table_index"]], output_shape=f["output_shape"],
                                        name=f["key"]) for f in case["features"]}
    sc = SparseCoreEmbeddingConfig(
        disable_table_stacking=case["sparse_core_embedding_config"]["disable_table_stacking"])
    topology = Topology(chips=case["num_partitions"],
                        sparse_cores_per_chip=case["num_sc_per_partition"])
    return tensorflow_config(features, shared, sc, topology=topology)


@pytest.mark.parametrize("case", FEED, ids=lambda c: f"feed{c['id']}")
def test_conversion_matches_tensorflow(case: dict[str, Any]) -> None:
    """Table list, names, feature paths and groups as ``TPUEmbeddingV2`` makes them."""
    config = _feed_case(case)
    expected = case["expected"]
    assert [t.name for t in config.tables] == expected["table_order_before_sorting"]
    assert [f.name for f in config.features] == expected["flat_feature_paths"]
    recorded = [c[1] for c in expected["stacker_calls"] if c[0] == "AddTable"]
    assert partition([(t.name, t.optimizer.group) for t in config.tables]) == partition(
        [(c["table_name"], c["group"]) for c in recorded])
    assert all(t.optimizer.group.startswith("_xxtpuv3internal_") for t in config.tables)
    by_name = {t.name: t for t in config.tables}
    for call in recorded:
        assert (by_name[call["table_name"]].vocabulary_size,
                by_name[call["table_name"]].dim) == (call["table_height"], call["table_width"])


def _feed() -> Any:
    return pytest.importorskip("tpuemb_cfg.sparsecore.feed")


@pytest.mark.parametrize("case", FEED, ids=lambda c: f"feed{c['id']}")
def test_stacker_calls_and_stacking_match_tensorflow(case: dict[str, Any]) -> None:
    """All six ``AddTable`` arguments (groups as a partition), the constructor, the offsets,
    sample counts and layouts TensorFlow's feeding code produced."""
    feed = _feed()
    config = _feed_case(case)
    expected = case["expected"]
    init = expected["stacker_calls"][0]
    assert init[0] == "__init__"
    assert init[1] == {"num_partitions": config.topology.chips,
                       "sparse_cores_per_partition": config.topology.sparse_cores_per_chip,
                       "disable_table_stacking": config.disable_table_stacking}
    recorded = [c[1] for c in expected["stacker_calls"][1:]]
    calls = feed.tensorflow_stacker_calls(config)
    fields = ("table_name", "table_height", "table_width", "output_samples", "num_features")
    assert [{k: getattr(c, k) for k in fields} for c in calls] == [
        {k: c[k] for k in fields} for c in recorded]
    assert partition([(c.table_name, c.group) for c in calls]) == partition(
        [(c["table_name"], c["group"]) for c in recorded])

    stacking = feed.stack(config)
    cores = stacking.num_sparse_cores
    offsets = {t.name: [s.name, t.row_offset_in_shard * cores, t.shard_rotation]
               for s in stacking.stacks for t in s.tables}
    assert offsets == expected["table_to_stacked_table_offset"]
    assert {s.name: s.total_sample_count for s in stacking.stacks} == expected[
        "table_to_sample_count"]
    assert {f.name: f.row_offset for f in stacking.features} == expected[
        "feature_to_sample_offset"]

    layouts = feed.tensorflow_layouts(config)
    recorded_layouts = type(layouts).FromString(bytes.fromhex(expected["get_layouts_hex"]))
    groups_per_width: dict[int, set[str]] = defaultdict(set)
    for stack in stacking.stacks:
        groups_per_width[stack.padded_dim].add(stack.group)
    if all(len(g) == 1 for g in groups_per_width.values()):
        assert layouts.SerializeToString(deterministic=True).hex() == expected["get_layouts_hex"]
    else:  # same-width stacks of different groups: TensorFlow's order follows its hash seed
        def tables(message: Any) -> list[bytes]:
            return sorted(t.SerializeToString(deterministic=True) for t in message.tables)

        assert tables(layouts) == tables(recorded_layouts)


def test_some_feed_cases_order_stacks_by_group() -> None:
    """The byte comparison above is not the only one taken: cases with and without
    group-dependent order both exist among the 30."""
    mixed = 0
    for case in FEED:
        widths: dict[int, set[str]] = defaultdict(set)
        for call in case["expected"]["stacker_calls"][1:]:
            widths[-(-call[1]["table_width"] // 8) * 8].add(call[1]["group"])
        mixed += any(len(g) > 1 for g in widths.values())
    assert 0 < mixed < len(FEED)


# -- the group key -------------------------------------------------------------------------------


def test_group_key_is_value_based_and_keeps_callables_apart() -> None:
    """TensorFlow's grouping: equal hyper-parameters share a group whatever the object; 1 and
    1.0 hash alike; each learning-rate callable is its own group unless shared."""
    def schedule() -> float:
        return 0.1

    assert group_key(Adagrad(0.1), None) == group_key(Adagrad(0.1), None)
    assert group_key(SGD(1), None) == group_key(SGD(1.0), None)
    assert group_key(Adagrad(0.1), None) != group_key(Adagrad(0.05), None)
    quant = QuantizationConfig(num_buckets=2, lower=-1.0, upper=1.0)
    assert group_key(Adagrad(0.1), None) != group_key(Adagrad(0.1), quant)
    shared = Adagrad(schedule)
    a = TableConfig(10, 8, optimizer=shared, name="a")
    b = TableConfig(10, 8, optimizer=Adagrad(schedule), name="b")
    c = TableConfig(10, 8, optimizer=Adagrad(lambda: 0.1), name="c")
    config = tensorflow_config([FeatureConfig(t, output_shape=[4]) for t in (a, b, c)],
                               topology="v5p:1")
    groups = [t.optimizer.group for t in config.tables]
    assert groups[0] == groups[1] != groups[2]
    assert "learning_rate=<callable 0>" in optimizer_key(shared)  # no address in the text
    # The same bytes on every run: the string does not depend on id() or the hash seed.
    assert group_key(Adagrad(0.1), None) == (
        "_xxtpuv3internal_" + hashlib.sha1(repr((
            "(learning_rate=0.1, use_gradient_accumulation=1.0, clip_weight_min=None, "
            "clip_weight_max=None, weight_decay_factor=None, "
            "multiply_weight_decay_factor_by_learning_rate=None, clip_gradient_min=None, "
            "clip_gradient_max=None, slot_variable_creation_fn=None, "
            "low_dimensional_packing_status=0.0, initial_accumulator_value=0.1)",
            "None")).encode()).hexdigest())


def test_tensorflow_conversion_errors_and_defaults() -> None:
    t = TableConfig(10, 8)
    with pytest.raises(ValueError, match="no optimizer"):
        tensorflow_config({"f": FeatureConfig(t, output_shape=[4])}, topology="v6e-4")
    twin = TableConfig(10, 8, optimizer=SGD(), name="table_1")
    with pytest.raises(ValueError, match="both named 'table_1'"):
        tensorflow_config([FeatureConfig(twin, output_shape=[4]),
                           FeatureConfig(TableConfig(10, 8, optimizer=SGD()), output_shape=[4])],
                          topology="v6e-4")
    with pytest.raises(ValueError, match="output_shape"):
        tensorflow_config([FeatureConfig(TableConfig(10, 8, optimizer=SGD()))], topology=4)
    decayed = SGD(0.1, weight_decay_factor=0.01)
    config = tensorflow_config([FeatureConfig(TableConfig(10, 8, optimizer=decayed),
                                              output_shape=[4])], topology=4)
    assert config.tables[0].optimizer.weight_decay
    assert config.tables[0].name == "table_0"
    # a chip count alone: TensorFlow's warning-and-4 SparseCores per chip
    assert config.topology == Topology(chips=4, sparse_cores_per_chip=4,
                                       sparse_cores_defaulted=True)
    assert (config.disable_table_stacking, config.max_ids_per_chip_per_sample,
            config.initialize_tables_on_host) == (False, 64, True)
    with pytest.raises(ValueError, match="unknown TPU chip kind"):
        tensorflow_config([FeatureConfig(t, output_shape=[4])], SGD(), topology="v4-8")


def test_layouts_from_stacking_writes_what_tensorflow_writes() -> None:
    """The stacking -> layouts mapping used for jax-tpu-embedding's stacks gives TensorFlow's
    own bytes when applied to TensorFlow's stacking (all 30 recorded feeds)."""
    feed = _feed()
    from tpuemb_cfg.sparsecore.summary import layouts_from_stacking

    for case in FEED:
        config = _feed_case(case)
        ours = layouts_from_stacking(feed.stack(config)).SerializeToString(deterministic=True)
        assert ours == feed.tensorflow_layouts(config).SerializeToString(deterministic=True)


# -- specs, compile --sparsecore, inspect ---------------------------------------------------------

TF_SPEC = str(DATA / "api_tf_spec.py")
KERAS_RS_SPEC = str(DATA / "api_keras_rs_spec.py")
JAX_SPEC = str(DATA / "api_jax_spec.py")


def test_tensorflow_spec_records_origins() -> None:
    assert is_sparsecore_spec(TF_SPEC) and is_sparsecore_spec(JAX_SPEC)
    assert not is_sparsecore_spec(str(Path(__file__)))  # no SparseCore names assigned
    spec = load_sparsecore_spec(TF_SPEC)
    config = spec.config
    tables = {t.name: t for t in config.tables}
    assert [t.name for t in config.tables] == ["ctx", "item", "user"]  # first use, keys sorted
    assert {n: t.origin.line for n, t in tables.items()} == {"user": 5, "item": 6, "ctx": 7}
    # user inherits the global optimizer: its origin is the optimizer's call (line 4)
    assert tables["user"].optimizer.origin.line == 4
    assert tables["item"].optimizer.origin.line == 6
    assert [(f.name, f.origin.line, f.output_shape) for f in config.features] == [
        ("ctx", 11, (32, 8)), ("item_id", 10, (32, 24)), ("user_id", 9, (32, 2, 20))]
    assert config.setting_origins["topology"].line == 15
    assert config.setting_origins["max_ids_per_table"].line == 13
    assert config.max_ids_per_table == {"item_user": 64}
    assert config.topology.num_sparse_cores == 8
    assert spec.compiled is not None  # the same tables in the same order, for the executor
    assert [t.name for t in spec.compiled.config.table_descriptor] == ["ctx", "item", "user"]
    assert spec.compiled.combiners == ["mean", "mean", "mean"]
    params = spec.compiled.config.table_descriptor[0].optimization_parameters
    assert spec.compiled.config.table_descriptor[0].name == "ctx"
    assert params.WhichOneof("parameters") == "stochastic_gradient_descent"
    assert params.learning_rate.constant == pytest.approx(0.05)


def test_inspect_tensorflow_spec_by_hand() -> None:
    """v6e-4: N = 4 chips x 2 SparseCores = 8, rows padded to 64, widths to 8.
    item (500 x 24 -> 512 x 24) and user (1000 x 20 -> 1024 x 24) share width 24 and an equal
    Adagrad(0.1): one stack item_user (tables added by name), 1536 x 24, user at row 512 / 8 = 64
    with rotation 1 x 2 = 2. Rows per SparseCore 1536 / 8 = 192; with Adagrad's one slot
    192 x 24 x 4 x 2 = 36,864 bytes, x 2 per chip = 73,728. Elements 20,000 + 12,000 = 32,000 of
    36,864: 13.19 % padding. ctx (7 x 8 -> 64 x 8, SGD): 8 rows, 256 bytes per SparseCore."""
    _feed()  # the stacking (tpuemb_cfg.sparsecore.feed) and the layouts schema
    result = run_cli("inspect", TF_SPEC, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    stacks = {s["name"]: s for s in summary["stacks"]}
    assert list(stacks) == ["ctx", "item_user"]  # width 8 before width 24
    s = stacks["item_user"]
    assert s["padded_shape"] == [1536, 24]
    assert [(t["name"], t["row_offset_in_shard"], t["shard_rotation"]) for t in s["tables"]] == [
        ("item", 0, 0), ("user", 64, 2)]
    assert (s["elements"], s["padded_elements"], s["padding_percent"]) == (32000, 36864, 13.19)
    assert (s["rows_per_sparse_core"], s["bytes_per_sparse_core"], s["bytes_per_chip"]) == (
        192, 36864, 73728)
    assert s["samples_per_step"] == 64 + 32
    assert s["limits"]["max_ids_per_partition"] == {
        "value": 64, "source": "max_ids_per_table['item_user']", "line": 13}
    assert s["limits"]["max_unique_ids_per_partition"]["value"] == 256
    c = stacks["ctx"]
    assert (c["bytes_per_sparse_core"], c["bytes_per_chip"]) == (256, 512)
    assert c["limits"]["max_unique_ids_per_partition"]["value"] == 16
    assert (summary["bytes_per_sparse_core"], summary["bytes_per_chip"]) == (37120, 74240)
    assert summary["padding_percent"] == 14.23  # 5,320 of 37,376
    text = run_cli("inspect", TF_SPEC)
    assert "stack item_user: 1536 x 24 padded, adagrad (1 slot)" in text.stdout
    assert "per SparseCore: 192 rows, 36 KiB; per chip: 72 KiB" in text.stdout
    assert "counts only the first feature" in text.stdout  # ctx is the first feature


def test_compile_sparsecore_formats_and_check(tmp_path: Path) -> None:
    _feed()  # the stacking (tpuemb_cfg.sparsecore.feed) and the layouts schema
    out = tmp_path / "layouts.pbtxt"
    result = run_cli("compile", TF_SPEC, "--sparsecore", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "3 tables in 2 stacks" in result.stdout
    text = out.read_text()
    assert text.startswith("# Generated by `tpuemb compile --sparsecore` from api_tf_spec.py")
    from google.protobuf import text_format

    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

    layouts = text_format.Parse(text, SparseCoreTableLayouts())
    assert [(t.table_name, t.stacked_table_name, t.total_rows_per_sparse_core_shard,
             t.per_sparse_core_batch_size, t.num_features) for t in layouts.tables] == [
        ("ctx", "ctx", 8, 16, 1),  # the first feature: 32 samples / 2 SparseCores per chip
        ("item", "item_user", 192, 0, 0), ("user", "item_user", 192, 0, 0)]
    assert run_cli("compile", TF_SPEC, "--sparsecore", "-o", str(out), "--check").exit_code == 0
    binary = tmp_path / "layouts.pb"
    assert run_cli("compile", TF_SPEC, "--sparsecore", "-o", str(binary)).exit_code == 0
    assert SparseCoreTableLayouts.FromString(binary.read_bytes()) == layouts
    as_json = tmp_path / "layouts.json"
    assert run_cli("compile", TF_SPEC, "--sparsecore", "-o", str(as_json)).exit_code == 0
    assert json.loads(as_json.read_text())["tables"][1]["stacked_table_name"] == "item_user"
    out.write_text(text.replace("total_rows_per_sparse_core_shard: 8\n", "", 1))
    stale = run_cli("compile", TF_SPEC, "--sparsecore", "-o", str(out), "--check")
    assert stale.exit_code == 1 and "+  total_rows_per_sparse_core_shard: 8" in stale.stdout


def test_keras_rs_spec_keeps_dropped_limits() -> None:
    """v5p:2 (2 chips): N = 2 x 4 = 8. keras-rs 'a' and 'b' (100 x 8, SGD from "sgd") stack as a_b,
    128 + 128 rows, b at 128 / 8 = 16 rotated 1 x 4; 'c' stays on the default device. Per
    SparseCore 256 / 8 = 32 rows x 8 x 4 bytes = 1 KiB (SGD: no slots), 4 KiB per chip."""
    spec = load_sparsecore_spec(KERAS_RS_SPEC)
    config = spec.config
    assert (config.api, config.mode) == ("keras_rs", "tensorflow")
    assert config.limits_dropped_by_conversion and not config.initialize_tables_on_host
    assert [(t.name, t.max_ids_per_partition, t.max_unique_ids_per_partition, t.origin.line)
            for t in config.tables] == [("a", 32, 16, 27), ("b", 256, 256, 29)]
    assert [(f.name, f.output_shape, f.origin.line) for f in config.features] == [
        ("fa", (32, 8), 32), ("fb", (32, 8), 33)]  # global batch 64 over 2 replicas
    assert [t.optimizer.origin.line for t in config.tables] == [27, 29]  # optimizer="sgd"
    assert spec.compiled is not None
    assert [t.name for t in spec.compiled.config.table_descriptor] == ["a", "b"]
    _feed()  # the stacking (tpuemb_cfg.sparsecore.feed) and the layouts schema
    summary = json.loads(run_cli("inspect", KERAS_RS_SPEC, "--json").stdout)
    (stack,) = summary["stacks"]
    assert stack["name"] == "a_b"
    assert [(t["row_offset_in_shard"], t["shard_rotation"]) for t in stack["tables"]] == [
        (0, 0), (16, 4)]
    assert (stack["bytes_per_sparse_core"], stack["bytes_per_chip"]) == (1024, 4096)
    assert "keras-rs' conversion drops" in stack["limits"]["max_ids_per_partition"]["source"]
    assert "a=32" in stack["limits"]["max_ids_per_partition"]["source"]


def test_jax_spec_and_its_layouts(tmp_path: Path) -> None:
    """2 devices x 4 SparseCores = 8. 'a' (1000 x 16, Adagrad) and 'b' (50 x 12, SGD) differ in
    optimizer: two stacks. a: 1024 rows / 8 = 128 per SparseCore, 128 x 16 x 4 x 2 = 16 KiB;
    b: 64 x 16 padded, 8 rows, 512 bytes. One-table stacks keep their tables' limits."""
    pytest.importorskip("tpuemb_cfg.sparsecore.jte")
    spec = load_sparsecore_spec(JAX_SPEC)
    assert spec.compiled is None and spec.config.mode == "jax"
    assert [(t.name, t.origin.line, t.optimizer.origin.line) for t in spec.config.tables] == [
        ("a", 9, 10), ("b", 12, 13)]
    _feed()  # the stacking (tpuemb_cfg.sparsecore.feed) and the layouts schema
    summary = json.loads(run_cli("inspect", JAX_SPEC, "--json").stdout)
    stacks = {s["name"]: s for s in summary["stacks"]}
    assert (stacks["a"]["bytes_per_sparse_core"], stacks["b"]["bytes_per_sparse_core"]) == (
        16384, 512)
    assert stacks["b"]["padded_shape"] == [64, 16]
    assert stacks["a"]["limits"]["max_ids_per_partition"] == {
        "value": 100, "source": "TableSpec 'a' max_ids_per_partition", "line": 9}
    out = tmp_path / "jax.pbtxt"
    assert run_cli("compile", JAX_SPEC, "--sparsecore", "-o", str(out)).exit_code == 0
    from google.protobuf import text_format

    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

    layouts = text_format.Parse(out.read_text(), SparseCoreTableLayouts())
    assert [(t.table_name, t.num_partitions, t.num_sparse_cores,
             t.total_rows_per_sparse_core_shard, t.per_sparse_core_batch_size)
            for t in layouts.tables] == [("a", 2, 8, 128, 8), ("b", 2, 8, 8, 8)]


def test_spec_errors_name_the_line(tmp_path: Path) -> None:
    spec = tmp_path / "bad.py"
    spec.write_text("from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig\n"
                    "t = TableConfig(10, 8, optimizer=SGD())\n"
                    "feature_config = [FeatureConfig(t, output_shape=[4])]\n"
                    "topology = 'v9-4'\n")
    with pytest.raises(InputError) as info:
        load_sparsecore_spec(spec)
    assert info.value.line == 4 and "unknown TPU chip kind 'v9'" in str(info.value)
    result = run_cli("compile", str(spec), "--sparsecore")
    assert result.exit_code == 2 and "Traceback" not in result.output
    spec.write_text("from tpuemb_cfg.embedding import FeatureConfig, TableConfig\n"
                    "t = TableConfig(10, 8)\n"
                    "feature_config = [FeatureConfig(t, output_shape=[4])]\n"
                    "topology = 'v6e-4'\n")
    with pytest.raises(InputError, match="no optimizer") as info:
        load_sparsecore_spec(spec)
    assert info.value.line == 3


class _TensorShape:
    """A stand-in of ``tf.TensorShape``: its dimensions through ``as_list()``."""

    def __init__(self, dims: list[int]) -> None:
        self.dims = dims

    def as_list(self) -> list[int]:
        return list(self.dims)


class _TFAdagrad:
    """A stand-in of TensorFlow's ``Adagrad`` (class name and attribute dict; not tpuemb's)."""

    def __init__(self, learning_rate: Any) -> None:
        self.learning_rate = learning_rate
        self.use_gradient_accumulation = True
        self.clip_weight_min = None
        self.clip_weight_max = None
        self.weight_decay_factor = None
        self.multiply_weight_decay_factor_by_learning_rate = None
        self.initial_accumulator_value = 0.1


_TFAdagrad.__name__ = "Adagrad"


class _TFTable:
    def __init__(self, vocabulary_size: int, dim: int, optimizer: Any = None,
                 name: str | None = None) -> None:
        self.vocabulary_size, self.dim, self.optimizer, self.name = (
            vocabulary_size, dim, optimizer, name)
        self.combiner, self.initializer, self.quantization_config = "mean", None, None


class _TFFeature:
    def __init__(self, table: _TFTable, output_shape: list[int]) -> None:
        self.table, self.output_shape = table, _TensorShape(output_shape)


def test_tensorflow_objects_by_their_attributes() -> None:
    """TensorFlow's own objects are read by attributes: the algorithm from the class name,
    the output shape through ``as_list()``, the group from the attribute dict; nothing written
    back into them (TPUEmbeddingV2 works on clones)."""
    a = _TFTable(64, 8, _TFAdagrad(0.5), name="a")
    b = _TFTable(64, 8)  # unnamed, takes the global optimizer
    config = tensorflow_config({"x": _TFFeature(a, [16, 3]), "y": _TFFeature(b, [16])},
                               _TFAdagrad(0.5), topology="v5p:2")
    assert [(t.name, t.optimizer.algorithm) for t in config.tables] == [
        ("a", "adagrad"), ("table_1", "adagrad")]
    assert config.tables[0].optimizer.group == config.tables[1].optimizer.group
    assert config.features[0].output_shape == (16, 3, 8) and config.features[0].samples == 48
    assert b.name is None and b.optimizer is None


def test_inspect_layouts_file(tmp_path: Path) -> None:
    """A layouts file alone: stacks, padding and the table bytes without slots (the optimizer
    is not in it): item_user 192 rows x 24 x 4 = 18,432 bytes per SparseCore, x 2 per device
    (a partition; the file does not name the chip kind, so it has no chips)."""
    _feed()  # the stacking (tpuemb_cfg.sparsecore.feed) and the layouts schema
    out = tmp_path / "layouts.pbtxt"
    assert run_cli("compile", TF_SPEC, "--sparsecore", "-o", str(out)).exit_code == 0
    result = run_cli("inspect", str(out), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    stacks = {s["name"]: s for s in summary["stacks"]}
    assert (stacks["item_user"]["bytes_per_sparse_core"], stacks["item_user"]["bytes_per_device"],
            stacks["item_user"]["bytes_per_chip"], stacks["item_user"]["padding_percent"]) == (
        18432, 36864, None, 13.19)
    assert summary["topology"]["sparse_cores"] == 8 and summary["padding_percent"] == 14.23
    assert "SparseCore layouts" in run_cli("inspect", str(out)).stdout
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("garbage {\n")
    refused = run_cli("inspect", str(bad))
    assert refused.exit_code == 2 and "TPUEmbeddingConfiguration" in refused.output


def test_compile_without_sparsecore_points_to_the_flag() -> None:
    result = run_cli("compile", TF_SPEC)
    assert result.exit_code == 0
    assert "a SparseCore spec; `--sparsecore` writes its stacked tables" in result.stderr
    assert "table_descriptor" in result.stdout


def test_flattened_paths_and_config_checks() -> None:
    """Feature names are TensorFlow's joined paths (dict keys sorted: uppercase first);
    ``SparseCoreEmbeddingConfig`` refuses what TensorFlow's types refuse."""
    t = TableConfig(64, 8, optimizer=SGD(), name="t")
    config = tensorflow_config({"a": {"x": FeatureConfig(t, output_shape=[2])},
                                "B": [FeatureConfig(t, output_shape=[3]),
                                      FeatureConfig(t, output_shape=[4])]}, topology="v6e-1")
    assert [(f.name, f.samples) for f in config.features] == [("B/0", 3), ("B/1", 4), ("a/x", 2)]
    with pytest.raises(TypeError, match="max_ids_per_table"):
        SparseCoreEmbeddingConfig(max_ids_per_table=[("t", 8)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_ids_per_chip_per_sample"):
        SparseCoreEmbeddingConfig(max_ids_per_chip_per_sample=-1)
    assert SparseCoreEmbeddingConfig() == SparseCoreEmbeddingConfig(
        disable_table_stacking=False, max_ids_per_chip_per_sample=64, max_ids_per_table=None,
        max_unique_ids_per_table=None, allow_id_dropping=False, initialize_tables_on_host=True,
        enable_fast_table_initialization=False)


def test_keras_rs_table_stacking_and_missing_topology(tmp_path: Path) -> None:
    """keras-rs' ``table_stacking``: 'auto' stacks, None does not, anything else is refused;
    a spec without a topology is one error naming what to define."""
    _feed()  # the stacking (tpuemb_cfg.sparsecore.feed) and the layouts schema
    source = (DATA / "api_keras_rs_spec.py").read_text()
    unstacked = tmp_path / "unstacked.py"
    unstacked.write_text(source + "table_stacking = None\n")
    assert load_sparsecore_spec(unstacked).config.disable_table_stacking
    summary = json.loads(run_cli("inspect", str(unstacked), "--json").stdout)
    assert [s["name"] for s in summary["stacks"]] == ["a", "b"]
    odd = tmp_path / "odd.py"
    odd.write_text(source + "table_stacking = [['a', 'b']]\n")
    with pytest.raises(InputError, match="takes only 'auto'") as info:
        load_sparsecore_spec(odd)
    assert info.value.line == source.count("\n") + 1  # the table_stacking line
    bare = tmp_path / "bare.py"
    bare.write_text(source.replace('topology = "v5p:2"', "sparse_core_config = None"))
    with pytest.raises(InputError, match="needs `topology`"):
        load_sparsecore_spec(bare)


def test_ids_per_bag_from_each_apis_input_shapes(tmp_path: Path) -> None:
    """The ids one bag holds (SparseCoreFeature.ids_per_bag): TensorFlow's
    per_replica_input_shapes (a spec-level name, as given to build()), keras-rs' input_shape,
    jax's FeatureSpec.input_shape. [16, 3] inputs for [16] bags: 3; [16] or a [16, 4] sequence
    for [16, 4] positions: 1; a ragged last axis or no input shape: unknown."""
    table = TableConfig(100, 8, optimizer=SGD(), name="t")
    features = {"dense": FeatureConfig(table, output_shape=[16]),
                "one": FeatureConfig(table, output_shape=[16]),
                "seq": FeatureConfig(table, output_shape=[16, 4]),
                "ragged": FeatureConfig(table, output_shape=[16]),
                "none": FeatureConfig(table, output_shape=[16])}
    given = {"dense": [16, 3], "one": [16], "seq": [16, 4], "ragged": [16, None],
             "none": [16, 5]}
    config = tensorflow_config(features, topology="v6e:1", per_replica_input_shapes=given)
    assert {f.name: f.ids_per_bag for f in config.features} == {
        "dense": 3, "one": 1, "seq": 1, "ragged": None, "none": 5}
    bare = tensorflow_config(features, topology="v6e:1")
    assert {f.ids_per_bag for f in bare.features} == {None}
    with pytest.raises(ValueError, match="per_replica_input_shapes"):
        tensorflow_config(features, topology="v6e:1", per_replica_input_shapes=[[16, 3]])
    spec = tmp_path / "keras_rs_spec.py"
    spec.write_text(Path(KERAS_RS_SPEC).read_text().replace('("fa", a, (64, 1), (64, 8))',
                                                            '("fa", a, (64, 7), (64, 8))'))
    keras = load_sparsecore_spec(str(spec)).config
    assert {f.name: f.ids_per_bag for f in keras.features} == {"fa": 7, "fb": 1}
