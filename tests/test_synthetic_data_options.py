"""Synthetic data options: the id distribution (``zipf:S``, ``uniform``) and sequence lengths
(``executor.workload``, ``sim.synthetic``), against frequencies computed here from the laws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import run_cli

from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig, build_config
from tpuemb_cfg.executor.memory import RunShape, step_ids
from tpuemb_cfg.executor.workload import (
    IdDistribution,
    SequenceLengths,
    parse_ids,
    parse_sequence_lengths,
)
from tpuemb_cfg.formats.io import load
from tpuemb_cfg.session import prepare
from tpuemb_cfg.sim import kernels
from tpuemb_cfg.sim.synthetic import SyntheticData

ONE_TABLE = """
table_descriptor { name: "t" vocabulary_size: %d dimension: 4
  optimization_parameters { adagrad {} learning_rate { constant: 0.1 } } }
mode: TRAINING num_hosts: 1 num_tensor_cores: 1
feature_descriptor { input_shape: %d }
"""


def plan_of(vocabulary: int, batch: int) -> object:
    return prepare(load((ONE_TABLE % (vocabulary, batch)).encode(), "text")).plan


def drawn_ids(plan: object, ids: str, steps: int = 1, seed: int = 0) -> np.ndarray:
    data = SyntheticData(plan, seed=seed, ids=ids)  # type: ignore[arg-type]
    return np.concatenate([data.next_batch()[0].ids for _ in range(steps)])


def test_the_default_is_zipf_1_1_and_draws_what_it_drew_before() -> None:
    plan = plan_of(1000, 500)
    assert parse_ids(None) == parse_ids("zipf") == parse_ids("zipf:1.1") == IdDistribution()
    # The stream as before the option existed: bag sizes 1 to 4 (a [batch] feature of a plain
    # configuration), then one uniform per id into the tenth-power sampler, scattered.
    rng = np.random.default_rng([0, 0x5EED])
    count = int(rng.integers(1, 5, 500).sum())
    expected = kernels.zipf_ids(rng.random(count), 1000, 2654435761 % 1000, 0)
    np.testing.assert_array_equal(drawn_ids(plan, "zipf:1.1"), expected)
    np.testing.assert_array_equal(drawn_ids(plan, "zipf"), expected)


@pytest.mark.parametrize("exponent", [0.7, 1.0, 1.5, 3.0])
def test_zipf_rank_frequencies_follow_the_law(exponent: float) -> None:
    vocabulary, draws = 50, 400_000
    u = np.random.default_rng(5).random(draws)
    ranks = kernels.zipf_ids(u, vocabulary, 1, 0, exponent)  # multiplier 1: id = rank
    # The law, computed here: P(rank r) = F(r + 2) - F(r + 1), F(x) = (x^a - 1) / ((V+1)^a - 1).
    a = 1.0 - exponent
    x = np.arange(1, vocabulary + 2, dtype=np.float64)
    cdf = np.log(x) / math.log(vocabulary + 1) if a == 0 else (x**a - 1) / (
        (vocabulary + 1) ** a - 1)
    expected = np.diff(cdf)
    found = np.bincount(ranks, minlength=vocabulary) / draws
    assert (np.abs(found - expected) <= 4 * np.sqrt(expected / draws) + 1e-4).all()


@pytest.mark.parametrize("exponent", [0.5, 1.0, 1.05, 2.0, 1.0000001])
def test_zipf_kernels_agree_with_numpy(exponent: float, monkeypatch: pytest.MonkeyPatch) -> None:
    u = np.random.default_rng(1).random(20_000)
    compiled = kernels.zipf_ids(u, 123_457, 7, 3, exponent)
    monkeypatch.setattr(kernels, "compiled", lambda: None)
    reference = kernels.zipf_ids(u, 123_457, 7, 3, exponent)
    np.testing.assert_array_equal(compiled, reference)
    assert compiled.min() >= 0 and compiled.max() < 123_457


def test_uniform_ids_are_flat() -> None:
    plan = plan_of(20, 1000)
    ids = drawn_ids(plan, "uniform", steps=40)
    counts = np.bincount(ids, minlength=20)
    expected = ids.shape[0] / 20
    assert counts.min() > 0 and np.abs(counts - expected).max() < 5 * np.sqrt(expected)
    # Zipf on the same table: the most frequent id takes far more than 1/20.
    zipf = np.bincount(drawn_ids(plan, "zipf:1.1", steps=40), minlength=20)
    assert zipf.max() / zipf.sum() > 0.2


def test_expected_unique_of_uniform_ids() -> None:
    plan = plan_of(5000, 3000)
    ids = drawn_ids(plan, "uniform")
    # 1 to 4 ids a bag: about 7,500 draws over 5,000 rows.
    found = np.unique(ids).size
    expected = 5000 * (1 - (1 - 1 / 5000) ** ids.shape[0])
    assert IdDistribution("uniform", 0.0).expected_unique(5000, ids.shape[0]) == pytest.approx(
        expected)
    assert found == pytest.approx(expected, rel=0.03)


def sequences() -> object:
    items = TableConfig(vocabulary_size=500, dim=4, name="items")
    features = {"a_seq": FeatureConfig(items, max_sequence_length=10, name="seq"),
                "b_one": FeatureConfig(items, name="one")}
    shapes = {"a_seq": [6, 10], "b_one": [6]}
    return prepare(build_config(features, SGD(0.1), num_replicas=2,
                                per_replica_input_shapes=shapes)).plan


def filled(plan: object, lengths: str, steps: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Per sample of the sequence feature, its non-empty positions, and the other feature's
    bag sizes."""
    data = SyntheticData(plan, seed=2, sequence_lengths=lengths)  # type: ignore[arg-type]
    rows, others = [], []
    for _ in range(steps):
        sequence, one = data.next_batch()
        sizes = np.diff(sequence.row_splits).reshape(12, 10)  # 2 cores x 6 samples, 10 places
        rows.append(sizes)
        others.append(np.diff(one.row_splits))
    return np.concatenate(rows), np.concatenate(others)


