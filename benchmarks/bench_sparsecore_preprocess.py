"""SparseCore host preprocessing: tpuemb's NumPy against jax-tpu-embedding's C++, same batches.

The workload: 4 tables of 1,000,000 rows (dims 16, 32, 64, 128), one feature each, dense
``[batch, 4]`` ids drawn Zipf(1.05) through a seeded permutation of each vocabulary, ``sum``
combiner, 4 local devices = 4 global devices x 4 SparseCores (a v5p host, N = 16), per-device
batches of 4,096, 16,384 and 65,536 rows. Each table is its own stack (rotation 0) and its
limits are set to the batch's own observed maxima, so no id is dropped and the COO buffers are as
small as the batch allows (both implementations get the same limits).

- tpuemb: ``tpuemb_cfg.sparsecore.preprocessing.preprocess`` in this process;
- jax-tpu-embedding (with ``--jte-python``, an interpreter with jax-tpu-embedding 0.2.0):
  ``embedding.preprocess_sparse_dense_matmul_input`` after ``prepare_feature_specs_for_training``,
  in a subprocess fed the same arrays through a temporary ``.npz``; it runs on the C++ library's
  own thread pool.

Each figure is the median of ``--repeats`` timed calls after one warm-up call; the statistics of
both (per-partition maxima, buffer sizes, drop counts) are compared, so the two did the same work.
jax-tpu-embedding is never a dependency of tpuemb; the worker imports only NumPy and it.

    nice -n 10 python benchmarks/bench_sparsecore_preprocess.py \\
        --jte-python /tmp/jte-venv/bin/python --out benchmarks/results/sparsecore_preprocess.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TABLES = (("t0", 1_000_000, 16), ("t1", 1_000_000, 32), ("t2", 1_000_000, 64),
          ("t3", 1_000_000, 128))
DEVICES = 4
SPARSE_CORES = 4
IDS_PER_ROW = 4
ZIPF = 1.05
SEED = 2026


def batch_ids(vocab: int, rows: int, seed: int) -> np.ndarray:
    """``[rows, IDS_PER_ROW]`` int32 ids, Zipf(1.05) ranks through a seeded permutation."""
    rng = np.random.default_rng([SEED, seed])
    cdf = np.cumsum(np.arange(1, vocab + 1, dtype=np.float64) ** -ZIPF)
    cdf /= cdf[-1]
    ranks = np.minimum(np.searchsorted(cdf, rng.random(rows * IDS_PER_ROW), side="right"),
                       vocab - 1)
    return rng.permutation(vocab)[ranks].astype(np.int32).reshape(rows, IDS_PER_ROW)


def stacking(limits: dict[str, tuple[int, int]]) -> Any:
    """Each table its own stack, as ``prepare_feature_specs_for_training`` makes them."""
    from tpuemb_cfg.sparsecore.stacking import FeatureSlot, Stack, StackedTable, Stacking

    n = DEVICES * SPARSE_CORES
    stacks, slots = [], []
    for name, vocab, dim in TABLES:
        padded = -(-vocab // (8 * n)) * 8 * n
        table = StackedTable(name, vocab, dim, padded, -(-dim // 8) * 8, 0, 0)
        stacks.append(Stack(name, (table,), "", "sum", 0, *limits[name]))
        slots.append(FeatureSlot(f"f_{name}", name, name, 0, 0, 0, 0))
    return Stacking("jax", DEVICES, SPARSE_CORES, tuple(stacks), tuple(slots))


def observed_limits(features: dict[str, np.ndarray]) -> dict[str, tuple[int, int]]:
    """The batch's own maxima per stack (a first pass with dropping on and generous limits)."""
    from tpuemb_cfg.sparsecore.preprocessing import preprocess

    generous = {name: (1 << 16, 1 << 16) for name, _, _ in TABLES}
    out = preprocess(stacking(generous), features, local_devices=DEVICES,
                     allow_id_dropping=True)
    return {name: (int(s.max_ids_per_partition.max()), int(s.max_unique_ids_per_partition.max()))
            for name, s in out.stacks.items()}


