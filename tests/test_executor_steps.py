"""One behaviour per test, on tiny tables whose results are worked out by hand from the spec.

Unless a test says otherwise: one table ``t`` of 4 rows of width 1 holding 1, 2, 3, 4, SGD with
learning rate 0.5, accumulation ENABLED, one core, one host.
"""

from __future__ import annotations

import numpy as np
import pytest

import tpuemb_cfg
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.executor import FeatureInput
from tpuemb_cfg.executor.engines import numpy as kernels
from tpuemb_cfg.simulate import Executor

F32 = np.float32
INIT = {"table/t": np.array([[1.0], [2.0], [3.0], [4.0]], dtype=F32)}


def config(
    optimizer: str = "stochastic_gradient_descent { }",
    extra: str = "",
    features: str = 'feature_descriptor { name: "a" input_shape: 2 }',
    top: str = "",
    vocabulary: int = 4,
    dimension: int = 1,
    learning_rate: str = "constant: 0.5",
) -> tpuemb_cfg.TPUEmbeddingConfiguration:
    text = f"""
    table_descriptor {{
      name: "t" vocabulary_size: {vocabulary} dimension: {dimension}
      optimization_parameters {{
        {optimizer}
        learning_rate {{ {learning_rate} }}
        gradient_accumulation_status: ENABLED
        {extra}
      }}
    }}
    mode: TRAINING num_hosts: 1 num_tensor_cores: 1
    {top}
    {features}
    """
    return tpuemb_cfg.load(text.encode(), "text")


def two_cores(optimizer: str, status: str, vocabulary: int = 2,
              input_shape: int = 1) -> tpuemb_cfg.TPUEmbeddingConfiguration:
    """One table of dimension 1 split over two tensor cores, learning rate 1, accumulation
    ``status``, and one feature."""
    text = f"""
    table_descriptor {{ name: "t" vocabulary_size: {vocabulary} dimension: 1
      optimization_parameters {{ {optimizer} {{ }} learning_rate {{ constant: 1 }}
        gradient_accumulation_status: {status} }} }}
    mode: TRAINING num_hosts: 1 num_tensor_cores: 2
    feature_descriptor {{ name: "a" input_shape: {input_shape} }}
    """
    return tpuemb_cfg.load(text.encode(), "text")


def feature(ids, splits=None, weights=None, grad=None) -> FeatureInput:
    return FeatureInput(
        np.array(ids, dtype=np.int64),
        None if splits is None else np.array(splits, dtype=np.int64),
        None if weights is None else np.array(weights, dtype=F32),
        None if grad is None else np.array(grad, dtype=F32),
    )


def column(executor: Executor, name: str = "table/t") -> list[float]:
    return [float(v) for v in executor.state_arrays()[name][:, 0]]


# ------------------------------------------------------------------------------------------------
# Forward pass: combiners, weights, empty bags, duplicates


def test_sum_with_weights_and_duplicates_across_features() -> None:
    cfg = config(features='feature_descriptor { name: "a" input_shape: 2 } '
                          'feature_descriptor { name: "b" input_shape: 1 }')
    executor = Executor(cfg, combiners="sum", initial_state=INIT)
    # Feature a: bag 0 = ids 0, 0, 1 with weights 1, 2, 1; bag 1 = id 2. Feature b: bag 0 = id 0.
    a = feature([0, 0, 1, 2], [0, 3, 4], [1, 2, 1, 1], [[1.0], [2.0]])
    b = feature([0], None, None, [[10.0]])
    activations = executor.step([a, b])
    # A = 1*1 + 2*1 + 1*2 = 5 and 3; feature b: 1.
    assert activations[0][:, 0].tolist() == [5.0, 3.0]
    assert activations[1][:, 0].tolist() == [1.0]
    # G(0) = (1 + 2) * 1 + 1 * 10 = 13 (one sum over both features), G(1) = 1, G(2) = 2.
    assert column(executor) == [1 - 0.5 * 13, 2 - 0.5 * 1, 3 - 0.5 * 2, 4.0]
    report = executor.last_report["t"]
    assert report.rows_touched == 3 and report.rows_updated == 3


