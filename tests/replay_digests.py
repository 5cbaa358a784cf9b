"""Digests of every golden replay (and a synthetic run): the bytes the reference promises.

    python tests/replay_digests.py [--engine numba,numpy] [--backend local|ray] [--shards N]

prints one JSON object, ``{engine: {case: sha256}}``, for every golden optimizer case
(``tests/data/golden`` or ``TPUEMB_GOLDEN``) replayed from its ``init.npz``, plus
``synthetic/...`` entries for a few steps of synthetic runs of the example configurations. A
case's digest covers every output array of the replay (tables, slots, activations: key, dtype,
shape and bytes) and, per step and table, the report's update norm (its float64 bytes), rows
touched, rows updated and zero-denominator bags. Run it under different settings (NumPy's SIMD
dispatch, numba's target CPU and thread count, engine, backend) and compare:
``tests/test_reproducible.py`` does, and docs/numerics.md says what is promised.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(os.environ.get("TPUEMB_GOLDEN") or ROOT / "tests" / "data" / "golden")
#: (example configuration, steps) of the synthetic entries; tag 0 follows an exponential decay.
SYNTHETIC = (("quickstart.pbtxt", 4), ("ads_ranking.pbtxt", 3))


def _arrays(digest: Any, arrays: dict[str, Any]) -> None:
    for key in sorted(arrays):
        array = np.ascontiguousarray(np.asarray(arrays[key]))
        digest.update(f"{key}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.reshape(-1).view(np.uint8))  # its bytes, without a copy


def _report(digest: Any, step: int, reports: dict[str, Any]) -> None:
    for name in sorted(reports):
        r = reports[name]
        digest.update(f"s{step}/{name}|{r.rows_touched}|{r.rows_updated}|".encode())
        digest.update(struct.pack("<d", float(r.update_norm)))
        digest.update(repr(sorted(r.zero_denominator_bags.items())).encode())


def replay_digests(engine: str, backend: str, shards: int | None) -> dict[str, str]:
    from tpuemb_cfg import load
    from tpuemb_cfg.executor import parse_combiners
    from tpuemb_cfg.formats.npzio import read_npz
    from tpuemb_cfg.simulate import replay

    out: dict[str, str] = {}
    cases = sorted(p.parent for p in (GOLDEN / "optimizers").glob("*/*/case.json"))
    if not cases:
        raise SystemExit(f"no golden cases under {GOLDEN / 'optimizers'}")
    for case in cases:
        config = load(str(case / "config.pbtxt"))
        arguments = shlex.split((case / "combiner.txt").read_text())
        combiners = parse_combiners(arguments[1::2], len(config.feature_descriptor))
        digest = hashlib.sha256()
        result = replay(config, read_npz(case / "batches.npz"), read_npz(case / "init.npz"),
                        combiners=combiners, engine=engine, backend=backend, shards=shards,
                        on_step=lambda step, reports, d=digest: _report(d, step, reports))
        _arrays(digest, dict(result))
        out[f"{case.parent.name}/{case.name}"] = digest.hexdigest()
    return out


def synthetic_digests(engine: str, backend: str, shards: int | None) -> dict[str, str]:
    from tpuemb_cfg.sim.schedules import Schedule
    from tpuemb_cfg.simulate import SyntheticRun

    out: dict[str, str] = {}
    decay = Schedule(tag=0, kind="exponential_decay", values=(0.2,), decay_steps=3,
                     decay_rate=0.7)
    for name, steps in SYNTHETIC:
        run = SyntheticRun(str(ROOT / "examples" / name), seed=7, engine=engine,
                           backend=backend, shards=shards, schedules=[decay])
        digest = hashlib.sha256()
        for step in range(steps):
            summary = run.run_step()
            digest.update(json.dumps(summary, sort_keys=True, default=repr).encode())
            _report(digest, step, run.executor.last_report)
        _arrays(digest, run.checkpoint_arrays())
        run.executor.close()  # its Ray actors go back to the pool for the next run at once
        out[f"synthetic/{name}"] = digest.hexdigest()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="numba",
                        help="numba, numpy, or both comma-separated (each run in turn)")
    parser.add_argument("--backend", default="local", choices=("local", "ray"))
    parser.add_argument("--shards", type=int, default=None)
    args = parser.parse_args(argv)
    engines = args.engine.split(",")
    if not set(engines) <= {"numba", "numpy"}:
        parser.error(f"--engine: expected numba, numpy or numba,numpy, got {args.engine!r}")
    shards = args.shards if args.backend == "ray" else None
    digests: dict[str, dict[str, str]] = {}
    with contextlib.ExitStack() as stack:
        if args.backend == "ray":
            from tpuemb_cfg.backends.ray.connection import ray_session

            stack.enter_context(ray_session(None))
        for engine in engines:
            digests[engine] = {**replay_digests(engine, args.backend, shards),
                               **synthetic_digests(engine, args.backend, shards)}
    json.dump(digests, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
