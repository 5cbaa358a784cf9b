"""The model configurations of ``examples/models``, scaled down and simulated: steps per second
and peak memory against ``Plan.memory_estimate``.

    python benchmarks/bench_models.py                       # both models, default scales
    python benchmarks/bench_models.py --model dlrm_criteo --vocab-scale 16 --batch-scale 4
    python benchmarks/bench_models.py --engine numba --steps 20 --json

A scale divides every vocabulary (``--vocab-scale``) and every replica's batch
(``--batch-scale``); the topology, tables, features, bag sizes, combiners and optimizers stay the
spec's. Each run is its own process (``tpuemb simulate`` would do the same work): it compiles
the spec, prepares it (``tpuemb_cfg.session``), runs ``--steps`` synthetic steps after one
warm-up step, and reports its peak resident memory (``ru_maxrss``). The process's own footprint
(interpreter, libraries, numba's compiled kernels) is measured the same way on a one-row
configuration and reported beside it: the estimate counts tables and working arrays only, so it
is compared with the peak minus that footprint. Results of the project's machine are in
``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {
    # model -> (vocabulary scale, batch scale): about 1-2 GB of tables and slots each
    "dlrm_criteo": (64, 2),
    "dcnv2_mlperf": (256, 8),
}


def scaled_compiled(model: str, vocab_scale: int, batch_scale: int) -> Any:
    """The spec of ``examples/models/MODEL.py`` compiled with smaller vocabularies and batches."""
    from tpuemb_cfg.embedding.spec import load_spec

    spec = load_spec(ROOT / "examples" / "models" / f"{model}.py")
    seen: set[int] = set()
    for feature in _leaves(spec.feature_config):
        table = feature.table
        if id(table) not in seen:
            seen.add(id(table))
            table.vocabulary_size = max(1, math.ceil(table.vocabulary_size / vocab_scale))
    shapes = spec.build_arguments.get("per_replica_input_shapes")
    if isinstance(shapes, dict):
        spec.build_arguments["per_replica_input_shapes"] = {
            name: [max(1, shape[0] // batch_scale), *shape[1:]] for name, shape in shapes.items()
        }
    return spec.compile()


def _leaves(structure: Any) -> list[Any]:
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in _leaves(structure[key])]
    if isinstance(structure, list | tuple):
        return [leaf for item in structure for leaf in _leaves(item)]
    return [structure]


def worker(arguments: dict[str, Any]) -> dict[str, Any]:
    """One measured run in this process (the child side)."""
    from tpuemb_cfg.executor.memory import memory_estimate
    from tpuemb_cfg.formats.io import load
    from tpuemb_cfg.session import prepare
    from tpuemb_cfg.simulate import SyntheticRun

    if arguments["model"] == "tiny":
        source: Any = load(
            b'table_descriptor { name: "t" vocabulary_size: 1 dimension: 8 optimization_parameters'
            b" { adagrad { } learning_rate { constant: 0.1 } } } mode: TRAINING num_hosts: 1"
            b" num_tensor_cores: 1 feature_descriptor { input_shape: 1 }", "text")
    else:
        source = scaled_compiled(arguments["model"], arguments["vocab_scale"],
                                 arguments["batch_scale"])
    prepared = prepare(source)
    estimate = memory_estimate(prepared.plan)
    run = SyntheticRun(prepared, engine=arguments["engine"], max_memory=1 << 50)
    run.run(1)  # warm-up: compiles the numba kernels
    start = time.perf_counter()
    run.run(1 + arguments["steps"])
    elapsed = time.perf_counter() - start
    return {
        "model": arguments["model"],
        "tables": len(prepared.plan.tables),
        "features": len(prepared.plan.features),
        "ids_per_step": int(sum(
            prepared.plan.num_cores * math.prod(f.input_shape) * (f.ids_per_bag or 1)
            for f in prepared.plan.features)),
        "state_bytes": prepared.plan.state_bytes(),
        "estimate_bytes": estimate,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "steps_per_second": arguments["steps"] / elapsed,
    }


def measure(arguments: dict[str, Any]) -> dict[str, Any]:
    """``worker`` in a fresh process, so its peak memory is its own."""
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(arguments)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode:
        raise SystemExit(f"{arguments['model']}: {done.stderr.strip().splitlines()[-1]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), action="append")
    parser.add_argument("--vocab-scale", type=int)
    parser.add_argument("--batch-scale", type=int)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--engine", choices=["numpy", "numba"], default="numpy")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    common = {"steps": args.steps, "engine": args.engine}
    process = measure({**common, "model": "tiny", "vocab_scale": 1, "batch_scale": 1})
    results = []
    for model in args.model or sorted(MODELS):
        vocab_scale = args.vocab_scale or MODELS[model][0]
        batch_scale = args.batch_scale or MODELS[model][1]
        result = measure({**common, "model": model, "vocab_scale": vocab_scale,
                          "batch_scale": batch_scale})
        added = result["peak_rss_bytes"] - process["peak_rss_bytes"]
        result.update(vocab_scale=vocab_scale, batch_scale=batch_scale,
                      process_bytes=process["peak_rss_bytes"], run_bytes=added,
                      estimate_over_run=result["estimate_bytes"] / added,
                      with_process_over_peak=(result["estimate_bytes"]
                                              + process["peak_rss_bytes"])
                      / result["peak_rss_bytes"])
        results.append(result)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    mib = 2**20
    print(f"engine {args.engine}; process footprint {process['peak_rss_bytes'] / mib:.0f} MiB")
    for r in results:
        print(
            f"{r['model']} (vocabularies / {r['vocab_scale']}, batches / {r['batch_scale']}): "
            f"{r['tables']} tables, {r['ids_per_step']:,} ids per step, "
            f"{r['steps_per_second']:.2f} steps/s; tables and slots "
            f"{r['state_bytes'] / mib:.0f} MiB; peak RSS {r['peak_rss_bytes'] / mib:.0f} MiB, "
            f"of which the run {r['run_bytes'] / mib:.0f} MiB; estimate "
            f"{r['estimate_bytes'] / mib:.0f} MiB ({r['estimate_over_run']:.2f} x the run; "
            f"with the footprint {r['with_process_over_peak']:.2f} x the peak)"
        )


if __name__ == "__main__":
    main()
