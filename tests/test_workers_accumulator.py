"""Conditional accumulators (spec: accumulator.md sections 1, 2 and 5).

Every expected number is derived by hand from the spec; float32 rounding cases are explained
next to the values.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tpuemb_cfg.sim.accumulators import (
    ConditionalAccumulator,
    GlobalStepWarning,
    SparseConditionalAccumulator,
    WouldBlock,
)

F32 = np.float32
TINY = 2.0**-24  # half an ulp of 1.0 in float32: 1 + TINY rounds (ties to even) back to 1


def bits(x: object) -> bytes:
    return np.asarray(x).tobytes()


# ---------------------------------------------------------------------------------------------
# construction


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, "float32"])
def test_supported_dtypes(dtype: object) -> None:
    acc = ConditionalAccumulator(dtype=dtype)
    acc.apply_grad([1, 2], 0)
    result = acc.take_grad(1)
    assert result.dtype == np.dtype(dtype)
    assert result.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("cls", [ConditionalAccumulator, SparseConditionalAccumulator])
@pytest.mark.parametrize("dtype", [np.int32, np.complex64, "bfloat16", "nonsense"])
def test_unsupported_dtype(cls: type, dtype: object) -> None:
    with pytest.raises(ValueError) as err:
        cls(dtype=dtype)
    message = str(err.value)
    assert message.startswith("dtype: got")
    assert "float16, float32, float64" in message


@pytest.mark.parametrize("cls", [ConditionalAccumulator, SparseConditionalAccumulator])
@pytest.mark.parametrize("reduction", ["AVG", "mean", "", None])
def test_unsupported_reduction(cls: type, reduction: object) -> None:
    with pytest.raises(ValueError) as err:
        cls(reduction_type=reduction)
    assert str(err.value) == (
        f"reduction_type: got {reduction!r}; allowed: 'MEAN', 'SUM' (case-sensitive)"
    )


@pytest.mark.parametrize("shape", [[-1, 3], [2.5], "2,3", [True]])
def test_bad_declared_shape(shape: object) -> None:
    with pytest.raises(ValueError, match=r"^shape: "):
        ConditionalAccumulator(shape=shape)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# dense: the worked example of spec 1.7


def test_worked_example_mean() -> None:
    acc = ConditionalAccumulator()
    assert acc.global_step == 0
    assert acc.apply_grad(10.0, 0) is True
    assert acc.apply_grad(20.0, 0) is True
    assert acc.num_accumulated() == 2
    first = acc.take_grad(1)  # mean of both although only one was required
    assert first.dtype == np.float32 and first.shape == ()
    assert float(first) == 15.0
    assert acc.global_step == 1
    assert acc.num_accumulated() == 0
    assert acc.apply_grad(5.0, 0) is False  # stale
    assert acc.num_accumulated() == 0
    assert acc.apply_grad(7.0, 5) is True  # from the future
    assert float(acc.take_grad(1)) == 7.0
    assert acc.global_step == 2
    assert acc.num_dropped == 1

    kinds = [(e.kind, e.local_step, e.global_step, e.counter, e.accepted) for e in acc.events]
    assert kinds == [
        ("apply", 0, 0, 1, True),
        ("apply", 0, 0, 2, True),
        ("take", None, 1, 0, None),
        ("drop", 0, 1, 0, False),
        ("apply", 5, 1, 1, True),
        ("take", None, 2, 0, None),
    ]
    take = acc.events[2]
    assert (take.global_step_before, take.num_required, take.num_reduced) == (0, 1, 2)
    drop = acc.events[3]
    assert drop.reason == "stale" and drop.backwards is False


def test_worked_example_sum() -> None:
    acc = ConditionalAccumulator(reduction_type="SUM")
    acc.apply_grad(10.0, 0)
    acc.apply_grad(20.0, 0)
    assert float(acc.take_grad(1)) == 30.0


def test_events_are_frozen_and_copied() -> None:
    acc = ConditionalAccumulator()
    acc.apply_grad(1.0, 0)
    events = acc.events
    events.clear()
    assert len(acc.events) == 1
    with pytest.raises(AttributeError):
        acc.events[0].kind = "drop"  # type: ignore[misc]


@pytest.mark.parametrize("num_required", [-1, 0])
def test_take_grad_num_required_must_be_positive(num_required: int) -> None:
    for state in ("empty", "full"):
        acc = ConditionalAccumulator()
        if state == "full":
            acc.apply_grad(1.0, 0)
            acc.apply_grad(2.0, 0)
        with pytest.raises(ValueError) as err:
            acc.take_grad(num_required)
        assert str(err.value) == f"Argument num_required must be positive, but was {num_required}"
        assert acc.global_step == 0
        assert acc.num_accumulated() == (2 if state == "full" else 0)


def test_take_grad_would_block_changes_nothing() -> None:
    acc = ConditionalAccumulator()
    with pytest.raises(WouldBlock):
        acc.take_grad(1)
    acc.apply_grad(1.0, 0)
    acc.apply_grad(3.0, 0)
    before = acc.events
    with pytest.raises(WouldBlock) as err:
        acc.take_grad(3)
    assert isinstance(err.value, RuntimeError)
    assert (err.value.num_required, err.value.num_accumulated, err.value.global_step) == (3, 2, 0)
    assert "2 of 3" in str(err.value)
    assert acc.events == before
    assert acc.num_accumulated() == 2 and acc.global_step == 0
    acc.apply_grad(5.0, 0)
    assert float(acc.take_grad(3)) == 3.0  # (1 + 3 + 5) / 3


def test_take_grad_exactly_at_least_num_required() -> None:
    acc = ConditionalAccumulator()
    acc.apply_grad(2.0, 0)
    acc.apply_grad(4.0, 0)
    assert float(acc.take_grad(2)) == 3.0


@pytest.mark.parametrize(
    ("local_step", "message"),
    [
        ([1, 2], "Argument local_step must be scalar, but had bad shape [2]"),
        (1.5, "Argument local_step must be an integer scalar, got float64 1.5"),
        (True, "Argument local_step must be an integer scalar, got bool True"),
        (2**63, "Argument local_step must fit in int64, got 9223372036854775808"),
    ],
)
def test_local_step_must_be_integer_scalar(local_step: object, message: str) -> None:
    acc = ConditionalAccumulator()
    with pytest.raises(ValueError) as err:
        acc.apply_grad(1.0, local_step)  # type: ignore[arg-type]
    assert str(err.value) == message
    assert acc.events == []


def test_numpy_integer_steps_are_accepted() -> None:
    acc = ConditionalAccumulator()
    assert acc.apply_grad(1.0, np.int64(0)) is True
    assert acc.apply_grad(3.0, np.array(4, dtype=np.int32)) is True
    assert float(acc.take_grad(np.int64(2))) == 2.0


# ---------------------------------------------------------------------------------------------
# dense: set_global_step


def test_set_global_step_sweep_forwards() -> None:
    acc = ConditionalAccumulator()
    acc.set_global_step(1000)
    assert acc.global_step == 1000
    results = [acc.apply_grad(float(v), step) for v, step in
               [(1, 998), (2, 999), (3, 1000), (4, 1001), (5, 1002)]]
    assert results == [False, False, True, True, True]
    assert acc.num_accumulated() == 3
    assert float(acc.take_grad(1)) == 4.0  # (3 + 4 + 5) / 3
    assert acc.global_step == 1001
    drops = [e.local_step for e in acc.events if e.kind == "drop"]
    assert drops == [998, 999]
    first = acc.events[0]
    assert (first.kind, first.global_step_before, first.global_step, first.backwards) == (
        "set_global_step", 0, 1000, False)


def test_set_global_step_backwards_warns_and_reaccepts_old_steps() -> None:
    acc = ConditionalAccumulator()
    acc.set_global_step(10)
    assert acc.apply_grad(1.0, 3) is False
    with pytest.warns(GlobalStepWarning, match="backwards from 10 to 3"):
        acc.set_global_step(3)
    event = acc.events[-1]
    assert (event.kind, event.global_step_before, event.global_step, event.backwards) == (
        "set_global_step", 10, 3, True)
    assert acc.global_step == 3
    assert acc.apply_grad(1.0, 3) is True
    assert acc.apply_grad(2.0, 2) is False


def test_set_global_step_same_value_does_not_warn() -> None:
    acc = ConditionalAccumulator()
    acc.set_global_step(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.set_global_step(4)
    assert acc.events[-1].backwards is False


def test_set_global_step_keeps_accumulated_gradients() -> None:
    acc = ConditionalAccumulator()
    acc.apply_grad(10.0, 0)
    acc.set_global_step(5)
    assert acc.num_accumulated() == 1
    assert acc.apply_grad(99.0, 4) is False
    assert float(acc.take_grad(1)) == 10.0
    assert acc.global_step == 6  # +1 from 5


# ---------------------------------------------------------------------------------------------
# dense: shapes


def test_shape_mismatch_against_declared_shape() -> None:
    acc = ConditionalAccumulator(shape=[2, 3])
    with pytest.raises(ValueError) as err:
        acc.apply_grad(np.zeros((4, 3)), 0)
    assert str(err.value) == "Shape mismatch: expected [2,3], got [4,3]"
    assert acc.num_accumulated() == 0 and acc.events == []


def test_shape_mismatch_against_buffer_wins_over_declared() -> None:
    acc = ConditionalAccumulator(shape=[None, 3])
    acc.apply_grad(np.ones((5, 3)), 0)
    with pytest.raises(ValueError) as err:
        acc.apply_grad(np.ones((2, 3)), 0)
    assert str(err.value) == "Shape mismatch: expected [5,3], got [2,3]"
    with pytest.raises(ValueError) as err:
        acc.apply_grad(np.ones((2, 4)), 0)
    assert str(err.value) == "Shape mismatch: expected [5,3], got [2,4]"
    assert acc.num_accumulated() == 1
    assert acc.take_grad(1).shape == (5, 3)
    assert acc.apply_grad(np.ones((2, 3)), 1) is True  # buffer released: any [?,3] now


def test_partially_known_shape() -> None:
    acc = ConditionalAccumulator(shape=[None, 3])
    with pytest.raises(ValueError) as err:
        acc.apply_grad(np.ones(3), 0)
    assert str(err.value) == "Shape mismatch: expected [?,3], got [3]"
    with pytest.raises(ValueError) as err:
        acc.apply_grad(np.ones((2, 2)), 0)
    assert str(err.value) == "Shape mismatch: expected [?,3], got [2,2]"
    assert acc.apply_grad(np.ones((7, 3)), 0) is True


def test_scalar_declared_shape() -> None:
    acc = ConditionalAccumulator(shape=[])
    with pytest.raises(ValueError) as err:
        acc.apply_grad([1.0], 0)
    assert str(err.value) == "Shape mismatch: expected [], got [1]"
    assert acc.apply_grad(1.0, 0) is True


def test_unknown_shape_held_only_while_accumulating() -> None:
    acc = ConditionalAccumulator(shape=None)
    acc.apply_grad(np.ones((2, 3)), 0)
    with pytest.raises(ValueError) as err:
        acc.apply_grad(np.ones((4, 3)), 0)
    assert str(err.value) == "Shape mismatch: expected [2,3], got [4,3]"
    acc.take_grad(1)
    assert acc.apply_grad(np.ones(5), 1) is True
    assert acc.take_grad(1).tolist() == [1.0] * 5


def test_stale_gradient_of_wrong_shape_is_dropped_without_error() -> None:
    acc = ConditionalAccumulator(shape=[2])
    acc.set_global_step(3)
    assert acc.apply_grad(np.ones((9, 9)), 2) is False
    assert acc.events[-1].kind == "drop"
    with pytest.raises(ValueError, match="Shape mismatch"):
        acc.apply_grad(np.ones((9, 9)), 3)


def test_gradient_must_be_numeric() -> None:
    acc = ConditionalAccumulator()
    with pytest.raises(ValueError, match="grad must hold real numbers"):
        acc.apply_grad("abc", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="grad cannot be converted to an array"):
        acc.apply_grad([[1.0], [1.0, 2.0]], 0)  # type: ignore[list-item]


def test_caller_array_is_not_aliased() -> None:
    acc = ConditionalAccumulator(reduction_type="SUM")
    grad = np.array([1.0, 2.0], dtype=np.float32)
    acc.apply_grad(grad, 0)
    grad[:] = 100.0
    assert acc.take_grad(1).tolist() == [1.0, 2.0]


# ---------------------------------------------------------------------------------------------
# dense: float32 arithmetic in arrival order


def test_float32_sum_in_arrival_order() -> None:
    # 1 + 2^-24 is a tie between 1 and 1 + 2^-23 and rounds to even (1.0): adding the two tiny
    # values one at a time to 1.0 loses both. Adding them first gives 2^-23, which survives.
    first_big = ConditionalAccumulator(reduction_type="SUM")
    for value in (1.0, TINY, TINY):
        first_big.apply_grad(value, 0)
    assert bits(first_big.take_grad(3)) == bits(F32(1.0))

    first_tiny = ConditionalAccumulator(reduction_type="SUM")
    for value in (TINY, TINY, 1.0):
        first_tiny.apply_grad(value, 0)
    assert bits(first_tiny.take_grad(3)) == bits(F32(1.0 + 2.0**-23))


def test_float32_mean_in_arrival_order() -> None:
    # MEAN = float32 sum / float32(3). 1/3 = 11184810.67 * 2^-25 rounds to 11184811 * 2^-25;
    # (1 + 2^-23)/3 = (2^25 + 4)/3 * 2^-25 = 11184812 * 2^-25 exactly.
    first_big = ConditionalAccumulator()
    for value in (1.0, TINY, TINY):
        first_big.apply_grad(value, 0)
    assert bits(first_big.take_grad(1)) == bits(F32(11184811 * 2.0**-25))

    first_tiny = ConditionalAccumulator()
    for value in (TINY, TINY, 1.0):
        first_tiny.apply_grad(value, 0)
    assert bits(first_tiny.take_grad(1)) == bits(F32(11184812 * 2.0**-25))


def test_float64_keeps_what_float32_loses() -> None:
    acc = ConditionalAccumulator(dtype=np.float64, reduction_type="SUM")
    for value in (1.0, TINY, TINY):
        acc.apply_grad(value, 0)
    assert float(acc.take_grad(1)) == 1.0 + 2.0**-23


finite32 = st.floats(min_value=-(2.0**100), max_value=2.0**100, allow_nan=False, width=32)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.lists(finite32, min_size=3, max_size=3), min_size=1, max_size=8))
def test_mean_is_float32_arrival_order_sum_over_count(grads: list[list[float]]) -> None:
    acc = ConditionalAccumulator(shape=[3])
    for grad in grads:
        acc.apply_grad(np.array(grad, dtype=np.float32), 0)
    expected = []
    for column in range(3):
        total = F32(grads[0][column])
        for grad in grads[1:]:
            total = F32(total + F32(grad[column]))
        expected.append(F32(total / F32(len(grads))))
    assert bits(acc.take_grad(1)) == bits(np.array(expected, dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# sparse: spec 2.2


def spec_example(reduction: str) -> SparseConditionalAccumulator:
    acc = SparseConditionalAccumulator(shape=[4, 2], reduction_type=reduction)
    assert acc.apply_indexed_slices_grad([0, 2], [[1, 1], [2, 2]], 0) is True
    assert acc.apply_indexed_slices_grad([2, 3], [[4, 4], [6, 6]], 0) is True
    return acc


def test_sparse_spec_example_mean() -> None:
    acc = spec_example("MEAN")
    assert acc.num_accumulated() == 2
    indices, values = acc.take_indexed_slices_grad(1)
    assert indices.dtype == np.int64 and values.dtype == np.float32
    assert indices.tolist() == [0, 2, 3]
    assert values.tolist() == [[1, 1], [3, 3], [6, 6]]
    assert acc.global_step == 1 and acc.num_accumulated() == 0


def test_sparse_spec_example_sum() -> None:
    indices, values = spec_example("SUM").take_indexed_slices_grad(1)
    assert indices.tolist() == [0, 2, 3]
    assert values.tolist() == [[1, 1], [6, 6], [6, 6]]


def test_sparse_mean_divides_by_row_count_not_gradient_count() -> None:
    acc = SparseConditionalAccumulator()
    acc.apply_indexed_slices_grad([0, 1], [[10.0], [1.0]], 0)
    acc.apply_indexed_slices_grad([1], [[2.0]], 0)
    acc.apply_indexed_slices_grad([1, 7], [[3.0], [8.0]], 0)
    acc.apply_indexed_slices_grad([1], [[4.0]], 0)
    indices, values = acc.take_indexed_slices_grad(4)
    assert indices.tolist() == [0, 1, 7]
    # row 0: 10/1 (not 10/4); row 1: (1+2+3+4)/4; row 7: 8/1
    assert values.tolist() == [[10.0], [2.5], [8.0]]


def test_sparse_disjoint_rows_are_kept_sorted() -> None:
    acc = SparseConditionalAccumulator()
    acc.apply_indexed_slices_grad([5, 9], [[3, 4], [5, 6]], 0)
    acc.apply_indexed_slices_grad([0], [[1, 2]], 0)
    indices, values = acc.take_indexed_slices_grad(2)
    assert indices.tolist() == [0, 5, 9]
    assert values.tolist() == [[1, 2], [3, 4], [5, 6]]


def test_sparse_row_sum_in_arrival_order_float32() -> None:
    acc = SparseConditionalAccumulator(reduction_type="SUM")
    for value in (1.0, TINY, TINY):
        acc.apply_indexed_slices_grad([3], [[value]], 0)
    acc.apply_indexed_slices_grad([4], [[TINY]], 0)
    acc.apply_indexed_slices_grad([4], [[TINY]], 0)
    acc.apply_indexed_slices_grad([4], [[1.0]], 0)
    indices, values = acc.take_indexed_slices_grad(1)
    assert indices.tolist() == [3, 4]
    assert bits(values) == bits(np.array([[1.0], [1.0 + 2.0**-23]], dtype=np.float32))


def test_sparse_negative_zero_row_is_copied() -> None:
    acc = SparseConditionalAccumulator(reduction_type="SUM")
    acc.apply_indexed_slices_grad([0], [[1.0]], 0)
    acc.apply_indexed_slices_grad([1], [[-0.0]], 0)  # a new row is a copy, not 0 + (-0.0)
    _, values = acc.take_indexed_slices_grad(1)
    assert np.signbit(values[1, 0])


def test_sparse_take_grad_returns_dense_shape() -> None:
    indices, values, dense_shape = spec_example("MEAN").take_grad(1)
    assert indices.tolist() == [0, 2, 3]
    assert dense_shape.tolist() == [4, 2]
    for shape in (None, [None, 2]):
        acc = SparseConditionalAccumulator(shape=shape)
        acc.apply_indexed_slices_grad([1], [[1, 2]], 0)
        assert acc.take_grad(1)[2].tolist() == [-1, 2]


def test_sparse_apply_grad_alias_uses_tensorflow_argument_order() -> None:
    acc = SparseConditionalAccumulator(shape=[4, 2])
    assert acc.apply_grad([1], [[2, 2]], grad_shape=[4, 2], local_step=0) is True
    acc.set_global_step(3)
    assert acc.apply_grad([1], [[2, 2]], local_step=2) is False
    with pytest.raises(ValueError) as err:
        acc.apply_grad([1], [[2, 2]], [5, 2], 3)
    assert str(err.value) == "Shape mismatch: expected shape dim 0 to be 4, got 5"


def test_sparse_stale_is_dropped_without_any_check() -> None:
    acc = SparseConditionalAccumulator(shape=[4, 2])
    acc.apply_indexed_slices_grad([1], [[1, 1]], 0)
    acc.take_indexed_slices_grad(1)
    assert acc.apply_indexed_slices_grad([[9, 9]], [[1, 2, 3]], 0) is False
    assert acc.apply_indexed_slices_grad([7, 3, 3], [[1, 1]], 0, dense_shape=[1]) is False
    assert [e.kind for e in acc.events][-2:] == ["drop", "drop"]
    assert acc.num_dropped == 2 and acc.num_accumulated() == 0


@pytest.mark.parametrize(
    ("shape", "indices", "values", "dense_shape", "message"),
    [
        ([4, 2], [[0], [1]], [[1, 1], [2, 2]], None,
         "Input indices should be vector but received shape: [2,1]"),
        ([4, 2], [0], 5.0, None, "Values cannot be 0-dimensional."),
        ([4, 2], [0, 1], [[1, 1]], None, "Expected 2 non-empty input values, got 1"),
        ([4, 2], [0], [[1, 1]], [4], "Shape mismatch: expected shape rank at least 2, got 1"),
        ([4, 2], [0], [[1, 1]], [5, 2], "Shape mismatch: expected shape dim 0 to be 4, got 5"),
        ([None, 2], [0], [[1, 1]], [5, 3], "Shape mismatch: expected shape dim 1 to be 2, got 3"),
        ([4, 2], [1, 4], [[1, 1], [2, 2]], None,
         "Shape mismatch: index of slice 1 exceeded limits of shape; index is 4 exceeded 4"),
        ([4, 2], [0], [1.0], None, "Shape mismatch: expected values rank at least 2, got 1"),
        ([4, 2], [0], [[1, 1, 1]], None, "Shape mismatch: expected values dim 1 to be 2, got 3"),
        (None, [2, 1], [[1], [2]], None,
         "indices[1] is 1 after 2 (unsorted): the indices of one gradient must be unique and "
         "ascending - combine duplicate rows (sum them) and sort before applying"),
        (None, [0, 3, 3], [[1], [2], [3]], None,
         "indices[2] is 3 after 3 (duplicate): the indices of one gradient must be unique and "
         "ascending - combine duplicate rows (sum them) and sort before applying"),
        (None, [-1, 0], [[1], [2]], None, "indices[0] is -1: row indices must be >= 0"),
    ],
)
def test_sparse_fresh_checks(shape: list[int | None] | None, indices: object, values: object,
                             dense_shape: object, message: str) -> None:
    acc = SparseConditionalAccumulator(shape=shape)
    with pytest.raises(ValueError) as err:
        acc.apply_indexed_slices_grad(indices, values, 0, dense_shape)  # type: ignore[arg-type]
    assert str(err.value) == message
    assert acc.num_accumulated() == 0 and acc.events == []


def test_sparse_checks_against_accumulated_values() -> None:
    acc = SparseConditionalAccumulator()
    acc.apply_indexed_slices_grad([0], [[1, 1]], 0)
    with pytest.raises(ValueError) as err:
        acc.apply_indexed_slices_grad([1], [[1, 1, 1]], 0)
    assert str(err.value) == "Shape mismatch: expected values dim 1 to be 2, got 3"
    with pytest.raises(ValueError) as err:
        acc.apply_indexed_slices_grad([1], [[[1, 1]]], 0)
    assert str(err.value) == "Shape mismatch: expected values rank 2, got 3"
    assert acc.num_accumulated() == 1
    acc.take_indexed_slices_grad(1)
    assert acc.apply_indexed_slices_grad([1], [[1, 1, 1]], 1) is True  # new window, new shape


def test_sparse_values_may_have_higher_rank_than_declared() -> None:
    acc = SparseConditionalAccumulator(shape=[4])
    assert acc.apply_indexed_slices_grad([3], [[1.0, 2.0]], 0) is True


def test_sparse_empty_gradient_counts_but_touches_no_row() -> None:
    acc = SparseConditionalAccumulator(shape=[4, 2])
    assert acc.apply_indexed_slices_grad([], np.zeros((0, 2)), 0) is True
    assert acc.num_accumulated() == 1
    indices, values = acc.take_indexed_slices_grad(1)
    assert indices.shape == (0,) and values.shape == (0, 2)

    acc.apply_indexed_slices_grad([], np.zeros((0, 2)), 1)
    acc.apply_indexed_slices_grad([2], [[4, 8]], 1)
    indices, values = acc.take_indexed_slices_grad(2)
    assert indices.tolist() == [2] and values.tolist() == [[4, 8]]  # row count 1, not 2


def test_sparse_would_block_and_num_required() -> None:
    acc = SparseConditionalAccumulator()
    acc.apply_indexed_slices_grad([0], [[1.0]], 0)
    with pytest.raises(WouldBlock, match=r"take_indexed_slices_grad\(2\) would block"):
        acc.take_indexed_slices_grad(2)
    with pytest.raises(ValueError, match="must be positive, but was 0"):
        acc.take_indexed_slices_grad(0)
    assert acc.num_accumulated() == 1


def test_sparse_indices_must_be_integers() -> None:
    acc = SparseConditionalAccumulator()
    with pytest.raises(ValueError, match="indices must be integers, got an array of float64"):
        acc.apply_indexed_slices_grad([0.5], [[1.0]], 0)


def test_sparse_dense_shape_must_be_an_integer_vector() -> None:
    acc = SparseConditionalAccumulator(shape=[4, 2])
    with pytest.raises(ValueError, match="dense_shape must be integers, got an array of float64"):
        acc.apply_indexed_slices_grad([0], [[1, 1]], 0, dense_shape=[4.0, 2.0])
    with pytest.raises(ValueError, match=r"dense_shape must be a vector, got shape \[1,2\]"):
        acc.apply_indexed_slices_grad([0], [[1, 1]], 0, dense_shape=[[4, 2]])
    assert acc.apply_indexed_slices_grad([0], [[1, 1]], 0, dense_shape=[4, 2, 7]) is True


sparse_grads = st.lists(
    st.dictionaries(st.integers(0, 5), finite32, max_size=6), min_size=1, max_size=6)


@settings(max_examples=examples(60), deadline=None)
@given(sparse_grads)
def test_sparse_mean_is_per_row_float32_sum_over_row_count(grads: list[dict[int, float]]) -> None:
    acc = SparseConditionalAccumulator(shape=[6, 1])
    sums: dict[int, np.float32] = {}
    counts: dict[int, int] = {}
    for grad in grads:
        rows = sorted(grad)
        acc.apply_indexed_slices_grad(rows, np.array([grad[r] for r in rows]).reshape(-1, 1), 0)
        for r in rows:
            value = F32(grad[r])
            sums[r] = value if r not in sums else F32(sums[r] + value)
            counts[r] = counts.get(r, 0) + 1
    indices, values = acc.take_indexed_slices_grad(len(grads))
    expected_rows = sorted(sums)
    expected = np.array([[F32(sums[r] / F32(counts[r]))] for r in expected_rows], np.float32)
    assert indices.tolist() == expected_rows
    assert bits(values.reshape(-1, 1)) == bits(expected.reshape(-1, 1))
