"""`tpuemb simulate`: replay recorded steps (--batches) or run the synthetic example.

Thin by design: options are parsed and checked here, the work is ``tpuemb_cfg.executor.replay``
and ``tpuemb_cfg.executor.synthetic.SyntheticRun``.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tpuemb_cfg.errors import InputError, UsageError

__all__ = ["available_memory", "parse_size", "simulate"]

_SYNTHETIC_ONLY = ("steps", "out_dir", "plot", "checkpoint_every", "resume", "learning_rate")
_REPLAY_ONLY = ("init_path", "out_path")
_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
          "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}


def parse_size(text: str) -> int:
    """Bytes from ``123``, ``512M``, ``1.5GiB``, ``8G`` (k/M/G/T decimal, Ki/Mi/Gi/Ti binary)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?)?b?\s*", text, re.IGNORECASE)
    if match is None:
        raise UsageError(
            f"--max-memory {text!r}: expected a size such as 8G, 512MiB or 1000000 (bytes)"
        )
    unit = (match.group(2) or "").lower()
    return int(float(match.group(1)) * _UNITS[unit])


def available_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or None where it cannot be read."""
    try:
        with open(meminfo, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _memory_limit(option: str | None) -> int | None:
    if option is not None:
        return parse_size(option)
    available = available_memory()
    return None if available is None else int(available * 0.8)


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _option_name(name: str) -> str:
    return {"init_path": "--init", "out_path": "--out"}.get(name, "--" + name.replace("_", "-"))


def _load_default_config() -> Any:
    from tpuemb_cfg import load

    resource = importlib.resources.files("tpuemb_cfg.data") / "default_config.pbtxt"
    return load(resource.read_bytes(), "text")


def _spec_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--spec``: the spec's values become the defaults of the other options."""
    if value is not None:
        from tpuemb_cfg.simspec import spec_callback

        spec_callback(ctx, param, value)


@click.command("simulate")
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--batches", "batches_path", type=click.Path(dir_okay=False), metavar="B.npz",
              help="Replay the recorded steps of B.npz (the replay contract, docs/simulate.md).")
@click.option("--init", "init_path", type=click.Path(dir_okay=False), metavar="I.npz",
              help="Replay: initial tables and slots (missing entries get defaults).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), metavar="O.npz",
              help="Replay: write final tables, slots and every step's activations here.")
@click.option("--combiner", "combiners", multiple=True, metavar="NAME | F=NAME",
              help="Combiner (sum, mean, sqrtn): NAME sets the default (mean), F=NAME sets "
                   "feature index F. Repeatable.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the default initial values and of the synthetic data.")
@click.option("--steps", type=click.IntRange(min=1), default=100, show_default=True,
              help="Synthetic run: number of steps.")
@click.option("--out-dir", type=click.Path(file_okay=False), default="tpuemb-out",
              show_default=True, help="Synthetic run: folder for tables, summary, checkpoint.")
@click.option("--learning-rate", type=float, default=0.1, show_default=True,
              help="Synthetic run: value sent for every dynamic learning-rate tag.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON on stdout.")
@click.option("--plot", type=click.Path(dir_okay=False), metavar="FILE.png",
              help="Synthetic run: plot loss and update norms per step (needs matplotlib).")
@click.option("--checkpoint-every", type=click.IntRange(min=1), metavar="N",
              help="Synthetic run: save the full state to OUT_DIR/checkpoint.npz every N steps.")
@click.option("--resume", is_flag=True,
              help="Synthetic run: continue from OUT_DIR/checkpoint.npz.")
@click.option("--max-memory", metavar="SIZE",
              help="Refuse to start when the estimate exceeds SIZE (default: 80% of available "
                   "RAM).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--engine", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True,
              help="numpy: the readable reference; numba: compiled kernels, same results.")
@click.option("--spec", type=click.Path(dir_okay=False), metavar="SIM.pbtxt", is_eager=True,
              expose_value=False, callback=_spec_callback,
              help="Take every option from a simulation spec (docs/multiworker.md); options "
                   "given on the command line override it.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Multi-worker run with N workers (docs/multiworker.md).")
