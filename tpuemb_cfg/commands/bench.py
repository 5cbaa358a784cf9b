"""`tpuemb bench`: time the executor on the anchor workload (``tpuemb_cfg.bench`` does the work)."""

from __future__ import annotations

import json
from typing import Any

import click

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
@click.option("--optimizer", type=click.Choice(["adagrad", "sgd", "momentum", "adam", "ftrl"]),
              default="adagrad", show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True,
              help="Timed steps per measurement (the median is reported).")
@click.option("--engine", type=click.Choice(["numba", "numpy"]), default="numba",
              show_default=True, help="numba: compiled kernels; numpy: the readable reference.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="numba threads (default: one per core).")
@click.option("--multi-feature", is_flag=True,
              help="Also time the realistic step: 3 tables, 8 features, mean, bags of 1-20 ids.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of ids and gradients.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def bench(vocab: int, dim: int, ids: int, zipf: float, optimizer: str, steps: int, engine: str,
          threads: int | None, multi_feature: bool, seed: int, as_json: bool) -> None:
    """Time one training step of a VOCAB x DIM float32 table for IDS Zipf-distributed ids.

    Prints the median seconds per step of the executor, the naive NumPy step and the
    memory-traffic limit (copy bandwidth x bytes the step must move), all measured in this
    run, with the unique ids, peak memory and the compile time of the numba kernels.
    """
    from tpuemb_cfg.bench import Workload, run

    workload = Workload(vocab=vocab, dim=dim, ids=ids, zipf=zipf, optimizer=optimizer,
                        steps=steps, seed=seed)
    result = run(workload, engine=engine, threads=threads, multi_feature=multi_feature)
    report = result.as_json()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(_text(report))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms"


def _mb(count: float) -> str:
    return f"{count / 1e6:.0f} MB"


def _text(r: dict[str, Any]) -> str:
    w = r["workload"]
    lines = [
        f"tpuemb bench: {w['optimizer']}, {w['vocab']:,} x {w['dim']} float32 table, "
        f"{w['ids']:,} ids per step (Zipf {w['zipf']}), {r['unique_ids']:,} unique; "
        f"engine {r['engine']}, {r['threads']} thread(s); median of {w['steps']} steps",
    ]
    if "engine_note" in r:
        lines.append(f"note: {r['engine_note']}")
    lines += [
        f"  step (dedup + duplicate sum + row update)        {_ms(r['sec_per_step'])}"
        f"   {r['ids_per_sec'] / 1e6:.1f} M ids/s; {r['naive_over_step']:.1f}x faster than "
        f"naive, {r['step_over_limit']:.1f}x the memory-traffic limit",
        f"  executor step (checks, forward, step, report)    "
        f"{_ms(r['executor_step_sec_per_step'])}",
        f"  naive NumPy step (np.unique + np.add.at)         {_ms(r['naive_sec_per_step'])}",
        f"  memory-traffic limit                             {_ms(r['limit_sec_per_step'])}"
        f"   {_mb(r['limit_bytes'])} at {r['copy_bandwidth_bytes_per_sec'] / 1e9:.1f} GB/s "
        "copy bandwidth",
        f"  peak RSS {_mb(r['peak_rss_bytes'])} for {_mb(r['state_bytes'])} of tables and slots "
        f"({r['peak_rss_over_state']:.2f}x; target 1.3x + 200 MB = "
        f"{_mb(r['peak_rss_target_bytes'])})",
        f"  compile/load of the kernels {r['compile_sec']:.2f} s (not in the steps; cached on "
        "disk after the first run)",
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