def test_mean_combiner() -> None:
    executor = Executor(config(), combiners="mean", initial_state=INIT)
    # Bag 0: ids 0, 1 with weights 1, 3 -> gains 1/4, 3/4; bag 1 empty.
    activations = executor.step([feature([0, 1], [0, 2, 2], [1, 3], [[4.0], [7.0]])])
    assert activations[0][:, 0].tolist() == [0.25 * 1 + 0.75 * 2, 0.0]
    # G(0) = 0.25 * 4 = 1, G(1) = 0.75 * 4 = 3; the empty bag's gradient is ignored.
    assert column(executor) == [0.5, 0.5, 3.0, 4.0]


def test_sqrtn_combiner() -> None:
    executor = Executor(config(), combiners="sqrtn", initial_state=INIT)
    # Weights 3, 4: 1 / sqrt(9 + 16) = 1/5 -> gains 0.6, 0.8.
    activations = executor.step([feature([0, 1], [0, 2, 2], [3, 4], [[1.0], [0.0]])])
    assert activations[0][0, 0] == pytest.approx(0.6 * 1 + 0.8 * 2, abs=1e-6)
    assert column(executor) == pytest.approx([1 - 0.5 * 0.6, 2 - 0.5 * 0.8, 3.0, 4.0], abs=1e-6)


def test_per_feature_combiners_default_is_mean() -> None:
    cfg = config(features='feature_descriptor { name: "a" input_shape: 1 } '
                          'feature_descriptor { name: "b" input_shape: 1 }')
    executor = Executor(cfg, combiners={1: "sum"}, initial_state=INIT)
    batch = [feature([0, 1], [0, 2], None, [[0.0]]), feature([0, 1], [0, 2], None, [[0.0]])]
    activations = executor.step(batch)
    assert activations[0][0, 0] == 1.5  # mean of 1 and 2
    assert activations[1][0, 0] == 3.0  # sum


def test_zero_denominator_bag_gives_zero_and_still_touches() -> None:
    executor = Executor(config(), combiners="mean", initial_state=INIT)
    # Weights 1 and -1 sum to 0: scale 0, activation 0, both rows touched with G = 0.
    activations = executor.step([feature([0, 1], [0, 2, 2], [1, -1], [[5.0], [0.0]])])
    assert activations[0][:, 0].tolist() == [0.0, 0.0]
    report = executor.last_report["t"]
    assert report.zero_denominator_bags == {0: 1}
    assert report.rows_touched == 2
    assert column(executor) == [1.0, 2.0, 3.0, 4.0]


def test_zero_weight_occurrence_still_steps_momentum() -> None:
    init = {**INIT, "slot/t/momenta": np.array([[1.0], [0.0], [0.0], [0.0]], dtype=F32)}
    executor = Executor(config("momentum { momentum: 0.5 }"), combiners="sum", initial_state=init)
    executor.step([feature([0], None, [0.0], [[3.0]])])
    # G = 0: m = 0.5 * 1 + 0 = 0.5, w = 1 - 0.5 * 0.5.
    assert column(executor) == [0.75, 2.0, 3.0, 4.0]
    assert column(executor, "slot/t/momenta") == [0.5, 0.0, 0.0, 0.0]


def test_simulated_quantization_forward_only() -> None:
    cfg = config(extra="simulated_quantization { enabled: true num_buckets: 3 "
                       "clipping_limits { lower { value: 0 } upper { value: 1 } } }")
    init = {"table/t": np.array([[0.3], [0.2], [1.7], [0.0]], dtype=F32)}
    executor = Executor(cfg, combiners="sum", initial_state=init)
    activations = executor.step([feature([0, 1, 2], [0, 1, 2, 3], None, [[0.0]] * 3)])
    # quantum 0.5: 0.3 -> floor(0.6 + 0.5) * 0.5 = 0.5; 0.2 -> 0; 1.7 -> clamp 1 -> 1.
    assert activations[0][:, 0].tolist() == [0.5, 0.0, 1.0]
    assert column(executor) == pytest.approx([0.3, 0.2, 1.7, 0.0])  # stored rows unquantized


# ------------------------------------------------------------------------------------------------
# Update pipeline: clipping, decay, optimizer, laziness


