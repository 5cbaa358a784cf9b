"""`tpuemb bench`: time the executor on the anchor workload (``tpuemb_cfg.run.bench`` does the
work)."""

from __future__ import annotations

import json
from typing import Any

import click

from tpuemb_cfg.algorithms.table import BENCHMARK, BENCHMARK_DEFAULT
from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.commands.flags import echo
from tpuemb_cfg.commands.simulate import (
    backend_option,
    engine_option,
    parse_size,
    seed_option,
)
from tpuemb_cfg.executor.storage import choose_backend

__all__ = ["bench"]


@click.command("bench")
@click.option("--vocab", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Rows of the table.")
@click.option("--dim", type=click.IntRange(min=1), default=64, show_default=True,
              help="Embedding dimension.")
@click.option("--ids", type=click.IntRange(min=1), default=65_536, show_default=True,
              help="Ids per step (one per bag).")
@click.option("--zipf", type=click.FloatRange(min=0, min_open=True), default=1.05,
              show_default=True, help="Exponent of the Zipf law of the ids.")
@click.option("--optimizer", type=click.Choice(
                  [BENCHMARK_DEFAULT, *(name for name in BENCHMARK if name != BENCHMARK_DEFAULT)]),
              default=BENCHMARK_DEFAULT, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True,
              help="Timed steps per measurement (the median is reported).")
@engine_option("numba: compiled kernels; numpy: the readable reference.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="numba threads (default: one per core).")
@seed_option("Seed of ids and gradients")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--max-memory", metavar="SIZE",
              help="Refuse to start when the estimate exceeds SIZE (default: 80% of the memory "
                   f"available). {units.SIZE_HELP}.")
@backend_option("ray: the same step with each host's rows in a Ray actor, timed against the local "
                "step in the same run, with the bytes sent per step per host.")
@click.option("--shards", type=click.IntRange(min=1), default=2, show_default=True,
              help="--backend ray: host actors (the table's num_hosts, MOD sharding).")
@click.option("--ray-address", metavar="ADDR",
              help="--backend ray: join this Ray cluster (default: RAY_ADDRESS, else start a "
                   "local instance).")
@click.option("--runtime-env", metavar="JSON | @FILE.json",
              help="--backend ray: Ray's runtime_env of the host actors (pip, env_vars, ...), "
                   "a JSON object; tpuemb adds itself to its py_modules.")
@click.option("--no-ship", is_flag=True,
              help="--backend ray: do not send this tpuemb to the host actors.")
def bench(  # noqa: PLR0913  (a click command: one parameter per option)
    vocab: int, dim: int, ids: int, zipf: float, optimizer: str, steps: int, engine: str,
    threads: int | None, seed: int, as_json: bool,
    max_memory: str | None, backend: str, shards: int, ray_address: str | None,
    runtime_env: str | None, no_ship: bool,
) -> None:
    """Time one training step of a VOCAB x DIM float32 table for IDS Zipf-distributed ids.

    Prints the median seconds of the public Executor.step (checks, forward pass, backward
    pass, update, report) and of the update alone, each against its memory-traffic limit:
    the bytes it must move (every touched row of the table and its slots read and written
    once, the activation gradients read once, and for the step the activations written once)
    at the machine's copy bandwidth, measured in the same run before and after the steps.
    Beside them: the bandwidth, the load (1-minute average) before and after, the unique
    ids, peak memory and the first-call cost of the numba kernels. --json carries every
    figure. The other yardsticks (the naive NumPy step, TensorFlow's and PyTorch's steps)
    are in the repository's benchmarks/ (docs/performance.md).
    """
    from tpuemb_cfg.run.bench import Workload, check_memory, run

    workload = Workload(vocab=vocab, dim=dim, ids=ids, zipf=zipf, optimizer=optimizer,
                        steps=steps, seed=seed)
    limit = parse_size(max_memory) if max_memory is not None else None
    chosen = choose_backend(backend)
    if chosen.in_process and (runtime_env is not None or no_ship):
        raise UsageError("--runtime-env and --no-ship apply to --backend ray only")
    actor_env = chosen.runtime_env(runtime_env)
    check_memory(workload, limit)  # before anything is allocated, on either backend
    if not chosen.in_process:  # the tables on the backend's host processes
        from tpuemb_cfg.run import bench_ray

        scaled = bench_ray.run(workload, shards=shards, engine=engine, address=ray_address,
                               runtime_env=actor_env, ship=not no_ship)
        echo(json.dumps(scaled, indent=2) if as_json else _ray_text(scaled))
        return
    result = run(workload, engine=engine, threads=threads, max_memory=limit)
    report = result.as_json()
    if as_json:
        echo(json.dumps(report, indent=2))
    else:
        echo(_text(report))


def _headline(r: dict[str, Any], backend: str = "", tables: str = "", ids: str = "",
              engine: str = "") -> str:
    """The first line of either report: the workload, its unique ids, the engine and the steps
    (``backend``, ``tables``, ``ids``, ``engine``: what the report adds to each)."""
    w = r["workload"]
    return (
        f"tpuemb bench{backend}: {w['optimizer']}, {w['vocab']:,} x {w['dim']} float32 "
        f"table{tables}, {w['ids']:,} ids per step{ids}, {r['unique_ids']:,} unique; "
        f"engine {r['engine']}{engine}; median of {w['steps']} steps"
    )


def _ray_text(r: dict[str, Any]) -> str:
    lines = [
        _headline(r, backend=" --backend ray",
                  tables=f" over {r['shards']} host actors ({r['sharding_strategy']})"),
        f"  local step (tables in this process)   {_ms(r['local_sec_per_step'])}",
        f"  ray step (rows in the host actors)    {_ms(r['ray_sec_per_step'])}   "
        f"{r['ray_over_local']:.2f}x the local step; bit-identical: "
        f"{'yes' if r['bit_identical'] else 'NO'}",
        f"  Ray start {r['ray_init_sec']:.1f} s, actor set-up {r['actor_setup_sec']:.1f} s",
        "  per host and step: unique ids, bytes sent / received (model: sent / received)",
    ]
    for host, (unique, sent, received, model) in enumerate(zip(
            r["unique_ids_per_host"], r["bytes_sent_per_step"], r["bytes_received_per_step"],
            r["model_bytes_per_step"], strict=True)):
        lines.append(f"    host {host}: {unique:>9,} ids  {sent / 1e6:.2f} / {received / 1e6:.2f} "
                     f"MB  ({model[0] / 1e6:.2f} / {model[1] / 1e6:.2f} MB)")
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms"


def _text(r: dict[str, Any]) -> str:
    from tpuemb_cfg.run.bench import report_lines

    return "\n".join([_headline(r, ids=f" (Zipf {r['workload']['zipf']})",
                                engine=f", {r['threads']} thread(s)"), *report_lines(r)])
