"""``tpuemb plan``: ids per second and peak memory against the sample's length, for the whole
command (a subprocess: start-up, reading, planning and the limits pass), the sample readers, and
the streaming counters alone.

**Whole command** (``command``): ``tpuemb plan CONFIG --ids S.parquet --format json -q`` timed
from spawn to exit (the fastest of ``--repeat`` runs), its peak resident memory the child's
own high-water mark (``VmHWM``, polled; ``ru_maxrss`` is stored too but Linux carries it over
from the parent across fork and exec, so it is at least the benchmark's own size);
ids/s = the sample ids the report says were read / wall time. Two configurations of MLPerf's
DLRM-DCNv2 (9 tables of 39,060 to 4 x 10^7 rows, global batch 16,384, each sample holding each
feature's multi-hot length of ids, 172 ids a sample), on one Zipf(1.2) sample written by
``examples/plan/zipf_sample.py --fixed-bags`` (a Parquet row group per configured batch, drawn
one row group at a time, before the clock starts and never whole in memory):

- ``sparsecore-mlperf``: examples/sparsecore/keras_rs_dcnv2_v6e32.py, ``--keras-backend jax``
  (columns named by ``FeatureConfig.name``), load counters and the limits pass;
- ``legacy-mlperf``: examples/models/dcnv2_mlperf.pbtxt (the same model as a
  ``TPUEmbeddingConfiguration``, 4 hosts), the same ids under the names ``f0`` ... ``f8``.

**Readers** (``readers``): the same SparseCore sample as Parquet, a replay ``B.npz`` (a step per
configured batch) and TFRecord, each read in a child process through ``planner.inputs.
open_sample`` (every check on, batches of the configured size); TFRecord twice, compiled and the
protobuf reference (``planner.tfrecord.read_tfrecord_reference``), in the same run.

The sizes are rounded to whole configured batches (at least one). Every figure is printed with
the load average before and after it and the machine's copy bandwidth
(``tpuemb_cfg.run.bench.copy_bandwidth``: bytes read and written per second by ``np.copyto``),
and stored with them.

**Counters** (in-process): each measurement runs in a child process of its own (``nice -n
10``) that generates its batches lazily, one step at a time (the sample is never in memory),
streams them through the counters
and reports the time spent counting (generation excluded and reported apart), the resident
memory after setting up the counters (before the first batch) and the peak resident memory at
the end (``VmHWM``). Memory independent of the sample's length shows as the same peak for
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
    python benchmarks/bench_plan.py --sizes 1e6                        # a quick look
    python benchmarks/bench_plan.py --sizes 1e7,1e8 --only command     # the issue's figures
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MLPERF_SPEC = ROOT / "examples" / "sparsecore" / "keras_rs_dcnv2_v6e32.py"
MLPERF_LEGACY = ROOT / "examples" / "models" / "dcnv2_mlperf.pbtxt"
MLPERF_BATCH = 16_384  # the global batch: a Parquet row group, a B.npz step
ZIPF_EXPONENT = 1.2
READERS = ("parquet", "npz", "tfrecord", "tfrecord-reference")
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
            "peak_rss_mib": round(_hwm_mib(), 1),
            "result": summary}


def _run_child(workload: str, total: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        ["nice", "-n", "10", sys.executable, __file__, "--child", workload, "--ids", str(total)],
        check=True, capture_output=True, text=True, env=env)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


# --- the whole command and the readers ---------------------------------------------------------

def _zipf_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("zipf_sample",
                                                  ROOT / "examples" / "plan" / "zipf_sample.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _schemas(zipf: Any) -> tuple[Any, Any]:
    """The SparseCore (JAX) and legacy sample schemas of the MLPerf model, the legacy one with
    the spec's ids per bag (the same tables, in the same order)."""
    from tpuemb_cfg.planner.inputs import SampleSchema

    sparsecore = zipf.schema_of(str(MLPERF_SPEC), "jax")
    lengths = {f.table: f.ids_per_bag for f in sparsecore.features}
    legacy = zipf.schema_of(str(MLPERF_LEGACY))
    legacy = SampleSchema(tuple(replace(f, ids_per_bag=lengths[f.table])
                                for f in legacy.features))
    return sparsecore, legacy


def _rows(size: int, schema: Any) -> int:
    per_row = sum(f.ids_per_bag for f in schema.features)
    return max(1, round(size / per_row / MLPERF_BATCH)) * MLPERF_BATCH


def _write(zipf: Any, schema: Any, rows: int, path: Path) -> float:
    """The sample of ``rows`` rows (a configured batch at a time) as ``path``: seconds taken."""
    start = time.perf_counter()
    chunks = zipf.zipf_chunks(schema, rows, MLPERF_BATCH, exponent=ZIPF_EXPONENT,
                              fixed_bags=True, seed=7)
    zipf.write_chunks(str(path), chunks, MLPERF_BATCH)
    return time.perf_counter() - start


