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

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

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
    group_key,
    is_sparsecore_spec,
    load_sparsecore_spec,
    tensorflow_config,
)
from tpuemb_cfg.errors import InputError
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


def _partition(pairs: list[tuple[str, str]]) -> set[frozenset[str]]:
    """{table: key} pairs as the sets of tables sharing a key."""
    groups: dict[str, set[str]] = defaultdict(set)
    for table, key in pairs:
        groups[key].add(table)
    return {frozenset(g) for g in groups.values()}


@pytest.mark.parametrize("case", FEED, ids=lambda c: f"feed{c['id']}")
def test_conversion_matches_tensorflow(case: dict[str, Any]) -> None:
    """Table list, names, feature paths and groups as ``TPUEmbeddingV2`` makes them."""
    config = _feed_case(case)
    expected = case["expected"]
    assert [t.name for t in config.tables] == expected["table_order_before_sorting"]
    assert [f.name for f in config.features] == expected["flat_feature_paths"]
    recorded = [c[1] for c in expected["stacker_calls"] if c[0] == "AddTable"]
    assert _partition([(t.name, t.optimizer.group) for t in config.tables]) == _partition(
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
    assert _partition([(c.table_name, c.group) for c in calls]) == _partition(
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
                               topology="v5p-1")
    groups = [t.optimizer.group for t in config.tables]
    assert groups[0] == groups[1] != groups[2]
    # The same bytes on every run: the string does not depend on id() or the hash seed.
    assert group_key(Adagrad(0.1), None) == (
        "_xxtpuv3internal_" + __import__("hashlib").sha1(repr((
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