def test_gradient_and_weight_clipping() -> None:
    cfg = config(extra="gradient_clipping_limits { lower { value: -1 } upper { value: 2 } } "
                       "clipping_limits { lower { value: 0.5 } }")
    init = {"table/t": np.array([[1.0], [2.0], [3.0], [-4.0]], dtype=F32)}
    executor = Executor(cfg, combiners="sum", initial_state=init)
    executor.step([feature([0, 1], None, None, [[13.0], [-5.0]])])
    # G = 13 -> 2: w = 1 - 1 = 0 -> clipped to 0.5; G = -5 -> -1: w = 2 + 0.5 = 2.5.
    # Row 3 is untouched, so its -4 stays although it is below the limit.
    assert column(executor) == [0.5, 2.5, 3.0, -4.0]


@pytest.mark.parametrize(("by_lr", "decay"), [(False, 0.1), (True, 0.1 * 0.5)])
def test_weight_decay(by_lr: bool, decay: float) -> None:
    flag = "multiply_weight_decay_factor_by_learning_rate: true" if by_lr else ""
    executor = Executor(
        config(extra=f"weight_decay_factor: 0.1 {flag}"), combiners="sum", initial_state=INIT
    )
    executor.step([feature([1], None, None, [[1.0]])])
    # w = 2 - decay * 2, then SGD: - 0.5 * 1. Untouched rows do not decay.
    expected = F32(2) - F32(decay) * F32(2) - F32(0.5)
    assert column(executor) == [1.0, pytest.approx(float(expected), abs=1e-6), 3.0, 4.0]


def test_adam_lazy_and_non_lazy() -> None:
    base = "beta1: 0.5 beta2: 0.5 epsilon: 1e-3"
    init = {
        "table/t": np.zeros((4, 1), dtype=F32),
        "slot/t/momenta": np.ones((4, 1), dtype=F32),
        "slot/t/velocities": np.ones((4, 1), dtype=F32),
    }
    lazy = Executor(config(f"adam {{ {base} }}"), combiners="sum", initial_state=init)
    lazy.step([feature([0], None, None, [[1.0]])])
    # Touched row 0: m = 0.5 + 0.5 = 1, v = 0.5 + 0.5 = 1, w = -0.5 * 1 / (1 + 1e-3).
    assert column(lazy)[0] == pytest.approx(-0.5 / 1.001, abs=1e-6)
    assert column(lazy)[1:] == [0.0, 0.0, 0.0]
    assert column(lazy, "slot/t/momenta")[1:] == [1.0, 1.0, 1.0]

    eager = Executor(
        config(f"adam {{ {base} use_non_lazy_adam: true }}"), combiners="sum", initial_state=init
    )
    eager.step([feature([0], None, None, [[1.0]])])
    # Untouched rows step with G = 0: m = 0.5, v = 0.5, w = -0.5 * 0.5 / (sqrt(0.5) + 1e-3).
    untouched = -0.5 * 0.5 / (np.sqrt(0.5) + 1e-3)
    assert column(eager)[1:] == pytest.approx([untouched] * 3, abs=1e-6)
    assert eager.last_report["t"].rows_updated == 4


# ------------------------------------------------------------------------------------------------
# Accumulation


def test_accumulation_enabled_vs_disabled_two_cores() -> None:
    def run(status: str) -> list[float]:
        cfg = two_cores("adagrad", status)
        init = {"table/t": np.ones((2, 1), dtype=F32)}
        executor = Executor(cfg, combiners="sum", initial_state=init)
        # Two bags (one per core), both id 0, gradient 1 each.
        executor.step([feature([0, 0], None, None, [[1.0], [1.0]])])
        return column(executor)

    # ENABLED: G = 2, acc = 0.1 + 4 = 4.1, w = 1 - 2 / sqrt(4.1).
    assert run("ENABLED")[0] == pytest.approx(1 - 2 / np.sqrt(4.1), abs=1e-6)
    # DISABLED: core 0 then core 1, each G = 1: acc 1.1 then 2.1.
    expected = 1 - 1 / np.sqrt(1.1) - 1 / np.sqrt(2.1)
    assert run("DISABLED")[0] == pytest.approx(expected, abs=1e-6)


def test_disabled_requires_bags_divisible_by_cores() -> None:
    executor = Executor(two_cores("adagrad", "DISABLED"), combiners="sum")
    with pytest.raises(InputError) as info:
        executor.step([feature([0, 1, 1], None, None, [[1.0]] * 3)])
    assert info.value.key == "s0/f0/row_splits"
    assert "3 bags" in info.value.message and "num_tensor_cores = 2" in info.value.message
    assert executor.step_index == 0


