"""TensorFlow 2.21's SparseCore host preprocessing (tpuemb_cfg.sparsecore.tf_preprocess).

TensorFlow's kernels do not run on a CPU, so every expected number is derived by hand in the
comments from the rules of ``sparse_core_preprocess_ops.cc`` (module docstring): step 1
(``ConvertToListOfSparseCoreCooTensors``), step 2 (``SortListOfSparseCoreCooTensors``),
step 3 (``ConvertToSparseCoreCsrWrappedCooTensor``).
"""

from __future__ import annotations

import numpy as np
import pytest

from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking
from tpuemb_cfg.sparsecore.tf_preprocess import (
    PAD_VALUE,
    TensorFlowBufferError,
    TensorFlowInputError,
    TensorFlowLimitError,
    preprocess_tensorflow,
)

P = PAD_VALUE
F32 = np.float32


def _one_table(combiner: str = "mean", limits: tuple[int, int] = (256, 256)) -> Stacking:
    """One chip with 2 SparseCores (N = 2); table t of 16 rows; feature f of 4 samples."""
    t = StackedTable("t", 16, 8, 16, 8, row_offset_in_shard=0, shard_rotation=0)
    stack = Stack("t", (t,), "g", combiner, total_sample_count=4,
                  max_ids_per_partition=limits[0], max_unique_ids_per_partition=limits[1])
    return Stacking("tensorflow", 1, 2, (stack,),
                    (FeatureSlot("f", "t", "t", row_offset=0, col_offset=0, col_shift=0,
                                 samples=4),))


# rows: [3, 3, 5] [7] [1, 2, 1] [4] with weights [1, 2, 1] [2] [1, 1, 1] [0]
SPLITS = np.array([0, 3, 4, 7, 8])
IDS = {"f": (np.array([3, 3, 5, 7, 1, 2, 1, 4]), SPLITS)}
WEIGHTS = {"f": (np.array([1, 2, 1, 2, 1, 1, 1, 0], F32), SPLITS)}


def test_one_table_by_hand() -> None:
    """Step 1. Mean scales: row 0 1/(1+2+1) = 0.25, row 1 1/2, row 2 1/3, row 3 (sum 0) 0 - not
    NaN as in jax-tpu-embedding. The adjacent 3, 3 of row 0 merge: (1 + 2) x 0.25 = 0.75; the
    1, 2, 1 of row 2 do not (not adjacent). Rows 0-1 go to SparseCore 0, rows 2-3 to
    SparseCore 1 (4 samples / 2), samples 0 and 1 on each. With N = 2: partition = id & 1,
    token = id >> 1.

    Step 2. SparseCore 0: ids 3, 5, 7, all partition 1 (tokens 1, 2, 3; samples 0, 0, 1).
    SparseCore 1 sorted by column: 1, 1 (same sample: merged, 1/3 + 1/3), 2, 4: partition 0
    holds 2 (token 1, sample 0, 1/3) and 4 (token 2, sample 1, gain 0), partition 1 holds 1
    (token 0, sample 0, 2/3).
    Statistics: partition 0 max(0, 2) = 2, partition 1 max(3, 1) = 3; required buffer
    SparseCore 0 roundup8(0) + roundup8(3) = 8, SparseCore 1 8 + 8 = 16.

    Step 3. max_ids_per_chip = 64 x (4 / 2) x 2 = 256. SparseCore 0: partition 0 ends at 0,
    partition 1 at 3, padded to 8; SparseCore 1: partition 0 from 8 to 10 (pad to 16),
    partition 1 from 16 to 17 (pad to 24). roundup8(2) = 8 row-pointer slots per SparseCore,
    the extra ones repeating the padded end."""
    r = preprocess_tensorflow(_one_table(), IDS, WEIGHTS, local_devices=1).stacks["t"]
    assert r.max_ids_per_partition.tolist() == [[2, 3]]
    assert r.max_unique_ids_per_partition.tolist() == [[2, 3]]
    assert r.required_buffer_size_per_sc.tolist() == [[8, 16]]
    assert r.coo_buffer_size_per_device == 256
    assert r.row_pointers.tolist() == [[0, 3, 8, 8, 8, 8, 8, 8, 10, 17, 24, 24, 24, 24, 24, 24]]
    assert r.embedding_ids[0, :24].tolist() == [1, 2, 3, P, P, P, P, P, 1, 2, P, P, P, P, P, P,
                                                0, P, P, P, P, P, P, P]
    assert r.sample_ids[0, :24].tolist() == [0, 0, 1, P, P, P, P, P, 0, 1, P, P, P, P, P, P,
                                             0, P, P, P, P, P, P, P]
    third = F32(1.0 / 3.0)
    assert r.gains[0, [0, 1, 2, 8, 9, 16]].tolist() == [0.75, 0.25, 1.0, third, 0.0,
                                                        F32(third + third)]
    assert r.gains[0, 3] == F32(P)  # TensorFlow pads the gains with (float) 2^31 - 1 too
    assert np.flatnonzero(r.valid_mask[0]).tolist() == [0, 1, 2, 8, 9, 16]
    assert not r.embedding_ids[0, 24:].any()
    assert r.id_drop_count == 0 and not r.dropped["f"].any()