@click.option("--replicas-to-aggregate", type=click.IntRange(min=1), metavar="R",
              help="Sync replicas: gradients the chief averages per update (default: N).")
@click.option("--max-staleness", type=int, metavar="S",
              help="DropStale mode: drop a gradient more than S updates old.")
@click.option("--init-tokens", type=int, metavar="T",
              help="Sync replicas: tokens queued before the first step (default -1: R).")
@click.option("--delay", metavar="fixed:K|geometric:P",
              help="Multi-worker: extra ticks each gradient takes (default fixed:0), seeded.")
@click.pass_context
def simulate(
    ctx: click.Context,
    config: str | None,
    batches_path: str | None,
    init_path: str | None,
    out_path: str | None,
    combiners: tuple[str, ...],
    seed: int,
    steps: int,
    out_dir: str,
    learning_rate: float,
    as_json: bool,
    plot: str | None,
    checkpoint_every: int | None,
    resume: bool,
    max_memory: str | None,
    quiet: bool,
    engine: str,
    workers: int | None,
    replicas_to_aggregate: int | None,
    max_staleness: int | None,
    init_tokens: int | None,
    delay: str | None,
) -> None:
    """Run the configured training updates of CONFIG on the CPU, in float32.

    \b
    Replay recorded steps (the replay contract, docs/simulate.md):
      tpuemb simulate CONFIG --batches B.npz [--init I.npz] --out O.npz [--combiner ...]
    Synthetic run (no --batches; no CONFIG runs the built-in example):
      tpuemb simulate [CONFIG] [--steps N] [--out-dir DIR] [--plot FILE.png] [--json]
    Several workers (docs/multiworker.md), all options from a spec file:
      tpuemb simulate [CONFIG] --workers N [--replicas-to-aggregate R | --max-staleness S]
      tpuemb simulate CONFIG --spec sim.pbtxt [options overriding the spec]
    """
    limit = _memory_limit(max_memory)
    spec = ctx.meta.get("tpuemb_cfg.simspec")
    schedules = spec.schedules if spec is not None else ()
    worker_options = {"workers": workers, "replicas_to_aggregate": replicas_to_aggregate,
                      "max_staleness": max_staleness, "init_tokens": init_tokens, "delay": delay}
    if any(value is not None for value in worker_options.values()):
        if batches_path is not None:
            raise UsageError("--workers, --replicas-to-aggregate, --max-staleness, --init-tokens "
                             "and --delay apply to synthetic runs, not to --batches replays")
        wrong = [_option_name(n) for n in ("checkpoint_every", "resume", *_REPLAY_ONLY)
                 if _given(ctx, n)]
        if wrong:
            raise UsageError(f"{', '.join(wrong)} cannot be combined with a multi-worker run")
        if plot is not None:
            _require_matplotlib()
        from tpuemb_cfg.multiworker import simulate_workers

        with _config_errors(config or "<built-in example>"):
            summary = simulate_workers(
                config if config is not None else _load_default_config(),
                config_label=config or "<built-in example>", steps=steps, out_dir=Path(out_dir),
                as_json=as_json, quiet=quiet, combiner_args=combiners, seed=seed,
                learning_rate=learning_rate, schedules=schedules, max_memory=limit,
                engine=engine, spec_path=spec.path if spec is not None else None,
                **{**worker_options, "workers": workers or 1,
                   "init_tokens": -1 if init_tokens is None else init_tokens},
            )
        if plot is not None:
            _plot(summary, plot)
        return
    if batches_path is not None:
        wrong = [_option_name(n) for n in _SYNTHETIC_ONLY if _given(ctx, n)]
        if wrong:
            raise UsageError(f"{', '.join(wrong)} appl{'ies' if len(wrong) == 1 else 'y'} to "
                             "synthetic runs only, not to --batches replays")
        if config is None:
            raise UsageError("--batches needs CONFIG: tpuemb simulate CONFIG --batches B.npz "
                             "--out O.npz")
        if out_path is None:
            raise UsageError("--batches needs --out O.npz (where the final tables, slots and "
                             "activations go)")
        if spec is not None and spec.schedules:
            raise UsageError(f"{spec.path}: learning_rate_schedule applies to synthetic runs; a "
                             "replay sends its recorded learning rates")
        with _config_errors(config):
            _replay(config, batches_path, init_path, out_path, combiners, seed, limit, as_json,
                    quiet, engine=engine)
        return
    wrong = [_option_name(n) for n in _REPLAY_ONLY if _given(ctx, n)]
    if wrong:
        raise UsageError(f"{', '.join(wrong)} need{'s' if len(wrong) == 1 else ''} --batches "
                         "(replay mode); a synthetic run writes to --out-dir")
    with _config_errors(config or "<built-in example>"):
        _synthetic(
            config, combiners, seed, steps, Path(out_dir), learning_rate, as_json, plot,
            checkpoint_every, resume, limit, quiet, engine=engine, schedules=schedules,
            spec_path=spec.path if spec is not None else None,
        )


