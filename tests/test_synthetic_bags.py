"""Synthetic batches follow the configuration: bag sizes from a spec's input shapes and sequence
lengths, ``--bag-sizes``, and Zipf ids over each table (``executor.bags``, ``sim.synthetic``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tpuemb_cfg.embedding import SGD, FeatureConfig, TableConfig, build_config
from tpuemb_cfg.executor.bags import expected_ids_per_bag
from tpuemb_cfg.formats.io import load
from tpuemb_cfg.session import prepare
from tpuemb_cfg.sim.synthetic import SyntheticData


def compiled() -> object:
    big = TableConfig(vocabulary_size=1000, dim=4, name="big")
    small = TableConfig(vocabulary_size=50, dim=4, name="small")
    features = {
        "a_multi_hot": FeatureConfig(big, name="multi_hot"),
        "b_one_hot": FeatureConfig(big, name="one_hot"),
        "c_sequence": FeatureConfig(small, max_sequence_length=6, name="sequence"),
        "d_pairs": FeatureConfig(small, output_shape=[16], name="pairs"),
    }
    shapes = {"a_multi_hot": [16, 7], "b_one_hot": [16], "c_sequence": [16, 6],
              "d_pairs": [16, 2]}
    return build_config(features, SGD(0.1), num_replicas=2, per_replica_input_shapes=shapes)


def lengths(plan: object, steps: int = 3) -> list[np.ndarray]:
    data = SyntheticData(plan, seed=3)  # type: ignore[arg-type]
    out: list[list[np.ndarray]] = [[] for _ in plan.features]  # type: ignore[attr-defined]
    for _ in range(steps):
        for f, item in enumerate(data.next_batch()):
            out[f].append(np.diff(item.row_splits))
    return [np.concatenate(parts) for parts in out]


def test_bag_sizes_follow_the_spec() -> None:
    plan = prepare(compiled()).plan
    assert [f.ids_per_bag for f in plan.features] == [7, 1, 1, 2]
    multi, one, sequence, pairs = lengths(plan)
    assert multi.shape == (3 * 2 * 16,) and set(multi) == {7}  # every sample holds 7 ids
    assert set(one) == {1} and set(pairs) == {2}
    assert sequence.shape == (3 * 2 * 16 * 6,) and set(sequence) == {1}  # one id a position
    assert [expected_ids_per_bag(f) for f in plan.features] == [7.0, 1.0, 1.0, 2.0]


def test_a_batch_size_alone_says_nothing_about_bags() -> None:
    table = TableConfig(vocabulary_size=100, dim=4, name="t")
    features = {"a": FeatureConfig(table), "b": FeatureConfig(table, max_sequence_length=3)}
    plan = prepare(build_config(features, SGD(0.1), per_replica_batch_size=16)).plan
    assert [f.ids_per_bag for f in plan.features] == [None, 1]
    unknown, sequence = lengths(plan)
    assert set(unknown) == {1, 2, 3, 4} and set(sequence) == {1}  # nothing said: 1 to 4 ids
    assert expected_ids_per_bag(plan.features[0]) == 2.5


def test_uniform_and_fixed() -> None:
    plan = prepare(compiled()).plan
    uniform = lengths(plan.with_bags(bag_sizes="uniform"), steps=20)
    assert set(uniform[0]) == set(range(1, 8))
    assert abs(uniform[0].mean() - 4.0) < 0.3
    assert set(uniform[2]) == {1}
    fixed = lengths(plan.with_bags(bag_sizes="fixed"))
    assert set(fixed[0]) == {7} and set(fixed[3]) == {2}
    assert expected_ids_per_bag(plan.with_bags(bag_sizes="uniform").features[0]) == 4.0


def test_plain_configuration_keeps_its_batches() -> None:
    # A [batch] feature: 1 to 4 ids; a [batch, length] feature: one id per position.
    config = load(b"""
        table_descriptor { name: "t" vocabulary_size: 100 dimension: 4
          optimization_parameters { adagrad {} learning_rate { constant: 0.1 } } }
        mode: TRAINING num_hosts: 1 num_tensor_cores: 2
        feature_descriptor { input_shape: 32 }
        feature_descriptor { input_shape: 8 input_shape: 5 }""", "text")
    plan = prepare(config).plan
    assert [f.ids_per_bag for f in plan.features] == [None, 1]
    flat, positions = lengths(plan)
    assert set(flat) == {1, 2, 3, 4} and set(positions) == {1}
    assert positions.shape == (3 * 2 * 8 * 5,)


def test_ids_are_zipf_over_each_table() -> None:
    plan = prepare(compiled()).plan
    data = SyntheticData(plan, seed=0)
    ids = np.concatenate([data.next_batch()[0].ids for _ in range(20)])
    assert ids.min() >= 0 and ids.max() < 1000
    counts = np.sort(np.bincount(ids, minlength=1000))[::-1]
    # Zipf: the most popular id is far more frequent than the median one.
    assert counts[0] > 20 * max(counts[500], 1)


def test_unknown_distribution_is_refused() -> None:
    from tpuemb_cfg.base.errors import UsageError

    plan = prepare(compiled()).plan
    with pytest.raises(UsageError, match="expected one of auto, fixed, uniform"):
        plan.with_bags(bag_sizes="poisson")
    with pytest.raises(UsageError, match="1 bag size"):
        replace(plan).with_bags([3])
