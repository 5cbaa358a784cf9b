"""The reshard engine (tpuemb_cfg/checkpoints/): TensorFlow 2.21's own adapter output on the
stored layout pairs (tests/data/checkpoints/reshard/, generator
tools/tf_reference/reshard_pairs.py), slots against the unshard/shard reference, streaming with
a tiny memory cap, hand-derived small cases, hostile inputs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tpuemb_cfg.checkpoints.reshard import (
    MIN_BLOCK_ROWS,
    ArraySink,
    ArraySource,
    KeyedSink,
    KeyedSource,
    ReshardError,
    execute_reshard,
    plan_reshard,
    reshard_arrays,
)
from tpuemb_cfg.checkpoints.sharding import (
    LayoutError,
    as_records,
    shard,
    shard_rows,
    stacks_of,
    table_rows,
    unshard,
)
from tpuemb_cfg.model.checkpoint import LayoutRecord
from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

DATA = Path(__file__).parent / "data" / "checkpoints" / "reshard"
INDEX = json.loads((DATA / "pairs.json").read_text())
PAIRS = {p["id"]: p for p in INDEX["pairs"]}
ARRAYS = dict(np.load(DATA / "arrays.npz"))


def _side(side: dict[str, Any]) -> Any:
    if side["layouts_hex"] is None:
        return {t: tuple(s) for t, s in side["tables"].items()} if "tables" in side else None
    message = SparseCoreTableLayouts()
    message.ParseFromString(bytes.fromhex(side["layouts_hex"]))
    return message


def _arrays(pair: dict[str, Any], which: str) -> dict[str, np.ndarray]:
    return {n: ARRAYS[f"{pair['id']}:{which}:{n}"] for n in pair[which]["arrays"]}


def _plan(pair: dict[str, Any], **kw: Any) -> Any:
    return plan_reshard(_side(pair["old"]), _side(pair["new"]), **kw)


def test_the_stored_pairs_cover_the_issue() -> None:
    assert INDEX["tensorflow"].startswith("2.21")
    kinds = [p["kind"] for p in INDEX["pairs"]]
    assert len(kinds) >= 24 and kinds.count("unshard") >= 4 and kinds.count("shard") >= 4
    assert (DATA / "arrays.npz").stat().st_size + (DATA / "pairs.json").stat().st_size < 2e6


@pytest.mark.parametrize("pid", sorted(PAIRS))
def test_reshard_equals_tensorflow_bit_for_bit(pid: str) -> None:
    pair = PAIRS[pid]
    plan = _plan(pair)
    assert plan.adapter == pair["adapter"]
    got = reshard_arrays(plan, _arrays(pair, "old"))
    want = _arrays(pair, "new")
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        assert got[name].tobytes() == value.tobytes(), name


@pytest.mark.parametrize("pid", sorted(p for p in PAIRS if PAIRS[p]["kind"] != "reshard"))
def test_reference_unshard_and_shard_equal_tensorflow(pid: str) -> None:
    pair = PAIRS[pid]
    old, new = _arrays(pair, "old"), _arrays(pair, "new")
    if pair["kind"] == "unshard":
        for stack, layouts in stacks_of(as_records(_side(pair["old"]))).items():
            for value, layout in zip(unshard(old[stack], layouts), layouts, strict=True):
                assert value.tobytes() == new[layout.table_name].tobytes()
    else:
        for stack, layouts in stacks_of(as_records(_side(pair["new"]))).items():
            assert shard(old, layouts).tobytes() == new[stack].tobytes()


def _reference(pair: dict[str, Any], old: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """NEW's variables by the whole-array reference: unshard every OLD stack (or take the
    tables), shard with NEW's layouts (or keep the tables); copies when no adapter."""
    old_side, new_side = _side(pair["old"]), _side(pair["new"])
    if not pair["adapter"]:
        return dict(old)
    if isinstance(old_side, dict):
        tables = dict(old)
    else:
        tables = {}
        for stack, layouts in stacks_of(as_records(old_side)).items():
            for value, layout in zip(unshard(old[stack], layouts), layouts, strict=True):
                tables[layout.table_name] = value
    if new_side is None or isinstance(new_side, dict):
        return tables
    return {stack: shard(tables, layouts)
            for stack, layouts in stacks_of(as_records(new_side)).items()}


