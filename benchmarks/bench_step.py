"""The whole training step a user runs: tpuemb against TensorFlow's and PyTorch's, side by side.

The anchor workload: a 1,000,000 x 64 float32 table, 65,536 ids per step drawn Zipf(1.05)
through a seeded permutation of the vocabulary (about 21,700 unique), one id per bag, ``sum``
combiner, a random [65,536, 64] activation gradient. Every contender runs the whole step and
returns the activations:

- tpuemb: ``Executor(config).step(batch)`` with the default engine, through ``anchor.run``
  (``benchmarks/anchor.py``: ``tpuemb bench``'s figures, and in the same process the naive NumPy
  update and the memory-traffic limits);
- TensorFlow (if importable): one ``tf.function`` as a user writes it - ``tf.nn.embedding_lookup``
  under a ``GradientTape``, ``tape.gradient`` (an ``IndexedSlices``), ``tf.unique`` +
  ``tf.math.unsorted_segment_sum``, then the optimizer's sparse kernel
  (``ResourceSparseApplyAdagradV2``, ``ResourceSparseApplyProximalGradientDescent`` for SGD,
  ``ResourceSparseApplyMomentum``, ``ResourceSparseApplyFtrl``, ``ResourceSparseApplyRMSProp``,
  ``ResourceSparseApplyProximalAdagrad``; TensorFlow has no sparse Adam kernel, so Adam is
  ``tf.gather`` + the arithmetic + ``ResourceScatterUpdate``, lazy like tpuemb's);
- PyTorch (if importable): ``nn.Embedding(sparse=True)``, ``backward`` of the activations with
  the gradient, then ``torch.optim`` where it takes sparse gradients (SGD, Adagrad, SparseAdam)
  and the coalesced gradient's rows updated with ``index_select``/``index_copy_`` otherwise.

TensorFlow and PyTorch are never dependencies: run the script with an interpreter that has
them, or name one with ``--tf-python`` / ``--torch-python`` (each needs tpuemb installed, for
the workload): that interpreter times its framework in a subprocess of this run, right after
tpuemb, on the same arrays. ``--runs N`` repeats everything N times and reports each figure as
a range; the machine's load average is recorded before and after every run. ``--out FILE``
writes the whole result as JSON (``benchmarks/results/``); docs/tour.md and
``docs/performance.md`` show those files.

    python benchmarks/bench_step.py --optimizer all --runs 3 \\
        --tf-python /tmp/tfvenv/bin/python --torch-python /tmp/torchvenv/bin/python \\
        --out benchmarks/results/step_2core.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anchor  # noqa: E402  (benchmarks/anchor.py, next to this script)

from tpuemb_cfg.run import bench  # noqa: E402

LR = bench.LEARNING_RATE
OPTIMIZERS = tuple(bench.OPTIMIZERS)
FRAMEWORKS = ("tensorflow", "torch")
_INITIAL = {"adagrad": [0.1], "momentum": [0.0], "adam": [0.0, 0.0], "ftrl": [0.1, 0.0],
            "rms_prop": [0.0, 0.0], "proximal_adagrad": [0.1]}


def workload_arrays(w: bench.Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ids, the activation gradient and an initial table (1/sqrt(D) normal), seeded."""
    ids = bench.zipf_ids(w.vocab, w.ids, w.zipf, w.seed)
    grads = np.random.default_rng([w.seed, 0x6AD]).standard_normal((w.ids, w.dim), np.float32)
    grads *= np.float32(0.01)
    table = np.random.default_rng(1).standard_normal((w.vocab, w.dim), np.float32)
    table *= np.float32(1 / np.sqrt(w.dim))
    return ids, grads, table


# ------------------------------------------------------------------------------------------------
# TensorFlow


