"""The local Ray instance the Ray-backend tests share: 2 CPUs, no dashboard, a 200 MB object store.

Import ``ray_cluster`` into a test module to use it (``from raycluster import ray_cluster``). The
first module to need it starts Ray (``ray_init_seconds`` keeps how long that took: pytest's
``--durations`` lists it as that test's setup); the instance lives until the end of the session,
and the actors a closed executor releases are reused by the next one. Without Ray the importing
module is skipped, with the reason. ``same_reports`` compares what two runs reported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'tpuemb[ray]'")

ray_init_seconds: list[float] = []

#: Two small tables on 2 hosts (MOD): a lazy Adagrad table and a momentum table with a dynamic
#: rate, the configuration of the fault and multi-node tests.
TWO_TABLES = """
table_descriptor { name: "a" vocabulary_size: 120 dimension: 4 optimization_parameters {
  adagrad { } learning_rate { constant: 0.2 } } }
table_descriptor { name: "b" vocabulary_size: 60 dimension: 2 optimization_parameters {
  momentum { momentum: 0.9 } learning_rate { dynamic { } } } }
mode: TRAINING num_hosts: 2 num_tensor_cores: 1 sharding_strategy: MOD
feature_descriptor { name: "x" input_shape: 8 }
feature_descriptor { name: "y" table_id: 1 input_shape: 5 }
"""


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    if not ray.is_initialized():
        start = time.perf_counter()
        ray.init(address="local", num_cpus=2, include_dashboard=False,
                 object_store_memory=200 << 20,
                 log_to_driver=False, logging_level=logging.ERROR)
        ray_init_seconds.append(time.perf_counter() - start)
    yield
    from tpuemb_cfg.backends.ray.connection import disconnect

    disconnect()


def same_reports(got: Any, want: Any) -> None:
    """``got == want`` for nested reports (dicts, lists, numbers), every ``update_norm``
    included: the Ray driver adds the hosts' per-row squares in global row order, as one
    process does (docs/numerics.md)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys()
        for key, value in want.items():
            same_reports(got[key], value)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for mine, theirs in zip(got, want, strict=True):
            same_reports(mine, theirs)
    else:
        assert got == want


def same_state(got: Any, want: Any) -> None:
    """Every table and slot of executor ``got`` (sharded) equals executor ``want``'s, bit for
    bit."""
    local = want.state_arrays()
    sharded = got.state_arrays()
    assert sharded.keys() == local.keys()
    for key, array in local.items():
        np.testing.assert_array_equal(np.asarray(sharded[key]), array, err_msg=key)