def test_deduplication_data_partials_per_core() -> None:
    cfg = two_cores("stochastic_gradient_descent", "DISABLED", vocabulary=4, input_shape=2)
    executor = Executor(cfg, combiners="sum")
    _, dedup = executor.recv_activations([feature([3, 1, 3, 2, 3], [0, 2, 3, 4, 5])])
    record = dedup.tables["t"]
    assert record.unique_ids.tolist() == [1, 2, 3]
    # Core 0 owns bags 0-1 (ids 3, 1, 3), core 1 bags 2-3 (ids 2, 3).
    assert [p.core for p in record.partials] == [0, 1]
    assert record.partials[0].rows.tolist() == [1, 3]
    assert record.partials[1].rows.tolist() == [2, 3]


# ------------------------------------------------------------------------------------------------
# Learning rates, the op pair, pipelining, sharding

THREE_TABLES = """
table_descriptor { name: "a" vocabulary_size: 2 dimension: 1 optimization_parameters {
  stochastic_gradient_descent { } learning_rate { dynamic { } } } }
table_descriptor { name: "b" vocabulary_size: 2 dimension: 1 optimization_parameters {
  stochastic_gradient_descent { } learning_rate { dynamic { tag: 1 } } } }
table_descriptor { name: "c" vocabulary_size: 2 dimension: 1 optimization_parameters {
  stochastic_gradient_descent { } learning_rate { dynamic { } } } }
mode: TRAINING num_hosts: 1 num_tensor_cores: 1
feature_descriptor { name: "fa" input_shape: 1 }
feature_descriptor { name: "fb" table_id: 1 input_shape: 1 }
feature_descriptor { name: "fc" table_id: 2 input_shape: 1 }
"""


def test_dynamic_learning_rates_by_tag() -> None:
    cfg = tpuemb_cfg.load(THREE_TABLES.encode(), "text")
    init = {f"table/{n}": np.zeros((2, 1), dtype=F32) for n in "abc"}
    executor = Executor(cfg, combiners="sum", initial_state=init)
    assert executor.num_learning_rates == 2
    activations, dedup = executor.recv_activations([feature([0]), feature([0]), feature([0])])
    grads = [np.ones((1, 1), dtype=F32)] * 3
    executor.send_gradients(grads, [0.5, 2.0], dedup)
    # Tables a and c share tag 0 (0.5); b uses tag 1 (2.0).
    state = executor.state_arrays()
    assert [float(state[f"table/{n}"][0, 0]) for n in "abc"] == [-0.5, -2.0, -0.5]


def test_wrong_learning_rate_count_names_k_and_tables() -> None:
    cfg = tpuemb_cfg.load(THREE_TABLES.encode(), "text")
    executor = Executor(cfg, combiners="sum")
    _, dedup = executor.recv_activations([feature([0]), feature([0]), feature([0])])
    with pytest.raises(InputError) as info:
        executor.send_gradients([np.ones((1, 1), dtype=F32)] * 3, [0.5], dedup)
    message = info.value.message
    assert info.value.key == "s0/learning_rates"
    assert "K = 2" in message
    assert "tag 0: table 'a', table 'c'" in message and "tag 1: table 'b'" in message


def test_stale_deduplication_data_is_refused() -> None:
    executor = Executor(config(), combiners="sum", initial_state=INIT)
    _, first = executor.recv_activations([feature([0])])
    executor.send_gradients([np.ones((1, 1), dtype=F32)], None, first)
    _, second = executor.recv_activations([feature([0])])
    with pytest.raises(InputError, match="comes from step 0"):
        executor.send_gradients([np.ones((1, 1), dtype=F32)], None, first)
    executor.send_gradients([np.ones((1, 1), dtype=F32)], None, second)
    assert column(executor)[0] == 0.0  # 1 - 0.5 - 0.5


@pytest.mark.parametrize(("pipelined", "expected"), [(False, [1.0, 0.5, 0.0]),
                                                     (True, [1.0, 1.0, 0.5])])
def test_pipelining_reads_one_update_back(pipelined: bool, expected: list[float]) -> None:
    top = "pipeline_execution_with_tensor_core: true" if pipelined else ""
    executor = Executor(config(top=top), combiners="sum", initial_state=INIT)
    seen = []
    for _ in range(3):
        seen.append(float(executor.step([feature([0], None, None, [[1.0]])])[0][0, 0]))
    # Updates always apply to the newest table: 1 -> 0.5 -> 0 -> -0.5.
    assert seen == expected
    assert column(executor)[0] == -0.5