@pytest.mark.parametrize("pid", sorted(PAIRS))
def test_slots_are_resharded_with_their_stack(pid: str) -> None:
    """TensorFlow's adapter never restores a slot (CKPT004); tpuemb moves each slot's rows as the
    parameters'. Checked against the unshard/shard reference on other values."""
    pair = PAIRS[pid]
    plan = _plan(pair, slots=("accumulators",))
    rng = np.random.default_rng(7)
    old = {n: v for n, v in _arrays(pair, "old").items()}
    slots = {f"{n}/accumulators": rng.standard_normal(v.shape).astype(np.float32)
             for n, v in old.items()}
    got = reshard_arrays(plan, {**old, **slots})
    want = _reference(pair, {n.split("/")[0]: v for n, v in slots.items()})
    assert sorted(n for n in got if n.endswith("/accumulators")) == sorted(
        f"{n}/accumulators" for n in want)
    for name, value in want.items():
        assert got[f"{name}/accumulators"].tobytes() == value.tobytes(), name


class CountingSource(ArraySource):
    """Records every read's rows."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        super().__init__(arrays)
        self.reads: list[tuple[str, int, int]] = []

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        self.reads.append((name, start, stop))
        return super().read_rows(name, start, stop)


@pytest.mark.parametrize("pid", ["topology_v5p2_to_v6e2", "topology_v6e2_to_v5p4",
                                 "padding_v6e2_to_v5p4", "rotations_stacking_off",
                                 "shard_rotations", "unshard_padding", "identical",
                                 "stacking_on"])
def test_streaming_with_a_tiny_cap_gives_the_same_bytes(pid: str) -> None:
    pair = PAIRS[pid]
    plan = _plan(pair, slots=("accumulators",))
    old = _arrays(pair, "old")
    old.update({f"{n}/accumulators": v * 2 for n, v in old.items()})
    whole = reshard_arrays(plan, old)
    widest = max(v.shape[1] for v in old.values()) * 4
    cap = 2 * MIN_BLOCK_ROWS * ((plan.amplification + 3) * widest + 112)
    source, sink = CountingSource(old), ArraySink()
    stats = execute_reshard(plan, source, sink, memory_cap=cap)
    assert sorted(sink.arrays) == sorted(whole)
    for name, value in whole.items():
        assert sink.arrays[name].tobytes() == value.tobytes()
    # several blocks a variable, each within the cap (a block and the sink's copy at least)
    assert stats.blocks > len(plan.variables)
    assert stats.block_rows * 2 * min(v.shape[1] * 4 for v in whole.values()) <= cap
    # no read is longer than a block's rows times the amplification
    assert max(stop - start for _, start, stop in source.reads) <= (
        stats.block_rows * plan.amplification)
    assert stats.rows_written == sum(v.shape[0] for v in whole.values())


def test_a_cap_below_one_block_is_refused_before_reading() -> None:
    pair = PAIRS["topology_v5p2_to_v5p4"]
    source = CountingSource(_arrays(pair, "old"))
    sink = ArraySink()
    with pytest.raises(ReshardError, match=r"memory cap 1000 bytes cannot hold a block of 8 rows"):
        execute_reshard(_plan(pair), source, sink, memory_cap=1000)
    assert source.reads == [] and sink.arrays == {}
    with pytest.raises(ReshardError, match="memory_cap must be a positive"):
        execute_reshard(_plan(pair), source, sink, memory_cap=0)


# -- hand-derived ------------------------------------------------------------------------------

def _layout(name: str, stack: str, rows: int, padded: int, offset: int, rotation: int, *,
            n: int = 4, per_shard: int = 4) -> LayoutRecord:
    dim = 2
    return LayoutRecord(table_name=name, stacked_table_name=stack, num_sparse_cores=n,
                        num_partitions=1, total_rows_per_sparse_core_shard=per_shard,
                        unsharded_shape=(rows, dim), unsharded_padded_shape=(padded, dim),
                        sparse_core_shard_row_offset=offset, sparse_core_shard_rotation=rotation)


# N = 4 SparseCores, R = 4 rows a shard: table A (8 rows) at offset 0, rotation 0; table B (6
# rows, padded 8) at offset 2, rotation 1. Shard s holds A[s], A[4 + s], B[(s - 1) mod 4],
# B[4 + (s - 1) mod 4]; B's rows 6 and 7 are padding.
A, B = _layout("a", "a_b", 8, 8, 0, 0), _layout("b", "a_b", 6, 8, 2, 1)
BY_HAND = [("a", 0), ("a", 4), ("b", 3), ("b", 7),
           ("a", 1), ("a", 5), ("b", 0), ("b", 4),
           ("a", 2), ("a", 6), ("b", 1), ("b", 5),
           ("a", 3), ("a", 7), ("b", 2), ("b", 6)]


def _tables() -> dict[str, np.ndarray]:
    return {"a": np.arange(16, dtype=np.float32).reshape(8, 2) + 100,
            "b": np.arange(12, dtype=np.float32).reshape(6, 2) + 200}


def _by_hand(tables: dict[str, np.ndarray]) -> np.ndarray:
    return np.array([tables[t][j] if j < len(tables[t]) else [0, 0] for t, j in BY_HAND],
                    dtype=np.float32)


def test_hand_derived_shard_unshard_and_row_maps() -> None:
    tables = _tables()
    stacked = shard(tables, [A, B])
    assert stacked.tobytes() == _by_hand(tables).tobytes()
    a, b = unshard(stacked, [A, B])
    assert a.tobytes() == tables["a"].tobytes() and b.tobytes() == tables["b"].tobytes()
    # row maps: b's row 0 is on shard 1 at row 2; a's row 5 on shard 1 at row 1
    assert shard_rows(B, np.array([0, 3, 5])).tolist() == [1 * 4 + 2, 0 * 4 + 2, 2 * 4 + 3]
    assert shard_rows(A, np.array([5])).tolist() == [5]
    which, rows = table_rows((A, B), np.arange(16))
    assert [("ab"[w], int(j)) for w, j in zip(which, rows, strict=True)] == BY_HAND


def test_hand_derived_reshard_to_two_sparse_cores_and_per_table() -> None:
    # N = 2, R = 7: a (8 rows, 4 a shard) at 0, rotation 1; b (6 rows, padded 6) at 4, rotation 0
    a2 = _layout("a", "a_b", 8, 8, 0, 1, n=2, per_shard=7)
    b2 = _layout("b", "a_b", 6, 6, 4, 0, n=2, per_shard=7)
    tables = _tables()
    old = {"a_b": _by_hand(tables)}
    got = reshard_arrays(plan_reshard([A, B], [a2, b2]), old)["a_b"]
    # shard 0: a[1], a[3], a[5], a[7], b[0], b[2], b[4]; shard 1: a[0], ..., b[1], b[3], b[5]
    want = np.concatenate([tables["a"][[1, 3, 5, 7]], tables["b"][[0, 2, 4]],
                           tables["a"][[0, 2, 4, 6]], tables["b"][[1, 3, 5]]])
    assert got.tobytes() == want.tobytes()
    per_table = reshard_arrays(plan_reshard([A, B], None), old)
    assert per_table["a"].tobytes() == tables["a"].tobytes()
    assert per_table["b"].tobytes() == tables["b"].tobytes()
    back = reshard_arrays(plan_reshard({"a": (8, 2), "b": (6, 2)}, [A, B]), tables)
    assert back["a_b"].tobytes() == old["a_b"].tobytes()


def test_resize_pads_and_truncates_only_when_asked() -> None:
    b_big = _layout("b", "a_b", 8, 8, 2, 1)
    old = {"a_b": _by_hand(_tables())}
    with pytest.raises(ReshardError, match=r"table 'b' is \[6, 2\] in the checkpoint and \[8, 2\]"):
        plan_reshard([A, B], [A, b_big])
    plan = plan_reshard([A, B], [A, b_big], resize=True)
    assert plan.resized == ("b",)
    grown = reshard_arrays(plan, old)
    b = unshard(grown["a_b"], [A, b_big])[1]
    assert b[:6].tobytes() == _tables()["b"].tobytes() and not b[6:].any()
    shrunk = reshard_arrays(plan_reshard({"a": (8, 2), "b": (8, 2)}, [A, B], resize=True),
                            {"a": _tables()["a"], "b": np.ones((8, 2), np.float32)})
    assert unshard(shrunk["a_b"], [A, B])[1].tolist() == [[1.0, 1.0]] * 6


# -- hostile inputs ------------------------------------------------------------------------------

@pytest.mark.parametrize(("change", "message"), [
    ({"sparse_core_shard_row_offset": 3}, r"table 'b' \(stack 'a_b'\): row offset 3 in each "
     r"shard, where the tables before it end at row 2"),
    ({"unsharded_padded_shape": (6, 2)}, "6 padded rows are not a multiple of its 4"),
    ({"num_sparse_cores": 8}, "num_sparse_cores 8, where table 'a' of the same stack has 4"),
    ({"unsharded_padded_shape": (8, 4)}, "padded width 4, where table 'a'"),
    ({"unsharded_shape": (9, 2)}, r"unsharded_shape \[9, 2\] and unsharded_padded_shape"),
    ({"num_partitions": 3}, "4 SparseCores on 3 partitions"),
    ({"total_rows_per_sparse_core_shard": 5}, "total_rows_per_sparse_core_shard 5"),
])
def test_inconsistent_layouts_are_refused_naming_the_table(change: dict[str, Any],
                                                           message: str) -> None:
    bad = replace(B, **change)
    with pytest.raises(LayoutError, match=message) as info:
        plan_reshard([A, bad], None)
    assert info.value.table in ("a", "b")


def test_arrays_that_disagree_with_the_layouts_are_refused() -> None:
    plan = plan_reshard([A, B], None)
    with pytest.raises(ReshardError, match=r"variable 'a_b' is \[15, 2\] in the checkpoint; the "
                       r"layouts of stack 'a_b' \(4 SparseCores x 4 rows\) say \[16, 2\]"):
        reshard_arrays(plan, {"a_b": np.zeros((15, 2), np.float32)})
    with pytest.raises(ReshardError, match="the checkpoint has no variable 'a_b'"):
        reshard_arrays(plan, {"x": np.zeros((16, 2), np.float32)})
    with pytest.raises(ReshardError, match="dtype <U1: only numeric"):
        reshard_arrays(plan, {"a_b": np.full((16, 2), "x")})
    from_tables = plan_reshard(None, [A, B])
    with pytest.raises(ReshardError, match=r"variable 'b' is \[7, 2\].*table 'b'.*\[6, 2\]"):
        reshard_arrays(from_tables, {"a": np.zeros((8, 2), np.float32),
                                     "b": np.zeros((7, 2), np.float32)})
    with pytest.raises(LayoutError, match=r"stack 'a_b' is \[16, 3\]; its layouts say \[16, 2\]"):
        unshard(np.zeros((16, 3), np.float32), [A, B])
    with pytest.raises(LayoutError, match=r"table 'b' is \[5, 2\]; its layout says \[6, 2\]"):
        shard({"a": np.zeros((8, 2)), "b": np.zeros((5, 2))}, [A, B])


def test_missing_tables_slots_and_nonsense_sides_are_refused() -> None:
    c = _layout("c", "c", 4, 4, 0, 0, per_shard=1)
    with pytest.raises(ReshardError, match=r"table\(s\) 'c' of NEW are not in the checkpoint"):
        plan_reshard([A, B], [A, B, c])
    assert plan_reshard([A, B, c], [A, B]).dropped == ("c",)
    # OLD's stack a_b takes the slots of its first table by name ('a': accumulators); NEW, per
    # table, asks table 'b' for momenta
    with pytest.raises(ReshardError, match="table 'b': NEW's 'b' has slot 'momenta'; the "
                       "checkpoint's 'a_b' has slots 'accumulators'"):
        plan_reshard([A, B], None, slots={"a": ["accumulators"], "b": ["momenta"]})
    with pytest.raises(ReshardError, match="per-table variables on both sides"):
        plan_reshard(None, None)
    with pytest.raises(ReshardError, match=r"OLD table 'a': shape \[8\]"):
        plan_reshard({"a": (8,)}, [A, B])
    with pytest.raises(LayoutError, match="a layout must be a LayoutRecord"):
        plan_reshard(["a"], None)
    with pytest.raises(LayoutError, match="table 'a' has two layouts"):
        plan_reshard([A, A], None)


def test_keyed_source_and_sink_speak_checkpoint_keys() -> None:
    class Reader:
        def __init__(self, arrays: dict[str, np.ndarray]) -> None:
            self.arrays = arrays

        def entry(self, key: str) -> Any:
            value = self.arrays[key]
            dtype = "string" if value.dtype.kind == "O" else value.dtype
            return type("Entry", (), {"shape": value.shape, "dtype": dtype})()

        def read_rows(self, key: str, start: int, stop: int) -> np.ndarray:
            return self.arrays[key][start:stop]

    class Writer:
        def __init__(self) -> None:
            self.got: dict[str, np.ndarray] = {}

        def add_rows(self, key: str, shape: Any, dtype: Any, chunks: Any) -> None:
            self.got[key] = np.concatenate(list(chunks)).reshape(shape).astype(dtype)

    key = "embedding/a_b/.ATTRIBUTES/VARIABLE_VALUE"
    slot_key = "embedding/a_b.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE"
    stacked = _by_hand(_tables())
    writer = Writer()
    execute_reshard(plan_reshard([A, B], None, slots=("accumulators",)),
                    KeyedSource(Reader({key: stacked, slot_key: stacked + 1})),
                    KeyedSink(writer), memory_cap=1 << 20)
    assert sorted(writer.got) == ["embedding/a.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE",
                                  "embedding/a/.ATTRIBUTES/VARIABLE_VALUE",
                                  "embedding/b.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE",
                                  "embedding/b/.ATTRIBUTES/VARIABLE_VALUE"]
    assert writer.got["embedding/b/.ATTRIBUTES/VARIABLE_VALUE"].tobytes() == (
        _tables()["b"].tobytes())
    plan = plan_reshard([A, B], None)
    with pytest.raises(ReshardError, match="the checkpoint has no variable 'a_b' \\(key "
                       "'embedding/a_b/.ATTRIBUTES/VARIABLE_VALUE'\\)"):
        execute_reshard(plan, KeyedSource(Reader({})), KeyedSink(Writer()), memory_cap=1 << 20)
    strings = np.empty((16, 2), dtype=object)
    with pytest.raises(ReshardError, match="variable 'a_b' holds strings"):
        execute_reshard(plan, KeyedSource(Reader({key: strings})), KeyedSink(Writer()),
                        memory_cap=1 << 20)


@pytest.mark.parametrize(("pid", "amplification"), [
    ("topology_v5p2_to_v5p4", 2), ("topology_v5p4_to_v5p2", 1), ("topology_v5p2_to_v6e4", 1),
    ("topology_v6e2_to_v5p4", 4), ("unshard_base", 1), ("shard_v6e4", 8), ("identical", 1)])
def test_amplification_is_new_cores_over_their_gcd_with_old(pid: str, amplification: int) -> None:
    assert _plan(PAIRS[pid]).amplification == amplification


def test_the_plan_names_its_inputs_and_reports_progress() -> None:
    pair = PAIRS["stacking_off"]
    plan = _plan(pair, slots=("accumulators",))
    assert plan.inputs() == ("cat", "cat/accumulators", "item_user", "item_user/accumulators")
    assert [v.name for v in plan.variables] == [
        "cat", "cat/accumulators", "item", "item/accumulators", "user", "user/accumulators"]
    old = _arrays(pair, "old")
    old.update({f"{n}/accumulators": v for n, v in old.items()})
    seen: list[tuple[str, int, int]] = []
    execute_reshard(plan, ArraySource(old), ArraySink(), memory_cap=1 << 16,
                    progress=lambda name, done, total: seen.append((name, done, total)))
    assert seen[-1] == ("user/accumulators", 320, 320)
    assert [s for s in seen if s[0] == "cat"][-1] == ("cat", 128, 128)


@pytest.mark.parametrize("pid", sorted(p for p in PAIRS if PAIRS[p]["new"]["layouts_hex"]))
def test_new_layouts_from_tpuembs_own_stacker_give_tensorflows_arrays(pid: str,
                                                                      tmp_path: Path) -> None:
    """The workflow: OLD's layouts as the checkpoint stores them, NEW's from the configuration
    (``sparsecore.summary.layouts_of``, tpuemb's stacker), not from TensorFlow."""
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.sparsecore.summary import layouts_of

    pair = PAIRS[pid]
    spec = tmp_path / "new_spec.py"
    spec.write_text(pair["new"]["spec"])
    new_layouts, _ = layouts_of(load_sparsecore_spec(str(spec), legacy=False).config)
    got = reshard_arrays(plan_reshard(_side(pair["old"]), new_layouts), _arrays(pair, "old"))
    want = _arrays(pair, "new")
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].tobytes() == value.tobytes(), name


