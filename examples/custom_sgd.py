"""SGD written as a ``CustomOptimizer`` equals the built-in SGD: the executor runs the callable.

    python examples/custom_sgd.py        # prints: max difference 0.0

The same model is compiled twice, once with ``SGD(0.1)`` and once with a ``CustomOptimizer``
whose NumPy computation is SGD's update (TensorFlow's ``tf.function`` signature), and both run
the same steps (bags with repeated ids, fixed activation gradients) in the reference executor.
TensorFlow writes no algorithm for a custom optimizer, so the configuration is built with
``validate=False``; the executor runs the callable where the built-in update would run.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from tpuemb_cfg.embedding import (
    SGD,
    CustomOptimizer,
    FeatureConfig,
    TableConfig,
    build_config,
)
from tpuemb_cfg.simulate import Executor


def sgd(gradient, embedding_table, slot_variables, learning_rate, hyperparameters):  # type: ignore[no-untyped-def]
    """One SGD step on the gathered rows: float32 in, float32 out."""
    return embedding_table - learning_rate * gradient


def final_table(optimizer: Any, steps: int = 5) -> np.ndarray:
    """The table after ``steps`` steps of the same bags and gradients with ``optimizer``."""
    table = TableConfig(vocabulary_size=100, dim=8, optimizer=optimizer, combiner="mean",
                        name="items")
    compiled = build_config({"items": FeatureConfig(table, name="items")},
                            per_replica_batch_size=16, validate=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # custom tables run the NumPy path
        executor = Executor(compiled, engine="numpy", seed=0)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        sizes = rng.integers(1, 5, size=16)
        ids = rng.integers(0, 20, size=int(sizes.sum()))  # few ids: many duplicates
        row_splits = np.concatenate([[0], np.cumsum(sizes)])
        grad = rng.standard_normal((16, 8)).astype(np.float32)
        executor.step([{"ids": ids, "row_splits": row_splits, "grad": grad}])
    return executor.state_arrays()["table/items"].copy()


def max_difference() -> float:
    custom = final_table(CustomOptimizer(sgd, learning_rate=0.1))
    builtin = final_table(SGD(learning_rate=0.1))
    return float(np.abs(custom - builtin).max())


if __name__ == "__main__":
    print(f"max difference {max_difference()}")