def summary(stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What both must agree on, per stack."""
    return {name: {k: np.asarray(v).reshape(-1).tolist() if k != "id_drop_count" else int(v)
                   for k, v in s.items()} for name, s in sorted(stats.items())}


def time_calls(call: Any, repeats: int) -> tuple[float, Any]:
    result = call()  # warm-up (and the result to compare)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def time_tpuemb(features: dict[str, np.ndarray], limits: dict[str, tuple[int, int]],
                repeats: int) -> tuple[float, dict[str, Any]]:
    from tpuemb_cfg.sparsecore.preprocessing import preprocess

    st = stacking(limits)
    seconds, out = time_calls(lambda: preprocess(st, features, local_devices=DEVICES), repeats)
    stats = {name: {"max_ids_per_partition": s.max_ids_per_partition,
                    "max_unique_ids_per_partition": s.max_unique_ids_per_partition,
                    "required_buffer_size_per_sc": s.required_buffer_size_per_sc,
                    "id_drop_count": s.id_drop_count} for name, s in out.stacks.items()}
    return seconds, summary(stats)


# ------------------------------------------------------------------------------------------------
# jax-tpu-embedding (run in its own interpreter: imports NumPy and jax-tpu-embedding only)


def jte_worker(path: str, repeats: int) -> None:
    from importlib.metadata import version

    from jax_tpu_embedding.sparsecore.lib.nn import embedding
    from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as es

    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    limits = json.loads(str(arrays.pop("__limits__")))

    def init(*_: Any, **__: Any) -> None:
        raise AssertionError("never initialised")

    optimizer = es.SGDOptimizerSpec(learning_rate=0.1)
    specs, features = {}, {}
    for name, vocab, dim in TABLES:
        table = es.TableSpec(name=name, vocabulary_size=vocab, embedding_dim=dim,
                             initializer=init, optimizer=optimizer, combiner="sum",
                             max_ids_per_partition=limits[name][0],
                             max_unique_ids_per_partition=limits[name][1])
        ids = arrays[f"f_{name}"]
        specs[f"f_{name}"] = es.FeatureSpec(name=f"f_{name}", table_spec=table,
                                            input_shape=list(ids.shape),
                                            output_shape=[ids.shape[0], dim])
        features[f"f_{name}"] = ids
    embedding.prepare_feature_specs_for_training(specs, global_device_count=DEVICES,
                                                 num_sc_per_device=SPARSE_CORES)

    def call() -> Any:
        return embedding.preprocess_sparse_dense_matmul_input(
            features, None, specs, local_device_count=DEVICES, global_device_count=DEVICES,
            num_sc_per_device=SPARSE_CORES, has_leading_dimension=True,
            allow_id_dropping=False)

    seconds, (_, stats) = time_calls(call, repeats)
    out = {name: {"max_ids_per_partition": stats.max_ids_per_partition[name],
                  "max_unique_ids_per_partition": stats.max_unique_ids_per_partition[name],
                  "required_buffer_size_per_sc": stats.required_buffer_size_per_sc[name],
                  "id_drop_count": stats.id_drop_counters[name]}
           for name in stats.max_ids_per_partition}
    print(json.dumps({"seconds": seconds, "version": version("jax-tpu-embedding"),
                      "summary": summary(out)}))


def time_jte(python: str, features: dict[str, np.ndarray],
             limits: dict[str, tuple[int, int]], repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tpuemb-bench-") as folder:
        path = os.path.join(folder, "batch.npz")
        arrays: dict[str, Any] = {"__limits__": np.array(json.dumps(limits)), **features}
        np.savez(path, **arrays)
        done = subprocess.run([python, __file__, "--jte-worker", path, "--repeats",
                               str(repeats)], capture_output=True, text=True, check=False)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-3:]}
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


# ------------------------------------------------------------------------------------------------


def one_size(rows_per_device: int, repeats: int, jte_python: str | None) -> dict[str, Any]:
    rows = rows_per_device * DEVICES
    features = {f"f_{name}": batch_ids(vocab, rows, k)
                for k, (name, vocab, _) in enumerate(TABLES)}
    ids = sum(int(f.size) for f in features.values())
    limits = observed_limits(features)
    load_before = os.getloadavg()[0]
    seconds, ours = time_tpuemb(features, limits, repeats)
    row: dict[str, Any] = {
        "rows_per_device": rows_per_device, "ids": ids, "limits": limits,
        "tpuemb_sec": seconds, "tpuemb_ids_per_sec": ids / seconds,
    }
    if jte_python:
        jte = time_jte(jte_python, features, limits, repeats)
        if "error" in jte:
            row["jte_error"] = jte["error"]
        else:
            row["jte_version"] = jte["version"]
            row["jte_sec"] = jte["seconds"]
            row["jte_ids_per_sec"] = ids / jte["seconds"]
            row["tpuemb_over_jte_time"] = seconds / jte["seconds"]
            row["same_statistics"] = jte["summary"] == ours
    row["load_before"], row["load_after"] = load_before, os.getloadavg()[0]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[4096, 16384, 65536],
                        help="rows per device of each feature")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per figure")
    parser.add_argument("--jte-python", help="an interpreter with jax-tpu-embedding 0.2.0")
    parser.add_argument("--jte-worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="write the result as JSON to this file")
    args = parser.parse_args()
    if args.jte_worker:
        jte_worker(args.jte_worker, args.repeats)
        return
    sys.path.insert(0, str(ROOT))
    from bench_step import machine  # one description of this machine for every benchmark

    out: dict[str, Any] = {
        "machine": machine(),
        "workload": {"tables": [list(t) for t in TABLES], "devices": DEVICES,
                     "sparse_cores_per_device": SPARSE_CORES, "ids_per_row": IDS_PER_ROW,
                     "zipf": ZIPF, "combiner": "sum", "repeats": args.repeats},
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "results": [one_size(rows, args.repeats, args.jte_python) for rows in args.rows],
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(text(out))


def text(out: dict[str, Any]) -> str:
    lines = [f"{'rows/device':>12} {'ids':>10} {'tpuemb ids/s':>14} {'jte ids/s':>14} "
             f"{'tpuemb/jte time':>16} {'same stats':>10} {'load':>10}"]
    for r in out["results"]:
        jte = f"{r['jte_ids_per_sec']:14,.0f}" if "jte_ids_per_sec" in r else f"{'-':>14}"
        ratio = f"{r['tpuemb_over_jte_time']:16.2f}" if "tpuemb_over_jte_time" in r \
            else f"{'-':>16}"
        same = str(r.get("same_statistics", "-"))
        lines.append(f"{r['rows_per_device']:>12,} {r['ids']:>10,} "
                     f"{r['tpuemb_ids_per_sec']:14,.0f} {jte} {ratio} {same:>10} "
                     f"{r['load_before']:4.1f}-{r['load_after']:.1f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
