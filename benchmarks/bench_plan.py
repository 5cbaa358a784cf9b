"""``tpuemb plan``'s streaming counters: ids per second and peak memory against the sample's length.

Each measurement runs in a child process of its own (``nice -n 10``) that generates its batches
lazily, one step at a time (the sample is never in memory), streams them through the counters
and reports the time spent counting (generation excluded and reported apart), the resident
memory after setting up the counters (before the first batch) and the peak resident memory at
the end (``ru_maxrss``). Memory independent of the sample's length shows as the same peak for
10^7 and 10^8 ids.

Workloads (ids drawn Zipf(1) by inverting a log-uniform: id = floor((V + 1)^u) - 1, u uniform,
so P(id = k) = log((k + 2) / (k + 1)) / log(V + 1), about 1 / (k + 1); the hot ids are the low
ones, the DIV_DEFAULT worst case):

- ``host``: 8 legacy tables (10^7, 10^6, 10^6, 10^5, 10^5, 10^4, 10^3, 100 rows), one feature
  each, 4,096 bags of 4 ids a step (131,072 ids), 16 hosts, MOD and DIV_DEFAULT counted in one
  pass (``planner.load.host_counter``);
- ``sparsecore``: examples/sparsecore/v5p_jax_ranking.py (3 tables of 10^7 to 8 x 10^7 rows in
  2 stacks over 64 SparseCores), its global batch of 4,096 samples with 4 ids each (49,152 ids
  a step) (``planner.load.sparsecore_counter``);
- ``limits``: the same SparseCore workload through ``planner.limits.limits`` (the exact
  preprocessing twice: at the current and at the suggested limits), on ``--limits-ids`` ids
  (``ids`` in its results counts both passes).

    nice -n 10 python benchmarks/bench_plan.py --out benchmarks/results/plan.json
    python benchmarks/bench_plan.py --sizes 1e6 --limits-ids 1e5      # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HOST_VOCABULARIES = (10**7, 10**6, 10**6, 10**5, 10**5, 10**4, 1000, 100)
HOST_BAGS, IDS_PER_BAG, HOSTS = 4096, 4, 16
SPEC = ROOT / "examples" / "sparsecore" / "v5p_jax_ranking.py"


def _zipf(rng: np.random.Generator, vocabulary: int, n: int) -> np.ndarray:
    """Zipf(1) ids in [0, V): floor((V + 1)^u) - 1."""
    ids: np.ndarray = np.exp(rng.random(n) * np.log(vocabulary + 1.0)).astype(np.int64) - 1
    np.clip(ids, 0, vocabulary - 1, out=ids)
    return ids


def _batches(features: dict[str, int], bags: int, total: int, seed: int,
             clock: list[float]) -> Iterator[dict[str, Any]]:
    """Steps of ``bags`` bags of 4 ids per feature until ``total`` ids; ``clock[0]`` collects
    the time spent generating."""
    rng = np.random.default_rng(seed)
    splits = np.arange(0, bags * IDS_PER_BAG + 1, IDS_PER_BAG, dtype=np.int64)
    per_step = bags * IDS_PER_BAG * len(features)
    for _ in range(-(-total // per_step)):
        start = time.perf_counter()
        batch = {name: (_zipf(rng, v, bags * IDS_PER_BAG), splits, None)
                 for name, v in features.items()}
        clock[0] += time.perf_counter() - start
        yield batch


def _rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _stacking() -> Any:
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.sparsecore.feed import stack

    config = load_sparsecore_spec(str(SPEC)).config
    vocab = {t.name: t.vocabulary_size for t in config.tables}
    return stack(config), {f.name: vocab[f.table] for f in config.features}


def child(workload: str, total: int) -> dict[str, Any]:
    """One measurement in this process."""
    from tpuemb_cfg.planner import limits as limits_module
    from tpuemb_cfg.planner import load

    clock = [0.0]
    if workload == "host":
        features = {f"f{i}": v for i, v in enumerate(HOST_VOCABULARIES)}
        tables = [load.LoadTable(f"t{i}", v, (f"f{i}",))
                  for i, v in enumerate(HOST_VOCABULARIES)]
        counter = load.host_counter(tables, hosts=HOSTS)
        bags = HOST_BAGS
    else:
        stacking, features = _stacking()
        counter = load.sparsecore_counter(stacking)
        bags = 4096
    baseline = _rss_mib()
    start = time.perf_counter()
    ids = steps = 0
    summary: dict[str, Any]
    if workload == "limits":
        def sample() -> Iterator[dict[str, Any]]:
            return _batches(features, bags, total, 1, clock)
        report = limits_module.limits(stacking, sample)
        steps = report.steps
        ids = 2 * steps * bags * IDS_PER_BAG * len(features)  # two passes
        summary = {s.stack: {"observed": [s.observed_max_ids, s.observed_max_unique_ids],
                             "suggested": [s.suggested.max_ids_per_partition,
                                           s.suggested.max_unique_ids_per_partition]
                             if s.suggested else None,
                             "dropped_current": s.current.dropped}
                   for s in report.stacks}
    else:
        for batch in _batches(features, bags, total, 1, clock):
            counter.update(batch)
            steps += 1
            ids += sum(int(v[0].shape[0]) for v in batch.values())
        reports = counter.reports()
        summary = {name: r.imbalance.to_json() for name, r in reports.items()}
    elapsed = time.perf_counter() - start
    counting = elapsed - clock[0]
    return {"workload": workload, "ids": ids, "steps": steps,
            "generate_sec": round(clock[0], 3), "count_sec": round(counting, 3),
            "ids_per_sec": round(ids / counting), "rss_before_mib": round(baseline, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "result": summary}


def _run_child(workload: str, total: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        ["nice", "-n", "10", sys.executable, __file__, "--child", workload, "--ids", str(total)],
        check=True, capture_output=True, text=True, env=env)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1e7,1e8", help="sample lengths in ids (counters)")
    parser.add_argument("--limits-ids", default="1e7,1e8",
                        help="sample lengths in ids through the limits pass")
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--ids", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ids)))
        return
    results = []
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    for size in (int(float(s)) for s in args.sizes.split(",")):
        for workload in ("host", "sparsecore"):
            results.append(_run_child(workload, size))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "result"}),
                  flush=True)
    for size in (int(float(s)) for s in args.limits_ids.split(",")):
        results.append(_run_child("limits", size))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "result"}), flush=True)
    document = {
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "platform": platform.platform()},
        "started": started,
        "workload": {"host_vocabularies": HOST_VOCABULARIES, "hosts": HOSTS,
                     "bags": HOST_BAGS, "ids_per_bag": IDS_PER_BAG,
                     "sparsecore_spec": str(SPEC.relative_to(ROOT)), "zipf": 1.0},
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
