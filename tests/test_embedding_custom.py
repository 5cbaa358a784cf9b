"""CustomOptimizer and CustomCombiner: TensorFlow 2.21's SparseCore classes with NumPy
computations, run by tpuemb and checked against the built-in optimizers and combiners.

TensorFlow's answers for the arguments, checks, slots and bytes are in
``data/tf/utils_cases.json`` (``test_tf_ported.py``); this file checks what TensorFlow cannot run
without a SparseCore: the computations themselves.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import ROOT, adagrad, sgd, total

from tpuemb_cfg.embedding import (
    ConfigValidationError,
    ConstantInitializer,
    CustomCombiner,
    CustomOptimizer,
    FeatureConfig,
    TableConfig,
    build_config,
)
from tpuemb_cfg.executor.optimizers import NoHyper, NoState, UpdateContext, get

RNG = np.random.default_rng(13)
ROWS = RNG.normal(size=(5, 4)).astype(np.float32)
GRAD = RNG.normal(size=(5, 4)).astype(np.float32)
CTX = UpdateContext(step=0, dynamic_inputs=())




def test_sgd_as_a_custom_optimizer_is_the_built_in_sgd() -> None:
    custom = CustomOptimizer(sgd, learning_rate=0.1)
    rows, slots = custom.update_rows(GRAD, ROWS, [])
    want, _ = get("stochastic_gradient_descent").update(ROWS, NoState(), GRAD,
                                                         np.float32(0.1), NoHyper(), CTX)
    np.testing.assert_array_equal(rows, want)
    assert slots == []


def test_adagrad_as_a_custom_optimizer_is_the_built_in_adagrad() -> None:
    custom = CustomOptimizer(adagrad, 0.05, ["accumulators"], [ConstantInitializer(0.1)])
    (accumulator,) = custom.initial_slots(5, 4)
    np.testing.assert_array_equal(accumulator, np.full((5, 4), 0.1, np.float32))
    rows, (acc,) = custom.update_rows(GRAD, ROWS, [accumulator])
    builtin = get("adagrad")
    want, state = builtin.update(ROWS, builtin.state(accumulator), GRAD, np.float32(0.05),
                                 NoHyper(), CTX)
    np.testing.assert_allclose(rows, want, rtol=1e-6)
    np.testing.assert_allclose(acc, state.accumulators, rtol=1e-6)


def test_update_fn_has_the_executors_row_function_form() -> None:
    custom = CustomOptimizer(adagrad, 0.05, ["accumulators"], [ConstantInitializer(0.1)])
    state = tuple(custom.initial_slots(5, 4))
    rows, new_state = custom.update_fn()(ROWS, state, GRAD, np.float32(0.05), None, CTX)
    assert rows.dtype == np.float32 and len(new_state) == 1


def test_hyperparameters_and_dynamic_learning_rates_are_evaluated() -> None:
    seen = []

    def scaled(gradient, table, slots, lr, hyper):  # type: ignore[no-untyped-def]
        seen.append((float(lr), hyper))
        return table - lr * hyper[0] * gradient

    custom = CustomOptimizer(scaled, learning_rate=lambda: 0.5, hyperparameters=[lambda: 2.0, 3])
    rows, _ = custom.update_rows(GRAD, ROWS, [])
    np.testing.assert_allclose(rows, ROWS - np.float32(0.5) * 2.0 * GRAD, rtol=1e-6)
    assert seen == [(0.5, (2.0, 3))]


def test_a_computation_returning_the_wrong_arrays_is_reported() -> None:
    custom = CustomOptimizer(sgd, 0.1, ["accumulators"], [ConstantInitializer(0.1)])
    with pytest.raises(ValueError, match="returned 1 array.*2 in all"):
        custom.update_rows(GRAD, ROWS, custom.initial_slots(5, 4))
    with pytest.raises(TypeError, match="custom_computation"):
        CustomOptimizer(42)  # type: ignore[arg-type]


def test_custom_optimizer_configuration_is_what_tensorflow_writes_and_fails_validation() -> None:
    table = TableConfig(16, 4, optimizer=CustomOptimizer(sgd, 0.1), name="t")
    compiled = build_config(FeatureConfig(table), per_replica_batch_size=8, validate=False)
    params = compiled.config.table_descriptor[0].optimization_parameters
    assert params.WhichOneof("parameters") is None
    assert params.gradient_accumulation_status == 2  # DISABLED
    with pytest.raises(ConfigValidationError) as info:
        build_config(FeatureConfig(TableConfig(16, 4, optimizer=CustomOptimizer(sgd, 0.1))),
                     per_replica_batch_size=8)
    assert [d.rule for d in info.value.diagnostics] == ["OPT001"]



def test_a_sum_combiner_combines_like_sum() -> None:
    combiner = CustomCombiner(total, max_valency=3)
    table = np.arange(20, dtype=np.float32).reshape(5, 4)
    got = combiner.combine_batch([[0, 1], [4], [2, 2, 3, 1]], table)
    want = np.stack([table[0] + table[1], table[4], table[2] + table[2] + table[3]])
    np.testing.assert_array_equal(got, want)  # the fourth id is beyond max_valency
    assert str(combiner).startswith("custom_combiner_") and combiner.slot_names == ()


def test_a_weighted_combiner_gets_its_weights() -> None:
    def weighted(valency, vectors, weights):  # type: ignore[no-untyped-def]
        return (vectors * weights[:, None]).sum(axis=0)

    combiner = CustomCombiner(weighted, 2, num_weights=2, initializer=ConstantInitializer(0.5))
    table = np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(combiner.combine([0, 1], table), [1.0, 1.0])
    np.testing.assert_array_equal(combiner.combine([0, 1], table, np.array([1.0, 0.0])),
                                  [1.0, 1.0])
    assert combiner.slot_names == ("custom_combiner_variables",)
    assert TableConfig(3, 2, combiner=combiner).combiner is combiner


def test_combiners_compare_like_tensorflows() -> None:
    assert CustomCombiner(total, 4) == CustomCombiner(total, 4)
    assert hash(CustomCombiner(total, 4)) == hash(CustomCombiner(total, 4))
    assert CustomCombiner(total, 4) != CustomCombiner(total, 5)


def test_the_documented_example_runs() -> None:
    """docs/compile.md: SGD written as a custom optimizer equals the built-in SGD."""
    text = (ROOT / "docs" / "compile.md").read_text(encoding="utf-8")
    section = text.split("### Custom optimizers and combiners", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    scope: dict[str, object] = {}
    exec(code.group(1), scope)  # noqa: S102 - the documentation's own example
    np.testing.assert_allclose(scope["new_rows"], np.ones((3, 4)) - np.float32(0.1) * 0.5)
