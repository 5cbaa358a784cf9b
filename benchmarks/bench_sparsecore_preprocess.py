"""SparseCore host preprocessing: tpuemb's engines against jax-tpu-embedding's C++, same batches.

Two workloads:

- ``synthetic``: 4 tables of 1,000,000 rows (dims 16, 32, 64, 128), one feature each, dense
  ``[batch, 4]`` ids drawn Zipf(1.05) through a seeded permutation of each vocabulary, ``sum``
  combiner, 4 local devices = 4 global devices x 4 SparseCores (a v5p host, N = 16), per-device
  batches of 4,096 and 16,384 rows (``--rows``). Each table is its own stack (rotation 0) and
  its limits are the batch's own observed maxima, so no id is dropped and the COO buffers are as
  small as the batch allows (both implementations get the same limits).
- ``mlperf``: keras-rs' MLPerf DLRM-DCNv2 on a v6e-32 (examples/sparsecore/
  keras_rs_dcnv2_v6e32.py on the JAX backend, stacked by tpuemb's own loader: one stack of the
  9 tables, N = 64, limits 8,192 / 4,096), one global batch of 16,384 samples on one host (32
  local devices), each feature holding exactly its ``feature_list_length`` ids per sample
  (3, 2, 7, 3, 8, 12, 100, 27, 10: 2.8M ids) drawn Zipf(1.05) through a multiplicative
  permutation of its vocabulary; ``allow_id_dropping`` on for both. jax-tpu-embedding gets the
  same stacking (``table_stacking.stack_tables`` with tpuemb's table order and limits).

Measured in ``--rounds`` rounds; in each, every contender in turn makes ``--burst`` calls back to
back (as a training input pipeline preprocesses batch after batch; a single call after an idle
gap also pays for waking a thread pool, on either side), so a busy machine slows every
contender alike; each figure the median of its calls after one warm-up call:

- tpuemb's ``numba`` engine with all of numba's threads and with 1 (``numba.set_num_threads``);
- tpuemb's ``numpy`` engine (the reference; ``--numpy-rounds`` calls, it is slow);
- jax-tpu-embedding 0.2.0 (``--jte-python``: an interpreter with it) in a worker process that
  stays up for the whole run, on the C++ library's own thread pool: all threads (its default,
  one per schedulable CPU) and 1 thread (a second worker with
  ``SPARSECORE_INPUT_PREPROCESSING_THREADS=1``, the variable its pool reads at start-up).

The statistics of every contender (per-partition maxima, buffer sizes, drop counts) are compared,
and tpuemb's CSR arrays with jax-tpu-embedding's (row pointers, and embedding ids, sample ids and
so they did the same work. Ratios are ``tpuemb ids/s over jte ids/s`` from the same run; the load
average before and after each workload is printed beside it. jax-tpu-embedding is never a
dependency of tpuemb; its worker imports only NumPy and it.

    nice -n 10 python benchmarks/bench_sparsecore_preprocess.py \\
        --jte-python /work/jte-venv/bin/python --out benchmarks/results/sparsecore_preprocess.json
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
MLPERF_SPEC = ROOT / "examples" / "sparsecore" / "keras_rs_dcnv2_v6e32.py"
JTE_THREADS_VARIABLE = "SPARSECORE_INPUT_PREPROCESSING_THREADS"


def batch_ids(vocab: int, rows: int, seed: int, per_row: int = IDS_PER_ROW) -> np.ndarray:
    """``[rows, per_row]`` int32 ids, Zipf(1.05) ranks through a seeded permutation."""
    rng = np.random.default_rng([SEED, seed])
    cdf = np.cumsum(np.arange(1, vocab + 1, dtype=np.float64) ** -ZIPF)
    cdf /= cdf[-1]
    ranks = np.minimum(np.searchsorted(cdf, rng.random(rows * per_row), side="right"),
                       vocab - 1)
    return rng.permutation(vocab)[ranks].astype(np.int32).reshape(rows, per_row)


def large_vocab_ids(vocab: int, rows: int, per_row: int, seed: int) -> np.ndarray:
    """``[rows, per_row]`` int32 ids for a vocabulary too large for :func:`batch_ids`' table:
    Zipf(1.05) ranks (``Generator.zipf``, folded into the vocabulary) through the bijection
    ``rank x a mod vocab`` (``a`` odd and coprime to the vocabulary)."""
    rng = np.random.default_rng([SEED, seed])
    ranks = (rng.zipf(ZIPF, size=rows * per_row) - 1) % vocab
    a = 2_654_435_761
    while np.gcd(a, vocab) != 1:
        a += 2
    return (ranks.astype(np.int64) * a % vocab).astype(np.int32).reshape(rows, per_row)


# ------------------------------------------------------------------------------------------------
# the workloads: tpuemb's stacking and the plain description the jte worker rebuilds it from


def synthetic_stacking(limits: dict[str, tuple[int, int]]) -> Any:
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
    out = preprocess(synthetic_stacking(generous), features, local_devices=DEVICES,
                     allow_id_dropping=True, csr=False)
    return {name: (int(s.max_ids_per_partition.max()), int(s.max_unique_ids_per_partition.max()))
            for name, s in out.stacks.items()}


def synthetic(rows_per_device: int) -> dict[str, Any]:
    rows = rows_per_device * DEVICES
    features = {f"f_{name}": batch_ids(vocab, rows, k)
                for k, (name, vocab, _) in enumerate(TABLES)}
    limits = observed_limits(features)
    describe = {"global_devices": DEVICES, "sparse_cores": SPARSE_CORES, "local_devices": DEVICES,
                "allow_id_dropping": False, "stacks": None,
                "tables": [[name, vocab, dim, "sum", *limits[name]]
                           for name, vocab, dim in TABLES],
                "features": [[f"f_{name}", name] for name, _, _ in TABLES]}
    return {"name": f"synthetic {rows_per_device} rows/device", "rows_per_device": rows_per_device,
            "stacking": synthetic_stacking(limits), "features": features, "describe": describe,
            "options": {"local_devices": DEVICES, "allow_id_dropping": False}}


def mlperf() -> dict[str, Any]:
    """The MLPerf DLRM-DCNv2 batch, stacked by tpuemb's loader (keras-rs on JAX)."""
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.sparsecore import stack

    config = load_sparsecore_spec(MLPERF_SPEC, keras_backend="jax").config
    stacking = stack(config)
    devices, cores = stacking.num_partitions, stacking.sparse_cores_per_partition
    by_name = {f.name: f for f in config.features}
    vocab = {t.name: t.vocabulary_size for s in stacking.stacks for t in s.tables}
    features, tables = {}, []
    for k, slot in enumerate(stacking.features):
        feature = by_name[slot.name]
        rows, per_row = (int(x) for x in feature.input_shape[:2])
        features[slot.name] = large_vocab_ids(vocab[feature.table], rows, per_row, k)
    for s in stacking.stacks:
        tables += [[t.name, t.vocabulary_size, t.dim, s.combiner, s.max_ids_per_partition,
                    s.max_unique_ids_per_partition] for t in s.tables]
    describe = {"global_devices": devices, "sparse_cores": cores, "local_devices": devices,
                "allow_id_dropping": True,
                "stacks": [[s.name, [t.name for t in s.tables]] for s in stacking.stacks],
                "tables": tables, "features": [[f.name, f.table] for f in stacking.features]}
    return {"name": "mlperf dlrm-dcnv2 v6e-32", "rows_per_device": 16_384 // devices,
            "stacking": stacking, "features": features, "describe": describe,
            "options": {"local_devices": devices, "allow_id_dropping": True}}


