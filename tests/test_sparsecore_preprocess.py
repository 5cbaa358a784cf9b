"""Host preprocessing (``tpuemb_cfg.sparsecore.preprocess``) against jax-tpu-embedding 0.2.0.

The expected values were computed by jax-tpu-embedding itself (``preprocess_sparse_dense_matmul_
input`` on a CPU; tests/data/sparsecore/PROVENANCE-C.md): 200 random batches (statistics, drop
counts, every written CSR entry, or the abort), 17 invalid or edge inputs, and a small batch on 2
devices x 2 SparseCores worked out by hand below.
"""

from __future__ import annotations

import ast
import functools
import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tpuemb_cfg.sparsecore.preprocessing import (
    SparseCoreBufferError,
    SparseCoreInputError,
    SparseCoreLimitError,
    _fma32,
    _sort,
    buffer_sizes,
    preprocess,
)
from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking

DATA = Path(__file__).parent / "data" / "sparsecore"


def _load_cases(path: Path) -> dict[int, dict[str, Any]]:
    """Recorded cases by id (a gzipped JSON file with a ``cases`` list)."""
    with gzip.open(path, "rt") as fh:
        return {c["id"]: c for c in json.load(fh)["cases"]}


def _load_csr(path: Path) -> dict[str, np.ndarray]:
    """Every array of a recorded CSR ``.npz``."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@functools.cache
def _cases() -> dict[int, dict[str, Any]]:
    return _load_cases(DATA / "jte_preprocess_c.json.gz")


@functools.cache
def _csr() -> dict[str, np.ndarray]:
    return _load_csr(DATA / "jte_preprocess_csr_c.npz")


def _stacking(case: dict[str, Any]) -> Stacking:
    """The stacking jax-tpu-embedding preprocessed with, from the case's recorded stacks."""
    n = case["global_device_count"] * case["num_sc_per_device"]
    dims = {t["name"]: t for t in case["tables"]}
    stacks, slots = [], []
    for name, st in case["stacks"].items():
        tables = {}
        for fname, f in st["features"].items():
            t = dims[f["table"]]
            tables[f["table"]] = StackedTable(
                f["table"], t["vocabulary_size"], t["embedding_dim"], f["padded_vocab_size"],
                -(-t["embedding_dim"] // 8) * 8, f["row_offset_in_shard"], f["shard_rotation"])
            assert f["col_offset"] == f["row_offset_in_shard"] * n
            slots.append(FeatureSlot(fname, f["table"], name, f["row_offset"], f["col_offset"],
                                     f["col_shift"], case["batch_global"]))
        stacks.append(Stack(
            name, tuple(sorted(tables.values(), key=lambda t: t.row_offset_in_shard)), "",
            st["combiner"], st["total_sample_count"], st["max_ids_per_partition"],
            st["max_unique_ids_per_partition"], st["suggested_coo_buffer_size_per_device"]))
    return Stacking("jax", case["global_device_count"], case["num_sc_per_device"],
                    tuple(stacks), tuple(slots))


def _batch(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The case's ids: dense features as [batch, k] int32, ragged ones as (values, row_splits)."""
    features: dict[str, Any] = {}
    weights: dict[str, Any] = {}
    for f in case["features"]:
        if f["ragged"]:
            splits = np.cumsum([0] + [len(r) for r in f["ids"]])
            features[f["name"]] = (np.array([x for r in f["ids"] for x in r], np.int32), splits)
            if f["weights"] is not None:
                weights[f["name"]] = np.array([x for r in f["weights"] for x in r], np.float32)
        else:
            features[f["name"]] = np.array(f["ids"], np.int32)
            if f["weights"] is not None:
                weights[f["name"]] = np.array(f["weights"], np.float32)
    return features, weights or None


def _run(case: dict[str, Any], **overrides: Any) -> Any:
    options = dict(local_devices=case["local_device_count"],
                   allow_id_dropping=case["allow_id_dropping"],
                   has_leading_dimension=case["has_leading_dimension"],
                   enable_minibatching=case["enable_minibatching"])
    options.update(overrides)
    features, weights = _batch(case)
    return preprocess(_stacking(case), features, weights, **options)


def _ids(outcome: str, minibatching: bool | None = None) -> list[int]:
    return [i for i, c in _cases().items() if c["expected"]["outcome"] == outcome and
            (minibatching is None or c["enable_minibatching"] == minibatching)]


def _one_minibatch(case: dict[str, Any]) -> bool:
    return bool(np.asarray(case["expected"].get("num_minibatches", 0)).reshape(-1)[0] == 1)


def test_the_stored_cases_are_all_here() -> None:
    assert len(_cases()) == 200
    assert len(_ids("ok", False)) == 159 and len(_ids("ok", True)) == 9
    assert len(_ids("process_aborted")) == 32
    assert sum(_one_minibatch(_cases()[i]) for i in _ids("ok", True)) == 8


@functools.cache
def _ok(case_id: int) -> Any:
    """The preprocessing of a stored batch the reference accepted (shared by two tests)."""
    return _run(_cases()[case_id])


@pytest.mark.parametrize("case_id", [i for i in _ids("ok") if _one_minibatch(_cases()[i])])
def test_ok_case_matches_jax_tpu_embedding(case_id: int) -> None:
    """Statistics, drop counts, buffer sizes, shapes and every written CSR entry, exactly
    (gains bit for bit, NaN where the reference has NaN); with minibatching (8 batches the
    reference kept in one minibatch) the row pointers it wrote, the first S x max(N, 8) per
    device."""
    case = _cases()[case_id]
    expected = case["expected"]
    batch = _ok(case_id)
    assert list(batch.stacks) == list(case["stacks"])
    local = case["local_device_count"]
    csr = _csr()
    for name, got in batch.stacks.items():
        stats = expected["stats"]
        assert got.max_ids_per_partition.reshape(-1).tolist() == \
            stats["max_ids_per_partition"][name]
        assert got.max_unique_ids_per_partition.reshape(-1).tolist() == \
            stats["max_unique_ids_per_partition"][name]
        assert got.required_buffer_size_per_sc.reshape(-1).tolist() == \
            stats["required_buffer_size_per_sc"][name]
        assert got.max_ids_per_partition.shape[0] == local
        assert got.id_drop_count == stats["id_drop_counters"][name]
        assert got.coo_buffer_size_per_device == expected["coo_buffer_size_per_device"][name]
        assert got.theoretical_max_coo_buffer_size == \
            expected["theoretical_max_coo_buffer_size"][name]
        for array in ("row_pointers", "embedding_ids", "sample_ids", "gains"):
            assert list(getattr(got, array).shape) == expected["shapes"][f"{array}/{name}"]
        key = f"c{case_id}/{name}/"
        mask = np.unpackbits(csr[key + "valid_bits"])[:got.valid_mask.size].astype(bool)
        assert np.array_equal(got.valid_mask.reshape(-1), mask)
        pointers = got.row_pointers.reshape(local, -1)
        written = case["num_sc_per_device"] * max(8, case["global_device_count"] *
                                                  case["num_sc_per_device"])
        if not case["enable_minibatching"]:
            assert written == pointers.shape[1]
        assert np.array_equal(pointers[:, :written],
                              csr[key + "row_pointers"].reshape(local, -1)[:, :written])
        assert not pointers[:, written:].any()
        valid = got.valid_mask.reshape(local, -1)
        for array in ("embedding_ids", "sample_ids"):
            assert np.array_equal(getattr(got, array).reshape(local, -1)[valid],
                                  csr[key + array])
        gains = got.gains.reshape(local, -1)[valid]
        assert gains.dtype == np.float32
        assert np.array_equal(gains.view(np.int32), csr[key + "gains"].view(np.int32)) or \
            np.array_equal(gains, csr[key + "gains"], equal_nan=True)
        # Slots jax-tpu-embedding never writes (neither an entry nor padding) are 0 in tpuemb;
        # jte_csr_written.npz checks the padding (test_every_slot_the_reference_writes).
        assert got.padding_mask is not None
        unwritten = ~valid & ~got.padding_mask.reshape(local, -1)
        assert not got.embedding_ids.reshape(local, -1)[unwritten].any()


@functools.cache
def _written() -> tuple[dict[str, np.ndarray], list[tuple[str, int]]]:
    """``jte_csr_written.npz``: full CSR arrays of 12 recorded batches and which slots
    jax-tpu-embedding wrote (generate_csr_written.py), and the cases (file, id) they are."""
    arrays = _load_csr(DATA / "jte_csr_written.npz")
    cases = [(str(f), int(i)) for f, i in json.loads(bytes(arrays.pop("cases")))]
    return arrays, cases


def _written_case(source: str, case_id: int) -> dict[str, Any]:
    if source == "jte_preprocess_c.json.gz":
        return _cases()[case_id]
    return _load_cases(DATA / source)[case_id]


@pytest.mark.parametrize("source,case_id", _written()[1])
def test_every_slot_the_reference_writes(source: str, case_id: int) -> None:
    """The CSR arrays equal jax-tpu-embedding's in every slot it writes, bit for bit: its
    entries, and the padding after each partition's run up to a multiple of 8 (embedding id and
    sample id 2^31 - 1, gain NaN); the slots it writes are exactly ``valid_mask |
    padding_mask``; the row pointers it writes are equal too. The slots it leaves uninitialised
    are 0 in tpuemb. Cases: without minibatching (1-2 devices, 2 and 4 SparseCores, limit and
    buffer drops, 1-3 stacks), with minibatching in one minibatch and split in several."""
    arrays, _ = _written()
    case = _written_case(source, case_id)
    got = _run(case)
    prefix = "c" if source == "jte_preprocess_c.json.gz" else "m"
    for name, stack in got.stacks.items():
        key = f"{prefix}{case_id}/{name}/"

        def wrote(array: str, key: str = key) -> np.ndarray:
            bits = np.unpackbits(arrays[key + array + "_written"])
            return bits[:arrays[key + array].size].astype(bool)

        slots = wrote("embedding_ids") & wrote("sample_ids") & wrote("gains")
        assert stack.padding_mask is not None
        assert np.array_equal(slots, (stack.valid_mask | stack.padding_mask).reshape(-1))
        for array in ("embedding_ids", "sample_ids", "gains"):
            mine = getattr(stack, array).reshape(-1)
            assert np.array_equal(mine[slots].view(np.uint32),
                                  arrays[key + array][slots].view(np.uint32)), array
            assert not mine[~slots].view(np.uint32).any()
        pointers = wrote("row_pointers")
        assert np.array_equal(stack.row_pointers.reshape(-1)[pointers],
                              arrays[key + "row_pointers"][pointers])
        padding = stack.padding_mask.reshape(-1)
        assert (stack.embedding_ids.reshape(-1)[padding] == 2**31 - 1).all()
        assert np.isnan(stack.gains.reshape(-1)[padding]).all()


@pytest.mark.parametrize("case_id", _ids("ok", False))
def test_dropped_flags_add_up_to_the_drop_count(case_id: int) -> None:
    """``dropped`` marks each input id; limit drops count every raw id, buffer drops each merged
    entry once, so the flags count at least the reference's counter, exactly when only limits
    dropped (no buffer overflow: the required buffer fits)."""
    case = _cases()[case_id]
    batch = _ok(case_id)
    features, _ = _batch(case)
    nsc = case["num_sc_per_device"]
    for got in batch.stacks.values():
        for fname, flags in got.dropped.items():
            ids = features[fname]
            size = ids[0].shape[0] if isinstance(ids, tuple) else ids.size
            assert flags.shape == (size,) and flags.dtype == np.bool_
        total = sum(int(f.sum()) for f in got.dropped.values())
        fits = int(got.required_buffer_size_per_sc.max()) <= got.coo_buffer_size_per_device // nsc
        if fits:
            assert total == got.id_drop_count
        else:
            assert total >= got.id_drop_count
        if got.id_drop_count == 0:
            assert total == 0


_LIMIT_KIND = {"max_ids_per_partition": "ids", "max_unique_ids_per_partition": "unique"}


@pytest.mark.parametrize("case_id", _ids("process_aborted"))
def test_aborted_case_raises_one_clear_error(case_id: int) -> None:
    case = _cases()[case_id]
    aborts = case["expected"]["aborts"]
    kinds = {a["kind"] for a in aborts}
    with pytest.raises(SparseCoreInputError) as info:
        _run(case)
    err = info.value
    assert isinstance(err, ValueError)
    if kinds == {"topology"}:
        assert err.reason == "topology"
        assert f"has {aborts[0]['sparse_cores']} SparseCores" in str(err)
    elif kinds == {"buffer"}:
        assert isinstance(err, SparseCoreBufferError)
        assert (err.size, err.theoretical_max) == (aborts[0]["suggested"],
                                                   aborts[0]["theoretical_max"])
        assert "suggested_coo_buffer_size_per_device" in str(err)
    else:
        assert kinds == {"limit"}
        assert isinstance(err, SparseCoreLimitError)
        assert err.observed > err.limit
        assert err.observed == int(err.per_sparse_core.max())
        text = str(err)
        assert f"{err.stack!r}" in text and f"at least {err.observed}" in text
        assert "allow_id_dropping" in text


@pytest.mark.parametrize("case_id", [i for i in _ids("process_aborted") if not
                                     _cases()[i]["enable_minibatching"] and
                                     _cases()[i]["expected"]["aborts"][0]["kind"] == "limit"])
def test_each_abort_message_is_reproduced(case_id: int) -> None:
    """Every abort line jax-tpu-embedding printed: lifting the other limits makes tpuemb report
    the same stack, limit and limit value, and the count the reference printed (its per-
    SparseCore maximum over partitions) is one of tpuemb's per-SparseCore counts."""
    case = _cases()[case_id]
    for abort in case["expected"]["aborts"]:
        high = 1 << 10  # above every count of the stored batches (at most a few dozen)
        limits = {name: (high, high) for name in case["stacks"]}
        st = case["stacks"][abort["stack"]]
        limits[abort["stack"]] = (
            (st["max_ids_per_partition"], high) if abort["limit_name"] ==
            "max_ids_per_partition" else (high, st["max_unique_ids_per_partition"]))
        with pytest.raises(SparseCoreLimitError) as info:
            _run(case, limits=limits)
        err = info.value
        assert (err.stack, err.limit_name, err.limit) == \
            (abort["stack"], abort["limit_name"], abort["limit"])
        assert abort["observed"] in err.per_sparse_core.reshape(-1).tolist()
        assert err.observed == int(err.per_sparse_core.max())


# ---------------------------------------------------------------- the 17 invalid or edge inputs

@functools.cache
def _errors() -> dict[str, dict[str, Any]]:
    with open(DATA / "jte_preprocess_errors_c.json") as fh:
        return {c["name"]: c for c in json.load(fh)}


def _one_table(batch: int = 8, vocab: int = 64, combiner: str = "sum", max_ids: int = 256,
               max_unique: int = 256, nsc: int = 2, devices: int = 1) -> Stacking:
    """The reference script's ``setup``: table ``t`` (dim 8) with feature ``f`` [batch, 2]."""
    n = devices * nsc
    padded = -(-vocab // (8 * n)) * 8 * n
    table = StackedTable("t", vocab, 8, padded, 8, 0, 0)
    stack = Stack("t", (table,), "", combiner, batch, max_ids, max_unique)
    return Stacking("jax", devices, nsc, (stack,),
                    (FeatureSlot("f", "t", "t", 0, 0, 0, batch),))


def _reference_result(name: str) -> tuple[dict[str, list[int]], list[int]]:
    """The statistics and row pointers jax-tpu-embedding printed for an accepted input."""
    stats_line, pointers_line = _errors()[name]["results"]
    stats = {k: [int(x) for x in v.split(",")] for k, v in
             re.findall(r"(\w+)=\{'t': array\(\[([\d, ]+)\]", stats_line)}
    drops = re.search(r"id_drop_counters=\{'t': (\d+)", stats_line)
    assert drops is not None
    stats["id_drop_counters"] = [int(drops[1])]
    pointers = ast.literal_eval(pointers_line.split(" ", 2)[2])["t"]
    return stats, pointers


@pytest.mark.parametrize(("name", "stacking", "ids", "weights", "options"), [
    ("batch_not_divisible_by_sparsecores", _one_table(batch=6), np.zeros((6, 2), np.int32),
     None, {}),
    ("over_limit_with_dropping", _one_table(max_ids=1, max_unique=1),
     np.arange(16, dtype=np.int32).reshape(8, 2) % 4, None, {"allow_id_dropping": True}),
    ("mean_all_zero_weights", _one_table(combiner="mean"), np.zeros((8, 2), np.int32),
     np.zeros((8, 2), np.float32), {}),
    ("empty_rows_ragged", _one_table(), (np.zeros(0, np.int32), np.zeros(9, np.int64)), None,
     {}),
])
def test_accepted_edge_inputs_match(name: str, stacking: Stacking, ids: Any, weights: Any,
                                    options: dict[str, Any]) -> None:
    stats, pointers = _reference_result(name)
    got = preprocess(stacking, {"f": ids}, None if weights is None else {"f": weights},
                     local_devices=1, **options).stacks["t"]
    assert got.max_ids_per_partition.reshape(-1).tolist() == stats["max_ids_per_partition"]
    assert got.max_unique_ids_per_partition.reshape(-1).tolist() == \
        stats["max_unique_ids_per_partition"]
    assert got.required_buffer_size_per_sc.reshape(-1).tolist() == \
        stats["required_buffer_size_per_sc"]
    assert got.id_drop_count == stats["id_drop_counters"][0]
    assert got.row_pointers.reshape(-1).tolist() == pointers
    if name == "mean_all_zero_weights":  # 0 / 0: NaN gains, no error (as the reference)
        assert np.isnan(got.gains[got.valid_mask]).all()


@pytest.mark.parametrize(("name", "call", "error", "reason", "words"), [
    ("batch_not_divisible_by_devices",
     lambda: preprocess(_one_table(batch=6, devices=4), {"f": np.zeros((6, 2), np.int32)},
                        local_devices=4), SparseCoreInputError, "batch", "multiple of 8"),
    ("negative_id", lambda: preprocess(_one_table(), {"f": np.full((8, 2), -3, np.int32)},
                                       local_devices=1),
     SparseCoreInputError, "ids", "id -3 is negative"),
    ("id_beyond_vocabulary",
     lambda: preprocess(_one_table(vocab=10), {"f": np.full((8, 2), 1000, np.int32)},
                        local_devices=1), SparseCoreInputError, "ids", "vocabulary of 10 rows"),
    ("id_int64_beyond_int32",
     lambda: preprocess(_one_table(), {"f": np.full((8, 2), 2**33, np.int64)},
                        local_devices=1), SparseCoreInputError, "ids", "beyond int32"),
    ("float_ids", lambda: preprocess(_one_table(), {"f": np.full((8, 2), 1.5, np.float32)},
                                     local_devices=1), SparseCoreInputError, "ids", "float32"),
    ("weights_shape_mismatch",
     lambda: preprocess(_one_table(), {"f": np.zeros((8, 2), np.int32)},
                        {"f": np.ones((8, 3), np.float32)}, local_devices=1),
     SparseCoreInputError, "weights", "(8, 3)"),
    # jax-tpu-embedding: "Table t is not stacked"; a Stacking is always stacked, the nearest
    # mistake is ids for a feature the stacking does not have.
    ("not_prepared", lambda: preprocess(_one_table(), {"f": np.zeros((8, 2), np.int32),
                                                       "g": np.zeros((8, 2), np.int32)},
                                        local_devices=1),
     SparseCoreInputError, "features", "'g'"),
    ("over_limit_no_dropping",
     lambda: preprocess(_one_table(max_ids=1, max_unique=1),
                        {"f": np.arange(16, dtype=np.int32).reshape(8, 2) % 4}, local_devices=1),
     SparseCoreLimitError, "limit", "sends 4 ids to partition 0, more than "
                                    "max_ids_per_partition = 1"),
    ("over_unique_limit_no_dropping",
     lambda: preprocess(_one_table(max_ids=64, max_unique=1),
                        {"f": np.arange(16, dtype=np.int32).reshape(8, 2) * 2}, local_devices=1),
     SparseCoreLimitError, "limit", "sends 8 distinct ids to partition 0"),
    ("max_ids_zero", lambda: preprocess(_one_table(max_ids=0, max_unique=0),
                                        {"f": np.zeros((8, 2), np.int32)}, local_devices=1,
                                        allow_id_dropping=True),
     SparseCoreBufferError, "buffer", "would hold 0 ids"),
    ("num_sc_3", lambda: preprocess(_one_table(nsc=3), {"f": np.zeros((8, 2), np.int32)},
                                    local_devices=1),
     SparseCoreInputError, "topology", "power of two"),
    ("local_greater_than_global",
     lambda: preprocess(_one_table(), {"f": np.zeros((8, 2), np.int32)}, local_devices=2),
     SparseCoreInputError, "topology", "expected 1 to global_devices (1)"),
    ("unknown_combiner", lambda: preprocess(_one_table(combiner="max"),
                                            {"f": np.zeros((8, 2), np.int32)}, local_devices=1),
     SparseCoreInputError, "combiner", "'max'"),
])
def test_refused_inputs(name: str, call: Any, error: type[Exception], reason: str,
                        words: str) -> None:
    """What jax-tpu-embedding aborts on or accepts silently but wrongly: one clear error."""
    assert name in _errors()
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, ValueError)
    assert info.value.reason == reason  # type: ignore[attr-defined]
    assert words in str(info.value)


def test_every_stored_error_input_is_tested() -> None:
    names = {"batch_not_divisible_by_sparsecores", "over_limit_with_dropping",
             "mean_all_zero_weights", "empty_rows_ragged", "batch_not_divisible_by_devices",
             "negative_id", "id_beyond_vocabulary", "id_int64_beyond_int32", "float_ids",
             "weights_shape_mismatch", "not_prepared", "over_limit_no_dropping",
             "over_unique_limit_no_dropping", "max_ids_zero", "num_sc_3",
             "local_greater_than_global", "unknown_combiner"}
    assert set(_errors()) == names


def test_over_limit_error_names_the_reference_count() -> None:
    """The reference printed "Observed max ids per partition: 4 ... set max ... 1" from both
    SparseCores; tpuemb's error holds the same count for each."""
    with pytest.raises(SparseCoreLimitError) as info:
        preprocess(_one_table(max_ids=1, max_unique=1),
                   {"f": np.arange(16, dtype=np.int32).reshape(8, 2) % 4}, local_devices=1)
    err = info.value
    messages = _errors()["over_limit_no_dropping"]["messages"]
    printed = {int(m) for m in re.findall(r"Observed max ids per partition: (\d+)",
                                          "\n".join(messages))}
    assert set(err.per_sparse_core.reshape(-1).tolist()) == printed == {4}
    assert (err.observed, err.limit, err.tables) == (4, 1, ("t",))


# ---------------------------------------------------------------- a batch worked out by hand

def _hand_stacking(max_ids: int = 4, max_unique: int = 4,
                   suggested: int | None = None) -> Stacking:
    """2 devices x 2 SparseCores (N = 4); tables a (vocab 16) and b (vocab 8) stacked as "a_b":
    each padded to 32 rows (8 N), b at row_offset_in_shard 32 / 4 = 8 and rotation 1 x 2 = 2.
    Feature fa reads a, fb reads b (col_offset 8 x 4 = 32, col_shift 2); combiner mean."""
    a = StackedTable("a", 16, 8, 32, 8, 0, 0)
    b = StackedTable("b", 8, 8, 32, 8, 8, 2)
    stack = Stack("a_b", (a, b), "", "mean", 16, max_ids, max_unique, suggested)
    return Stacking("jax", 2, 2, (stack,), (FeatureSlot("fb", "b", "a_b", 8, 32, 2, 8),
                                            FeatureSlot("fa", "a", "a_b", 0, 0, 0, 8)))


#: fa: dense [8, 2], weights 1 except row 0 ([1, 3]); fb: ragged, no weights.
_FA = np.array([[5, 5], [1, 9], [4, 0], [13, 13], [2, 6], [7, 3], [15, 11], [8, 12]])
_FA_W = np.ones((8, 2), np.float32)
_FA_W[0] = [1, 3]
_FB = (np.array([3, 0, 4, 4, 1, 7, 7, 7, 2, 5, 6]), np.array([0, 1, 1, 4, 5, 8, 9, 9, 11]))


def _hand(**options: Any) -> Any:
    stacking = options.pop("stacking", _hand_stacking())
    return preprocess(stacking, {"fa": _FA, "fb": _FB}, {"fa": _FA_W}, local_devices=2,
                      **options).stacks["a_b"]


def test_hand_worked_batch() -> None:
    """Rows go 2 per SparseCore: SC c = d x 2 + s takes rows 2c, 2c+1 of each feature; fa's rows
    are samples 0, 1 and fb's samples 2, 3 (fa has row_offset 0, so it comes first).
    fa's id x: partition x mod 4, embedding id x div 4; fb's: partition (x + 2) mod 4,
    embedding id x div 4 + 8. Mean gains: fa row 0 -> 1/4, 3/4; other fa rows 1/2; fb rows of
    one id 1, fb row 2 [0, 4, 4] and row 4 [7, 7, 7] 1/3 each, fb row 7 [5, 6] 1/2.

    SC 0 (rows 0, 1): fa 5, 5 -> p1 e1 s0 merged (1/4 + 3/4 = 1); fa 1 -> p1 e0 s1; fa 9 -> p1
      e2 s1; fb 3 -> p1 e8 s2. Partition 1 sorted by embedding id: e0 e1 e2 e8.
    SC 1 (rows 2, 3): fa 4 -> p0 e1 s0; 0 -> p0 e0 s0; 13, 13 -> p1 e3 s1 merged (1);
      fb 0 -> p2 e8 s2; 4, 4 -> p2 e9 s2 merged (2/3); fb 1 -> p3 e8 s3.
    SC 2 (rows 4, 5): fa 2 -> p2 e0 s0; 6 -> p2 e1 s0; 7 -> p3 e1 s1; 3 -> p3 e0 s1;
      fb 7, 7, 7 -> p1 e9 s2 merged (1); fb 2 -> p0 e8 s3.
    SC 3 (rows 6, 7): fa 15 -> p3 e3 s0; 11 -> p3 e2 s0; 8 -> p0 e2 s1; 12 -> p0 e3 s1;
      fb 5 -> p3 e9 s3; 6 -> p0 e9 s3.
    Entries per (SC, partition): SC0 [0, 4, 0, 0], SC1 [2, 1, 2, 1], SC2 [1, 1, 2, 2],
    SC3 [3, 0, 0, 3]; all embedding ids of a partition differ, so unique counts are the same.
    Per device the maximum over its 2 SCs; required = sum of counts rounded up to 8.
    Buffer: roundup8(4) x 2 x 4 = 64 per device, 32 per SC; partitions start at multiples of 8.
    """
    got = _hand()
    assert got.max_ids_per_partition.tolist() == [[2, 4, 2, 1], [3, 1, 2, 3]]
    assert got.max_unique_ids_per_partition.tolist() == [[2, 4, 2, 1], [3, 1, 2, 3]]
    assert got.required_buffer_size_per_sc.tolist() == [[8, 32], [32, 16]]
    assert (got.id_drop_count, got.coo_buffer_size_per_device) == (0, 64)
    assert got.theoretical_max_coo_buffer_size == 64
    assert got.row_pointers.tolist() == [
        [0, 4, 8, 8, 8, 8, 8, 8, 2, 9, 18, 25, 32, 32, 32, 32],
        [1, 9, 18, 26, 32, 32, 32, 32, 3, 8, 8, 11, 16, 16, 16, 16]]
    third, half = float(np.float32(1) / np.float32(3)), 0.5
    expected: dict[int, dict[int, tuple[int, int, float]]] = {  # device -> position -> entry
        0: {0: (0, 1, half), 1: (1, 0, 1.0), 2: (2, 1, half), 3: (8, 2, 1.0),
            32: (0, 0, half), 33: (1, 0, half), 40: (3, 1, 1.0),
            48: (8, 2, third), 49: (9, 2, third + third), 56: (8, 3, 1.0)},
        1: {0: (8, 3, 1.0), 8: (9, 2, third + third + third), 16: (0, 0, half),
            17: (1, 0, half), 24: (0, 1, half), 25: (1, 1, half),
            32: (2, 1, half), 33: (3, 1, half), 34: (9, 3, half),
            40: (2, 0, half), 41: (3, 0, half), 42: (9, 3, half)},
    }
    for device, entries in expected.items():
        assert np.flatnonzero(got.valid_mask[device]).tolist() == sorted(entries)
        for position, (embedding_id, sample, gain) in entries.items():
            assert got.embedding_ids[device, position] == embedding_id
            assert got.sample_ids[device, position] == sample
            assert got.gains[device, position] == np.float32(gain)
    assert not any(flags.any() for flags in got.dropped.values())


def test_hand_worked_batch_with_dropping() -> None:
    """limits (2, 1): in each (SC, partition) run only the first embedding id is kept (its
    repeats too, but here none repeats). Dropped merged entries and their raw ids:
    SC0 p1 e1 (2 ids: fa 5, 5), e2 (fa 9), e8 (fb 3) -> 4; SC1 p0 e1 (fa 4), p2 e9 (fb 4, 4)
    -> 3; SC2 p2 e1 (fa 6), p3 e1 (fa 7) -> 2; SC3 p0 e3, e9 (fa 12, fb 6), p3 e3, e9 (fa 15,
    fb 5) -> 4. 13 in all; the statistics are counted before dropping, unchanged."""
    got = _hand(allow_id_dropping=True, limits={"a_b": (2, 1)})
    assert got.id_drop_count == 13
    assert got.max_ids_per_partition.tolist() == [[2, 4, 2, 1], [3, 1, 2, 3]]
    assert got.coo_buffer_size_per_device == 8 * 2 * 4  # roundup8(2) x 2 x 4
    assert got.dropped["fa"].tolist() == [True, True, False, True, True, False, False, False,
                                          False, True, True, False, True, False, False, True]
    assert got.dropped["fb"].tolist() == [True, False, True, True, False, False, False, False,
                                          False, True, True]
    assert got.row_pointers.tolist() == [
        [0, 1, 8, 8, 8, 8, 8, 8, 1, 9, 17, 25, 32, 32, 32, 32],
        [1, 9, 17, 25, 32, 32, 32, 32, 1, 8, 8, 9, 16, 16, 16, 16]]


def test_hand_worked_batch_buffer_overflow() -> None:
    """A suggested buffer of 32 ids per device (16 per SC), no id dropping asked: SC1 writes
    p0 at 0-1, p1 at 8; p2 would start at 16 = full, so its 2 merged entries (3 raw ids) and
    p3's 1 are lost; SC2 loses p2's 2 and p3's 2; SC0 and SC3 fit (SC3: p0 0-2, p3 8-10).
    jax-tpu-embedding drops them silently and counts each merged entry once: 7."""
    got = _hand(stacking=_hand_stacking(suggested=32))
    assert got.coo_buffer_size_per_device == 32
    assert got.id_drop_count == 7
    assert got.required_buffer_size_per_sc.tolist() == [[8, 32], [32, 16]]
    assert got.row_pointers.tolist() == [
        [0, 4, 8, 8, 8, 8, 8, 8, 2, 9, 16, 16, 16, 16, 16, 16],
        [1, 9, 16, 16, 16, 16, 16, 16, 3, 8, 8, 11, 16, 16, 16, 16]]
    assert sum(int(f.sum()) for f in got.dropped.values()) == 8  # fb 4, 4 is one entry


def test_layout_without_leading_dimension() -> None:
    flat = _hand(has_leading_dimension=False)
    nested = _hand()
    for array in ("row_pointers", "embedding_ids", "sample_ids", "gains", "valid_mask"):
        assert getattr(flat, array).ndim == 1
        assert np.array_equal(getattr(flat, array), getattr(nested, array).reshape(-1),
                              equal_nan=array == "gains")
    assert flat.max_ids_per_partition.shape == (2, 4)  # statistics stay [devices, N]


def test_buffer_sizes() -> None:
    stack = _hand_stacking(max_ids=5).stacks[0]
    assert buffer_sizes(stack, global_devices=2, sparse_cores_per_device=2) == (64, 64)
    suggested = _hand_stacking(max_ids=5, suggested=20).stacks[0]
    assert buffer_sizes(suggested, global_devices=2, sparse_cores_per_device=2) == (64, 32)
    too_big = _hand_stacking(max_ids=5, suggested=65).stacks[0]
    with pytest.raises(SparseCoreBufferError, match="at most 64"):
        buffer_sizes(too_big, global_devices=2, sparse_cores_per_device=2)


def test_fused_multiply_add_rounds_once() -> None:
    """(1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 is halfway between two float32; adding 2^-60 must
    round up. float64 arithmetic loses the 2^-60 and rounds to even (down)."""
    a = np.array([1 + 2.0**-12], np.float32)
    for c, up in ((0.0, False), (2.0**-60, True), (-(2.0**-60), False)):
        got = _fma32(a, a, np.array([c], np.float32))[0]
        below = np.float32(1 + 2.0**-11)
        assert got == (np.nextafter(below, np.float32(2)) if up else below)


def test_option_checks() -> None:
    features = {"fa": _FA, "fb": _FB}
    with pytest.raises(SparseCoreInputError, match="not a stacked table"):
        preprocess(_hand_stacking(), features, local_devices=2, limits={"nope": (1, 1)})
    with pytest.raises(SparseCoreInputError, match="stack the tables again"):
        preprocess(_hand_stacking(), features, local_devices=2, global_devices=4)
    with pytest.raises(SparseCoreInputError, match="no ids for feature"):
        preprocess(_hand_stacking(), {"fa": _FA}, local_devices=2)
    with pytest.raises(SparseCoreInputError, match="row_splits"):
        preprocess(_hand_stacking(), {"fa": _FA, "fb": (_FB[0], _FB[1][:-1])}, local_devices=2)
    with pytest.raises(SparseCoreInputError, match="unknown preprocessing mode"):
        preprocess(_hand_stacking(), features, local_devices=2, mode="torch")  # type: ignore


@pytest.mark.parametrize("column_high", [50, 1 << 40])
def test_sort_is_stable_whether_keys_pack_or_not(column_high: int) -> None:
    """Small keys are packed into one int64 and sorted; keys too wide for 63 bits take
    ``np.lexsort``. Both give the stable order by (run, column)."""
    rng = np.random.default_rng(7)
    run = rng.integers(0, 8, 500).astype(np.int64)
    column = rng.integers(0, 5, 500).astype(np.int64) * (column_high // 5)
    order, run_sorted, column_sorted = _sort(run, column)
    expected = np.lexsort((column, run))  # lexsort is stable
    assert order.tolist() == expected.tolist()
    assert run_sorted.tolist() == run[expected].tolist()
    assert column_sorted.tolist() == column[expected].tolist()


def test_hand_worked_batch_with_minibatching() -> None:
    """With minibatching (and no limit exceeded: one minibatch) a device's SparseCores write
    one after the other, each partition at the next multiple of 8, pointers absolute; buffers
    and pointers have room for 64 minibatches. Device 0: SC0 [0, 4, 0, 0] ends at 0, 4, 8, 8
    (spare slots 8); SC1 [2, 1, 2, 1] starts at 8: 10, 17, 26, 33 (spare 40). Device 1: SC2
    [1, 1, 2, 2]: 1, 9, 18, 26 (32); SC3 [3, 0, 0, 3] from 32: 35, 40, 40, 43 (48)."""
    got = _hand(enable_minibatching=True)
    assert got.coo_buffer_size_per_device == 64 * 64
    assert got.row_pointers.shape == (2, 8 * 2 * 64)
    assert got.row_pointers[:, :16].tolist() == [
        [0, 4, 8, 8, 8, 8, 8, 8, 10, 17, 26, 33, 40, 40, 40, 40],
        [1, 9, 18, 26, 32, 32, 32, 32, 35, 40, 40, 43, 48, 48, 48, 48]]
    plain = _hand()
    assert np.array_equal(got.embedding_ids[0, 8:10], plain.embedding_ids[0, 32:34])  # SC1 p0
    assert np.array_equal(got.gains[1, 32:35], plain.gains[1, 32:35])  # SC3 p0 at 32 in both
    assert got.valid_mask.sum() == plain.valid_mask.sum() == 22
