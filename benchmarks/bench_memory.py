"""The memory estimate against the measured peak: every example model and real models' scaled
configurations, each run by ``tpuemb simulate`` in a process of its own.

    python benchmarks/bench_memory.py                        # every model, numba engine
    python benchmarks/bench_memory.py --model sasrec --model quickstart --engine numpy
    python benchmarks/bench_memory.py --runs 2 --out benchmarks/results/memory_numba.json

For each model: ``tpuemb simulate SPEC --dry-run --json`` gives the estimate
(``executor.memory``, with the run's options), then the same command without ``--dry-run`` runs
in a child process whose peak resident memory the operating system reports when it ends
(``os.wait4``'s ``ru_maxrss``: everything, the interpreter and the writing of the outputs
included). The table shows both and their ratio; the goal is every ratio within 0.8-1.2.

Models (sources in ``MODELS``; a scale divides every vocabulary and every replica's batch, the
tables, features, bag sizes, combiners and optimizers stay the model's):

- the examples: ``examples/quickstart.pbtxt``, ``ads_ranking.pbtxt``, ``video_legacy.pbtxt``,
  ``specs/ranking.py``, ``specs/video_retrieval.toml`` (at 1/8: 30 GiB whole),
  ``models/dlrm_criteo_1_16.pbtxt`` (whole), ``models/dlrm_criteo.py`` (Model Garden DLRM, the 8
  tables it puts on the TPU, at 1/64 of the vocabularies and 1/2 of the batch) and
  ``models/dcnv2_mlperf.py`` (keras-rs MLPerf DLRM-DCNv2 multi-hot for a v6e-16, 1/256, 1/8);
- published models' configurations, rebuilt from their public code: Model Garden's DLRM with all
  26 tables on the TPU (``dlrm_criteo.py`` with ``size_threshold`` 0, 1/64, 1/2); keras-rs'
  MLPerf DCN-v2 for a v6e-32 (``examples/ml_perf/configs/v6e_32_full_dataset.py``: the v6e-16
  model on 8 hosts of 4 chips, 512 samples a chip; 1/64, 1/2); keras-rs' SASRec
  (``examples/sas_rec.py``: one item table of MovieLens-1M's 3,953 ids, dimension 50, Keras 3
  ``Adam(0.001, beta_2=0.98)``, the input, positive and negative sequences of 200 positions, 128
  a batch, lengths geometric of mean 120 cut at 200); non-lazy Adam with pipelining (the
  case of a whole table's pre-update copy kept between steps); and a step-heavy configuration (a
  1,000-row table looked up at 2.56 million positions a step: the step's arrays dominate);
- the options that change what a run holds, on the 8-table DLRM: ``--tables all``, ``--ids
  uniform``, ``--checkpoint-every``, ``--plot`` with ``--save-batches``;
- multi-worker runs (``--workers 4``): the quickstart and the 8-table DLRM, with synchronous
  replicas (R = 4; R = 2 writing every table) and DropStale (a geometric delay on the
  quickstart);
- replays (``REPLAYS``: ``--batches`` of the batches a synthetic run of the model saved, the
  estimate from ``--batches B.npz --dry-run --json``): the quickstart, the 8-table DLRM, SASRec.
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
EXAMPLES = ROOT / "examples"
TPUEMB = [sys.executable, "-m", "tpuemb_cfg"]

# A spec that runs another spec (``SOURCE``: a .py, whose text may be edited by ``EDITS``, or a
# .toml) with its vocabularies and per-replica batches divided by the scales.
_WRAPPER = '''\
"""{title}: {source} at 1/{vocab} of its vocabularies and 1/{batch} of its batches
(written by benchmarks/bench_memory.py)."""
from tpuemb_cfg.embedding.spec import load_spec as _load_spec

_spec = _load_spec({path!r})


def _leaves(structure):
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in _leaves(structure[key])]
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in _leaves(item)]
    return [structure]


for _table in {{id(f.table): f.table for f in _leaves(_spec.feature_config)}}.values():
    _table.vocabulary_size = max(1, -(-_table.vocabulary_size // {vocab}))
feature_config = _spec.feature_config
globals().update(_spec.build_arguments)
if "per_replica_input_shapes" in globals():
    per_replica_input_shapes = {{
        name: [max(1, shape[0] // {batch}), *shape[1:]]
        for name, shape in per_replica_input_shapes.items()}}
if "per_replica_batch_size" in globals():
    per_replica_batch_size = max(1, per_replica_batch_size // {batch})
'''

SASREC = '''\
"""keras-rs SASRec (examples/sas_rec.py) as a TPU embedding: the item table of MovieLens-1M
(movies_count + 1 = 3,953 ids), dimension HIDDEN_DIM = 50, Keras 3 Adam(learning_rate=0.001,
beta_2=0.98); the model looks up the input sequence and, in its loss, the positive and negative
sequences: three sequence features of MAX_CONTEXT_LENGTH = 200 positions, BATCH_SIZE = 128."""
from tpuemb_cfg.embedding import FeatureConfig, TableConfig, from_keras

ADAM = {"name": "adam", "learning_rate": 0.001, "weight_decay": None, "clipnorm": None,
        "global_clipnorm": None, "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
        "ema_overwrite_frequency": None, "loss_scale_factor": None,
        "gradient_accumulation_steps": None, "beta_1": 0.9, "beta_2": 0.98, "epsilon": 1e-07,
        "amsgrad": False}
item = TableConfig(vocabulary_size=3953, dim=50, name="item_embedding",
                   optimizer=from_keras({"class_name": "Adam", "config": ADAM}), combiner="sum")
feature_config = {
    name: FeatureConfig(item, max_sequence_length=200, name=name)
    for name in ("item_ids", "positive_sequence", "negative_sequence")
}
per_replica_input_shapes = {name: [128, 200] for name in feature_config}
'''

NON_LAZY_ADAM = '''\
"""A million-row table with non-lazy Adam, pipelined: every row steps each step, and the
forward pass reads the table as it was before the last update (a whole copy kept)."""
from tpuemb_cfg.embedding import Adam, FeatureConfig, TableConfig

table = TableConfig(vocabulary_size=1_000_000, dim=64, name="items",
                    optimizer=Adam(learning_rate=0.001, lazy_adam=False))
feature_config = {"items": FeatureConfig(table, name="items")}
per_replica_input_shapes = {"items": [4096, 8]}
pipeline_execution_with_tensor_core = True
'''

ISSUE16 = """\
# A small table looked up at 2.56 million positions a step (one id each).
table_descriptor { name: "t" vocabulary_size: 1000 dimension: 128
  optimization_parameters { adagrad { } learning_rate { constant: 0.1 } } }
