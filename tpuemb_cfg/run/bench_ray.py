"""``tpuemb bench --backend ray``: the anchor workload, measured by the Ray backend's benchmark.

The workload is ``tpuemb bench``'s (``bench.Workload``: one ``vocab x dim`` table, Adagrad by
default, ``ids`` Zipf ids per step, one id per bag, ``sum`` combiner), laid out over ``shards``
hosts (``num_hosts``; MOD or DIV_DEFAULT); ``tpuemb_cfg.backends.ray.benchmark`` times its step
on Ray host actors against one process and says what it measures. A whole model's step on Ray
is benchmark machinery: ``benchmarks/bench_ray.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from tpuemb_cfg.backends.ray import benchmark
from tpuemb_cfg.backends.ray.options import RayOptions
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.errors import parameter as arg
from tpuemb_cfg.executor.options import Placement
from tpuemb_cfg.formats.io import load
from tpuemb_cfg.run.bench import OPTIMIZERS, Workload, config_text, zipf_ids
from tpuemb_cfg.session import prepare

__all__ = ["run"]

F32 = np.float32


def _config(w: Workload, hosts: int, mod: bool) -> Any:
    """``tpuemb bench``'s anchor configuration (``bench.config_text``) over ``hosts`` hosts."""
    config = load(config_text([("anchor", w.vocab, w.dim)], [(0, w.ids)], w.optimizer).encode(),
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
