"""The whole ``tpuemb simulate`` run, not only the step: where a synthetic run's time goes.

Runs ``tpuemb simulate CONFIG --steps N --out-dir TMP -q --tables T`` (default CONFIG: the
1/16-scale DLRM on Criteo, ``examples/models/dlrm_criteo_1_16.pbtxt``: 26 tables, dimension 128,
Adagrad) in a fresh Python process, with the executor's step - ``Executor.step``, or the
``recv_activations`` + ``send_gradients`` pair a synthetic run calls - timed from inside, and
reports:

- ``wall_sec``: the process's wall time, from its start to its exit (interpreter, imports,
  kernels from the cache, configuration, state, every step, the synthetic data, writing
  ``tables.npz`` and ``summary.json``);
- ``step_sec``: the time inside the executor's steps, and ``step_share`` = step / wall;
- ``data_sec``: the synthetic data pass (drawing each step's batch, the loss and its gradients:
  ``SyntheticData.next_batch`` and ``loss_gradients``), and ``other_share`` = the wall time
  outside the steps and the data pass (start-up, configuration, writing the outputs);
- ``init_sec``: the ``Executor`` construction (the initial state: lazy, rows computed when
  first touched or written out);
- and, apart from the run, ``eager_init``: ``initial.initial_state`` of the whole configuration
  computed up front (every row of every table and slot), in seconds and GB/s.

``--runs N`` repeats it; each figure is reported as a range with the load average before and
after each run (the machine's other work). ``--out FILE`` writes the JSON
(``benchmarks/results/``).

    python benchmarks/bench_run.py --steps 20 --runs 3 --out benchmarks/results/run_dlrm_1_16.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "models" / "dlrm_criteo_1_16.pbtxt"

# The child: tpuemb's CLI in this process, the executor's step methods wrapped by timers.
_CHILD = """
import json, sys, time
from tpuemb_cfg.executor import core

spent = {"step": 0.0, "init": 0.0, "data": 0.0}

def timed(name, method):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - start
    return wrapper

for method in ("step", "recv_activations", "send_gradients"):
    setattr(core.Executor, method, timed("step", getattr(core.Executor, method)))
core.Executor.__init__ = timed("init", core.Executor.__init__)
from tpuemb_cfg.sim import synthetic
for method in ("next_batch", "loss_gradients"):
    setattr(synthetic.SyntheticData, method,
            timed("data", getattr(synthetic.SyntheticData, method)))
from tpuemb_cfg.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    print("TIMES " + json.dumps(spent), file=sys.stderr)
"""


def one_run(config: Path, steps: int, engine: str, tables: str = "touched") -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as out_dir:
        command = [sys.executable, "-c", _CHILD, "simulate", str(config), "--steps", str(steps),
                   "--out-dir", out_dir, "-q", "--engine", engine, "--tables", tables]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        written = sum(f.stat().st_size for f in Path(out_dir).iterdir())
    if done.returncode:
        raise SystemExit(f"the run failed:\n{done.stderr[-2000:]}")
    line = [x for x in done.stderr.splitlines() if x.startswith("TIMES ")][-1]
    spent = json.loads(line[len("TIMES "):])
    return {
        "wall_sec": wall,
        "step_sec": spent["step"],
        "init_sec": spent["init"],
        "step_share": spent["step"] / wall,
        "data_sec": spent["data"],
        "other_share": 1.0 - (spent["step"] + spent["data"]) / wall,
        "bytes_written": written,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def eager_init(config: Path) -> dict[str, float]:
    """Every table and slot computed up front, in a fresh process (kernels from the cache)."""
    code = (
        "import json, sys, time\n"
        "from tpuemb_cfg.session import prepare\n"
        "from tpuemb_cfg.executor import initial\n"
        "plan = prepare(sys.argv[1]).plan\n"
        "initial.initial_state(plan, seed=1)\n"  # load the kernels, first touch of the memory
        "start = time.perf_counter()\n"
        "arrays = initial.initial_state(plan, seed=0)\n"
        "print(json.dumps({'sec': time.perf_counter() - start,\n"
        "                  'bytes': sum(a.nbytes for a in arrays.values())}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True,
                          text=True, check=True)
    result = json.loads(done.stdout)
    return {"sec": result["sec"], "bytes": result["bytes"],
            "gb_per_sec": result["bytes"] / 1e9 / result["sec"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(MODEL))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--engine", default="numba", choices=("numba", "numpy"))
    parser.add_argument("--tables", default="touched", choices=("all", "touched", "none"),
                        help="what the run writes (tpuemb simulate --tables)")
    parser.add_argument("--out", help="write the result as JSON to this file")
    args = parser.parse_args()
    config = Path(args.config)
    runs = [one_run(config, args.steps, args.engine, args.tables) for _ in range(args.runs)]
    inits = [eager_init(config) for _ in range(args.runs)]
    out = {
        "config": str(config.relative_to(ROOT) if config.is_relative_to(ROOT) else config),
        "steps": args.steps,
        "engine": args.engine,
        "tables": args.tables,
        "nproc": os.cpu_count(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "runs": runs,
        "eager_init": inits,
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    for key in ("wall_sec", "step_sec", "data_sec", "init_sec", "step_share", "other_share",
                "bytes_written", "load_before", "load_after"):
        values = [r[key] for r in runs]
        print(f"{key:12s} {min(values):8.3f} - {max(values):8.3f}")
    rates = [i["gb_per_sec"] for i in inits]
    print(f"eager init of {inits[0]['bytes'] / 1e9:.2f} GB: "
          f"{min(i['sec'] for i in inits):.2f} - {max(i['sec'] for i in inits):.2f} s "
          f"({min(rates):.2f} - {max(rates):.2f} GB/s)")


if __name__ == "__main__":
    main()