def time_tensorflow(w: bench.Workload, optimizer: str) -> float:
    import tensorflow as tf

    ids, grads, table = workload_arrays(w)
    raw = tf.raw_ops
    var = tf.Variable(table)
    del table
    shape = (w.vocab, w.dim)
    slots = [tf.Variable(tf.fill(shape, np.float32(v))) for v in _INITIAL.get(optimizer, [])]
    ids_t = tf.constant(ids)
    d_activations = tf.constant(grads)
    lr = tf.constant(np.float32(LR))
    zero = np.float32(0.0)
    small = np.float32(0.001)

    def apply(unique: Any, g: Any) -> None:
        if optimizer == "adagrad":
            raw.ResourceSparseApplyAdagradV2(var=var.handle, accum=slots[0].handle, lr=lr,
                                             epsilon=zero, grad=g, indices=unique)
        elif optimizer == "sgd":
            raw.ResourceSparseApplyProximalGradientDescent(var=var.handle, alpha=lr, l1=zero,
                                                           l2=zero, grad=g, indices=unique)
        elif optimizer == "momentum":
            raw.ResourceSparseApplyMomentum(var=var.handle, accum=slots[0].handle, lr=lr, grad=g,
                                            indices=unique, momentum=np.float32(0.9))
        elif optimizer == "ftrl":
            raw.ResourceSparseApplyFtrl(var=var.handle, accum=slots[0].handle,
                                        linear=slots[1].handle, grad=g, indices=unique, lr=lr,
                                        l1=small, l2=small, lr_power=np.float32(-0.5))
        elif optimizer == "rms_prop":
            raw.ResourceSparseApplyRMSProp(var=var.handle, ms=slots[0].handle,
                                           mom=slots[1].handle, lr=lr, rho=np.float32(0.9),
                                           momentum=np.float32(0.9), epsilon=np.float32(1e-7),
                                           grad=g, indices=unique)
        elif optimizer == "proximal_adagrad":
            raw.ResourceSparseApplyProximalAdagrad(var=var.handle, accum=slots[0].handle, lr=lr,
                                                   l1=small, l2=small, grad=g, indices=unique)
        else:  # adam: no sparse kernel in TensorFlow; lazy, as tpuemb's
            m = 0.9 * tf.gather(slots[0], unique) + 0.1 * g
            v = 0.999 * tf.gather(slots[1], unique) + 0.001 * g * g
            new = tf.gather(var, unique) - lr * m / (tf.sqrt(v) + 1e-8)
            raw.ResourceScatterUpdate(resource=slots[0].handle, indices=unique, updates=m)
            raw.ResourceScatterUpdate(resource=slots[1].handle, indices=unique, updates=v)
            raw.ResourceScatterUpdate(resource=var.handle, indices=unique, updates=new)

    @tf.function
    def step() -> Any:
        with tf.GradientTape() as tape:
            activations = tf.nn.embedding_lookup(var, ids_t)
            loss = tf.reduce_sum(activations * d_activations)  # d loss / d activations = dA
        grad = tape.gradient(loss, var)  # IndexedSlices: one row per id
        unique, inverse = tf.unique(grad.indices)
        g = tf.math.unsorted_segment_sum(grad.values, inverse, tf.shape(unique)[0])
        apply(unique, g)
        return activations

    return bench.median_time(step, w.steps)


# ------------------------------------------------------------------------------------------------
# PyTorch


