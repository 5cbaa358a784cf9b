"""The memory of a Ray host actor's process beyond its rows (``placement.PROCESS_BYTES``).

For each engine, a fresh local Ray instance (this machine's cores, no dashboard) runs a
synthetic run of CONFIG (default: ``examples/quickstart.pbtxt``) on ``--shards`` host actors and
reads every actor's ``/proc/self/smaps_rollup`` (``RayStorage.memory``): idle (set up, rows
allocated, no step yet) and after ``--steps`` steps. Printed as JSON: per engine and moment,
each actor's RSS, USS and PSS, its rows' bytes, and RSS and USS minus the rows.

    python benchmarks/bench_ray_process.py [CONFIG] [--shards N] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

MIB = 1 << 20


def measure(config: str, engine: str, shards: int, steps: int) -> dict[str, Any]:
    """One engine, in this process: a local Ray instance started, used and stopped."""
    from tpuemb_cfg.backends.ray.connection import connect, disconnect
    from tpuemb_cfg.simulate import SyntheticRun

    connect()
    try:
        run = SyntheticRun(config, backend="ray", shards=shards, engine=engine)
        storage = run.executor.storage
        idle = storage.memory()
        run.run(steps)
        stepped = storage.memory()
        run.executor.close()
    finally:
        disconnect()

    def shown(parts: list[dict[str, int]]) -> list[dict[str, float]]:
        return [{**{k: round(v / MIB, 1) for k, v in p.items()},
                 "rss_minus_rows": round((p["rss"] - p["rows"]) / MIB, 1),
                 "uss_minus_rows": round((p["uss"] - p["rows"]) / MIB, 1)} for p in parts]

    return {"engine": engine, "config": config, "shards": shards, "steps": steps,
            "unit": "MiB", "idle": shown(idle), "after_steps": shown(stepped)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="examples/quickstart.pbtxt")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--engine", choices=["numba", "numpy"])
    args = parser.parse_args()
    if args.engine is not None:
        print(json.dumps(measure(args.config, args.engine, args.shards, args.steps)))
        return
    results = []
    for engine in ("numba", "numpy"):  # each in a process of its own: a fresh Ray instance
        out = subprocess.run([sys.executable, __file__, args.config, "--shards",
                              str(args.shards), "--steps", str(args.steps), "--engine", engine],
                             check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