def test_sqrtn_and_sum_gains() -> None:
    """sqrtn: row 0 1/sqrt(1 + 4 + 1) -> 3, 3 merge to (1 + 2)/sqrt(6); sum: the weights."""
    r = preprocess_tensorflow(_one_table("sqrtn"), IDS, WEIGHTS, local_devices=1).stacks["t"]
    assert r.gains[0, 0] == F32(F32(3) * F32(1.0 / float(np.sqrt(F32(6)))))
    assert r.gains[0, 9] == 0.0  # row 3: sum of squares 0 -> scale 0
    r = preprocess_tensorflow(_one_table("sum"), IDS, WEIGHTS, local_devices=1).stacks["t"]
    assert r.gains[0, [0, 1, 2, 8, 9, 16]].tolist() == [3.0, 1.0, 2.0, 1.0, 0.0, 2.0]


def test_limit_fails_even_with_dropping() -> None:
    """SparseCore 0 sends 3 ids to partition 1; a limit of 2 fails the step (TensorFlow's sort op
    has no dropping), allow_id_dropping or not."""
    for allow in (False, True):
        with pytest.raises(TensorFlowLimitError, match=r"SparseCore 0 of local device 0 sends 3 "
                           r"ids to partition 1, more than 2 .*raise max_ids_per_table\['t'\] "
                           r"to at least 3") as info:
            preprocess_tensorflow(_one_table(limits=(2, 256)), IDS, WEIGHTS, local_devices=1,
                                  allow_id_dropping=allow)
        assert (info.value.observed, info.value.partition) == (3, 1)
    with pytest.raises(TensorFlowLimitError, match=r"sends 3 unique ids to partition 1"):
        preprocess_tensorflow(_one_table(limits=(256, 2)), IDS, WEIGHTS, local_devices=1)


def test_buffer_overflow_drops_or_fails() -> None:
    """max_ids_per_chip = 2 x 2 x 2 = 8: SparseCore 0 fills 0..8 (3 entries + padding), so
    SparseCore 1's 3 entries (ids 2, 4 and the merged 1, 1: the last 4 input ids) do not fit.
    With allow_id_dropping they are dropped (3 merged entries) and every row pointer of
    SparseCore 1 is 8; without, TensorFlow fails with 6 - 3 = 3 ids remaining."""
    r = preprocess_tensorflow(_one_table(), IDS, WEIGHTS, local_devices=1,
                              allow_id_dropping=True, max_ids_per_chip_per_sample=2).stacks["t"]
    assert r.coo_buffer_size_per_device == 8
    assert r.row_pointers.tolist() == [[0, 3, 8, 8, 8, 8, 8, 8] + [8] * 8]
    assert r.id_drop_count == 3
    assert r.dropped["f"].tolist() == [False] * 4 + [True] * 4
    assert r.embedding_ids.tolist() == [[1, 2, 3, P, P, P, P, P]]
    with pytest.raises(TensorFlowBufferError, match=r"'The remaining id count is 3'"):
        preprocess_tensorflow(_one_table(), IDS, WEIGHTS, local_devices=1,
                              max_ids_per_chip_per_sample=2)