def time_torch(w: bench.Workload, optimizer: str) -> float:
    import torch

    ids_np, grads_np, table_np = workload_arrays(w)
    ids = torch.from_numpy(ids_np)
    d_activations = torch.from_numpy(grads_np)
    embedding = torch.nn.Embedding(w.vocab, w.dim, sparse=True)
    with torch.no_grad():
        embedding.weight.copy_(torch.from_numpy(table_np))
    del table_np
    weight = embedding.weight
    builtin = {
        "sgd": lambda: torch.optim.SGD([weight], lr=LR),
        "adagrad": lambda: torch.optim.Adagrad([weight], lr=LR, initial_accumulator_value=0.1,
                                               eps=0.0),
        "adam": lambda: torch.optim.SparseAdam([weight], lr=LR, betas=(0.9, 0.999), eps=1e-8),
    }
    optim = builtin[optimizer]() if optimizer in builtin else None
    slots = [torch.full((w.vocab, w.dim), v) for v in _INITIAL.get(optimizer, [])]

    def manual(grad: Any) -> None:
        """The optimizers torch.optim cannot run on sparse gradients, on the coalesced rows."""
        coalesced = grad.coalesce()
        unique, g = coalesced.indices()[0], coalesced.values()
        table = weight.data
        if optimizer == "momentum":
            m = slots[0].index_select(0, unique).mul_(0.9).add_(g)
            slots[0].index_copy_(0, unique, m)
            table.index_add_(0, unique, m, alpha=-LR)
        elif optimizer == "rms_prop":
            ms = slots[0].index_select(0, unique).mul_(0.9).addcmul_(g, g, value=0.1)
            mom = slots[1].index_select(0, unique).mul_(0.9).add_(g / (ms + 1e-7).sqrt(),
                                                                   alpha=LR)
            slots[0].index_copy_(0, unique, ms)
            slots[1].index_copy_(0, unique, mom)
            table.index_add_(0, unique, mom, alpha=-1.0)
        elif optimizer == "proximal_adagrad":
            acc = slots[0].index_select(0, unique).addcmul_(g, g)
            eta = LR / acc.sqrt()
            p = table.index_select(0, unique) - eta * g
            new = p.sign() * (p.abs() - eta * 0.001).clamp_min(0) / (1 + eta * 0.001)
            slots[0].index_copy_(0, unique, acc)
            table.index_copy_(0, unique, new)
        else:  # ftrl, l1 = l2 = 0.001, lr_power = -0.5, beta = 0
            acc_old = slots[0].index_select(0, unique)
            acc = acc_old + g * g
            rows = table.index_select(0, unique)
            lin = slots[1].index_select(0, unique) + g - (acc.sqrt() - acc_old.sqrt()) * rows / LR
            new = (lin.clamp(-0.001, 0.001) - lin) / (acc.sqrt() / LR + 0.002)
            slots[0].index_copy_(0, unique, acc)
            slots[1].index_copy_(0, unique, lin)
            table.index_copy_(0, unique, new)

    def step() -> Any:
        weight.grad = None
        activations = embedding(ids)
        activations.backward(d_activations)
        if optim is not None:
            optim.step()
        else:
            with torch.no_grad():
                manual(weight.grad)
        return activations.detach()

    return bench.median_time(step, w.steps)


TIMERS = {"tensorflow": time_tensorflow, "torch": time_torch}


# ------------------------------------------------------------------------------------------------
# One run


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
            "numpy": np.__version__, "platform": platform.platform()}


