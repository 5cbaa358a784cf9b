"""Minibatching in host preprocessing (``preprocess(..., enable_minibatching=True)``) against
jax-tpu-embedding 0.2.0: batches above their limits split into minibatches.

Expected values were computed by jax-tpu-embedding itself on a CPU: 48 single-host batches drawn
to exceed small limits (tests/data/sparsecore/PROVENANCE-MB.md: 43 split into 2-36 minibatches,
2 kept in one, many dropping ids by limits or by buffer, 3 aborting because one bucket alone is
above a limit), 8 batches within their limits but with a small buffer (one minibatch, 2 of them
dropping ids by buffer), and the two minibatching batches of the 200 of PROVENANCE-C.md that need
a split (case 137, 8 minibatches; case 54, an abort). The hash and the split tree are also
checked by hand.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_sparsecore_preprocess import _batch, _cases, _csr, _load_cases, _load_csr, _run, _stacking

from tpuemb_cfg.sparsecore.preprocessing import (
    MINIBATCHES,
    SparseCoreLimitError,
    SparseCoreUnsupportedError,
    _minibatch_of_bucket,
    _split_nodes,
    highway_hash_int32,
    preprocess,
)

DATA = Path(__file__).parent / "data" / "sparsecore"


@functools.cache
def _mb_cases() -> dict[int, dict[str, Any]]:
    return _load_cases(DATA / "jte_minibatch_split.json.gz")


@functools.cache
def _mb_csr() -> dict[str, np.ndarray]:
    return _load_csr(DATA / "jte_minibatch_split.npz")


def _case(source: str, case_id: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    return (_mb_cases()[case_id], _mb_csr()) if source == "mb" else (_cases()[case_id], _csr())


def _minibatches(case: dict[str, Any]) -> int:
    return int(np.asarray(case["expected"]["num_minibatches"]).reshape(-1)[0])


_OK = [("mb", i) for i, c in sorted(_mb_cases().items()) if c["expected"]["outcome"] == "ok"]
_OK += [("c", 137)]
_ABORTED = [("mb", i) for i, c in sorted(_mb_cases().items())
            if c["expected"]["outcome"] != "ok"] + [("c", 54)]


def test_the_stored_cases_are_all_here() -> None:
    cases = _mb_cases()
    assert len(cases) == 56 and len(_OK) == 54 and len(_ABORTED) == 4
    counts = [_minibatches(c) for c in cases.values() if c["expected"]["outcome"] == "ok"]
    assert sum(n > 1 for n in counts) == 43 and max(counts) == 36
    overflow = [c for i, c in cases.items() if i >= 48]
    assert all(_minibatches(c) == 1 for c in overflow)
    assert sum(any(c["expected"]["stats"]["id_drop_counters"].values()) for c in overflow) == 2
    assert _minibatches(_cases()[137]) == 8


def test_highway_hash_reference_vector() -> None:
    """HighwayHash's own test vector (c/highwayhash_test.c): the 4 bytes 00 01 02 03 under
    the key 00 01 ... 1f hash to 0xF205A46893007EDA."""
    key = (0x0706050403020100, 0x0F0E0D0C0B0A0908, 0x1716151413121110, 0x1F1E1D1C1B1A1918)
    assert int(highway_hash_int32([0x03020100], key)[0]) == 0xF205A46893007EDA


def test_split_tree_by_hand() -> None:
    """Limit 1. Buckets 0 and 1 hold one id each: the pair node 0 splits (1 + 1 > 1) and
    passes up 1, nothing above splits: minibatches {0} and {1..63}. Buckets 0 and 63: only
    the root (node 62) sees 1 + 1: minibatches {0..31} and {32..63}. Three rows OR their
    splits: the union of the cuts."""
    a = np.zeros((1, MINIBATCHES), np.int64)
    a[0, [0, 1]] = 1
    split = _split_nodes(a, 1)
    assert np.flatnonzero(split).tolist() == [0]
    assert _minibatch_of_bucket(split).tolist() == [0] + [1] * 63
    b = np.zeros((1, MINIBATCHES), np.int64)
    b[0, [0, 63]] = 1
    split = _split_nodes(b, 1)
    assert np.flatnonzero(split).tolist() == [62]
    assert _minibatch_of_bucket(split).tolist() == [0] * 32 + [1] * 32
    both = _split_nodes(np.concatenate([a, b, np.zeros_like(a)]), 1)
    assert _minibatch_of_bucket(both).tolist() == [0] + [1] * 31 + [2] * 32
    # Counts (2, 5, 1, 6) in buckets 0-3, limit 7: the pairs fit (7, 7), their node does not
    # (node 32 splits, cutting between buckets 1 and 2); the larger half 7 goes up and fits.
    c = np.zeros((1, MINIBATCHES), np.int64)
    c[0, :4] = (2, 5, 1, 6)
    assert np.flatnonzero(_split_nodes(c, 7)).tolist() == [32]


@pytest.mark.parametrize(("source", "case_id"), _OK)
def test_split_batch_matches_jax_tpu_embedding(source: str, case_id: int) -> None:
    """Statistics (the whole batch's), drop counts (per-bucket limits and buffer; with one
    minibatch, the buffer of the one-minibatch layout), the number of minibatches, shapes,
    the written row pointers (S x minibatches x max(N, 8) per device) and every written CSR
    entry exactly (gains bit for bit)."""
    case, csr = _case(source, case_id)
    expected = case["expected"]
    batch = _run(case)
    assert batch.num_minibatches == _minibatches(case)
    local, nsc = case["local_device_count"], case["num_sc_per_device"]
    written = nsc * batch.num_minibatches * max(8, case["global_device_count"] * nsc)
    for name, got in batch.stacks.items():
        stats = expected["stats"]
        assert got.max_ids_per_partition.reshape(-1).tolist() == \
            stats["max_ids_per_partition"][name]
        assert got.max_unique_ids_per_partition.reshape(-1).tolist() == \
            stats["max_unique_ids_per_partition"][name]
        assert got.required_buffer_size_per_sc.reshape(-1).tolist() == \
            stats["required_buffer_size_per_sc"][name]
        assert got.id_drop_count == stats["id_drop_counters"][name]
        assert got.coo_buffer_size_per_device == expected["coo_buffer_size_per_device"][name]
        for array in ("row_pointers", "embedding_ids", "sample_ids", "gains"):
            assert list(getattr(got, array).shape) == expected["shapes"][f"{array}/{name}"]
        key = f"c{case_id}/{name}/"
        mask = np.unpackbits(csr[key + "valid_bits"])[:got.valid_mask.size].astype(bool)
        assert np.array_equal(got.valid_mask.reshape(-1), mask)
        pointers = got.row_pointers.reshape(local, -1)
        assert np.array_equal(pointers[:, :written],
                              csr[key + "row_pointers"].reshape(local, -1)[:, :written])
        assert not pointers[:, written:].any()
        for array in ("embedding_ids", "sample_ids"):
            assert np.array_equal(getattr(got, array).reshape(-1)[mask], csr[key + array])
        gains = got.gains.reshape(-1)[mask]
        assert np.array_equal(gains.view(np.int32), csr[key + "gains"].view(np.int32)) or \
            np.array_equal(gains, csr[key + "gains"], equal_nan=True)
        flagged = sum(int(f.sum()) for f in got.dropped.values())
        assert (flagged == 0) == (got.id_drop_count == 0)


@pytest.mark.parametrize(("source", "case_id"), _ABORTED)
def test_bucket_above_a_limit_raises_the_reason_jax_tpu_embedding_aborts_for(
        source: str, case_id: int) -> None:
    """jax-tpu-embedding aborted in its second pass: one bucket of one (SparseCore,
    partition) is above a limit and ids may not be dropped. tpuemb raises a limit error for
    the same stack, limit and limit value; the count the reference printed (its SparseCore's
    largest bucket) is one of tpuemb's per-SparseCore counts."""
    case, _ = _case(source, case_id)
    with pytest.raises(SparseCoreLimitError) as info:
        _run(case)
    err = info.value
    for abort in case["expected"]["aborts"]:  # one line per SparseCore that aborted
        assert (err.stack, err.limit_name, err.limit) == \
            (abort["stack"], abort["limit_name"], abort["limit"])
        assert abort["observed"] in err.per_sparse_core.reshape(-1).tolist()
    assert err.observed == int(err.per_sparse_core.max()) > err.limit
    text = str(err)
    assert "no split into minibatches can help" in text and "allow_id_dropping" in text
    assert f"at least {err.observed}" in text


def test_several_hosts_are_still_refused() -> None:
    """Across hosts the split is agreed through an all-reduce tpuemb does not model."""
    case = _cases()[137]
    features, weights = _batch(case)
    stacking = _stacking(case)
    with pytest.raises(SparseCoreUnsupportedError, match="several hosts"):
        preprocess(stacking, features, weights, local_devices=1, global_devices=2,
                   enable_minibatching=True)