def _random_stacks(rng: np.random.Generator, names: list[str], dims: dict[str, int],
                   rows: dict[str, int]) -> list[LayoutRecord]:
    """Consistent layouts of random stacking, SparseCores, partitions and rotations."""
    n = int(rng.choice([1, 2, 4, 8, 16]))
    partitions = int(rng.choice([p for p in (1, 2, 4) if n % p == 0]))
    order = list(rng.permutation(names))
    stacks: dict[str, list[str]] = {}
    for name in order:  # tables of one width may share a stack
        key = f"w{dims[name]}_{int(rng.integers(2))}"
        stacks.setdefault(key, []).append(name)
    out = []
    for members in stacks.values():
        stack = "_".join(members)
        width = -(-max(dims[t] for t in members) // 8) * 8 + 8 * int(rng.integers(2))
        padded = {t: -(-rows[t] // (8 * n)) * 8 * n + 8 * n * int(rng.integers(2))
                  for t in members}
        per_shard = sum(padded.values()) // n
        offset = 0
        for t in members:
            out.append(LayoutRecord(t, stack, n, partitions, per_shard, (rows[t], dims[t]),
                                    (padded[t], width), offset, int(rng.integers(n))))
            offset += padded[t] // n
    return out


@pytest.mark.parametrize("seed", range(40))
def test_random_layouts_agree_with_the_reference_under_small_caps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = [f"t{i}" for i in range(int(rng.integers(1, 6)))]
    dims = {t: int(rng.choice([4, 8, 12, 16])) for t in names}
    rows = {t: int(rng.integers(1, 150)) for t in names}
    old, new = _random_stacks(rng, names, dims, rows), _random_stacks(rng, names, dims, rows)
    old_stacks = stacks_of(old)
    arrays = {}
    for stack, layouts in old_stacks.items():
        shape = (layouts[0].num_sparse_cores * layouts[0].total_rows_per_sparse_core_shard,
                 layouts[0].unsharded_padded_shape[1])
        arrays[stack] = rng.standard_normal(shape).astype(np.float32)
        arrays[f"{stack}/momenta"] = rng.standard_normal(shape).astype(np.float32)
    tables = {}
    for stack, layouts in old_stacks.items():
        for which in (stack, f"{stack}/momenta"):
            for value, layout in zip(unshard(arrays[which], layouts), layouts, strict=True):
                tables[(layout.table_name, which != stack)] = value
    plan = plan_reshard(old, new, slots=("momenta",))
    cap = int(rng.integers(2, 6)) * 4 * MIN_BLOCK_ROWS * (
        (plan.amplification + 3) * 16 * 4 + 112)
    sink = ArraySink()
    execute_reshard(plan, ArraySource(arrays), sink, memory_cap=cap)
    for stack, layouts in stacks_of(new).items():
        for slot in (False, True):
            want = shard({t: tables[(t, slot)] for t in (r.table_name for r in layouts)},
                         layouts)
            name = f"{stack}/momenta" if slot else stack
            if not plan.adapter:
                want = arrays[name]
            assert sink.arrays[name].tobytes() == want.tobytes(), (seed, name)