def framework_time(framework: str, w: bench.Workload, optimizer: str,
                   python: str | None) -> tuple[float | None, str]:
    """Seconds per whole step of ``framework`` (None: not installed) and its version."""
    if python is None:
        try:
            module = __import__(framework)
        except ImportError:
            return None, "not installed"
        return TIMERS[framework](w, optimizer), str(module.__version__)
    command = [python, __file__, "--only", framework, "--optimizer", optimizer,
               "--vocab", str(w.vocab), "--dim", str(w.dim), "--ids", str(w.ids),
               "--steps", str(w.steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        return None, f"failed: {done.stderr.strip().splitlines()[-1:]}"
    answer = json.loads(done.stdout)
    return answer["sec_per_step"], answer["version"]


def one_run(w: bench.Workload, engine: str, pythons: dict[str, str | None],
            multi_feature: bool) -> dict[str, Any]:
    load_before = os.getloadavg()
    ours = anchor.run(w, engine=engine, with_multi_feature=multi_feature)
    row: dict[str, Any] = {
        "tpuemb_step": ours["sec_per_step"],
        "tpuemb_update": ours["update_sec_per_step"],
        "naive_numpy_update": ours["naive_sec_per_step"],
        "step_limit": ours["limit_sec_per_step"],
        "update_limit": ours["update_limit_sec_per_step"],
        "copy_bandwidth_bytes_per_sec": ours["copy_bandwidth_bytes_per_sec"],
        "peak_rss_over_state": ours["peak_rss_over_state"],
        "peak_rss_bytes": ours["peak_rss_bytes"],
        "state_bytes": ours["state_bytes"],
        "compile_sec": ours["compile_sec"],
        "warm_start_sec": ours["warm_start_sec"],
        "unique_ids": ours["unique_ids"],
        "engine": ours["engine"],
        "threads": ours["threads"],
    }
    if multi_feature:
        row["multi_feature_ratio"] = ours["multi_feature"]["ratio"]
        row["multi_feature_step"] = ours["multi_feature"]["multi_feature_sec_per_step"]
    for framework in FRAMEWORKS:
        seconds, version = framework_time(framework, w, w.optimizer, pythons[framework])
        row[framework] = seconds
        row[f"{framework}_version"] = version
        if seconds is not None:
            row[f"{framework}_over_tpuemb_step"] = seconds / row["tpuemb_step"]
    row["tpuemb_step_over_limit"] = row["tpuemb_step"] / row["step_limit"]
    # The 1-minute load average before and after: other processes' share of the cores.
    row["load_before"], row["load_after"] = load_before[0], os.getloadavg()[0]
    return row


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure as [min, max] over the runs."""
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        values = [r[key] for r in runs]
        if all(isinstance(v, float | int) and not isinstance(v, bool) for v in values):
            out[key] = [min(values), max(values)]
        elif isinstance(value, str):
            out[key] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimizer", default="adagrad", choices=(*OPTIMIZERS, "all"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=1, help="repeat everything; report ranges")
    parser.add_argument("--vocab", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--ids", type=int, default=65_536)
    parser.add_argument("--engine", default="numba", choices=("numba", "numpy"))
    parser.add_argument("--multi-feature", action="store_true")
    parser.add_argument("--tf-python", help="an interpreter with TensorFlow and tpuemb")
    parser.add_argument("--torch-python", help="an interpreter with PyTorch and tpuemb")
    parser.add_argument("--only", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help="write the result as JSON to this file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    names = OPTIMIZERS if args.optimizer == "all" else (args.optimizer,)
    if args.only:  # a subprocess of a run: one framework, one optimizer
        w = bench.Workload(vocab=args.vocab, dim=args.dim, ids=args.ids,
                           optimizer=names[0], steps=args.steps)
        module = __import__(args.only)
        print(json.dumps({"sec_per_step": TIMERS[args.only](w, names[0]),
                          "version": str(module.__version__)}))
        return
    pythons = {"tensorflow": args.tf_python, "torch": args.torch_python}
    out: dict[str, Any] = {
        "machine": machine(),
        "workload": {"vocab": args.vocab, "dim": args.dim, "ids": args.ids,
                     "steps": args.steps, "runs": args.runs},
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "results": {},
    }
    for name in names:
        w = bench.Workload(vocab=args.vocab, dim=args.dim, ids=args.ids, optimizer=name,
                           steps=args.steps)
        runs = [one_run(w, args.engine, pythons, args.multi_feature) for _ in range(args.runs)]
        out["results"][name] = {"runs": runs, "range": summarize(runs)}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(text(out))


def _span(pair: list[float], scale: float = 1e3, unit: str = " ms") -> str:
    low, high = pair
    return (f"{low * scale:.2f}{unit}" if abs(high - low) < 0.005 / scale
            else f"{low * scale:.2f}-{high * scale:.2f}{unit}")


def text(out: dict[str, Any]) -> str:
    m = out["machine"]
    lines = [f"machine: {m['nproc']} cores, {m['cpu']}; Python {m['python']}, NumPy {m['numpy']}"]
    for name, result in out["results"].items():
        r = result["range"]
        lines.append(f"{name}: {r['unique_ids'][0]:,} unique ids of {out['workload']['ids']:,}; "
                     f"engine {r['engine']}, {r['threads'][0]} threads; "
                     f"{out['workload']['runs']} run(s), load average "
                     f"{_span(r['load_before'], 1, '')} before, {_span(r['load_after'], 1, '')} "
                     "after")
        for label, key in (("tpuemb Executor.step", "tpuemb_step"),
                           ("TensorFlow whole step", "tensorflow"),
                           ("PyTorch whole step", "torch"),
                           ("tpuemb update alone", "tpuemb_update"),
                           ("naive NumPy update", "naive_numpy_update"),
                           ("memory-traffic limit", "step_limit")):
            if key not in r:
                shown = f"skipped ({r.get(f'{key}_version', 'not installed')})"
            else:
                shown = _span(r[key])
                if key in FRAMEWORKS:
                    shown += f"  ({_span(r[f'{key}_over_tpuemb_step'], 1, 'x')} tpuemb's step)"
                if key == "tpuemb_step":
                    shown += f"  ({_span(r['tpuemb_step_over_limit'], 1, 'x')} its limit)"
                if key == "step_limit":
                    shown += (f"  at {_span(r['copy_bandwidth_bytes_per_sec'], 1e-9, ' GB/s')}"
                              " copy bandwidth")
            lines.append(f"  {label:24s} {shown}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