def _hwm_mib(pid: int | str = "self") -> float:
    """The peak resident memory of process ``pid``'s current program (``VmHWM``; 0 when gone).
    Not ``ru_maxrss``: Linux keeps that across ``fork`` and ``exec``, so a child's starts at
    its parent's resident size (a benchmark holding 200 MiB would floor every child at 200 MiB);
    ``VmHWM`` starts afresh with each program."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _spawn(argv: list[str], out: Path) -> dict[str, Any]:
    """``argv`` under ``nice -n 10`` (nice execs it: one process), stdout to ``out``: wall
    seconds, exit status, the child's peak resident memory (its ``VmHWM``, read every 10 ms
    until it exits: a high-water mark, so the last reading is the peak), the load before and
    after."""
    # byte code cached as an installed package has it (PYTHONDONTWRITEBYTECODE would make every
    # run compile the package's sources again: ~0.4 s here), in the work folder
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(out.parent / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    load = os.getloadavg()[0]
    errors = out.with_suffix(".stderr")
    with open(out, "wb") as stdout, open(errors, "wb") as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen(["nice", "-n", "10", *argv], stdout=stdout, stderr=stderr,
                                env=env)
        peak = 0.0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, _hwm_mib(proc.pid))
            time.sleep(0.01)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # 1: the gate failed, still a report
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: "
                         f"{errors.read_text(errors='replace')[-2000:]}")
    return {"wall_sec": round(wall, 3), "exit": proc.returncode, "peak_rss_mib": round(peak, 1),
            "ru_maxrss_mib": round(usage.ru_maxrss / 1024, 1),
            "load_before": load, "load_after": os.getloadavg()[0]}


def command(name: str, config: Path, sample: Path, extra: list[str], work: Path,
            repeat: int) -> dict[str, Any]:
    """The whole ``tpuemb plan`` command on ``sample``, ``repeat`` times: the fastest run (the
    first may compile numba kernels and the byte code into their caches), every wall time
    listed."""
    out = work / f"{name}.json"
    runs = [_spawn([sys.executable, "-m", "tpuemb_cfg", "plan", str(config), "--ids",
                    str(sample), *extra, "--format", "json", "-q"], out) for _ in range(repeat)]
    row = min(runs, key=lambda r: r["wall_sec"])
    report = json.loads(out.read_text(encoding="utf-8"))
    ids = sum(report["sample"]["ids_read"].values())
    limits = report.get("limits") or {}
    return {"workload": f"command:{name}", "ids": ids, "batches": report["sample"]["batches"],
            "limits_pass": bool(limits.get("stacks")), **row,
            "ids_per_sec": round(ids / row["wall_sec"]),
            "walls": [r["wall_sec"] for r in runs],
            "peak_rss_mib_max": max(r["peak_rss_mib"] for r in runs)}


def reader_child(fmt: str, path: str, backend: str) -> dict[str, Any]:
    """One reader in this process: every batch of the sample, ids/s and peak memory."""
    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.planner import inputs, tfrecord
    from tpuemb_cfg.planner.inputs import open_sample, sparsecore_schema

    schema = sparsecore_schema(load_sparsecore_spec(str(MLPERF_SPEC), keras_backend=backend).config)
    if fmt == "tfrecord-reference":
        inputs._READERS["tfrecord"] = tfrecord.read_tfrecord_reference
    if fmt == "tfrecord":  # compile (or load the cached kernels) before the clock starts
        _warm_tfrecord(schema)
    baseline = _rss_mib()
    start = time.perf_counter()
    ids = 0
    for batch in open_sample(path, schema):
        ids += sum(int(b.values.shape[0]) for b in batch.values())
    elapsed = time.perf_counter() - start
    return {"workload": f"reader:{fmt}", "ids": ids, "read_sec": round(elapsed, 3),
            "ids_per_sec": round(ids / elapsed), "rss_before_mib": round(baseline, 1),
            "peak_rss_mib": round(_hwm_mib(), 1)}


def _warm_tfrecord(schema: Any) -> None:
    """Read a one-batch TFRecord sample, so the kernels are compiled or loaded."""
    from tpuemb_cfg.planner.inputs import SampleSchema, open_sample, write_tfrecord

    small = SampleSchema(tuple(replace(f, bags=1) for f in schema.features))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "warm.tfrecord"
        with open(path, "wb") as handle:
            write_tfrecord(handle, [{f.name: [0] for f in schema.features}])
        for _ in open_sample(str(path), small):
            pass


def reader(fmt: str, path: Path, work: Path) -> dict[str, Any]:
    out = work / f"reader-{fmt}.json"
    row = _spawn([sys.executable, __file__, "--reader", fmt, "--path", str(path)], out)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return {**result, "wall_sec": row["wall_sec"], "load_before": row["load_before"],
            "load_after": row["load_after"]}


def _show(row: dict[str, Any], bandwidth: float) -> None:
    shown = {k: v for k, v in row.items() if k != "result"}
    print(json.dumps({**shown, "copy_gb_per_sec": round(bandwidth / 1e9, 1)}), flush=True)


def _sizes(text: str | None) -> list[int]:
    return [int(float(s)) for s in text.split(",")] if text else []


def whole(sizes: list[int], reader_sizes: list[int], work: Path, bandwidth: float,
          repeat: int) -> list[dict[str, Any]]:
    """The command and reader figures at each size (samples written first, not timed)."""
    zipf = _zipf_module()
    sparsecore, legacy = _schemas(zipf)
    results = []
    for size in sorted(set(sizes) | set(reader_sizes)):
        rows = _rows(size, sparsecore)
        sc_path = work / f"mlperf-{size:.0e}.parquet"
        generated = {"sample_rows": rows, "sample_write_sec": {
            "parquet": round(_write(zipf, sparsecore, rows, sc_path), 1)}}
        if size in sizes:
            legacy_path = work / f"mlperf-legacy-{size:.0e}.parquet"
            _write(zipf, legacy, rows, legacy_path)
            for row in (command("sparsecore-mlperf", MLPERF_SPEC, sc_path,
                                ["--keras-backend", "jax"], work, repeat),
                        command("legacy-mlperf", MLPERF_LEGACY, legacy_path, [], work, repeat)):
                results.append({**row, **generated, "size": size})
                _show(results[-1], bandwidth)
            legacy_path.unlink()
        if size in reader_sizes:
            paths = {"parquet": sc_path}
            for fmt, ext in (("npz", "npz"), ("tfrecord", "tfrecord")):
                paths[fmt] = work / f"mlperf-{size:.0e}.{ext}"
                generated["sample_write_sec"][fmt] = round(
                    _write(zipf, sparsecore, rows, paths[fmt]), 1)
            paths["tfrecord-reference"] = paths["tfrecord"]
            for fmt in READERS:
                results.append({**reader(fmt, paths[fmt], work), **generated, "size": size,
                                "file_mib": round(paths[fmt].stat().st_size / 2**20, 1)})
                _show(results[-1], bandwidth)
            for path in set(paths.values()) - {sc_path}:
                path.unlink()
        sc_path.unlink()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1e7,1e8",
                        help="sample lengths in ids (every group unless given its own)")
    parser.add_argument("--limits-ids", help="sample lengths through the limits pass alone")
    parser.add_argument("--reader-sizes", help="sample lengths for the readers (default: the "
                                               "smallest of --sizes)")
    parser.add_argument("--only", default="command,readers,counters,limits",
                        help="groups to run: command, readers, counters, limits")
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs of each whole command (the fastest is reported)")
    parser.add_argument("--workdir", type=Path, help="where the samples are written (default: "
                                                     "a temporary folder, removed)")
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--ids", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--reader", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ids)))
        return
    if args.reader:
        print(json.dumps(reader_child(args.reader, args.path, "jax")))
        return
    from tpuemb_cfg.run.bench import copy_bandwidth

    groups = set(args.only.split(","))
    sizes = _sizes(args.sizes)
    bandwidth = copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e9:.1f} GB/s, load {os.getloadavg()[0]:.2f}", flush=True)
    results: list[dict[str, Any]] = []
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    if groups & {"command", "readers"}:
        work = Path(tempfile.mkdtemp(prefix="bench_plan_", dir=args.workdir))
        try:
            results += whole(sizes if "command" in groups else [],
                             (_sizes(args.reader_sizes) or sizes[:1]) if "readers" in groups
                             else [], work, bandwidth, args.repeat)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for size in sizes if "counters" in groups else []:
        for workload in ("host", "sparsecore"):
            results.append({**_run_child(workload, size), "size": size})
            _show(results[-1], bandwidth)
    for size in (_sizes(args.limits_ids) or sizes) if "limits" in groups else []:
        results.append({**_run_child("limits", size), "size": size})
        _show(results[-1], bandwidth)
    document = {
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "platform": platform.platform(),
                    "copy_bandwidth_bytes_per_sec": round(bandwidth)},
        "started": started,
        "workload": {"host_vocabularies": HOST_VOCABULARIES, "hosts": HOSTS,
                     "bags": HOST_BAGS, "ids_per_bag": IDS_PER_BAG,
                     "sparsecore_spec": str(SPEC.relative_to(ROOT)), "zipf": 1.0,
                     "command": {"sparsecore": str(MLPERF_SPEC.relative_to(ROOT)),
                                 "legacy": str(MLPERF_LEGACY.relative_to(ROOT)),
                                 "batch": MLPERF_BATCH, "zipf": ZIPF_EXPONENT,
                                 "ids_per_sample": 172}},
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
