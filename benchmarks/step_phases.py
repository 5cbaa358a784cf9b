"""Where the anchor step's time goes: each phase of ``Executor.step`` timed on its own.

On the anchor workload (``tpuemb_cfg.run.bench``), with the executor's own functions on the
same arrays, median of ``--steps`` calls each (after one untimed call); the whole step first
and last (its spread says how steady the machine was). The phases:

- ``check``: ``Executor.check_step`` (the batch, learning rates and gradients checked);
- ``inputs``: the table's occurrences (``fused.table_input``);
- ``live``: the pending default rows looked for (``numba_step.missing_rows``);
- ``dedup``: ``numba_step.deduplicate``;
- ``forward`` (one thread, as in the overlapped step, and on every thread);
- ``backprop``: back-propagation and the duplicate sum with the input check on the sums;
- ``overlap``: the forward pass alongside de-duplication and back-propagation
  (``fused.forward_backprop``, what the step runs);
- ``update``: the fused update with the update norm (``fused.update_table``);
- ``report``: the per-step report (``records.table_report``).

    python benchmarks/step_phases.py [--steps S] [--threads T] [--json]

The update phases run on the live table, so every call updates it again (as the steps do).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout: the package next to this folder
    sys.path.insert(0, str(ROOT))

from tpuemb_cfg.executor.fused import forward_backprop, table_input, update_table  # noqa: E402
from tpuemb_cfg.executor.optimizers import UpdateContext  # noqa: E402
from tpuemb_cfg.executor.records import Partial, table_report  # noqa: E402
from tpuemb_cfg.run import bench  # noqa: E402


def phases(steps: int, threads: int | None) -> dict[str, Any]:
    """The median seconds of each phase (module docstring), with the load before and after."""
    load_before = os.getloadavg()[0]
    bench.warm_up("numba", "adagrad")
    used = bench.set_threads(threads)
    w = bench.Workload(steps=steps)
    a = bench.anchor(w, "numba")
    ex = a.executor
    fused = ex._fused
    live = ex._live
    table = ex.plan.tables[0]
    batch = [{"ids": a.ids, "grad": a.grads}]
    timed: dict[str, float] = {}

    def time(name: str, fn: Any) -> None:
        timed[name] = bench.median_time(fn, steps)

    time("step", a.step)
    checked = ex.check_step(batch, None, ex.step_index)
    grads = checked.grads
    assert grads is not None
    time("check", lambda: ex.check_step(batch, None, ex.step_index))
    given = table_input(ex.plan, ex.engine, table, checked.features, ex.step_index, None, {})
    time("inputs", lambda: table_input(ex.plan, ex.engine, table, checked.features,
                                       ex.step_index, None, {}))
    time("live", lambda: live.live_params(table.name, given.ids, fused.missing_rows))
    unique, inverse = fused.deduplicate(given.ids)
    time("dedup", lambda: fused.deduplicate(given.ids))
    params = live.live_params(table.name, given.ids, fused.missing_rows)
    feature = given.feats[0]

    def forward() -> Any:
        return fused.lookup(params, feature.ids, None, given.gains_list[0], feature.row_splits)

    bench.set_threads(1)
    time("forward_1_thread", forward)
    bench.set_threads(used)
    time("forward_all_threads", forward)
    rec = ex._record(table, given, unique, inverse, (Partial(None, unique, inverse, None),), True)
    time("backprop", lambda: fused.backprop(grads[0], rec.sample, rec.gains, rec.inverse,
                                           unique.shape[0]))
    time("overlap", lambda: forward_backprop(
        fused, live, ex.plan.tables, [given], grads, {},
        lambda t, g, u, i: ex._record(t, g, u, i, (Partial(None, u, i, None),), True)))
    summed, _ = fused.backprop(grads[0], rec.sample, rec.gains, rec.inverse, unique.shape[0])
    lr = np.float32(bench.LEARNING_RATE)
    time("update", lambda: update_table(fused, live, table, rec, summed, lr,
                                        UpdateContext(ex.step_index, ())))
    time("report", lambda: table_report(ex.plan, ex.engine, table, rec, given.zero_bags))
    time("step_again", a.step)
    return {"threads": used, "load_before": load_before, "load_after": os.getloadavg()[0],
            "sec": timed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = phases(args.steps, args.threads)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"anchor step phases, {out['threads']} thread(s), median of {args.steps}; load "
          f"{out['load_before']:.2f} -> {out['load_after']:.2f}")
    for name, sec in out["sec"].items():
        print(f"  {name:<20} {sec * 1e3:8.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
