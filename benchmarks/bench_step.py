"""One sparse optimizer step on the anchor workload: tpuemb against TensorFlow and PyTorch.

The workload (issue 8): a 1,000,000 x 64 float32 table, 65,536 ids per step drawn Zipf(1.05)
through a seeded permutation of the vocabulary (about 21,800 unique), a random [65,536, 64]
gradient row per id. Every contender does the same work per step: de-duplicate the ids, sum the
gradient rows of equal ids, update the touched rows of the table and of its slots.

- tpuemb: ``tpuemb_cfg.bench.run`` (the executor's update step, its whole step with the forward
  pass, the naive NumPy step and the memory-traffic limit, measured in one run);
- TensorFlow (if importable): ``tf.unique`` + ``tf.math.unsorted_segment_sum`` + the matching
  sparse kernel (``ResourceSparseApplyAdagradV2``, ``ResourceSparseApplyProximalGradientDescent``,
  ``ResourceSparseApplyMomentum``, ``ResourceSparseApplyFtrl``; TensorFlow has no sparse Adam
  kernel, so Adam is ``tf.gather`` + the Adam arithmetic + ``ResourceScatterUpdate``), inside
  one ``tf.function``;
- PyTorch (if importable): ``torch.unique`` + ``index_add_`` + ``index_select``/``index_copy_``
  row updates (what ``torch.optim``'s sparse paths do).

A framework that is not installed is skipped with a note. Run from the repository root:

    python benchmarks/bench_step.py [--optimizer adagrad|sgd|momentum|adam|ftrl|all]
                                    [--steps 20] [--vocab 1000000] [--dim 64] [--ids 65536]
                                    [--json]

Each figure is the median of ``--steps`` timed steps after one warm-up step; ratios are
computed from figures of this one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tpuemb_cfg import bench  # noqa: E402

LR = bench.LEARNING_RATE
OPTIMIZERS = ("adagrad", "sgd", "momentum", "adam", "ftrl")


def median_time(fn: Callable[[], Any], steps: int) -> float:
    fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def workload_arrays(w: bench.Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ids = bench.zipf_ids(w.vocab, w.ids, w.zipf, w.seed)
    grads = np.random.default_rng([w.seed, 0x6AD]).standard_normal((w.ids, w.dim), np.float32)
    grads *= np.float32(0.01)
    table = np.random.default_rng(1).standard_normal((w.vocab, w.dim), np.float32)
    table *= np.float32(1 / np.sqrt(w.dim))
    return ids, grads, table


# ------------------------------------------------------------------------------------------------
# TensorFlow


def time_tensorflow(w: bench.Workload, optimizer: str) -> float | None:
    try:
        import tensorflow as tf
    except ImportError:
        return None
    ids, grads, table = workload_arrays(w)
    raw = tf.raw_ops
    var = tf.Variable(table)
    del table
    shape = (w.vocab, w.dim)
    slot_init = {"adagrad": [0.1], "momentum": [0.0], "adam": [0.0, 0.0], "ftrl": [0.1, 0.0]}
    slots = [tf.Variable(tf.fill(shape, np.float32(v))) for v in slot_init.get(optimizer, [])]
    ids_t = tf.constant(ids)
    grads_t = tf.constant(grads)
    lr = tf.constant(np.float32(LR))

    @tf.function
    def step() -> Any:
        unique, inverse = tf.unique(ids_t)
        g = tf.math.unsorted_segment_sum(grads_t, inverse, tf.shape(unique)[0])
        if optimizer == "adagrad":
            raw.ResourceSparseApplyAdagradV2(
                var=var.handle, accum=slots[0].handle, lr=lr, epsilon=np.float32(0), grad=g,
                indices=unique, use_locking=False, update_slots=True,
            )
        elif optimizer == "sgd":
            raw.ResourceSparseApplyProximalGradientDescent(
                var=var.handle, alpha=lr, l1=np.float32(0), l2=np.float32(0), grad=g,
                indices=unique,
            )
        elif optimizer == "momentum":
            raw.ResourceSparseApplyMomentum(
                var=var.handle, accum=slots[0].handle, lr=lr, grad=g, indices=unique,
                momentum=np.float32(0.9),
            )
        elif optimizer == "ftrl":
            raw.ResourceSparseApplyFtrl(
                var=var.handle, accum=slots[0].handle, linear=slots[1].handle, grad=g,
                indices=unique, lr=lr, l1=np.float32(0.001), l2=np.float32(0.001),
                lr_power=np.float32(-0.5),
            )
        else:  # adam: no sparse kernel in TensorFlow
            m = 0.9 * tf.gather(slots[0], unique) + 0.1 * g
            v = 0.999 * tf.gather(slots[1], unique) + 0.001 * g * g
            w_new = tf.gather(var, unique) - lr * m / (tf.sqrt(v) + 1e-8)
            raw.ResourceScatterUpdate(resource=slots[0].handle, indices=unique, updates=m)
            raw.ResourceScatterUpdate(resource=slots[1].handle, indices=unique, updates=v)
            raw.ResourceScatterUpdate(resource=var.handle, indices=unique, updates=w_new)
        return tf.shape(unique)[0]

    return median_time(lambda: int(step()), w.steps)


# ------------------------------------------------------------------------------------------------
# PyTorch


def time_torch(w: bench.Workload, optimizer: str) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    ids_np, grads_np, table_np = workload_arrays(w)
    ids = torch.from_numpy(ids_np)
    grads = torch.from_numpy(grads_np)
    table = torch.from_numpy(table_np)
    shape = (w.vocab, w.dim)
    slot_init = {"adagrad": [0.1], "momentum": [0.0], "adam": [0.0, 0.0], "ftrl": [0.1, 0.0]}
    slots = [torch.full(shape, v, dtype=torch.float32) for v in slot_init.get(optimizer, [])]

    def step() -> None:
        with torch.no_grad():
            unique, inverse = torch.unique(ids, return_inverse=True)
            g = torch.zeros((unique.shape[0], w.dim)).index_add_(0, inverse, grads)
            if optimizer == "sgd":
                table.index_add_(0, unique, g, alpha=-LR)
            elif optimizer == "adagrad":
                acc = slots[0].index_select(0, unique).addcmul_(g, g)
                slots[0].index_copy_(0, unique, acc)
                table.index_add_(0, unique, g.div_(acc.sqrt_()), alpha=-LR)
            elif optimizer == "momentum":
                m = slots[0].index_select(0, unique).mul_(0.9).add_(g)
                slots[0].index_copy_(0, unique, m)
                table.index_add_(0, unique, m, alpha=-LR)
            elif optimizer == "adam":
                m = slots[0].index_select(0, unique).mul_(0.9).add_(g, alpha=0.1)
                v = slots[1].index_select(0, unique).mul_(0.999).addcmul_(g, g, value=0.001)
                slots[0].index_copy_(0, unique, m)
                slots[1].index_copy_(0, unique, v)
                table.index_add_(0, unique, m / (v.sqrt() + 1e-8), alpha=-LR)
            else:  # ftrl, l1 = l2 = 0.001, lr_power = -0.5, beta = 0
                acc_old = slots[0].index_select(0, unique)
                acc = acc_old + g * g
                w_rows = table.index_select(0, unique)
                dp = acc.sqrt() - acc_old.sqrt()
                lin = slots[1].index_select(0, unique) + g - dp * w_rows / LR
                new = (lin.clamp(-0.001, 0.001) - lin) / (acc.sqrt() / LR + 0.002)
                slots[0].index_copy_(0, unique, acc)
                slots[1].index_copy_(0, unique, lin)
                table.index_copy_(0, unique, new)

    return median_time(step, w.steps)


# ------------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "numpy": np.__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimizer", default="adagrad", choices=(*OPTIMIZERS, "all"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--ids", type=int, default=65_536)
    parser.add_argument("--engine", default="numba", choices=("numba", "numpy"))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    names = OPTIMIZERS if args.optimizer == "all" else (args.optimizer,)
    out: dict[str, Any] = {"machine": machine(), "results": {}}
    for name in names:
        w = bench.Workload(vocab=args.vocab, dim=args.dim, ids=args.ids, optimizer=name,
                           steps=args.steps)
        ours = bench.run(w, engine=args.engine).as_json()
        row: dict[str, Any] = {
            "tpuemb_update": ours["sec_per_step"],
            "tpuemb_executor_step": ours["executor_step_sec_per_step"],
            "naive_numpy": ours["naive_sec_per_step"],
            "memory_limit": ours["limit_sec_per_step"],
            "unique_ids": ours["unique_ids"],
            "engine": ours["engine"],
            "threads": ours["threads"],
        }
        for framework, timer in (("tensorflow", time_tensorflow), ("torch", time_torch)):
            seconds = timer(w, name)
            row[framework] = seconds
            if seconds is not None:
                row[f"{framework}_over_tpuemb_update"] = seconds / row["tpuemb_update"]
        out["results"][name] = row
    if args.json:
        print(json.dumps(out, indent=2))
        return
    m = out["machine"]
    print(f"machine: {m['nproc']} cores, {m['cpu']}; Python {m['python']}, NumPy {m['numpy']}")
    for name, row in out["results"].items():
        print(f"{name}: {row['unique_ids']:,} unique ids of {args.ids:,}; engine "
              f"{row['engine']} ({row['threads']} threads)")
        for label, key in (("tpuemb update step", "tpuemb_update"),
                           ("tpuemb executor step", "tpuemb_executor_step"),
                           ("naive NumPy", "naive_numpy"), ("TensorFlow", "tensorflow"),
                           ("PyTorch", "torch"), ("memory-traffic limit", "memory_limit")):
            value = row[key]
            shown = "not installed, skipped" if value is None else f"{value * 1e3:8.2f} ms"
            ratio = ""
            if value is not None and key not in ("tpuemb_update", "memory_limit"):
                ratio = f"  ({value / row['tpuemb_update']:.2f}x tpuemb's update step)"
            print(f"  {label:22s} {shown}{ratio}")


if __name__ == "__main__":
    main()