@contextlib.contextmanager
def _config_errors(config_path: str) -> Iterator[None]:
    """Errors that name no file are about the configuration: name it."""
    try:
        yield
    except InputError as exc:
        if exc.path is None:
            exc.path = config_path
        raise


def _replay(
    config_path: str,
    batches_path: str,
    init_path: str | None,
    out_path: str,
    combiner_args: tuple[str, ...],
    seed: int,
    limit: int | None,
    as_json: bool,
    quiet: bool,
    engine: str = "numpy",
) -> None:
    from tpuemb_cfg import load
    from tpuemb_cfg.executor import replay
    from tpuemb_cfg.executor.plan import build_plan, parse_combiners, refuse_invalid
    from tpuemb_cfg.npzio import atomic_write_npz, read_npz

    config = load(config_path)
    refuse_invalid(config_path)  # the path: diagnostics get line:column and suppressions
    plan = build_plan(config)
    combiners = parse_combiners(list(combiner_args), len(plan.features))
    batches = read_npz(batches_path)
    init = read_npz(init_path) if init_path is not None else None
    tables: dict[str, dict[str, Any]] = {}
    for table in plan.tables:
        tables[table.name] = {"optimizer": table.optimizer.name}

    def record(step: int, reports: Any) -> None:
        for name, report in reports.items():
            for field, value in report.as_dict().items():
                tables[name].setdefault(field, []).append(value)

    out = replay(
        config, batches, init, combiners=combiners, seed=seed,
        batches_source=batches_path, init_source=init_path, max_memory=limit,
        validate_config=False, on_step=record, engine=engine,
    )
    atomic_write_npz(out_path, out)
    steps = sum(1 for k in out if k.endswith("/activations") and "/f0/" in k)
    if as_json:
        summary = {"steps": steps, "config": config_path, "out": out_path, "tables": tables}
        click.echo(json.dumps(summary, indent=2))
    elif not quiet:
        click.echo(f"replayed {steps} step(s) of {batches_path} on {config_path}; wrote {out_path}",
                   err=True)


