"""How TensorFlow 2.21's TPUEmbeddingV2 feeds its stacker (tpuemb_cfg.sparsecore.feed).

Every expected number is derived by hand in the comments from the rules of
docs/sparsecore/stacking-tensorflow.md (TensorFlow's v3.py and the stacker's C++). The 30 feeds
TensorFlow recorded (tf_embedding_v2_feed.json) are checked by the API conversion's tests.
"""

from __future__ import annotations

import types
from collections.abc import Mapping

import pytest

from tpuemb_cfg.sparsecore import feed
from tpuemb_cfg.sparsecore.config import (
    SparseCoreConfig,
    SparseCoreFeature,
    SparseCoreOptimizer,
    SparseCoreTable,
)
from tpuemb_cfg.sparsecore.feed import AddTableCall
from tpuemb_cfg.sparsecore.topology import Topology


def _table(name: str, vocabulary: int, dim: int, group: str = "g",
           combiner: str = "mean") -> SparseCoreTable:
    return SparseCoreTable(name=name, vocabulary_size=vocabulary, dim=dim, combiner=combiner,
                           optimizer=SparseCoreOptimizer("adagrad", group=group))


def _feature(name: str, table: str, *shape: int) -> SparseCoreFeature:
    """``shape`` is TensorFlow's output shape; the contract appends the table's dim (ignored)."""
    return SparseCoreFeature(name=name, table=table, input_shape=shape, output_shape=(*shape, 8))


def _config(tables: tuple[SparseCoreTable, ...], features: tuple[SparseCoreFeature, ...], *,
            chips: int = 2, cores: int = 4, disable: bool = False,
            max_ids: Mapping[str, int] | None = None,
            max_unique: Mapping[str, int] | None = None) -> SparseCoreConfig:
    return SparseCoreConfig(api="tensorflow", mode="tensorflow", tables=tables,
                            features=features, topology=Topology(chips, cores),
                            disable_table_stacking=disable, max_ids_per_table=max_ids,
                            max_unique_ids_per_table=max_unique)


# Two chips of four SparseCores: N = 8, heights pad to multiples of 8N = 64.
# Flattened feature order: f_b (b, 16 samples), f_a (a, 16 x 3 = 48), f_b2 (b, 16),
# f_c (c, 16), f_d (d, 32). Table "unused" has no feature.
TABLES = (_table("b", 100, 8), _table("a", 50, 8, combiner="sum"), _table("c", 10, 16),
          _table("d", 30, 8, group="h"), _table("unused", 8, 8))
FEATURES = (_feature("f_b", "b", 16), _feature("f_a", "a", 16, 3), _feature("f_b2", "b", 16),
            _feature("f_c", "c", 16), _feature("f_d", "d", 32))


def test_calls_sorted_by_name_and_only_the_first_feature_counted() -> None:
    """Tables sorted by name (a, b, c, d; 'unused' is dropped: no feature uses it). The first
    feature is f_b: b gets its 16 samples and num_features 1, though f_b2 also uses b (the full
    count would be 32 and 2); a, c, d get 0 and 0 (their features are never counted)."""
    assert feed.tensorflow_stacker_calls(_config(TABLES, FEATURES)) == [
        AddTableCall("a", 50, 8, "g", 0, 0),
        AddTableCall("b", 100, 8, "g", 16, 1),
        AddTableCall("c", 10, 16, "g", 0, 0),
        AddTableCall("d", 30, 8, "h", 0, 0),
    ]


