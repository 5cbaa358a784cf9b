"""One Ray call per host per step phase, however many tables: the step does not grow with tables.

A step reads every table's rows in one call per host (``RayStorage.prefetch``) and sends every
table's updates, with the change measurements their norms need, in one more (``flush``); the
end of the step rides on the next step's first call. ``RayStorage.calls`` counts the Ray calls
made to each host, so a step costs exactly two per host, with one table or six, through shared
memory or the object store, and the results stay the local backend's bits.
"""

from __future__ import annotations

import numpy as np
import pytest
from raycluster import ray_cluster  # noqa: F401  (the fixture)

import tpuemb_cfg
from tpuemb_cfg.backends.ray.storage import PLACEMENT_ENV, SHARED_MEMORY_ENV, RayStorage
from tpuemb_cfg.base.errors import NumericalError, UsageError
from tpuemb_cfg.simulate import Executor

pytestmark = pytest.mark.usefixtures("ray_cluster")

HOSTS = 3
#: Lazy Adagrad and momentum, and non-lazy Adam (every row steps: its norm needs a pre-step copy
#: and a change measurement, which ride in the same calls).
OPTIMIZERS = ["adagrad { }", "momentum { momentum: 0.9 }",
              "adam { epsilon: 1e-07 use_non_lazy_adam: true }"]


def _config(tables: int) -> tpuemb_cfg.TPUEmbeddingConfiguration:
    text = "".join(
        f'table_descriptor {{ name: "t{t}" vocabulary_size: {90 + 7 * t} dimension: {2 + t % 3} '
        f"optimization_parameters {{ {OPTIMIZERS[t % 3]} learning_rate {{ constant: 0.1 }} }} }}\n"
        f'feature_descriptor {{ name: "f{t}" table_id: {t} input_shape: 8 }}\n'
        for t in range(tables)
    )
    text += f"mode: TRAINING num_hosts: {HOSTS} num_tensor_cores: 1 sharding_strategy: MOD\n"
    return tpuemb_cfg.load(text.encode(), "text")


def _batch(tables: int, step: int) -> list[dict[str, np.ndarray]]:
    """Eight ids per table, consecutive (so every host of the MOD layout holds some), with a
    repeat; the same ids every step (the arena keeps its size), other gradients."""
    rng = np.random.default_rng([step, 7])
    batch = []
    for t in range(tables):
        ids = np.array([0, 1, 2, 3, 4, 5, 1, 9], dtype=np.int64) + t
        batch.append({"ids": ids,
                      "grad": rng.standard_normal((8, 2 + t % 3)).astype(np.float32)})
    return batch


@pytest.mark.parametrize("transport", ["1", "0"], ids=["shared-memory", "object-store"])
@pytest.mark.parametrize("tables", [1, 6])
def test_a_step_is_one_read_and_one_update_call_per_host(
        monkeypatch: pytest.MonkeyPatch, tables: int, transport: str) -> None:
    monkeypatch.setenv(SHARED_MEMORY_ENV, transport)
    config = _config(tables)
    local = Executor(config, seed=3)
    with Executor(config, seed=3, backend="ray") as sharded:
        storage = sharded.storage
        assert isinstance(storage, RayStorage)
        for step in range(4):
            before = storage.calls.copy()
            got = sharded.step(_batch(tables, step))
            want = local.step(_batch(tables, step))
            if step:  # the first step also maps the shared-memory arena
                assert (storage.calls - before).tolist() == [2] * HOSTS
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b)
            assert sharded.last_report.keys() == local.last_report.keys()
            for name, report in local.last_report.items():
                assert sharded.last_report[name].update_norm == report.update_norm, name
        assert storage.shared == (set(range(HOSTS)) if transport == "1" else set())
        wanted = local.state_arrays()
        held = sharded.state_arrays()
        for key, array in wanted.items():
            np.testing.assert_array_equal(np.asarray(held[key]), array, err_msg=key)


def test_actors_prefer_the_drivers_node_unless_told_to_spread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    with Executor(_config(1), backend="ray") as executor:
        storage = executor.storage
        assert isinstance(storage, RayStorage)
        strategy = storage._scheduling(None)
        assert isinstance(strategy, NodeAffinitySchedulingStrategy)
        assert strategy.node_id == ray.get_runtime_context().get_node_id()
        assert strategy.soft  # another node when the driver's has no room
        monkeypatch.setenv(PLACEMENT_ENV, "spread")
        assert storage._scheduling(None) == "SPREAD"
        assert isinstance(storage._scheduling("driver"), NodeAffinitySchedulingStrategy)
        with pytest.raises(UsageError, match=r"actor placement 'nearby' .* expected 'driver' "
                                             r"or 'spread'"):
            storage._scheduling("nearby")


OVERFLOWING = """
table_descriptor { name: "a" vocabulary_size: 40 dimension: 2 optimization_parameters {
  adagrad { } learning_rate { constant: 0.1 } } }
table_descriptor { name: "b" vocabulary_size: 30 dimension: 2 optimization_parameters {
  stochastic_gradient_descent { } learning_rate { constant: 1e30 } } }
table_descriptor { name: "c" vocabulary_size: 20 dimension: 2 optimization_parameters {
  momentum { momentum: 0.5 } learning_rate { constant: 0.1 } } }
mode: TRAINING num_hosts: 2 num_tensor_cores: 1 sharding_strategy: MOD
feature_descriptor { name: "x" input_shape: 4 }
feature_descriptor { name: "y" table_id: 1 input_shape: 4 }
feature_descriptor { name: "z" table_id: 2 input_shape: 4 }
"""


def test_an_overflow_leaves_the_later_tables_as_one_machine_does() -> None:
    """The updates of every table go to the hosts before the first norm is read; when table b's
    overflows, table c (which one table at a time would not have reached) is put back."""
    config = tpuemb_cfg.load(OVERFLOWING.encode(), "text")
    ids = np.array([0, 1, 2, 3], dtype=np.int64)
    batch = [{"ids": ids, "grad": np.full((4, 2), scale, dtype=np.float32)}
             for scale in (1.0, 1e10, 1.0)]
    local = Executor(config, seed=1, strict_finite=True)
    with Executor(config, seed=1, backend="ray", strict_finite=True) as sharded:
        for executor in (local, sharded):
            with pytest.raises(NumericalError, match="the update of table 'b'"):
                executor.step(batch)
        wanted = local.state_arrays()
        held = sharded.state_arrays()
        assert not np.isfinite(wanted["table/b"]).all()
        assert (wanted["table/c"] == Executor(config, seed=1).state_arrays()["table/c"]).all()
        for key, array in wanted.items():
            np.testing.assert_array_equal(np.asarray(held[key]), array, err_msg=key)
