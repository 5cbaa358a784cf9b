"""``tpuemb bench --backend ray``: the anchor workload, measured by the Ray backend's benchmark.

The workload is ``tpuemb bench``'s (``bench.Workload``: one ``vocab x dim`` table, Adagrad by
default, ``ids`` Zipf ids per step, one id per bag, ``sum`` combiner), laid out over ``shards``
hosts (``num_hosts``; MOD or DIV_DEFAULT); ``tpuemb_cfg.backends.ray.benchmark`` times its step
on Ray host actors against one process and says what it measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from .bench import OPTIMIZERS, Workload, _config_text, zipf_ids
from .errors import UsageError
from .errors import parameter as arg

__all__ = ["run", "run_model"]

F32 = np.float32


def _config(w: Workload, hosts: int, mod: bool) -> Any:
    """``tpuemb bench``'s anchor configuration (``bench._config_text``) over ``hosts`` hosts."""
    from . import load

    config = load(_config_text([("anchor", w.vocab, w.dim)], [(0, w.ids)], w.optimizer).encode(),
                  "text")
    config.num_hosts = hosts
    config.sharding_strategy = config.MOD if mod else config.DIV_DEFAULT
    return config


def run(workload: Workload | None = None, *, shards: int = 2, engine: str = "numba",
        mod: bool = True, address: str | None = None,
        shared_memory: bool | None = None, runtime_env: Mapping[str, Any] | None = None,
        ship: bool = True) -> dict[str, Any]:
    """Measure ``workload`` (default: the anchor) over ``shards`` host actors; return the
    JSON-ready dict of ``backends.ray.benchmark.run``. ``shared_memory``: as for
    ``RayStorage`` (None: its default); ``runtime_env``, ``ship``: as for ``Placement``."""
    from .backends.ray import benchmark
    from .backends.ray.options import RayOptions
    from .executor.options import Placement
    from .session import prepare

    w = workload or Workload()
    if w.optimizer not in OPTIMIZERS:
        raise UsageError(f"unknown optimizer {w.optimizer!r}; expected one of: "
                         + ", ".join(OPTIMIZERS))
    if shards < 1 or w.vocab < shards:
        raise UsageError(f"{arg('shards')} {shards}: expected 1..{w.vocab} (one row per host "
                         "at least)")
    ids = zipf_ids(w.vocab, w.ids, w.zipf, w.seed)
    grads = np.random.default_rng([w.seed, 0x6AD]).standard_normal((w.ids, w.dim), dtype=F32)
    grads *= F32(0.01)
    prepared = prepare(_config(w, shards, mod), combiners="sum")
    return benchmark.run(prepared, [{"ids": ids, "grad": grads}], steps=w.steps, engine=engine,
                         address=address, shared_memory=shared_memory, workload=asdict(w),
                         placement=Placement("ray", RayOptions(runtime_env=runtime_env, ship=ship)))


def run_model(source: Any, *, shards: int, steps: int = 6, engine: str = "numba",
              address: str | None = None, seed: int = 0) -> dict[str, Any]:
    """A whole model's step (``source``: a configuration, e.g. ``examples/quickstart.pbtxt``;
    every table) on ``shards`` host actors against one process: one synthetic batch
    (``sim.synthetic.SyntheticData`` of ``seed``: its ids, its step-0 learning rates, float32
    gradients of scale 0.01) stepped ``steps`` times by both, alternating; the JSON-ready dict
    of ``backends.ray.benchmark.run_model`` with ``config``. What
    ``benchmarks/results/ray_round_trips.json`` records."""
    from .backends.ray import benchmark
    from .session import prepare
    from .sim.synthetic import SyntheticData

    prepared = prepare(source)
    plan = prepared.plan
    data = SyntheticData(plan, seed=seed)
    rng = np.random.default_rng([seed, 0x6AD])
    batch = []
    for feature, given in zip(plan.features, data.next_batch(), strict=True):
        bags = given.row_splits.shape[0] - 1
        grad = rng.standard_normal((bags, plan.tables[feature.table].dimension), dtype=F32)
        batch.append({"ids": given.ids, "row_splits": given.row_splits,
                      "grad": grad * F32(0.01)})
    result = benchmark.run_model(prepared, batch, data.learning_rates(0), shards=shards,
                                 steps=steps, engine=engine, address=address)
    result["config"] = str(source)
    return result