def test_sharding_report_div_and_mod() -> None:
    ids = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 7, 7]
    for strategy, per_host, unique_per_host in (
        ("DIV_DEFAULT", [3, 3, 4, 2], [3, 3, 2, 2]),  # DIV: {0,1,2} {3,4,5} {6,7} {8,9}
        ("MOD", [3, 3, 2, 4], [3, 3, 2, 2]),  # MOD: {0,4,8} {1,5,9} {2,6} {3,7}
    ):
        cfg = config(vocabulary=10, top=f"sharding_strategy: {strategy}")
        cfg.num_hosts = 4
        executor = Executor(cfg, combiners="sum")
        executor.recv_activations([feature(ids, [0, 6, 12])])
        report = executor.last_report["t"]
        assert report.ids_per_host.tolist() == per_host, strategy
        assert report.unique_ids_per_host.tolist() == unique_per_host, strategy


def test_host_of_worked_example() -> None:
    ids = np.arange(10)
    assert kernels.host_of(ids, 10, 4, mod=False).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    assert kernels.host_of(ids, 10, 4, mod=True).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]


def test_segment_sum_keeps_order_and_zero_fills() -> None:
    values = np.array([[1.0], [2.0], [4.0]], dtype=F32)
    out = kernels.segment_sum(values, np.array([2, 0, 2]), 4)
    assert out[:, 0].tolist() == [2.0, 0.0, 5.0, 0.0]


def test_default_initial_state_is_seeded() -> None:
    cfg = config("adagrad { }", vocabulary=50, dimension=4)
    a = Executor(cfg, seed=3).state_arrays()
    b = Executor(cfg, seed=3).state_arrays()
    c = Executor(cfg, seed=4).state_arrays()
    assert np.array_equal(a["table/t"], b["table/t"])
    assert not np.array_equal(a["table/t"], c["table/t"])
    # Truncated normal, stddev 1/sqrt(4) = 0.5, cut at two standard deviations.
    assert float(np.max(np.abs(a["table/t"]))) <= 1.0
    assert np.all(a["slot/t/accumulators"] == F32(0.1))


def test_unsupported_optimizer_is_refused_naming_the_table() -> None:
    with pytest.raises(InputError, match="table 't'.*online_yogi"):
        Executor(config("online_yogi { }"))


def test_inference_mode_does_not_update() -> None:
    cfg = config()
    cfg.mode = cfg.INFERENCE
    executor = Executor(cfg, combiners="sum", initial_state=INIT)
    activations = executor.step([feature([0])])
    assert activations[0][0, 0] == 1.0
    assert column(executor) == [1.0, 2.0, 3.0, 4.0]
    assert executor.step_index == 1


def test_legacy_style_features_come_table_by_table() -> None:
    text = """
    table_descriptor { name: "t" vocabulary_size: 4 dimension: 1 num_features: 2
      optimization_parameters { stochastic_gradient_descent { } learning_rate { constant: 0.5 } } }
    table_descriptor { name: "u" vocabulary_size: 2 dimension: 1 num_features: 1
      optimization_parameters { stochastic_gradient_descent { } learning_rate { constant: 1 } } }
    mode: TRAINING batch_size_per_tensor_core: 1 num_hosts: 1 num_tensor_cores: 1
    """
    init = {**INIT, "table/u": np.array([[5.0], [6.0]], dtype=F32)}
    executor = Executor(tpuemb_cfg.load(text.encode(), "text"), combiners="sum",
                        initial_state=init)
    assert [(f.index, f.table) for f in executor.plan.features] == [(0, 0), (1, 0), (2, 1)]
    # Mapping-style inputs work like FeatureInput.
    activations = executor.step([
        {"ids": [0], "grad": [[1.0]]},
        {"ids": [3], "grad": [[2.0]]},
        {"ids": [1], "grad": [[1.0]]},
    ])
    assert [float(a[0, 0]) for a in activations] == [1.0, 4.0, 6.0]
    assert column(executor) == [0.5, 2.0, 3.0, 3.0]
    assert column(executor, "table/u") == [5.0, 5.0]