def test_layouts() -> None:
    """a: 50 -> 64 rows, a new stack of group (8, "g"). b: 100 -> 128 rows; activation
    4 x 8 x (16 / 4) = 128 bytes, shard 4 x 8 x 128 / 2 = 2048 bytes: joins a's stack at row
    64 / 8 = 8 of each SparseCore, rotation (1 x 8 / 2) mod 8 = 4; 16 / 4 = 4 samples per
    SparseCore. c: width 16, its own group. d: group "h". Output order (8, "g"), (8, "h"),
    (16, "g"): a, b, d, c. The a_b stack has (64 + 128) / 8 = 24 rows per SparseCore."""
    layouts = feed.tensorflow_layouts(_config(TABLES, FEATURES)).tables
    assert [(t.table_name, t.stacked_table_name) for t in layouts] == [
        ("a", "a_b"), ("b", "a_b"), ("d", "d"), ("c", "c")]
    b = layouts[1]
    assert (b.sparse_core_shard_row_offset, b.sparse_core_shard_rotation) == (8, 4)
    assert (b.total_rows_per_sparse_core_shard, b.per_sparse_core_batch_size) == (24, 4)
    assert list(b.unsharded_padded_shape) == [128, 8]


def test_stacking_offsets_over_all_features() -> None:
    """After GetLayouts TensorFlow counts every feature, in flattened order, per stack:
    a_b: f_b at 0 (16 samples), f_a at 16 (48), f_b2 at 16 + 48 = 64; total 80.
    c: f_c at 0, total 16. d: f_d at 0, total 32.
    col_offset = row offset in shard x N: b's 8 x 8 = 64, a's 0; col_shift = rotation."""
    s = feed.stack(_config(TABLES, FEATURES))
    assert s.mode == "tensorflow"
    assert (s.num_partitions, s.sparse_cores_per_partition, s.num_sparse_cores) == (2, 4, 8)
    assert [(st.name, st.total_sample_count) for st in s.stacks] == [
        ("a_b", 80), ("d", 32), ("c", 16)]
    assert [(f.name, f.stack, f.row_offset, f.col_offset, f.col_shift, f.samples)
            for f in s.features] == [
        ("f_b", "a_b", 0, 64, 4, 16),
        ("f_a", "a_b", 16, 0, 0, 48),
        ("f_b2", "a_b", 64, 64, 4, 16),
        ("f_c", "c", 0, 0, 0, 16),
        ("f_d", "d", 0, 0, 0, 32),
    ]
    a_b = s.stack("a_b")
    # the combiner of the stack's first table (a: "sum"), the group string of the calls
    assert (a_b.combiner, a_b.group) == ("sum", "g")
    assert [(t.name, t.padded_vocabulary_size, t.row_offset_in_shard, t.shard_rotation,
             t.output_samples, t.num_features) for t in a_b.tables] == [
        ("a", 64, 0, 0, 0, 0), ("b", 128, 8, 4, 16, 1)]
    assert a_b.padded_vocabulary_size == 192
    assert [f.name for f in s.features_of("a_b")] == ["f_b", "f_a", "f_b2"]


def test_limits_by_stacked_name_with_256_fallback() -> None:
    """Limits are looked up by the stacked name: "a" (a table name, not a stack) is ignored, so
    a_b takes 100; a stack missing from a mapping, or a missing mapping, gets 256."""
    s = feed.stack(_config(TABLES, FEATURES, max_ids={"a_b": 100, "a": 7, "d": 50},
                           max_unique={"c": 9}))
    assert [(st.name, st.max_ids_per_partition, st.max_unique_ids_per_partition)
            for st in s.stacks] == [("a_b", 100, 256), ("d", 50, 256), ("c", 256, 9)]
    assert feed.DEFAULT_MAX_IDS_PER_TABLE == feed.DEFAULT_MAX_UNIQUE_IDS_PER_TABLE == 256


def test_the_bug_lets_tables_stack_that_the_activation_limit_would_split() -> None:
    """One chip of 4 SparseCores, width 512. x's feature fx comes first: 2048 samples,
    4 x 512 x (2048 / 4) = 1 MiB of activations. y's feature fy (8192 samples) would cost
    4 x 512 x 2048 = 4 MiB > 2 MiB, but the bug tells the stacker 0: 1 MiB + 0 < 2 MiB, so y
    joins x. The sample count afterwards is right: 2048 + 8192 = 10240, fy at 2048."""
    config = _config((_table("x", 8, 512), _table("y", 8, 512)),
                     (_feature("fx", "x", 2048), _feature("fy", "y", 8192)), chips=1)
    assert [c.output_samples for c in feed.tensorflow_stacker_calls(config)] == [2048, 0]
    s = feed.stack(config)
    assert [(st.name, st.total_sample_count) for st in s.stacks] == [("x_y", 10240)]
    assert [f.row_offset for f in s.features] == [0, 2048]


