"""The Ray backend's step against the local backend's, and 16 hosts against 4, in one run.

Issue 26's targets, on one machine: the 4-host quickstart step within 3x of the local step, the
1/16 DLRM (26 tables) at 4 hosts within 2x, and the step at 16 hosts within 1.5x of 4 hosts.
Each case is :func:`run_model`: one synthetic batch of the model, stepped by a
local executor and a Ray executor in turn (the medians of the timed steps after a warm-up step,
both executors under the same load), the activations compared bit for bit. The hosts are
actors of a local Ray instance started by this script (one instance for every case, so actors
are reused between cases as they are between executors), on the driver's node: the step's
calls go over the hosts' direct links (``backends/ray/link.py``) unless the case says
``calls: ray`` (``TPUEMB_RAY_LINK=0``: every call through Ray, the transport of hosts on other
nodes, measured in the same run as the baseline the links replace).

    nice -n 10 python benchmarks/bench_ray.py --out benchmarks/results/ray_steps.json
    python benchmarks/bench_ray.py --quick            # the quickstart cases only

The ratios are what to read: a 2-core machine shared with other work moves the absolute times
by 2x between runs, and the load average at the start of each case is recorded with it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.pbtxt"
DLRM = ROOT / "examples" / "models" / "dlrm_criteo_1_16.pbtxt"

#: (name, configuration, hosts, steps, calls through the link or through Ray)
CASES = [
    ("quickstart, 4 hosts", QUICKSTART, 4, 40, "link"),
    ("quickstart, 4 hosts, Ray calls", QUICKSTART, 4, 40, "ray"),
    ("quickstart, 16 hosts", QUICKSTART, 16, 40, "link"),
    ("dlrm 1/16, 4 hosts", DLRM, 4, 5, "link"),
    ("dlrm 1/16, 16 hosts", DLRM, 16, 5, "link"),
    ("dlrm 1/16, 4 hosts, Ray calls", DLRM, 4, 5, "ray"),
]
TARGETS = {"quickstart_4_hosts_over_local": 3.0, "dlrm_1_16_4_hosts_over_local": 2.0,
           "dlrm_1_16_16_hosts_over_4_hosts": 1.5}


def run_model(source: Any, *, shards: int, steps: int = 6, engine: str = "numba",
              address: str | None = None, seed: int = 0) -> dict[str, Any]:
    """A whole model's step (``source``: a configuration, e.g. ``examples/quickstart.pbtxt``;
    every table) on ``shards`` host actors against one process: one synthetic batch
    (``sim.synthetic.SyntheticData`` of ``seed``: its ids, its step-0 learning rates, float32
    gradients of scale 0.01) stepped ``steps`` times by both, alternating; the JSON-ready dict
    of ``backends.ray.benchmark.run_model`` with ``config``. What
    ``benchmarks/results/ray_round_trips.json`` records."""
    import numpy as np

    from tpuemb_cfg.backends.ray import benchmark
    from tpuemb_cfg.session import prepare
    from tpuemb_cfg.sim.synthetic import SyntheticData

    prepared = prepare(source)
    plan = prepared.plan
    data = SyntheticData(plan, seed=seed)
    rng = np.random.default_rng([seed, 0x6AD])
    batch = []
    for feature, given in zip(plan.features, data.next_batch(), strict=True):
        bags = given.row_splits.shape[0] - 1
        grad = rng.standard_normal((bags, plan.tables[feature.table].dimension),
                                   dtype=np.float32)
        batch.append({"ids": given.ids, "row_splits": given.row_splits,
                      "grad": grad * np.float32(0.01)})
    result = benchmark.run_model(prepared, batch, data.learning_rates(0), shards=shards,
                                 steps=steps, engine=engine, address=address)
    result["config"] = str(source)
    return result


def _case(name: str, config: Path, hosts: int, steps: int, calls: str) -> dict[str, Any]:
    from tpuemb_cfg.backends.ray.storage import LINK_ENV

    os.environ[LINK_ENV] = "1" if calls == "link" else "0"
    load = os.getloadavg()[0]
    result = run_model(str(config.relative_to(ROOT)), shards=hosts, steps=steps)
    result.update({"case": name, "calls": calls, "load_average_at_start": round(load, 2)})
    print(f"{name:34s} local {result['local_sec_per_step'] * 1e3:8.2f} ms   ray "
          f"{result['ray_sec_per_step'] * 1e3:8.2f} ms   {result['ray_over_local']:5.2f}x   "
          f"bit-identical {result['bit_identical']}   load {load:.1f}", flush=True)
    return result


def _summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    quick = runs.get("quickstart, 4 hosts")
    if quick:
        out["quickstart_4_hosts_over_local"] = quick["ray_over_local"]
        slow = runs.get("quickstart, 4 hosts, Ray calls")
        if slow:
            out["quickstart_4_hosts_over_local_ray_calls"] = slow["ray_over_local"]
        many = runs.get("quickstart, 16 hosts")
        if many:
            out["quickstart_16_hosts_over_4_hosts"] = (many["ray_sec_per_step"]
                                                       / quick["ray_sec_per_step"])
    four, sixteen = runs.get("dlrm 1/16, 4 hosts"), runs.get("dlrm 1/16, 16 hosts")
    if four:
        out["dlrm_1_16_4_hosts_over_local"] = four["ray_over_local"]
    if four and sixteen:
        out["dlrm_1_16_16_hosts_over_4_hosts"] = (sixteen["ray_sec_per_step"]
                                                  / four["ray_sec_per_step"])
        out["dlrm_1_16_16_hosts_over_4_hosts_each_against_local"] = (
            sixteen["ray_over_local"] / four["ray_over_local"])
    slow = runs.get("dlrm 1/16, 4 hosts, Ray calls")
    if slow:
        out["dlrm_1_16_4_hosts_over_local_ray_calls"] = slow["ray_over_local"]
    out["met"] = {key: out[key] <= target for key, target in TARGETS.items() if key in out}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="the quickstart cases only")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tpuemb_cfg.backends.ray.connection import connect, disconnect

    begin = time.perf_counter()
    connect()
    runs: dict[str, dict[str, Any]] = {}
    try:
        for name, config, hosts, steps, calls in CASES:
            if args.quick and config != QUICKSTART:
                continue
            runs[name] = _case(name, config, hosts, steps, calls)
    finally:
        disconnect()
    summary = _summary(runs)
    for key, value in summary.items():
        if key != "met":
            mark = ("" if key not in TARGETS else
                    f"  (target {TARGETS[key]}: {'met' if summary['met'][key] else 'NOT met'})")
            print(f"{key:52s} {value:6.2f}{mark}")
    if args.out:
        args.out.write_text(json.dumps({
            "what": __doc__.split("\n\n")[0],
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform()},
            "seconds": round(time.perf_counter() - begin, 1),
            "targets": TARGETS,
            "summary": summary,
            "runs": list(runs.values()),
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
