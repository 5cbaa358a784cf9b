"""The memory estimate counts every working array of a step (``executor.memory``); measured
against peak RSS by ``benchmarks/bench_models.py``, not here."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, run_cli

from tpuemb_cfg.executor.memory import ZIPF_EXPONENT, estimate, expected_unique
from tpuemb_cfg.io import load
from tpuemb_cfg.prepare import prepare
from tpuemb_cfg.sim import synthetic

# The configuration of issue 16: a small table, 2.56 million bags a step.
ISSUE = """\
table_descriptor { name: "t" vocabulary_size: 1000 dimension: 128
  optimization_parameters { adagrad { } learning_rate { constant: 0.1 } } }
mode: TRAINING num_hosts: 1 num_tensor_cores: 128
feature_descriptor { table_id: 0 input_shape: 200 input_shape: 5 input_shape: 20 }
"""


def test_the_zipf_law_is_the_synthetic_one() -> None:
    assert ZIPF_EXPONENT == synthetic._ZIPF_EXPONENT


@pytest.mark.parametrize(("vocabulary", "draws"), [(100, 10_000), (10**5, 10**4),
                                                    (10**6, 3 * 10**5), (10**8, 10**5)])
def test_expected_unique_matches_the_sampler(vocabulary: int, draws: int) -> None:
    import numpy as np

    from tpuemb_cfg.executor.plan import TablePlan

    table = TablePlan.__new__(TablePlan)
    object.__setattr__(table, "vocabulary", vocabulary)
    object.__setattr__(table, "index", 0)
    data = synthetic.SyntheticData.__new__(synthetic.SyntheticData)
    counts = [np.unique(data._ids(np.random.default_rng(seed), table, draws)).size
              for seed in range(3)]
    assert expected_unique(vocabulary, draws) == pytest.approx(np.mean(counts), rel=0.03)
    assert expected_unique(vocabulary, 0) == 0


def test_counts_the_batch_arrays() -> None:
    plan = prepare(load(ISSUE.encode(), "text")).plan
    parts = estimate(plan)
    bags = 128 * 200 * 5 * 20  # one id per position
    assert parts.state == 1000 * 128 * 4 * 2
    # Activations and their gradients alone are 2 * 4 * bags * 128 bytes (2.6 GB).
    assert parts.steady >= 2 * 4 * bags * 128
    assert plan.memory_estimate() == parts.total > 8 * 10**9  # it peaks at about 8 GB


def test_grows_with_bag_sizes_and_cores() -> None:
    text = ISSUE.replace("input_shape: 200 input_shape: 5 input_shape: 20", "input_shape: 64")
    plan = prepare(load(text.encode(), "text")).plan
    base = plan.memory_estimate()
    assert plan.with_bags([10]).memory_estimate() > base  # 10 ids a bag instead of 1 to 4
    more_cores = prepare(load(text.replace("128", "256", 2).replace(
        "dimension: 256", "dimension: 128").encode(), "text")).plan
    assert more_cores.memory_estimate() > base


def test_non_lazy_optimizers_count_whole_tables() -> None:
    lazy = ISSUE.replace("adagrad { }", "adam { epsilon: 1e-7 }").replace(
        "input_shape: 200 input_shape: 5 input_shape: 20", "input_shape: 4")
    lazy = lazy.replace("vocabulary_size: 1000", "vocabulary_size: 1000000")
    eager = lazy.replace("epsilon: 1e-7", "epsilon: 1e-7 use_non_lazy_adam: true")
    lazy_bytes = prepare(load(lazy.encode(), "text")).plan.memory_estimate()
    eager_bytes = prepare(load(eager.encode(), "text")).plan.memory_estimate()
    assert eager_bytes - lazy_bytes >= 5 * 4 * 10**6 * 128


def test_simulate_refuses_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "issue.pbtxt"
    path.write_text(ISSUE)
    result = run_cli("simulate", str(path), "--max-memory", "64M", "--out-dir",
                     str(tmp_path / "o"))
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "the simulation needs about 9." in result.output and "GiB" in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("model", ["dlrm_criteo", "dcnv2_mlperf"])
def test_example_models_are_estimated_before_allocating(model: str) -> None:
    # The full models need tens of GB: refused up front, in one line.
    result = run_cli("simulate", str(EXAMPLES / "models" / f"{model}.pbtxt"), "--steps", "1",
                     "--max-memory", "1G", "--out-dir", "unused")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "more than the memory limit" in result.output