def _two_tables() -> Stacking:
    """2 chips x 2 SparseCores (N = 4): tables a and b (8 rows, padded to 8N = 32) stacked;
    b at row 32 / 4 = 8 of each SparseCore, rotation (1 x 4 / 2) mod 4 = 2, so col_offset
    8 x 4 = 32 and col_shift 2. Features fa (a) then fb (b), 2 samples per chip each: fb's
    samples start at 2 (1 per SparseCore)."""
    a = StackedTable("a", 8, 8, 32, 8, 0, 0)
    b = StackedTable("b", 8, 8, 32, 8, 8, 2)
    stack = Stack("a_b", (a, b), "g", "sum", 4, 256, 256)
    return Stacking("tensorflow", 2, 2, (stack,), (
        FeatureSlot("fa", "a", "a_b", row_offset=0, col_offset=0, col_shift=0, samples=2),
        FeatureSlot("fb", "b", "a_b", row_offset=2, col_offset=32, col_shift=2, samples=2)))


def test_stacked_tables_on_two_local_chips() -> None:
    """Column = ((x + shift) & 3) + (x & ~3) + col_offset; partition = column & 3, token =
    column >> 2. a: column x. b: 5 -> 3 + 4 + 32 = 39 (partition 3, token 9 = 5 div 4 + 8);
    3 -> 1 + 0 + 32 = 33 (partition 1, token 8).
    Chip 0 (rows 0-1 of each feature): SparseCore 0 gets fa's 5 (partition 1, token 1,
    sample 0) and fb's 5 (partition 3, token 9, sample 1); SparseCore 1 gets fa's 6
    (partition 2, token 1, sample 0) and fb's 3 (partition 1, token 8, sample 1).
    Chip 1: SparseCore 0: fa's 1 (partition 1, token 0), fb's 5 (partition 3, token 9);
    SparseCore 1: fa's 0 (partition 0, token 0), fb's 5 (partition 3, token 9).
    Chip 0 buffer: SparseCore 0 partition 1 at 0 (end 1, pad to 8), partition 3 at 8 (end 9,
    pad to 16); SparseCore 1 partition 1 at 16 (end 17, pad to 24), partition 2 at 24 (end 25,
    pad to 32). roundup8(4) = 8 slots per SparseCore."""
    ids = {"fa": np.array([[5], [6], [1], [0]]), "fb": np.array([[5], [3], [5], [5]])}
    r = preprocess_tensorflow(_two_tables(), ids, local_devices=2).stacks["a_b"]
    assert r.max_ids_per_partition.tolist() == [[0, 1, 1, 1], [1, 1, 0, 1]]
    assert r.row_pointers[0].tolist() == [0, 1, 8, 9, 16, 16, 16, 16,
                                          16, 17, 25, 32, 32, 32, 32, 32]
    assert r.embedding_ids[0, [0, 8, 16, 24]].tolist() == [1, 9, 8, 1]
    assert r.sample_ids[0, [0, 8, 16, 24]].tolist() == [0, 1, 1, 0]
    # chip 1: SparseCore 0 partition 1 token 0 at 0, partition 3 token 9 at 8; SparseCore 1
    # partition 0 token 0 at 16, partition 3 token 9 at 24
    assert r.row_pointers[1].tolist() == [0, 1, 8, 9, 16, 16, 16, 16,
                                          17, 24, 24, 25, 32, 32, 32, 32]
    assert r.embedding_ids[1, [0, 8, 16, 24]].tolist() == [0, 9, 0, 9]
    assert r.coo_buffer_size_per_device == 64 * 2 * 2
    flat = preprocess_tensorflow(_two_tables(), ids, local_devices=2,
                                 has_leading_dimension=False).stacks["a_b"]
    assert flat.embedding_ids.shape == (2 * 256,)