def _synthetic(
    config_path: str | None,
    combiner_args: tuple[str, ...],
    seed: int,
    steps: int,
    out_dir: Path,
    learning_rate: float,
    as_json: bool,
    plot: str | None,
    checkpoint_every: int | None,
    resume: bool,
    limit: int | None,
    quiet: bool,
    engine: str = "numpy",
    schedules: Any = (),
    spec_path: str | None = None,
) -> None:
    from tpuemb_cfg import load
    from tpuemb_cfg.executor.plan import build_plan, parse_combiners, refuse_invalid
    from tpuemb_cfg.executor.synthetic import SyntheticRun
    from tpuemb_cfg.io import atomic_write_text
    from tpuemb_cfg.npzio import atomic_write_npz, read_npz
    from tpuemb_cfg.simspec import ScheduledRun

    if plot is not None:
        _require_matplotlib()
    config = load(config_path) if config_path is not None else _load_default_config()
    refuse_invalid(config_path if config_path is not None else config)
    combiners = parse_combiners(list(combiner_args), len(build_plan(config).features))
    run: SyntheticRun = ScheduledRun(
        config, seed=seed, combiners=combiners, learning_rate=learning_rate, max_memory=limit,
        validate_config=False, engine=engine, schedules=schedules, spec_path=spec_path,
    )
    checkpoint_path = out_dir / "checkpoint.npz"
    if resume:
        if not checkpoint_path.exists():
            raise UsageError(f"--resume: no checkpoint at {checkpoint_path}; run with "
                             "--checkpoint-every N first, or drop --resume")
        run.restore(read_npz(checkpoint_path), str(checkpoint_path))
    out_dir.mkdir(parents=True, exist_ok=True)

    def save_checkpoint() -> None:
        atomic_write_npz(checkpoint_path, run.checkpoint_arrays())

    show_bar = not quiet and sys.stderr.isatty()
    remaining = max(steps - run.step, 0)
    if show_bar:
        with click.progressbar(length=remaining, label="simulating", file=sys.stderr,
                               show_pos=True) as bar:
            run.run(steps, checkpoint_every=checkpoint_every, checkpoint=save_checkpoint,
                    progress=lambda _step: bar.update(1))
    else:
        run.run(steps, checkpoint_every=checkpoint_every, checkpoint=save_checkpoint)

    summary = run.summary()
    summary["config"] = config_path if config_path is not None else "<built-in example>"
    summary["out_dir"] = str(out_dir)
    tables_path = out_dir / "tables.npz"
    atomic_write_npz(tables_path, run.executor.state_arrays())
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if plot is not None:
        _plot(summary, plot)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(_summary_table(summary, str(tables_path), plot))


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed; install it with "
            "`pip install 'tpuemb[plot]'` (or `pip install matplotlib`), or drop --plot"
        ) from None


def _plot(summary: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    top.plot(summary["loss"])
    top.set_ylabel("loss")
    for name, table in summary["tables"].items():
        bottom.plot(table["update_norm"], label=name)
    bottom.set_ylabel("update norm")
    bottom.set_xlabel("step")
    bottom.legend()
    figure.tight_layout()
    directory = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(directory, f".{os.path.basename(path)}.tmp.png")
    figure.savefig(temp, metadata={"Software": None})
    plt.close(figure)
    os.replace(temp, path)


def _per_host(per_step: list[list[int]]) -> str:
    """Mean count per step for each host: ``h0 12.5, h1 11.0`` (just the number for one host)."""
    if not per_step:
        return "-"
    hosts = len(per_step[0])
    means = [sum(step[h] for step in per_step) / len(per_step) for h in range(hosts)]
    if hosts == 1:
        return f"{means[0]:.1f}"
    return ", ".join(f"h{h} {mean:.1f}" for h, mean in enumerate(means))


def _summary_table(summary: dict[str, Any], tables_path: str, plot: str | None) -> str:
    loss = summary["loss"]
    lines = [
        f"tpuemb simulate: {summary['steps']} steps of synthetic data on {summary['config']} "
        f"(seed {summary['seed']})",
    ]
    if loss:
        lines.append(f"loss: {loss[0]:.4f} (step 0) -> {loss[-1]:.4f} (step {len(loss) - 1})")
    header = ("table", "optimizer", "rows touched/step", "update norm first -> last",
              "ids/step per host", "unique ids/step per host")
    rows = [header]
    for name, table in summary["tables"].items():
        touched = table["rows_touched"]
        norms = table["update_norm"]
        rows.append((
            name,
            table["optimizer"],
            f"{sum(touched) / max(len(touched), 1):.1f}",
            f"{norms[0]:.4g} -> {norms[-1]:.4g}" if norms else "-",
            _per_host(table["ids_per_host"]),
            _per_host(table["unique_ids_per_host"]),
        ))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    for index, row in enumerate(rows):
        lines.append("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths,
                                                                            strict=True)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    lines.append(f"tables and slots written to {tables_path}; summary in "
                 f"{os.path.join(summary['out_dir'], 'summary.json')}")
    if plot is not None:
        lines.append(f"plot written to {plot}")
    return "\n".join(lines)

