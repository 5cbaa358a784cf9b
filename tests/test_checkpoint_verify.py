"""``checkpoints.embedding`` and ``checkpoints.verify`` on checkpoints held in memory, with
hand-derived layouts (TensorFlow's arithmetic: docs/diff/checkpoints.md)."""

from __future__ import annotations

import numpy as np
import pytest

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.checkpoints.embedding import MemorySource, find_embedding, unescape
from tpuemb_cfg.checkpoints.verify import table_rows, verify
from tpuemb_cfg.model.checkpoint import (
    CheckpointVariable,
    CheckpointView,
    LayoutRecord,
    saved_layouts,
)

KEY = "/.ATTRIBUTES/VARIABLE_VALUE"


def _layout(table: str, stack: str, rows: int, padded: int, offset: int, rotation: int,
            total: int, n: int = 4) -> LayoutRecord:
    return LayoutRecord(table, stack, n, 1, total, (rows, 2), (padded, 8), offset, rotation)


def test_unescape_undoes_tensorflow_escaping() -> None:
    assert unescape("item_user.Saccumulators") == "item_user/accumulators"
    assert unescape("a..b.Sc") == "a.b/c"


def test_table_rows_by_hand() -> None:
    """N = 4, one table of 5 rows padded to 32 (8 x N): 8 rows per SparseCore. Padded row j is
    on SparseCore (j + rotation) mod 4 at row j // 4 of its shard."""
    stacked, table = table_rows(_layout("t", "t", 5, 32, 0, 0, 8))
    assert list(zip(stacked.tolist(), table.tolist(), strict=True)) == [
        (0, 0), (1, 4), (8, 1), (16, 2), (24, 3)]
    # rotated by 1: row 0 on SparseCore 1; a second table at offset 8 of a 16-row shard
    stacked, table = table_rows(_layout("u", "tu", 5, 32, 8, 1, 16))
    assert sorted(zip(table.tolist(), stacked.tolist(), strict=True)) == [
        (0, 16 + 8), (1, 32 + 8), (2, 48 + 8), (3, 0 + 8), (4, 16 + 9)]


def _stacked(tables: dict[str, np.ndarray], layouts: list[LayoutRecord]) -> np.ndarray:
    n = layouts[0].num_sparse_cores
    out = np.zeros((layouts[0].total_rows_per_sparse_core_shard * n, 8), np.float32)
    for layout in layouts:
        stacked, rows = table_rows(layout)
        out[stacked, :2] = tables[layout.table_name][rows]
    return out


def test_find_and_verify_a_stacked_checkpoint() -> None:
    layouts = [_layout("item", "item_user", 5, 32, 0, 0, 16),
               _layout("user", "item_user", 6, 32, 8, 1, 16)]
    item = np.arange(10, dtype=np.float32).reshape(5, 2)
    user = np.full((6, 2), 0.1, np.float32)
    user[2] = [np.nan, 1.0]
    user[4] = [5.0, 5.0]
    params = _stacked({"item": item, "user": np.ones((6, 2), np.float32)}, layouts)
    accum = _stacked({"item": np.full((5, 2), 0.1, np.float32), "user": user}, layouts)
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

    message = SparseCoreTableLayouts()
    for r in layouts:
        t = message.tables.add(table_name=r.table_name, stacked_table_name=r.stacked_table_name,
                               num_sparse_cores=4, num_partitions=1,
                               total_rows_per_sparse_core_shard=16,
                               sparse_core_shard_row_offset=r.sparse_core_shard_row_offset,
                               sparse_core_shard_rotation=r.sparse_core_shard_rotation)
        t.unsharded_shape.extend(r.unsharded_shape)
        t.unsharded_padded_shape.extend(r.unsharded_padded_shape)
    source = MemorySource({
        "model/embedding/item_user" + KEY: params,
        "model/embedding/item_user.Saccumulators" + KEY: accum,
        "model/embedding/_sparse_core_table_layouts" + KEY:
            [saved_layouts(message).SerializeToString()],
        "model/dense/kernel" + KEY: np.zeros((3, 3), np.float32),
        "_CHECKPOINTABLE_OBJECT_GRAPH": [b""],
    })
    found = find_embedding(source)
    assert (found.kind, found.object_path) == ("sparsecore", "model/embedding")
    assert [v.name for v in found.variables] == ["item_user", "item_user/accumulators"]
    assert [v.slot for v in found.variables] == ["parameters", "accumulators"]
    assert found.layouts == tuple(layouts)
    assert "model/dense/kernel" + KEY in found.other_keys
    expected = CheckpointView("sparsecore", (
        CheckpointVariable("item_user", ("item", "user"), "parameters", (64, 8)),
        CheckpointVariable("item_user/accumulators", ("item", "user"), "accumulators", (64, 8)),
    ), tuple(layouts), "model/embedding")
    report = verify(source, found, expected, initial={("item", "accumulators"): 0.1,
                                                      ("user", "accumulators"): 0.1},
                    )
    assert [c.status for c in report.variables] == ["ok", "ok"]
    assert report.layouts_differ == ()
    states = {(s.table, s.slot): s for s in report.states}
    assert states[("user", "accumulators")].nonfinite == 1
    assert states[("user", "accumulators")].initial == 4  # rows 0, 1, 3, 5
    assert states[("item", "accumulators")].initial == 5
    assert (states[("item", "parameters")].rows, states[("item", "parameters")].nonfinite) == (5, 0)
    assert report.restore.outcome == "restores" and not report.ok  # a NaN row