def test_full_sequences_are_the_default() -> None:
    plan = sequences()
    sizes, _ = filled(plan, "full")
    assert (sizes == 1).all()
    default = SyntheticData(plan, seed=2).next_batch()  # type: ignore[arg-type]
    full = SyntheticData(plan, seed=2, sequence_lengths="full").next_batch()  # type: ignore
    for a, b in zip(default, full, strict=True):
        np.testing.assert_array_equal(a.ids, b.ids)


@pytest.mark.parametrize(("text", "allowed"), [
    ("fixed:3", {3}), ("fixed:40", {10}), ("uniform:2:4", {2, 3, 4}),
    ("uniform", set(range(1, 11))), ("uniform:8", {8, 9, 10}), ("uniform:0:2", {0, 1, 2}),
])
def test_each_sample_fills_its_first_positions(text: str, allowed: set[int]) -> None:
    sizes, others = filled(sequences(), text, steps=30)
    lengths = sizes.sum(axis=1)
    assert set(lengths) == allowed  # every length of the range shows up in 360 samples
    # The filled positions are the first ones: 1, ..., 1, 0, ..., 0.
    positions = np.arange(10)[None, :]
    np.testing.assert_array_equal(sizes, (positions < lengths[:, None]).astype(np.int64))
    assert set(others) == {1}  # a [batch] feature is not a sequence: one id a sample


def test_geometric_lengths_have_their_mean() -> None:
    sizes, _ = filled(sequences(), "geometric:3", steps=200)
    lengths = sizes.sum(axis=1)
    # E[min(G, 10)] for G geometric of mean 3 (p = 1/3): (1 - (2/3)^10) / (1/3).
    assert lengths.mean() == pytest.approx((1 - (2 / 3) ** 10) * 3, rel=0.05)
    assert lengths.min() >= 1 and lengths.max() <= 10


def test_the_estimate_counts_the_filled_positions() -> None:
    plan = sequences()
    table = plan.tables[0]  # type: ignore[attr-defined]
    full, _ = step_ids(plan, table, RunShape())  # type: ignore[arg-type]
    half, _ = step_ids(plan, table, RunShape(  # type: ignore[arg-type]
        sequence_lengths=parse_sequence_lengths("fixed:5")))
    # 2 x 6 x 10 positions of one id, and 12 one-id samples (a spec's [batch] input).
    assert full == 120 + 12 and half == 60 + 12
    assert SequenceLengths("uniform", 2, 4).expected_fraction(10) == 0.3


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--ids", "zipf:0", "the Zipf exponent must be a number above 0"),
    ("--ids", "normal", "unknown id distribution; expected zipf, zipf:S"),
    ("--sequence-lengths", "uniform:5:2", "HI (2) is below LO (5)"),
    ("--sequence-lengths", "fixed:x", "N 'x' is not a whole number"),
    ("--sequence-lengths", "geometric:0.5", "the mean length must be a number of at least 1"),
])
def test_bad_options_are_one_line(option: str, value: str, message: str) -> None:
    result = run_cli("simulate", "--steps", "1", option, value, "--out-dir", "unused")
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    with pytest.raises(UsageError):
        (parse_ids if option == "--ids" else parse_sequence_lengths)(value)


def test_other_data_is_another_run_for_resume(tmp_path: object) -> None:
    from tpuemb_cfg.simulate import SyntheticRun

    config = load((ONE_TABLE % (100, 8)).encode(), "text")
    default = SyntheticRun(config).fingerprint
    assert SyntheticRun(config, ids="zipf:1.1").fingerprint == default  # the same data
    assert SyntheticRun(config, ids="uniform").fingerprint != default
    assert SyntheticRun(config, sequence_lengths="fixed:1").fingerprint != default