def summary(stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What every contender must agree on, per stack."""
    return {name: {k: np.asarray(v).reshape(-1).tolist() if k != "id_drop_count" else int(v)
                   for k, v in s.items()} for name, s in sorted(stats.items())}


# ------------------------------------------------------------------------------------------------
# jax-tpu-embedding (run in its own interpreter: imports NumPy and jax-tpu-embedding only)


def jte_worker(path: str) -> None:
    """Build the workload of ``path`` for jax-tpu-embedding, answer one warm-up call with its
    statistics, then time one call per line read from stdin until it closes."""
    from importlib.metadata import version

    from jax_tpu_embedding.sparsecore.lib.nn import embedding, table_stacking
    from jax_tpu_embedding.sparsecore.lib.nn import embedding_spec as es

    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    w = json.loads(str(arrays.pop("__workload__")))

    def init(*_: Any, **__: Any) -> None:
        raise AssertionError("never initialised")

    optimizer = es.SGDOptimizerSpec(learning_rate=0.1)
    tables = {name: es.TableSpec(name=name, vocabulary_size=vocab, embedding_dim=dim,
                                 initializer=init, optimizer=optimizer, combiner=combiner,
                                 max_ids_per_partition=max_ids,
                                 max_unique_ids_per_partition=max_unique)
              for name, vocab, dim, combiner, max_ids, max_unique in w["tables"]}
    limits = {name: (max_ids, max_unique) for name, _, _, _, max_ids, max_unique in w["tables"]}
    specs, features = {}, {}
    # jax-tpu-embedding lays a stack's features end to end (their row offsets) in the order it
    # flattens the feature structure: sorted keys. Keyed by position, that is tpuemb's order
    # (keras-rs' own structure is the user's dict, whose sorted keys give the order tpuemb
    # models; keyed by the features' names here, '1' would sort before '10').
    for k, (fname, table) in enumerate(w["features"]):
        ids = arrays[fname]
        key = f"{k:04d}"
        specs[key] = es.FeatureSpec(name=fname, table_spec=tables[table],
                                    input_shape=list(ids.shape),
                                    output_shape=[ids.shape[0], tables[table].embedding_dim])
        features[key] = ids
    devices, cores = w["global_devices"], w["sparse_cores"]
    for stack_name, names in w["stacks"] or []:
        table_stacking.stack_tables(
            specs, names, global_device_count=devices, num_sc_per_device=cores,
            stack_to_max_ids_per_partition=lambda *_, n=names: limits[n[0]][0],
            stack_to_max_unique_ids_per_partition=lambda *_, n=names: limits[n[0]][1],
            stack_name=stack_name)
    embedding.prepare_feature_specs_for_training(specs, global_device_count=devices,
                                                 num_sc_per_device=cores)

    def call() -> Any:
        return embedding.preprocess_sparse_dense_matmul_input(
            features, None, specs, local_device_count=w["local_devices"],
            global_device_count=devices, num_sc_per_device=cores, has_leading_dimension=True,
            allow_id_dropping=w["allow_id_dropping"])

    inputs, stats = call()
    csr = {f"{field}/{name}": np.asarray(array)
           for field in ("lhs_row_pointers", "lhs_embedding_ids", "lhs_sample_ids", "lhs_gains")
           for name, array in getattr(inputs, field).items()}
    np.savez(path + ".csr.npz", **csr)  # compared with tpuemb's arrays by the parent
    out = {name: {"max_ids_per_partition": stats.max_ids_per_partition[name],
                  "max_unique_ids_per_partition": stats.max_unique_ids_per_partition[name],
                  "required_buffer_size_per_sc": stats.required_buffer_size_per_sc[name],
                  "id_drop_count": stats.id_drop_counters[name]}
           for name in stats.max_ids_per_partition}
    print(json.dumps({"version": version("jax-tpu-embedding"), "summary": summary(out)}),
          flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        call()
        print(time.perf_counter() - start, flush=True)


class Jte:
    """A jax-tpu-embedding worker process for one workload (``threads``: its pool's size, None
    for its default)."""

    def __init__(self, python: str, path: str, threads: int | None) -> None:
        env = dict(os.environ)
        if threads is not None:
            env[JTE_THREADS_VARIABLE] = str(threads)
        # stderr to a file: the library logs a line per call, which would fill a pipe nobody
        # reads until the end, and the worker would block writing it (the run hangs).
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [python, __file__, "--jte-worker", path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            self.close()
            raise RuntimeError(self.error or "the jax-tpu-embedding worker said nothing")
        self.first = json.loads(line)

    error = ""

    def time_calls(self, burst: int) -> list[float]:
        """``burst`` calls back to back in the worker, each timed there."""
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write("go\n" * burst)
        self.process.stdin.flush()
        return [float(self.process.stdout.readline()) for _ in range(burst)]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=120)
        self.stderr.seek(0)
        err = self.stderr.read()
        self.stderr.close()
        if self.process.returncode:
            self.error = " | ".join(err.strip().splitlines()[-3:])


# ------------------------------------------------------------------------------------------------


def tpuemb_stats(out: Any) -> dict[str, Any]:
    return summary({name: {"max_ids_per_partition": s.max_ids_per_partition,
                           "max_unique_ids_per_partition": s.max_unique_ids_per_partition,
                           "required_buffer_size_per_sc": s.required_buffer_size_per_sc,
                           "id_drop_count": s.id_drop_count} for name, s in out.stacks.items()})


def same_csr(out: Any, path: str) -> dict[str, bool]:
    """Per stack, whether jax-tpu-embedding's CSR arrays (saved by its worker) equal tpuemb's:
    the row pointers whole, the embedding ids, sample ids and gains (bit for bit, NaN padding
    included) on every slot tpuemb says is written (an entry or padding); the slots neither
    writes are left uninitialised by jax-tpu-embedding and are 0 in tpuemb."""
    result = {}
    with np.load(path + ".csr.npz") as z:
        for name, s in out.stacks.items():
            written = (s.valid_mask | s.padding_mask).reshape(-1)
            theirs = {field: z[f"lhs_{field}/{name}"].reshape(-1)
                      for field in ("row_pointers", "embedding_ids", "sample_ids", "gains")}
            ok = np.array_equal(theirs["row_pointers"], s.row_pointers.reshape(-1))
            for field in ("embedding_ids", "sample_ids", "gains"):
                mine = getattr(s, field).reshape(-1)
                ok = ok and mine.shape == theirs[field].shape and np.array_equal(
                    mine.view(np.int32)[written], theirs[field].view(np.int32)[written])
            result[name] = bool(ok)
    return result


def one_workload(w: dict[str, Any], rounds: int, numpy_rounds: int,
                 jte_python: str | None, burst: int = 3) -> dict[str, Any]:
    import numba

    from tpuemb_cfg.sparsecore.preprocessing import preprocess

    features, stacking, options = w["features"], w["stacking"], w["options"]
    ids = sum(int(f.size) for f in features.values())
    all_threads = numba.get_num_threads()

    def ours(engine: str, threads: int) -> Any:
        numba.set_num_threads(threads)
        try:
            return preprocess(stacking, features, engine=engine, **options)
        finally:
            numba.set_num_threads(all_threads)

    contenders: dict[str, Any] = {
        f"tpuemb numba {all_threads} threads": lambda: ours("numba", all_threads),
        "tpuemb numba 1 thread": lambda: ours("numba", 1),
        "tpuemb numpy": lambda: ours("numpy", all_threads),
    }
    row: dict[str, Any] = {"workload": w["name"], "rows_per_device": w["rows_per_device"],
                           "ids": ids, "load_before": os.getloadavg()[0]}
    reference = tpuemb_stats(contenders["tpuemb numpy"]())
    same = {name: tpuemb_stats(call()) == reference for name, call in contenders.items()}
    workers: dict[str, Jte] = {}
    with tempfile.TemporaryDirectory(prefix="tpuemb-bench-") as folder:
        if jte_python:
            path = os.path.join(folder, "batch.npz")
            np.savez(path, __workload__=np.array(json.dumps(w["describe"])), **features)
            for label, threads in (("jte all threads", None), ("jte 1 thread", 1)):
                try:
                    workers[label] = worker = Jte(jte_python, path, threads)
                except RuntimeError as exc:
                    row[f"{label} error"] = str(exc)
                    continue
                row["jte_version"] = worker.first["version"]
                same[label] = worker.first["summary"] == reference
                if "same_csr" not in row:
                    row["same_csr"] = same_csr(contenders["tpuemb numpy"](), path)
        times: dict[str, list[float]] = {name: [] for name in [*contenders, *workers]}
        for r in range(rounds):
            for name, call in contenders.items():
                if name == "tpuemb numpy" and r >= numpy_rounds:
                    continue
                for _ in range(1 if name == "tpuemb numpy" else burst):
                    start = time.perf_counter()
                    call()
                    times[name].append(time.perf_counter() - start)
            for label, worker in workers.items():
                times[label] += worker.time_calls(burst)
        for worker in workers.values():
            worker.close()
    row["load_after"] = os.getloadavg()[0]
    row["same_statistics"] = same
    row["seconds"] = {name: statistics.median(t) for name, t in times.items()}
    row["ids_per_sec"] = {name: ids / s for name, s in row["seconds"].items()}
    best = row["ids_per_sec"]
    for mine, theirs in ((f"tpuemb numba {all_threads} threads", "jte all threads"),
                         ("tpuemb numba 1 thread", "jte 1 thread"),
                         ("tpuemb numba 1 thread", "jte all threads")):
        if theirs in best:
            row[f"{mine} / {theirs}"] = best[mine] / best[theirs]
    row["numba / numpy"] = best[f"tpuemb numba {all_threads} threads"] / best["tpuemb numpy"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[4096, 16384],
                        help="rows per device of each feature (synthetic workload)")
    parser.add_argument("--no-mlperf", action="store_true", help="skip the MLPerf batch")
    parser.add_argument("--rounds", type=int, default=7, help="timed calls per contender")
    parser.add_argument("--numpy-rounds", type=int, default=3,
                        help="timed calls of the NumPy engine (at most --rounds)")
    parser.add_argument("--burst", type=int, default=3,
                        help="calls back to back per contender and round (as a training input "
                             "pipeline preprocesses batch after batch)")
    parser.add_argument("--jte-python", help="an interpreter with jax-tpu-embedding 0.2.0")
    parser.add_argument("--jte-worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="write the result as JSON to this file")
    args = parser.parse_args()
    if args.jte_worker:
        jte_worker(args.jte_worker)
        return
    sys.path.insert(0, str(ROOT))
    from bench_step import machine  # one description of this machine for every benchmark

    workloads = [synthetic(rows) for rows in args.rows]
    if not args.no_mlperf:
        workloads.append(mlperf())
    results = []
    for w in workloads:
        results.append(one_workload(w, args.rounds, args.numpy_rounds, args.jte_python,
                                    args.burst))
        print(text(results[-1]), flush=True)
    out: dict[str, Any] = {
        "machine": machine(),
        "workload": {"tables": [list(t) for t in TABLES], "devices": DEVICES,
                     "sparse_cores_per_device": SPARSE_CORES, "ids_per_row": IDS_PER_ROW,
                     "zipf": ZIPF, "combiner": "sum", "mlperf_spec": str(
                         MLPERF_SPEC.relative_to(ROOT)), "rounds": args.rounds,
                     "numpy_rounds": args.numpy_rounds, "burst": args.burst},
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "results": results,
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


def text(r: dict[str, Any]) -> str:
    lines = [f"{r['workload']}: {r['ids']:,} ids, load {r['load_before']:.1f}-"
             f"{r['load_after']:.1f}"]
    for name, rate in r["ids_per_sec"].items():
        lines.append(f"  {name:<28} {rate / 1e6:8.1f}M ids/s  {r['seconds'][name] * 1e3:9.1f} ms"
                     f"  same statistics: {r['same_statistics'].get(name)}")
    lines += [f"  {k}: {v:.2f}x" for k, v in r.items() if " / " in k]
    if "same_csr" in r:
        lines.append(f"  CSR arrays identical to jax-tpu-embedding's: {r['same_csr']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
