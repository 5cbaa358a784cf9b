"""Counter-based default initial values (issue 14, item 5; spec section 11).

Row r of a default table depends only on (seed, table, r): any subset or sharding of the rows
gives the same bytes as the whole table, NumPy and the compiled kernels agree bit for bit, and
the values are a truncated normal (mean 0, standard deviation 1/sqrt(D) before truncation, all
within two standard deviations). The expectations are statistics and identities, never a dump
of the generator's own output.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tpuemb_cfg
from tpuemb_cfg.executor import initial, state
from tpuemb_cfg.executor.counter import LAYER_F, LAYER_X, exp_minus, mix, normal_rows
from tpuemb_cfg.session import prepare
from tpuemb_cfg.simulate import Executor

numba_init = pytest.importorskip("tpuemb_cfg.executor.engines.numba_init")

# The standard deviation of a standard normal truncated to (-2, 2):
# sqrt(1 - 2 * 2 * phi(2) / (Phi(2) - Phi(-2))).
_PHI2 = math.exp(-2.0) / math.sqrt(2 * math.pi)
TRUNCATED_STD = math.sqrt(1 - 4 * _PHI2 / math.erf(math.sqrt(2.0)))


def _config(
    optimizer: str = "adagrad { }", vocab: int = 3000, dim: int = 16
) -> tpuemb_cfg.TPUEmbeddingConfiguration:
    """Table "a" (``optimizer``, ``vocab`` x ``dim``) and table "b" (Adam, 50 x 3), one feature
    each."""
    text = (
        f'table_descriptor {{ name: "a" vocabulary_size: {vocab} dimension: {dim} '
        f"optimization_parameters {{ {optimizer} learning_rate {{ constant: 0.1 }} }} }} "
        'table_descriptor { name: "b" vocabulary_size: 50 dimension: 3 '
        "optimization_parameters { adam { beta1: 0.9 beta2: 0.99 epsilon: 1e-3 } "
        "learning_rate { constant: 0.1 } } } "
        "mode: TRAINING num_hosts: 1 num_tensor_cores: 1 "
        'feature_descriptor { name: "f" table_id: 0 input_shape: 4 } '
        'feature_descriptor { name: "g" table_id: 1 input_shape: 4 }'
    )
    return tpuemb_cfg.load(text.encode(), "text")


def _plan(optimizer: str = "adagrad { }", vocab: int = 3000, dim: int = 16) -> object:
    return prepare(_config(optimizer, vocab, dim)).plan


def test_splitmix_known_answers() -> None:
    """SplitMix64 from state 0: its first two outputs are mix(G) and mix(2G) (Steele et al.)."""
    gamma = 0x9E3779B97F4A7C15
    states = np.array([gamma, (2 * gamma) % 2**64], dtype=np.uint64)
    assert [int(z) for z in mix(states)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]


def test_exp_polynomial_and_ziggurat_layers() -> None:
    t = np.linspace(0.0, 8.0, 20001)
    assert np.max(np.abs(exp_minus(t) / np.exp(-t) - 1)) < 1e-14
    assert LAYER_X[28] == 2.0 and LAYER_X[128] == 0.0 and LAYER_F[128] == 1.0
    area = LAYER_X[28] * (LAYER_F[29] - LAYER_F[28])  # every layer above the base: this area
    tops = LAYER_X[28:128] * (LAYER_F[29:] - LAYER_F[28:128])
    np.testing.assert_allclose(tops, area, rtol=1e-12)
    assert LAYER_F[28] == pytest.approx(14 * area) and LAYER_F[28] < math.exp(-2.0)
    # Below the curve inside each layer: f(X[i+1]) is the layer's top.
    np.testing.assert_allclose(exp_minus(0.5 * LAYER_X[29:128] ** 2), LAYER_F[29:128], rtol=1e-12)


@pytest.mark.parametrize("dim", [1, 3, 16, 129])
def test_numpy_and_compiled_agree_bit_for_bit(dim: int) -> None:
    rows = np.array([0, 7, 5, 123456789012, 2**40 + 3, 7], dtype=np.int64)
    want = normal_rows(11, 4, rows, dim, 1 / math.sqrt(dim))
    got = np.empty_like(want)
    numba_init.fill_normal_rows(11, 4, rows, got, 1 / math.sqrt(dim))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    whole = np.empty((10, dim), np.float32)
    numba_init.fill_normal_range(11, 4, 0, whole, 1 / math.sqrt(dim))
    np.testing.assert_array_equal(whole[[0, 7, 5]].view(np.uint32), want[:3].view(np.uint32))


def test_truncated_normal_statistics() -> None:
    dim = 64
    values = normal_rows(3, 0, np.arange(20000), dim, 1 / math.sqrt(dim)).astype(np.float64)
    scaled = values * math.sqrt(dim)
    assert abs(scaled.mean()) < 0.005
    assert scaled.std() == pytest.approx(TRUNCATED_STD, rel=0.01)
    assert np.abs(scaled).max() <= 2.0 and np.abs(scaled).max() > 1.99
    # A standard normal restricted to (-2, 2): P(|x| < 1) = (Phi(1) - Phi(-1)) / (Phi(2) - Phi(-2)).
    inside = math.erf(1 / math.sqrt(2)) / math.erf(math.sqrt(2))
    assert np.mean(np.abs(scaled) < 1) == pytest.approx(inside, abs=0.003)
    # Columns and rows are not correlated with their neighbours.
    assert abs(np.corrcoef(scaled[:, 0], scaled[:, 1])[0, 1]) < 0.03
    assert abs(np.corrcoef(scaled[:-1, 5], scaled[1:, 5])[0, 1]) < 0.03


def test_rows_depend_on_seed_table_and_row_only() -> None:
    plan = _plan()
    table = plan.tables[0]
    whole = initial.initial_state(plan, seed=5)["table/a"]
    rows = np.random.default_rng(0).permutation(table.vocabulary)
    # Any sharding: MOD over 3 hosts, then DIV in 4 blocks, each shard computed on its own.
    for shards in ([rows[rows % 3 == h] for h in range(3)], np.array_split(np.arange(3000), 4)):
        for shard in shards:
            got = state.initial_table_rows(table, 5, shard)
            np.testing.assert_array_equal(got.view(np.uint32), whole[shard].view(np.uint32))
    assert not np.array_equal(state.initial_table_rows(table, 6, rows[:10]), whole[rows[:10]])
    other = initial.initial_state(plan, seed=5)["table/b"]
    assert not np.allclose(other[:10, :3], whole[:10, :3])  # tables have their own streams


def test_slot_rows_and_frequency_estimator() -> None:
    plan = _plan()
    adam = plan.tables[1]
    np.testing.assert_array_equal(state.initial_slot_rows(adam, "velocities", [3, 1]), 0.0)
    plan = _plan("frequency_estimator { tau: 0.1 max_delta: 7 outlier_threshold: 2 }", dim=1)
    estimator = plan.tables[0]
    np.testing.assert_array_equal(state.initial_table_rows(estimator, 0, [5, 2]), 7.0)
    assert initial.initial_state(plan)["table/a"].min() == 7.0


def test_lazy_state_materializes_the_same_values() -> None:
    plan = _plan()
    eager = initial.initial_state(plan, seed=2)
    lazy = initial.initial_state(plan, seed=2, lazy=True)
    assert set(lazy.pending) == {"a", "b"} and not eager.pending
    pending = lazy.pending["a"]
    params, slots = lazy["table/a"], (lazy["slot/a/accumulators"],)
    assert not pending.materialize(params, slots, np.array([4, 9, 2999]))
    np.testing.assert_array_equal(params[[4, 9, 2999]], eager["table/a"][[4, 9, 2999]])
    assert pending.remaining == 2997
    assert pending.materialize(params, slots, None)
    np.testing.assert_array_equal(params, eager["table/a"])
    np.testing.assert_array_equal(slots[0], eager["slot/a/accumulators"])


def test_executor_computes_rows_when_touched() -> None:
    lazy = Executor(_config(), seed=4)
    eager_state = initial.initial_state(lazy.plan, seed=4)
    assert lazy.storage._pending  # nothing computed yet
    batch = [{"ids": np.array([3, 3, 17, 2]), "grad": np.ones((4, 16), np.float32)},
             {"ids": np.array([1, 0, 1, 1]), "grad": np.ones((4, 3), np.float32)}]
    activations = lazy.step(batch)
    np.testing.assert_array_equal(activations[0][2], eager_state["table/a"][17])
    arrays = lazy.state_arrays()  # written out: every row computed
    untouched = np.setdiff1d(np.arange(3000), [2, 3, 17])
    np.testing.assert_array_equal(arrays["table/a"][untouched], eager_state["table/a"][untouched])
    assert not lazy.storage._pending
