"""A spec's initializers and learning-rate schedules on the Ray backend (issue 22, part C): each
host draws its own rows of every table from the spec's initializer, and the run sends the same
schedule values, so three hosts end with one process's bits (``raycluster``: 2 CPUs)."""

from __future__ import annotations

import numpy as np
import pytest
from raycluster import ray_cluster, same_state  # noqa: F401  (the fixture)

from tpuemb_cfg.embedding import (
    SGD,
    Adagrad,
    FeatureConfig,
    KerasSchedule,
    TableConfig,
    build_config,
)
from tpuemb_cfg.simulate import SyntheticRun

pytestmark = pytest.mark.usefixtures("ray_cluster")


class GlorotUniform:  # Keras' class as tpuemb reads it: its name and get_config()
    def get_config(self) -> dict[str, object]:
        return {"seed": None}

    def __call__(self, shape: object, dtype: object = None) -> object:
        raise AssertionError("computed by tpuemb, not called")


def ramp(shape: tuple[int, int], dtype: object = None) -> np.ndarray:
    """A callable initializer: called once on the whole table."""
    return (np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape) % 7) / 10


def test_three_hosts_start_and_step_as_one_process() -> None:
    warmup = KerasSchedule("CosineDecay", {"initial_learning_rate": 0.0, "decay_steps": 8,
                                           "warmup_target": 0.2, "warmup_steps": 3})
    tables = [
        TableConfig(vocabulary_size=301, dim=8, name="glorot", initializer=GlorotUniform(),
                    optimizer=Adagrad(learning_rate=warmup)),
        TableConfig(vocabulary_size=97, dim=4, name="ramp", initializer=ramp,
                    optimizer=SGD(learning_rate=lambda step: 0.01 * step)),
    ]
    compiled = build_config({t.name: FeatureConfig(t) for t in tables}, num_hosts=3,
                            per_replica_batch_size=16)
    local = SyntheticRun(compiled, seed=3)
    local.run(6)
    sharded = SyntheticRun(compiled, seed=3, backend="ray")
    try:
        sharded.run(6)
        same_state(sharded.executor, local.executor)
        assert sharded.summary()["learning_rates"] == local.summary()["learning_rates"]
        rates = local.summary()["learning_rates"]
        assert rates[1]["per_step"] == [float(np.float32(0.01 * s)) for s in range(6)]
    finally:
        sharded.executor.close()