def test_dense_one_id_per_sample_and_rows_of_k() -> None:
    """A dense [4, 2] batch for a feature of 4 samples is 4 rows of 2 ids; [2, 2] = 4 ids is
    TensorFlow's dense input, one id per sample. Both give SparseCore 0 rows 0-1."""
    s = _one_table("sum")
    rows = preprocess_tensorflow(s, {"f": np.array([[1, 3], [5, 7], [0, 2], [4, 6]])},
                                 local_devices=1).stacks["t"]
    # SparseCore 0: ids 1, 3, 5, 7 (all partition 1), samples 0, 0, 1, 1
    assert rows.sample_ids[0, :4].tolist() == [0, 0, 1, 1]
    single = preprocess_tensorflow(s, {"f": np.array([[1, 3], [5, 7]])},
                                   local_devices=1).stacks["t"]
    # one id per sample: 1 and 3 on SparseCore 0 (samples 0, 1), 5 and 7 on SparseCore 1
    assert single.embedding_ids[0, [0, 1, 8, 9]].tolist() == [0, 1, 2, 3]
    assert single.sample_ids[0, [0, 1, 8, 9]].tolist() == [0, 1, 0, 1]


def test_empty_rows() -> None:
    """A dense [4, 0] batch is 4 rows without ids: nothing to send, every pointer 0."""
    r = preprocess_tensorflow(_one_table(), {"f": np.zeros((4, 0), np.int64)},
                              local_devices=1).stacks["t"]
    assert not r.row_pointers.any() and not r.valid_mask.any()
    assert r.max_ids_per_partition.tolist() == [[0, 0]]


def test_input_errors() -> None:
    s = _one_table()
    with pytest.raises(TensorFlowInputError, match=r"3 rows, but its output shape gives 4"):
        preprocess_tensorflow(s, {"f": np.array([[1], [2], [3]])}, local_devices=1)
    with pytest.raises(TensorFlowInputError, match=r"id 16 is outside 0 to 15"):
        preprocess_tensorflow(s, {"f": np.array([[1], [2], [3], [16]])}, local_devices=1)
    with pytest.raises(TensorFlowInputError, match=r"missing \['f'\], unknown \['g'\]"):
        preprocess_tensorflow(s, {"g": np.array([[1]])}, local_devices=1)
    with pytest.raises(TensorFlowInputError, match=r"made for 1 chips x 2 SparseCores"):
        preprocess_tensorflow(s, IDS, local_devices=1, sparse_cores_per_device=4)
    with pytest.raises(TensorFlowInputError, match=r"'max_ids_per_sparse_core must be > 0'"):
        preprocess_tensorflow(s, IDS, local_devices=1, limits={"t": (0, 1)})


# --- enable_minibatching: GetMinibatchSplitsWithPhysicalReplica + GetMinibatchesInCsr ----------

def _bucketed(limits: tuple[int, int]) -> Stacking:
    """1 chip x 2 SparseCores (N = 2), table t of 128 rows: buckets of ceil(128 / 64) = 2
    columns, so id x (column x) is in partition x mod 2, bucket x div 2, token x div 2.
    SparseCore 0 takes the stack's samples 0-1, SparseCore 1 samples 2-3."""
    t = StackedTable("t", 128, 8, 128, 8, 0, 0)
    stack = Stack("t", (t,), "g", "sum", 4, *limits)
    return Stacking("tensorflow", 1, 2, (stack,), (FeatureSlot("f", "t", "t", 0, 0, 0, 4),))


# rows [0, 2, 4] [0, 6] [1] [3]: SparseCore 0 sends columns 0 (twice: rows 0 and 1), 2, 4, 6
# to partition 0 (buckets 0, 1, 2, 3); SparseCore 1 sends 1 and 3 to partition 1 (buckets 0, 1)
BUCKET_IDS = {"f": (np.array([0, 2, 4, 0, 6, 1, 3]), np.array([0, 3, 5, 6, 7]))}


