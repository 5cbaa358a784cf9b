"""What shipping tpuemb to the Ray nodes costs: joining and the first host actors' start.

Each case is a fresh driver process that connects (``init_sec``: ``ray.init``, which zips and
uploads the package when shipping) and then opens the host actors of a small configuration
(``actors_sec``: ``RayStorage`` set up - actor processes started, with their runtime_env, and
their rows allocated), with and without the package in the job's ``runtime_env``:

- ``local``: a local instance the driver starts (``ray.init(address="local")``); tpuemb itself
  never ships there (same interpreter), the shipping case forces it to measure the cost;
- ``cluster``: a head node (no CPUs) and one worker node started with ``ray start``
  (``tests/raynodes.py``), joined at its address; the first shipping run after the cluster
  starts unpacks the package on the node, later ones find it there (same content, same hash).

    python benchmarks/bench_ray_ship.py --out benchmarks/results/ray_ship.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

DRIVER = """
import json, logging, sys, time
import ray
from tpuemb_cfg.backends.ray.connection import connect
from tpuemb_cfg.backends.ray.runtime_env import actor_runtime_env
from tpuemb_cfg.executor.core import Executor
from tpuemb_cfg.backends.ray.options import RayOptions
from tpuemb_cfg.executor.options import Placement, RunOptions
from tpuemb_cfg.session import prepare

where, ship = sys.argv[1], sys.argv[2] == "ship"
start = time.perf_counter()
if where == "local":
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR, runtime_env=actor_runtime_env(None, ship))
else:
    connect(where, ship=ship)
joined = time.perf_counter()
executor = Executor(prepare(sys.argv[3]), RunOptions(),
                    Placement("ray", RayOptions(shards=2, ship=ship)))
opened = time.perf_counter()
executor.close()
print(json.dumps({"init_sec": joined - start, "actors_sec": opened - joined}))
"""


def _case(where: str, ship: bool, config: str, env: dict[str, str], cwd: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", DRIVER, where, "ship" if ship else "no",
                           config], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"where": "local" if where == "local" else "cluster", "ship": ship, **result,
            "load": os.getloadavg()[0]}


def main() -> None:
    from raynodes import NodeSpec, RayNodes

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    config = str(ROOT / "examples" / "quickstart.pbtxt")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        for _ in range(args.runs):
            for ship in (False, True):
                results.append(_case("local", ship, config, env, tmp))
                print(results[-1], flush=True)
        nodes = RayNodes(Path(tmp), [NodeSpec(cpus=2)], head_cpus=0)
        try:
            for _ in range(args.runs):
                for ship in (False, True):
                    results.append(_case(nodes.address, ship, config, nodes.env, tmp))
                    print(results[-1], flush=True)
        finally:
            nodes.stop()
    text = json.dumps({"config": "examples/quickstart.pbtxt", "shards": 2, "runs": results},
                      indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