mode: TRAINING num_hosts: 1 num_tensor_cores: 128
feature_descriptor { table_id: 0 input_shape: 200 input_shape: 5 input_shape: 20 }
"""

#: name -> (source, vocabulary scale, batch scale, text edits, steps, extra simulate options)
MODELS: dict[str, tuple[str, int, int, dict[str, str], int, tuple[str, ...]]] = {
    "quickstart": ("quickstart.pbtxt", 1, 1, {}, 100, ()),
    "ads_ranking": ("ads_ranking.pbtxt", 1, 1, {}, 20, ()),
    "video_legacy": ("video_legacy.pbtxt", 1, 1, {}, 20, ()),
    "ranking_spec": ("specs/ranking.py", 1, 1, {}, 20, ()),
    "video_retrieval_1_8": ("specs/video_retrieval.toml", 8, 1, {}, 20, ()),
    "dlrm_criteo_1_16": ("models/dlrm_criteo_1_16.pbtxt", 1, 1, {}, 100, ()),
    "dlrm_model_garden_8": ("models/dlrm_criteo.py", 64, 2, {}, 20, ()),
    "dcnv2_v6e16": ("models/dcnv2_mlperf.py", 256, 8, {}, 10, ()),
    "dlrm_model_garden_26": ("models/dlrm_criteo.py", 64, 2,
                             {"SIZE_THRESHOLD = 50_000": "SIZE_THRESHOLD = 0"}, 20, ()),
    "dcnv2_v6e32": ("models/dcnv2_mlperf.py", 64, 2,
                    {"NUM_HOSTS = 4": "NUM_HOSTS = 8", "NUM_REPLICAS = 16": "NUM_REPLICAS = 32"},
                    5, ()),
    "sasrec": ("<sasrec>", 1, 1, {}, 50, ("--sequence-lengths", "geometric:120")),
    "adam_non_lazy_pipelined": ("<non_lazy_adam>", 1, 1, {}, 10, ()),
    "issue16_positions": ("<issue16>", 1, 1, {}, 2, ()),
    # The options that change what a run holds, on Model Garden's DLRM (8 tables):
    "dlrm_8_tables_all": ("models/dlrm_criteo.py", 64, 2, {}, 20, ("--tables", "all")),
    "dlrm_8_uniform_ids": ("models/dlrm_criteo.py", 64, 2, {}, 20, ("--ids", "uniform")),
    "dlrm_8_checkpoints": ("models/dlrm_criteo.py", 64, 2, {}, 20,
                           ("--checkpoint-every", "10")),
    "dlrm_8_plot_batches": ("models/dlrm_criteo.py", 64, 2, {}, 20,
                            ("--plot", "{folder}/run.png", "--save-batches", "{folder}/b.npz")),
    # Multi-worker runs (steps per worker): the chief's tables, the workers' gradients in
    # flight, the accumulators and the record of every gradient.
    "quickstart_4_workers_sync": ("quickstart.pbtxt", 1, 1, {}, 100, ("--workers", "4")),
    "quickstart_4_workers_drop_stale": ("quickstart.pbtxt", 1, 1, {}, 100,
                                        ("--workers", "4", "--max-staleness", "1",
                                         "--delay", "geometric:0.5")),
    "dlrm_8_4_workers_sync": ("models/dlrm_criteo.py", 64, 2, {}, 10, ("--workers", "4")),
    "dlrm_8_4_workers_drop_stale": ("models/dlrm_criteo.py", 64, 2, {}, 10,
                                    ("--workers", "4", "--max-staleness", "2")),
    "dlrm_8_4_workers_sync_all": ("models/dlrm_criteo.py", 64, 2, {}, 10,
                                  ("--workers", "4", "--replicas-to-aggregate", "2",
                                   "--tables", "all")),
}

#: Replays (``--batches``): name -> the model whose synthetic run's batches are replayed
#: (``--save-batches``, not measured) and its steps.
REPLAYS: dict[str, tuple[str, int]] = {
    "quickstart_replay": ("quickstart", 100),
    "dlrm_8_replay": ("dlrm_model_garden_8", 10),
    "sasrec_replay": ("sasrec", 20),
}


def spec_file(name: str, folder: Path) -> Path:
    """The file ``tpuemb simulate`` runs for model ``name``: the example itself, or a spec
    written into ``folder`` (scaled, edited or rebuilt)."""
    source, vocab, batch, edits, _, _ = MODELS[name]
    if source == "<sasrec>":
        path = folder / "sasrec.py"
        path.write_text(SASREC)
        return path
    if source == "<issue16>":
        path = folder / "issue16.pbtxt"
        path.write_text(ISSUE16)
        return path
    if source == "<non_lazy_adam>":
        path = folder / "non_lazy_adam.py"
        path.write_text(NON_LAZY_ADAM)
        return path
    original = EXAMPLES / source
    if vocab == batch == 1 and not edits:
        return original
    if edits:
        text = original.read_text()
        for old, new in edits.items():
            if old not in text:
                raise SystemExit(f"{source}: {old!r} not found; update MODELS")
            text = text.replace(old, new)
        original = folder / f"{name}_source.py"
        original.write_text(text)
    path = folder / f"{name}.py"
    path.write_text(_WRAPPER.format(title=name, source=source, vocab=vocab, batch=batch,
                                    path=str(original)))
    return path


def dry_run(name: str, arguments: list[str]) -> dict[str, Any]:
    """What ``tpuemb simulate ARGUMENTS --dry-run --json`` plans (its estimate), or exit."""
    planned = subprocess.run([*TPUEMB, "simulate", *arguments, "--dry-run", "--json"],
                             capture_output=True, text=True, check=False)
    if planned.returncode:
        raise SystemExit(f"{name}: --dry-run failed:\n{planned.stderr.strip()}")
    result: dict[str, Any] = json.loads(planned.stdout)
    return result


def run_alone(command: list[str], folder: Path) -> tuple[int, int, str, str]:
    """Run ``command``; return its exit status, its peak resident memory in bytes (``wait4``:
    this child's own ``ru_maxrss``), its stdout and its stderr."""
    with open(folder / "stdout", "w+") as out, open(folder / "stderr", "w+") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        out.seek(0)
        err.seek(0)
        kib = 1 if sys.platform == "darwin" else 1024
        return os.waitstatus_to_exitcode(status), usage.ru_maxrss * kib, out.read(), err.read()


def measure(name: str, engine: str, folder: Path) -> dict[str, Any]:
    """One model: the estimate (``--dry-run --json``) and a real run's peak resident memory."""
    _, vocab, batch, _, steps, extra = MODELS[name]
    spec = spec_file(name, folder)
    out = folder / f"{name}-out"
    common = [str(spec), "--steps", str(steps), "--engine", engine, "--out-dir", str(out),
              "-q", *(option.format(folder=folder) for option in extra)]
    plan = dry_run(name, common)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    status, peak, stdout, stderr = run_alone([*TPUEMB, "simulate", *common, "--json"], folder)
    wall = time.perf_counter() - start
    if status:
        raise SystemExit(f"{name}: the run failed:\n{stderr.strip()[-2000:]}")
    if json.loads(stdout)["memory"]["estimate"] != plan["memory"]["estimate"]:
        raise SystemExit(f"{name}: the run's estimate is not the one --dry-run showed")
    estimate = plan["memory"]["estimate"]
    return {
        "model": name, "engine": engine, "steps": steps, "vocab_scale": vocab,
        "batch_scale": batch, "options": list(extra), "tables": len(plan["tables"]),
        "state_bytes": estimate["tables_and_slots_whole_bytes"],
        "estimate": estimate,
        "peak_rss_bytes": peak,
        "ratio": estimate["total_bytes"] / peak,
        "wall_sec": wall, "load_before": load, "load_after": os.getloadavg()[0],
    }


def measure_replay(name: str, engine: str, folder: Path) -> dict[str, Any]:
    """One replay: a synthetic run of the model writes its batches, then the estimate
    (``--batches B.npz --dry-run --json``) and the replay's peak resident memory."""
    model, steps = REPLAYS[name]
    _, vocab, batch, _, _, extra = MODELS[model]
    spec = spec_file(model, folder)
    batches = folder / f"{name}.npz"
    saved = subprocess.run([*TPUEMB, "simulate", str(spec), "--steps", str(steps), "--out-dir",
                            str(folder / f"{name}-synthetic"), "--tables", "none", "-q",
                            "--save-batches", str(batches), *extra],
                           capture_output=True, text=True, check=False)
    if saved.returncode:
        raise SystemExit(f"{name}: the synthetic run failed:\n{saved.stderr.strip()}")
    common = [str(spec), "--batches", str(batches), "--engine", engine]
    plan = dry_run(name, common)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    status, peak, _, stderr = run_alone(
        [*TPUEMB, "simulate", *common, "--out", str(folder / f"{name}-out.npz"), "-q"], folder)
    wall = time.perf_counter() - start
    if status:
        raise SystemExit(f"{name}: the replay failed:\n{stderr.strip()[-2000:]}")
    estimate = plan["memory"]["estimate"]
    return {
        "model": name, "engine": engine, "steps": steps, "vocab_scale": vocab,
        "batch_scale": batch, "options": ["--batches"], "tables": len(plan["tables"]),
        "state_bytes": estimate["tables_and_slots_whole_bytes"],
        "estimate": estimate,
        "peak_rss_bytes": peak,
        "ratio": estimate["total_bytes"] / peak,
        "wall_sec": wall, "load_before": load, "load_after": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted([*MODELS, *REPLAYS]), action="append",
                        help="a model (repeatable; default: every one)")
    parser.add_argument("--engine", choices=["numba", "numpy"], default="numba")
    parser.add_argument("--runs", type=int, default=1, help="runs of each model")
    parser.add_argument("--out", help="write the results as JSON to this file")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        for name in args.model or [*MODELS, *REPLAYS]:
            for _ in range(args.runs):
                run = measure_replay if name in REPLAYS else measure
                results.append(run(name, args.engine, Path(tmp)))
                r = results[-1]
                print(f"{name:24s} estimate {r['estimate']['total_bytes'] / 2**20:9.1f} MiB  "
                      f"peak {r['peak_rss_bytes'] / 2**20:9.1f} MiB  ratio {r['ratio']:.2f}  "
                      f"({r['wall_sec']:.0f} s, load {r['load_before']:.1f})", flush=True)
    out = {"engine": args.engine, "nproc": os.cpu_count(),
           "started": time.strftime("%Y-%m-%d %H:%M:%S"), "results": results}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    mib = 2**20
    print()
    print("| model | scale | steps | tables + slots | estimate | peak RSS | estimate / peak |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['model']} | 1/{r['vocab_scale']}, 1/{r['batch_scale']} | {r['steps']} | "
              f"{r['state_bytes'] / mib:,.0f} MiB | {r['estimate']['total_bytes'] / mib:,.0f} MiB "
              f"| {r['peak_rss_bytes'] / mib:,.0f} MiB | {r['ratio']:.2f} |")
    outside = [r["model"] for r in results if not 0.8 <= r["ratio"] <= 1.2]
    print(f"\n{len(results) - len(outside)} of {len(results)} within 20%"
          + (f"; outside: {', '.join(outside)}" if outside else ""))


if __name__ == "__main__":
    main()
