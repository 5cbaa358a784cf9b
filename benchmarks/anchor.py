"""The anchor benchmark with its yardsticks: ``tpuemb bench``'s figures and what they mean.

``tpuemb bench`` (``tpuemb_cfg.run.bench``, installed with the package) times the public
``Executor.step`` and the update alone on the anchor workload, against their memory-traffic
limits (``bench.traffic_limit``: the bytes a step must move, at the copy bandwidth measured in the
run, ``bench.copy_bandwidth``), with the load before and after. This script runs the same
workload, on the same arrays, with the same limits, and adds the yardsticks that say more:

- **naive step** (``naive_sec_per_step``): the same update written the obvious NumPy way
  (``np.unique``, ``np.add.at``, fancy indexing, the family's NumPy update); before the update is
  timed, one update is checked against it on copies of the touched rows
  (``step_check_max_abs_diff``), so a benchmark that times the wrong thing shows;
- **warm start** (``warm_start_sec``): a fresh process importing tpuemb and running a tiny step
  with the kernels in the cache, the cost a user pays for every new process;
- **multi-feature** (``--multi-feature``): three tables (together the same vocabulary), eight
  features with the ``mean`` combiner and bags of 1 to 20 ids, about the same number of ids,
  timed against the same ids sent as one anchor-style step.

``bench_step.py`` runs this next to TensorFlow's and PyTorch's steps.

    python benchmarks/anchor.py [--vocab V] [--dim D] [--ids N] [--optimizer NAME] [--steps S]
                                [--engine numba|numpy] [--threads T] [--multi-feature] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout: the package next to this folder
    sys.path.insert(0, str(ROOT))

from tpuemb_cfg.algorithms.table import BENCHMARK, BENCHMARK_DEFAULT  # noqa: E402
from tpuemb_cfg.algorithms.update import UpdateContext  # noqa: E402
from tpuemb_cfg.base.errors import UsageError  # noqa: E402
from tpuemb_cfg.run import bench  # noqa: E402

F32 = np.float32


def yardstick_bytes(w: bench.Workload) -> int:
    """What the yardsticks add to ``bench.memory_needed``: the activations, the naive step's
    gathered rows and sums (three more ``ids x dim`` float32 arrays)."""
    return 12 * w.ids * w.dim


# ------------------------------------------------------------------------------------------------
# Yardsticks


def naive_step(
    optimizer: str, table: np.ndarray, slots: list[np.ndarray], ids: np.ndarray,
    grads: np.ndarray, lr: float = bench.LEARNING_RATE,
) -> None:
    """The update step written the obvious NumPy way: ``np.unique``, ``np.add.at``, fancy
    indexing, and the family's NumPy update of the rows (the executor's equations)."""
    if optimizer not in bench.OPTIMIZERS:
        raise UsageError(f"unknown optimizer {optimizer!r}")
    unique, inverse = np.unique(ids, return_inverse=True)
    g = np.zeros((unique.shape[0], table.shape[1]), dtype=F32)
    np.add.at(g, inverse.reshape(-1), grads)
    optimizer_of, hyper = _naive_update(optimizer)
    state = optimizer_of.state(*(slot[unique] for slot in slots))
    w, state = optimizer_of.update(table[unique], state, g, F32(lr), hyper, UpdateContext(0, ()))
    table[unique] = w
    for slot, value in zip(slots, state, strict=True):
        slot[unique] = value


def _naive_update(optimizer: str) -> tuple[Any, Any]:
    """The family's NumPy update of the benchmark's ``optimizer`` and its bound hyper-parameters
    (read from the benchmark's configuration text)."""
    from google.protobuf import text_format

    from tpuemb_cfg.algorithms.update import get as get_update
    from tpuemb_cfg.proto.optimization_parameters_pb2 import OptimizationParameters

    name = BENCHMARK[optimizer][0]
    message = text_format.Parse(bench.OPTIMIZERS[optimizer], OptimizationParameters())
    found = get_update(name)
    return found, found.bind(getattr(message, name))


def check_step(
    optimizer: str, table: np.ndarray, slots: list[np.ndarray], ids: np.ndarray,
    grads: np.ndarray, update: Callable[[], np.ndarray],
) -> tuple[int, float]:
    """Run ``update`` (the timed step) once, and the naive step on copies of the rows it should
    touch; return the number of rows ``update`` updated and the largest absolute difference
    between the two results over those rows and their slots (inf when the rows differ)."""
    expected_rows = np.unique(ids)
    local = [table[expected_rows]] + [slot[expected_rows] for slot in slots]
    rows = update()
    naive_step(optimizer, local[0], local[1:], np.searchsorted(expected_rows, ids), grads)
    if rows.shape != expected_rows.shape or (rows != expected_rows).any():
        return int(rows.shape[0]), float("inf")
    diffs = [float(np.abs(array[rows] - want).max(initial=0.0))
             for array, want in zip([table, *slots], local, strict=True)]
    return int(rows.shape[0]), max(diffs)


def warm_start(engine: str = "numba", optimizer: str = BENCHMARK_DEFAULT) -> float:
    """Seconds a fresh Python process takes to import tpuemb and run one tiny ``Executor.step``
    (with the kernels already in the cache: what every new process pays)."""
    code = (
        "import time; start = time.perf_counter()\n"
        "from tpuemb_cfg.run.bench import tiny_step\n"
        f"tiny_step({optimizer!r}, {engine!r})\n"
        "print(time.perf_counter() - start)\n"
    )
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHONPATH": path})
    try:
        return float(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return float("nan")


def multi_feature(w: bench.Workload, engine: str) -> dict[str, float]:
    """The realistic step (3 tables, 8 features, mean, bags of 1-20 ids) against the same ids
    as one anchor-style step (one table holding the three side by side, one id per bag)."""
    rng = np.random.default_rng([w.seed, 0x3F])
    sizes = [w.vocab // 2, w.vocab // 4, w.vocab - w.vocab // 2 - w.vocab // 4]
    offsets = [0, sizes[0], sizes[0] + sizes[1]]
    feature_tables = [0, 0, 0, 1, 1, 1, 2, 2]
    bags_per_feature = max(w.ids // (len(feature_tables) * 21 // 2), 1)
    batch, global_ids = [], []
    for f, t in enumerate(feature_tables):
        lengths = rng.integers(1, 21, bags_per_feature)
        ids = bench.zipf_ids(sizes[t], int(lengths.sum()), w.zipf, w.seed * 131 + f)
        batch.append({
            "ids": ids,
            "row_splits": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "grad": rng.standard_normal((bags_per_feature, w.dim), dtype=F32) * F32(0.01),
        })
        global_ids.append(ids + offsets[t])
    multi_text = bench.config_text(
        [(f"t{t}", size, w.dim) for t, size in enumerate(sizes)],
        [(t, bags_per_feature) for t in feature_tables], w.optimizer,
    )
    multi_sec = _time_steps(multi_text, "mean", engine, batch, w.steps)
    flat = np.concatenate(global_ids)
    flat_grads = rng.standard_normal((flat.shape[0], w.dim), dtype=F32) * F32(0.01)
    anchor_text = bench.config_text([("all", w.vocab, w.dim)], [(0, flat.shape[0])], w.optimizer)
    anchor_sec = _time_steps(
        anchor_text, "sum", engine, [{"ids": flat, "grad": flat_grads}], w.steps
    )
    return {
        "ids": float(flat.shape[0]),
        "unique_ids": float(np.unique(flat).shape[0]),
        "multi_feature_sec_per_step": multi_sec,
        "same_ids_one_feature_sec_per_step": anchor_sec,
        "ratio": multi_sec / anchor_sec,
    }


def _time_steps(text: str, combiner: str, engine: str, batch: list[dict[str, np.ndarray]],
                steps: int) -> float:
    """Median seconds of ``Executor.step(batch)`` on a fresh executor (freed on return)."""
    executor = bench.executor(text, combiner, engine)
    return bench.median_time(lambda: executor.step(batch), steps)


# ------------------------------------------------------------------------------------------------
# The run


def run(w: bench.Workload | None = None, *, engine: str = "numba",
        threads: int | None = None, with_multi_feature: bool = False,
        max_memory: int | None = None) -> dict[str, Any]:
    """``tpuemb bench``'s figures and the yardsticks (module docstring) for ``w`` (default: the
    anchor workload), measured in this process on the same arrays; the JSON-ready dict."""
    w = w or bench.Workload()
    bench.check_workload(w)
    if with_multi_feature and w.vocab < 3:
        raise UsageError(f"--multi-feature needs --vocab 3 or more (three tables share it); got "
                         f"{w.vocab}")
    bench.check_memory(w, max_memory, extra_bytes=yardstick_bytes(w))
    name, note, compile_sec, compiled = bench.warm_up(engine, w.optimizer)
    warm_sec = warm_start(engine, w.optimizer)
    used_threads = bench.set_threads(threads) if name == "numba" else 1

    def timed() -> tuple[bench.Anchor, float, tuple[int, float], float, float]:
        a = bench.anchor(w, engine)
        step_sec = bench.median_time(a.step, w.steps)
        checked = check_step(w.optimizer, a.table, a.slots, a.ids, a.grads, a.update)
        update_sec = bench.median_time(a.update, w.steps)
        naive = functools.partial(naive_step, w.optimizer, a.table, a.slots, a.ids, a.grads)
        return a, step_sec, checked, update_sec, bench.median_time(naive, w.steps)

    (a, step_sec, (unique_ids, step_check), update_sec, naive_sec), machine = (
        bench.measured(timed))
    state_bytes, setup_sec, slots = a.executor.plan.state_bytes(), a.setup_sec, len(a.slots)
    del a  # free the anchor table before the multi-feature tables
    out = bench.BenchResult(
        engine=name, workload=w, threads=used_threads, unique_ids=unique_ids,
        sec_per_step=step_sec, update_sec_per_step=update_sec, compile_sec=compile_sec,
        kernels_compiled=compiled, peak_rss_bytes=bench.peak_rss(), state_bytes=state_bytes,
        setup_sec=setup_sec, limit=bench.traffic_limit(unique_ids, w.ids, w.dim, slots),
        machine=machine, engine_note=note,
    ).as_json()
    out.update({
        "naive_sec_per_step": naive_sec,
        "step_check_max_abs_diff": step_check,
        "warm_start_sec": warm_sec,
        "naive_over_update": naive_sec / update_sec,
    })
    if with_multi_feature:
        out["multi_feature"] = multi_feature(w, engine)
    return out


# ------------------------------------------------------------------------------------------------
# The report


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms"


def text(r: dict[str, Any]) -> str:
    """The report of :func:`run`'s result: ``tpuemb bench``'s lines (``bench.report_lines``),
    then the yardsticks', one figure a line."""
    w = r["workload"]
    lines = [
        f"anchor benchmark: {w['optimizer']}, {w['vocab']:,} x {w['dim']} float32 table, "
        f"{w['ids']:,} ids per step (Zipf {w['zipf']}), {r['unique_ids']:,} unique; engine "
        f"{r['engine']}, {r['threads']} thread(s); median of {w['steps']} steps",
        *bench.report_lines(r),
        f"  naive NumPy update (np.unique + np.add.at)                 "
        f"{_ms(r['naive_sec_per_step'])}   {r['naive_over_update']:.1f}x the update",
        f"  a new process starts in {r['warm_start_sec']:.2f} s (importing tpuemb and one tiny "
        "step, kernels in the cache)",
    ]
    multi = r.get("multi_feature")
    if multi:
        lines.append(
            f"  multi-feature step (3 tables, 8 features, mean)  "
            f"{_ms(multi['multi_feature_sec_per_step'])}   "
            f"{multi['ratio']:.2f}x the same {int(multi['ids']):,} ids as one feature "
            f"({_ms(multi['same_ids_one_feature_sec_per_step']).strip()})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = bench.Workload()
    parser.add_argument("--vocab", type=int, default=defaults.vocab)
    parser.add_argument("--dim", type=int, default=defaults.dim)
    parser.add_argument("--ids", type=int, default=defaults.ids)
    parser.add_argument("--zipf", type=float, default=defaults.zipf)
    parser.add_argument("--optimizer", default=defaults.optimizer, choices=tuple(bench.OPTIMIZERS))
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--engine", default="numba", choices=("numba", "numpy"))
    parser.add_argument("--threads", type=int)
    parser.add_argument("--multi-feature", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    w = bench.Workload(vocab=args.vocab, dim=args.dim, ids=args.ids, zipf=args.zipf,
                       optimizer=args.optimizer, steps=args.steps, seed=args.seed)
    try:
        result = run(w, engine=args.engine, threads=args.threads,
                     with_multi_feature=args.multi_feature)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else text(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