def test_minibatches_by_column_range() -> None:
    """Limits (3, 3). SparseCore 0, partition 0: 5 ids in buckets 0-3 (prefix 2, 3, 4, 5).
    The tree splits each section holding more than 3: the whole range (bit 0, split at 32),
    [0, 32) (bit 1, at 16), [0, 16) (bit 3, at 8), [0, 8) (bit 7, at 4), [0, 4) (bit 15, at 2);
    [0, 2) holds 3, not more. Greedy merge over [0, 2, 4, 8, 16, 32, 64]: [0, 2) holds 3,
    [0, 4) 5 > 3, so a split at 2; [2, 64) holds 2. SparseCore 1's 2 ids need no split.
    Splits {2}: minibatch 0 = buckets [0, 2), minibatch 1 = [2, 64).
    Packing (one buffer of 64 x 4 = 256): SparseCore 0 minibatch 0: partition 0 tokens 0
    (sample 0), 0 (sample 1), 1 (sample 0) end at 3 (pad to 8), partition 1 empty; minibatch 1:
    tokens 2, 3 at 8-9 (end 10, pad to 16); SparseCore 1 minibatch 0: partition 1 tokens 0, 1
    at 16-17 (end 18, pad to 24); minibatch 1 empty."""
    batch = preprocess_tensorflow(_bucketed((3, 3)), BUCKET_IDS, local_devices=1,
                                  enable_minibatching=True)
    assert batch.num_minibatches == 2
    r = batch.stacks["t"]
    assert r.row_pointers.tolist() == [[3] + [8] * 7 + [10] + [16] * 7
                                       + [16, 18] + [24] * 6 + [24] * 8]
    assert r.embedding_ids[0, :24].tolist() == [0, 0, 1, P, P, P, P, P, 2, 3, P, P, P, P, P, P,
                                                0, 1, P, P, P, P, P, P]
    assert r.sample_ids[0, [0, 1, 2, 8, 9, 16, 17]].tolist() == [0, 1, 0, 0, 1, 0, 1]
    # statistics over all buckets: partition 0 max(5, 0), partition 1 max(0, 2); distinct 4, 2
    assert r.max_ids_per_partition.tolist() == [[5, 2]]
    assert r.max_unique_ids_per_partition.tolist() == [[4, 2]]
    # room: SparseCore 0 roundup8(3) + roundup8(2) = 16, SparseCore 1 roundup8(2) = 8
    assert r.required_buffer_size_per_sc.tolist() == [[16, 8]]
    assert r.id_drop_count == 0


def test_minibatch_dropping_is_sticky_per_bucket() -> None:
    """Limits (1, 256) with dropping: in SparseCore 0's run (partition 0, bucket 0) column 0
    comes from rows 0 and 1; the second finds the run full (1 id) and is dropped. Kept per
    bucket of that partition: 1, 1, 1, 1. The tree splits down to single buckets ([0, 2) holds
    2 > 1: bit 31, at 1; [2, 4): bit 32, at 3); the greedy merge keeps splits 1, 2, 3, so 4
    minibatches: [0, 1), [1, 2), [2, 3), [3, 64)."""
    batch = preprocess_tensorflow(_bucketed((1, 256)), BUCKET_IDS, local_devices=1,
                                  enable_minibatching=True, allow_id_dropping=True)
    assert batch.num_minibatches == 4
    r = batch.stacks["t"]
    assert r.id_drop_count == 1
    assert r.dropped["f"].tolist() == [False, False, False, True, False, False, False]
    # SparseCore 0: one token per minibatch at 0, 8, 16, 24; SparseCore 1: minibatch 0
    # partition 1 at 32, minibatch 1 partition 1 at 40
    assert r.embedding_ids[0, [0, 8, 16, 24, 32, 40]].tolist() == [0, 1, 2, 3, 0, 1]
    assert r.row_pointers[0, ::8].tolist() == [1, 9, 17, 25, 32, 40, 48, 48]
    with pytest.raises(TensorFlowLimitError, match=r"column bucket 0 to partition 0"):
        preprocess_tensorflow(_bucketed((1, 256)), BUCKET_IDS, local_devices=1,
                              enable_minibatching=True)
