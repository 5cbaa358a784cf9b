"""The compiled step's memory-level pieces (issue 14): cache-line-aligned state and outputs, the
bitmap de-duplication, streaming stores of the activations, the input check made on the summed
gradients and the pending-row lookup of the forward pass.

Every result is compared with NumPy's own answer (``np.unique``, a gather and ``np.add.reduceat``
written out, ``np.isfinite``) or with the NumPy engine, never with the kernel itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tpuemb_cfg
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.executor.aligned import ALIGNMENT, aligned_empty, is_aligned
from tpuemb_cfg.executor.nonfinite import NonFiniteWarning
from tpuemb_cfg.simulate import Executor

pytest.importorskip("numba")

from tpuemb_cfg.executor.engines import numba_step  # noqa: E402


def _config(vocab: int = 300, dim: int = 16, optimizer: str = "adagrad { }"
            ) -> tpuemb_cfg.TPUEmbeddingConfiguration:
    text = (
        f'table_descriptor {{ name: "t" vocabulary_size: {vocab} dimension: {dim} '
        f"optimization_parameters {{ {optimizer} learning_rate {{ constant: 0.1 }} }} }} "
        "mode: TRAINING num_hosts: 1 num_tensor_cores: 1 "
        'feature_descriptor { name: "f" table_id: 0 input_shape: 4 }'
    )
    return tpuemb_cfg.load(text.encode(), "text")


# ------------------------------------------------------------------------------------------
# Alignment


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (7, 5), (1000, 64), (3,)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_aligned_empty_is_an_ordinary_array_on_a_cache_line(shape: tuple[int, ...],
                                                            dtype: type) -> None:
    for _ in range(5):  # several allocations: NumPy's own start offsets vary
        array = aligned_empty(shape, dtype)
        assert array.shape == shape and array.dtype == np.dtype(dtype)
        assert array.flags.c_contiguous and array.flags.writeable
        if array.size:  # an empty array has no data to align
            assert array.ctypes.data % ALIGNMENT == 0 and is_aligned(array)
        array[...] = 3
        assert (array == 3).all()


@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_the_executor_state_starts_on_cache_lines(engine: str) -> None:
    config = _config(optimizer="adagrad { }")
    default = Executor(config, engine=engine)
    given = Executor(config, engine=engine, initial_state={
        "table/t": np.arange(300 * 16, dtype=np.float64).reshape(300, 16),
    })
    for executor in (default, given):
        for key, array in executor.state_arrays().items():
            assert is_aligned(array), key
            assert array.dtype == np.float32 and array.flags.c_contiguous
    # A given array is copied (and converted) exactly, not aliased.
    np.testing.assert_array_equal(given.state_arrays()["table/t"],
                                  np.arange(300 * 16, dtype=np.float32).reshape(300, 16))


# ------------------------------------------------------------------------------------------
# De-duplication


def _same_as_numpy(ids: np.ndarray, deduplicate: Any = None) -> None:
    unique, inverse = (deduplicate or numba_step.deduplicate)(ids)
    expected_unique, expected_inverse = np.unique(ids, return_inverse=True)
    np.testing.assert_array_equal(unique, expected_unique)
    np.testing.assert_array_equal(inverse, expected_inverse.reshape(-1))
    assert unique.dtype == np.int64 and inverse.dtype == np.int64


@pytest.mark.parametrize("ids", [
    [], [0], [5], [63], [64], [0, 63, 64, 127, 128, 63, 0], [1, 1, 1, 1],
    list(range(200, 0, -1)), [2**40, 3, 2**40, 7],  # the last: far beyond the bitmap's range
])
def test_deduplicate_matches_numpy_unique(ids: list[int]) -> None:
    _same_as_numpy(np.asarray(ids, dtype=np.int64))


def test_deduplicate_matches_numpy_on_both_paths_at_random() -> None:
    rng = np.random.default_rng(14)
    for _ in range(400):
        n = int(rng.integers(1, 400))
        # ranges on both sides of the bitmap's limit (256 ids per id of the batch)
        high = int(rng.choice([2, 64, 65, 1000, 256 * n - 1, 256 * n, 256 * n + 1, 10**9]))
        _same_as_numpy(rng.integers(0, high, n).astype(np.int64))


def test_both_de_duplications_agree_on_the_anchor_ids() -> None:
    from tpuemb_cfg.run.bench import zipf_ids

    ids = zipf_ids(1_000_000, 65_536, 1.05, 0)
    assert ids.max() < numba_step._BITMAP_IDS_PER_ID * ids.shape[0]  # the bitmap path
    _same_as_numpy(ids)
    _same_as_numpy(ids, numba_step._hash_deduplicate)


def test_missing_rows_lists_the_sorted_distinct_ids_not_done() -> None:
    from tpuemb_cfg.executor.state import Pending

    rng = np.random.default_rng(3)
    flags = rng.random(1001) < 0.7  # 1001 rows: the last byte of the bitmap is partial
    done = np.packbits(flags, bitorder="little")
    assert done.shape == Pending.bitmap(1001).shape
    ids = rng.integers(0, 1001, 5000).astype(np.int64)
    np.testing.assert_array_equal(numba_step.missing_rows(done, ids), np.unique(ids[~flags[ids]]))
    everything = np.packbits(np.ones(1001, bool), bitorder="little")
    assert numba_step.missing_rows(everything, ids).shape == (0,)


def test_pending_rows_are_computed_once_and_the_bitmap_follows() -> None:
    """Lazy default rows: computed when first read (the values of the eager state), marked in
    the bitmap, never recomputed; the rows no step read are computed on export."""
    from tpuemb_cfg.executor.initial import initial_state

    executor = Executor(_config(vocab=77, dim=8), engine="numba")
    eager = initial_state(executor.plan, seed=0)  # every row computed up front
    pending = executor.storage._pending["t"]
    assert pending.remaining == 77 and not pending.holds(np.arange(77)).any()
    grad = np.zeros((4, 8), np.float32)  # a zero gradient: SGD-like rows stay as they were
    executor.step([{"ids": np.array([70, 3, 70, 9]), "grad": grad}])
    np.testing.assert_array_equal(np.flatnonzero(pending.holds(np.arange(77))), [3, 9, 70])
    assert pending.remaining == 74
    arrays = executor.state_arrays()  # every other row computed now
    np.testing.assert_array_equal(arrays["table/t"], eager["table/t"])
    np.testing.assert_array_equal(arrays["slot/t/accumulators"], eager["slot/t/accumulators"])


# ------------------------------------------------------------------------------------------
# Forward pass: streaming stores


def _reference_lookup(params: np.ndarray, ids: np.ndarray, gains: np.ndarray,
                      row_splits: np.ndarray) -> np.ndarray:
    out = np.zeros((row_splits.shape[0] - 1, params.shape[1]), dtype=np.float32)
    for b in range(out.shape[0]):
        first, last = row_splits[b], row_splits[b + 1]
        if first == last:
            continue
        total = gains[first] * params[ids[first]]
        for j in range(first + 1, last):
            total = total + gains[j] * params[ids[j]]
        out[b] = total
    return out


@pytest.mark.parametrize("dim", [1, 7, 8, 16, 24, 64, 100])
@pytest.mark.parametrize("streaming", [True, False])
def test_lookup_writes_the_same_activations_streamed_or_not(
    dim: int, streaming: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numba_step, "STREAMING", streaming and numba_step.STREAMING)
    rng = np.random.default_rng(dim)
    params = rng.standard_normal((50, dim), dtype=np.float32)
    sizes = rng.integers(0, 5, 300)  # empty bags among them
    row_splits = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ids = rng.integers(0, 50, row_splits[-1]).astype(np.int64)
    gains = rng.standard_normal(ids.shape[0]).astype(np.float32)
    expected = _reference_lookup(params, ids, gains, row_splits)
    by_id = numba_step.lookup(params, ids, None, gains, row_splits)
    unique, inverse = np.unique(ids, return_inverse=True)
    by_inverse = numba_step.lookup(params, unique, inverse, gains, row_splits)
    for out in (by_id, by_inverse):
        np.testing.assert_array_equal(out, expected)  # the same float32 sums, in order
        assert is_aligned(out)


# ------------------------------------------------------------------------------------------
# The input check on the summed gradients


def _batch(grad: np.ndarray) -> list[dict[str, np.ndarray]]:
    return [{"ids": np.array([3, 3, 9, 3], np.int64), "grad": grad}]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("weight", [1.0, 0.0, -2.0])  # a zero weight: 0 * inf is NaN
def test_a_non_finite_gradient_is_refused_whatever_the_weight(bad: float, weight: float) -> None:
    executor = Executor(_config(), engine="numba")
    before = {k: v.copy() for k, v in executor.state_arrays().items()}
    grad = np.full((4, 16), 0.01, np.float32)
    grad[1, 5] = bad
    batch = [{**_batch(grad)[0], "weights": np.array([1.0, weight, 1.0, 1.0], np.float32)}]
    with pytest.raises(InputError, match="finite"):
        executor.step(batch)
    for key, array in executor.state_arrays().items():
        np.testing.assert_array_equal(array, before[key])
    assert executor.step_index == 0


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("engine", ["numba", "numpy"])
def test_sums_that_overflow_from_finite_gradients_are_not_refused(engine: str) -> None:
    """The check of the sums flags an overflow too; the inputs are then checked one by one and
    are not refused, as the NumPy engine (which checks the inputs) does. The update then leaves
    float32's range, TensorFlow's result, said with its cause: the summed gradient (issue
    34), not a bad input gradient nor the learning rate."""
    executor = Executor(_config(optimizer="stochastic_gradient_descent { }"), engine=engine)
    grad = np.zeros((4, 16), np.float32)
    grad[[0, 1, 3], 2] = 3e38  # row 3 occurs three times: its sum is +inf
    with pytest.warns(NonFiniteWarning) as caught:
        executor.step(_batch(grad))
    assert [str(w.message) for w in caught] == [
        "step 0: the update of table 't' left 1 parameter(s) non-finite (first: -inf at row 3, "
        "column 2): the row's gradient G (the sum of its contributions) is inf: the summed "
        "gradient overflowed float32"]  # w - 0.1 * inf
    table = executor.state_arrays()["table/t"]
    assert np.isneginf(table[3, 2])
    assert np.isfinite(np.delete(table, 3, axis=0)).all()