def test_missing_extra_and_wrong_shapes_are_named() -> None:
    source = MemorySource({"embedding/user" + KEY: np.zeros((4, 2), np.float32),
                           "embedding/extra" + KEY: np.zeros((3, 2), np.float32)})
    found = find_embedding(source, tables=["user"])
    assert (found.kind, found.object_path) == ("unsharded", "embedding")
    expected = CheckpointView("unsharded", (
        CheckpointVariable("user", ("user",), "parameters", (5, 2)),
        CheckpointVariable("user/accumulators", ("user",), "accumulators", (5, 2)),
    ))
    report = verify(source, found, expected)
    statuses = {c.name: c.status for c in report.variables}
    assert statuses == {"user": "shape", "user/accumulators": "missing", "extra": "extra"}
    assert not report.ok


def test_bad_layouts_and_two_embeddings_are_one_error() -> None:
    with pytest.raises(InputError, match="do not parse as SparseCoreTableLayouts"):
        find_embedding(MemorySource({"embedding/_sparse_core_table_layouts" + KEY: [b"\xff\xff"]}))
    two = MemorySource({"a/_sparse_core_table_layouts" + KEY: [b""],
                        "b/_sparse_core_table_layouts" + KEY: [b""]})
    with pytest.raises(InputError, match="2 SparseCore embeddings"):
        find_embedding(two)
    assert find_embedding(two, object_path="b").object_path == "b"


def test_state_round_trip_through_stacked_variables() -> None:
    """tpuemb's state -> the stacked variables of a view -> the state again, bit for bit;
    padding stays zero."""
    from tpuemb_cfg.checkpoints.embedding import EmbeddingCheckpoint, EmbeddingVariable
    from tpuemb_cfg.checkpoints.state import checkpoint_variables, state_from_checkpoint

    layouts = (_layout("item", "item_user", 5, 32, 0, 0, 16),
               _layout("user", "item_user", 6, 32, 8, 1, 16))
    view = CheckpointView("sparsecore", (
        CheckpointVariable("item_user", ("item", "user"), "parameters", (64, 8)),
        CheckpointVariable("item_user/accumulators", ("item", "user"), "accumulators", (64, 8)),
    ), layouts)
    rng = np.random.default_rng(3)
    state = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in (
        ("table/item", (5, 2)), ("table/user", (6, 2)), ("slot/item/accumulators", (5, 2)),
        ("slot/user/accumulators", (6, 2)))}
    variables = checkpoint_variables(state, view)
    assert variables["item_user"].shape == (64, 8)
    assert np.count_nonzero(variables["item_user"]) == (5 + 6) * 2  # the rest is padding
    source = MemorySource({f"embedding/{k.replace('/', '.S')}{KEY}": v
                           for k, v in variables.items()})
    found = EmbeddingCheckpoint("<memory>", "sparsecore", "embedding", tuple(
        EmbeddingVariable(name, f"embedding/{name.replace('/', '.S')}{KEY}", "item_user",
                          name.partition("/")[2] or "parameters", (64, 8), "float32")
        for name in variables), layouts)
    back = state_from_checkpoint(source, found, [("item", 5, 2, ("accumulators",)),
                                                 ("user", 6, 2, ("accumulators",))])
    assert sorted(back) == sorted(state)
    for key, value in state.items():
        assert back[key].tobytes() == value.tobytes(), key
    with pytest.raises(InputError, match="wrong size"):
        state_from_checkpoint(source, found, [("item", 7, 2, ())])