def test_python_string_order_of_names() -> None:
    """sorted(): 'B' (0x42) < '_z' (0x5f) < 'a' (0x61); one group, so one stack named by C++'s
    join: 'B' + '_' + '_z' + '_' + 'a'. Rotations (k x 4 / 1) mod 4 with N = 4: 0, 0, 0."""
    config = _config((_table("a", 8, 8), _table("_z", 8, 8), _table("B", 8, 8)),
                     (_feature("f", "a", 4), _feature("g", "_z", 4), _feature("h", "B", 4)),
                     chips=1)
    assert [c.table_name for c in feed.tensorflow_stacker_calls(config)] == ["B", "_z", "a"]
    s = feed.stack(config)
    assert [st.name for st in s.stacks] == ["B__z_a"]
    # rows: 8 -> 32 (8N = 32), so offsets 0, 32/4 = 8, 64/4 = 16
    assert [t.row_offset_in_shard for t in s.stacks[0].tables] == [0, 8, 16]
    assert [t.shard_rotation for t in s.stacks[0].tables] == [0, 0, 0]


def test_disable_table_stacking() -> None:
    s = feed.stack(_config(TABLES, FEATURES, disable=True))
    assert [st.name for st in s.stacks] == ["a", "b", "d", "c"]
    # b alone: col_offset 0; f_b2 after f_b in b's own stack
    assert [(f.name, f.row_offset, f.col_offset) for f in s.features[:3]] == [
        ("f_b", 0, 0), ("f_a", 0, 0), ("f_b2", 16, 0)]


def test_no_features_no_calls() -> None:
    """TensorFlow's loop over the features does not run: no AddTable, no stacks."""
    config = _config(TABLES, ())
    assert feed.tensorflow_stacker_calls(config) == []
    assert feed.stack(config).stacks == ()


def test_errors() -> None:
    with pytest.raises(ValueError, match=r"feature 'f' uses table 'zz', which the configuration "
                                         r"does not define; known tables: \['a'\]"):
        feed.stack(_config((_table("a", 8, 8),), (_feature("f", "zz", 4),)))
    with pytest.raises(ValueError, match=r"two tables are named 'a'"):
        feed.stack(_config((_table("a", 8, 8), _table("a", 9, 8)), (_feature("f", "a", 4),)))
    bad = SparseCoreConfig(api="tensorflow", mode="torch", tables=(),  # type: ignore[arg-type]
                           features=(), topology=Topology(1, 4))
    with pytest.raises(ValueError, match=r"unknown stacking mode 'torch'"):
        feed.stack(bad)


def test_jax_mode_goes_to_jte(monkeypatch: pytest.MonkeyPatch) -> None:
    """``mode="jax"`` hands the configuration to ``jte.stack_config`` unchanged."""
    seen = []
    fake = types.ModuleType("tpuemb_cfg.sparsecore.jte")
    fake.stack_config = lambda config: seen.append(config) or "stacked"  # type: ignore[attr-defined]
    monkeypatch.setattr(feed, "jte", fake)
    config = SparseCoreConfig(api="jax", mode="jax", tables=(), features=(),
                              topology=Topology(1, 4))
    assert feed.stack(config) == "stacked"
    assert seen == [config]


def test_lazy_exports() -> None:
    import tpuemb_cfg.sparsecore as sc

    assert sc.stack is feed.stack
    assert sc.SparseCoreLayoutStacker.__module__ == "tpuemb_cfg.sparsecore.stacker"
