"""`tpuemb simulate`: replay recorded steps (--batches) or run the synthetic example.

Thin by design: options are parsed and checked here, the work is ``tpuemb_cfg.executor.replay``,
``tpuemb_cfg.sim.synthetic.SyntheticRun`` (one worker) and
``tpuemb_cfg.sim.multiworker.MultiWorkerRun`` (``--workers N``); ``_progress`` shows how every
mode's run goes (a bar on a terminal, timestamped lines otherwise) and ``_outputs`` writes the
files of both synthetic runs.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tpuemb_cfg import units
from tpuemb_cfg.commands.flags import echo, keras_backend_option
from tpuemb_cfg.errors import InputError, NumericalError, OutputError, UsageError
from tpuemb_cfg.limits import available_memory

if TYPE_CHECKING:
    from tpuemb_cfg.commands._progress import RunLog
    from tpuemb_cfg.executor.options import Placement, RunOptions
    from tpuemb_cfg.session import Prepared
    from tpuemb_cfg.sim.options import SyntheticOptions

__all__ = ["available_memory", "backend_option", "engine_option", "parse_size", "ray_runtime_env",
           "seed_option", "simulate"]

_SYNTHETIC_ONLY = ("steps", "out_dir", "plot", "checkpoint_every", "resume", "learning_rate",
                   "bag_sizes", "ids", "sequence_lengths", "save_batches", "tables_output")
_REPLAY_ONLY = ("init_path", "out_path")
_SPEC_KEY = "tpuemb_cfg.sim.spec"  # where --spec leaves its LoadedSpec in click's ctx.meta
_BUILT_IN = "<built-in example>"


def parse_size(text: str, option: str = "--max-memory") -> int:
    """The bytes of a SIZE option (``--max-memory``): the one size grammar, ``units.parse_size``
    (bytes, or K/M/G/T = 2^10, 2^20, ...: ``8G`` is 8 GiB wherever a size is given)."""
    try:
        return units.parse_size(text)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{option} {text}: {exc}") from None


def seed_option(text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--seed N`` (default 0) of every command that draws numbers, read by the one seed
    grammar (``units.parse_seed``: 0 to 2^64 - 1); ``text``: what it seeds in that command."""
    return click.option("--seed", default="0", show_default=True, metavar="N",
                        callback=_seed, help=f"{text} ({units.SEED_HELP}).")


def _seed(ctx: click.Context, param: click.Parameter, value: object) -> int:
    try:
        return units.parse_seed(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--seed {value}: {exc}") from None


def engine_option(text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--engine numba|numpy`` (default numba), the option of every command that runs steps;
    ``text``: its help in that command."""
    return click.option("--engine", type=click.Choice(["numba", "numpy"]), default="numba",
                        show_default=True, help=text)


def backend_option(text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--backend local|ray`` (default local): where the tables live; ``text``: its help."""
    return click.option("--backend", type=click.Choice(["local", "ray"]), default="local",
                        show_default=True, help=text)


def _source(ctx: click.Context, name: str) -> str:
    """Where the value of option ``name`` came from: ``COMMANDLINE``, ``DEFAULT_MAP`` (a
    ``--spec`` file), ``DEFAULT``, ..."""
    source = ctx.get_parameter_source(name)
    return "DEFAULT" if source is None else source.name


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _option_name(name: str) -> str:
    return {"init_path": "--init", "out_path": "--out", "tables_output": "--tables"}.get(
        name, "--" + name.replace("_", "-"))


def _refuse_beyond_machine(limit: int) -> None:
    """An explicit --max-memory above this machine's physical memory would only trade a clear
    refusal for the kernel's out-of-memory kill: refuse it."""
    from tpuemb_cfg.limits import total_memory
    from tpuemb_cfg.units import format_size

    total = total_memory()
    if total is not None and limit > total:
        raise UsageError(
            f"--max-memory {format_size(limit)} is more than this machine has "
            f"({format_size(total)} of memory); give at most that, or spread the tables over "
            "several machines with --backend ray (docs/scale.md)"
        )


def _load_default_config() -> Any:
    from tpuemb_cfg import load

    resource = importlib.resources.files("tpuemb_cfg.data") / "default_config.pbtxt"
    return load(resource.read_bytes(), "text")


def _spec_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--spec``: the spec's values become the defaults of the other options.

    The option is eager, so this runs before the options it provides defaults for; the loaded
    spec (its schedules and path) waits in ``ctx.meta`` for the command.
    """
    if value is not None:
        from tpuemb_cfg.sim.spec import load_spec

        loaded = load_spec(value)
        ctx.default_map = {**(ctx.default_map or {}), **loaded.options}
        ctx.meta[_SPEC_KEY] = loaded


@click.command("simulate")
@keras_backend_option
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--batches", "batches_path", type=click.Path(dir_okay=False), metavar="B.npz",
              help="Replay the recorded steps of B.npz (the replay contract, docs/simulate.md).")
@click.option("--init", "init_path", type=click.Path(dir_okay=False), metavar="I.npz",
              help="Replay: initial tables and slots (missing entries get defaults).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), metavar="O.npz",
              help="Replay: write final tables, slots and every step's activations here.")
@click.option("--combiner", "combiners", multiple=True, metavar="NAME | F=NAME",
              help="Combiner (sum, mean, sqrtn): NAME sets every feature, F=NAME feature index "
                   "F; the others keep a spec's (CONFIG.py/.toml), else mean. Repeatable.")
@click.option("--bag-sizes", type=click.Choice(["auto", "fixed", "uniform"]), default="auto",
              show_default=True,
              help="Synthetic run: ids per bag. fixed: as many as the spec's input shapes give; "
                   "uniform: 1 to that many; auto: fixed where the configuration says, else 1 "
                   "to 4 (docs/simulate.md).")
@click.option("--ids", default="zipf:1.1", show_default=True, metavar="zipf[:S] | uniform",
              help="Synthetic run: how ids fall over a table's rows: a Zipf law of exponent S > 0 "
                   "(a few popular ids and a long tail) or uniform (every row alike, as Model "
                   "Garden's and keras-rs' dummy data).")
@click.option("--sequence-lengths", default="full", show_default=True,
              metavar="full | fixed:N | uniform[:LO[:HI]] | geometric:MEAN",
              help="Synthetic run: how many positions of a sequence feature ([batch, L] "
                   "input) each sample fills, the rest left empty: all, N, uniform from LO "
                   "(default 1) to HI (default L), or geometric of mean MEAN cut at L.")
@click.option("--save-batches", type=click.Path(dir_okay=False), metavar="B.npz",
              help="Synthetic run: write every step's ids, row splits, gradients and learning "
                   "rates (the replay contract); `tpuemb simulate CONFIG --batches B.npz --seed "
                   "N --out O.npz` ends with the same tables bit for bit.")
@click.option("--tables", "tables_output", type=click.Choice(["all", "touched", "none"]),
              default="touched", show_default=True,
              help="Synthetic run: what OUT_DIR/tables.npz holds: only the rows the run touched "
                   "(touched: every other row keeps its initial value; --init reads the file), "
                   "every table and slot (all), or no file (none).")
@click.option("--dry-run", is_flag=True,
              help="Print the plan (tables, rows, bytes, engine, workers) and the whole "
                   "process's memory estimate with its parts, of a synthetic run, a multi-worker "
                   "run or a --batches replay (--json: as JSON); with --backend ray, also each "
                   "host actor's rows, memory and node; run and write nothing.")
@seed_option("Seed of the default initial values and of the synthetic data")
@click.option("--steps", type=click.IntRange(min=1), default=100, show_default=True,
              help="Synthetic run: number of steps.")
@click.option("--out-dir", type=click.Path(file_okay=False), default="tpuemb-out",
              show_default=True, help="Synthetic run: folder for tables, summary, checkpoint.")
@click.option("--learning-rate", type=float, default=0.1, show_default=True,
              help="Synthetic run: value sent for every dynamic learning-rate tag. A spec's "
                   "(CONFIG.py/.toml) tags get its own schedules unless this is given.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON on stdout.")
@click.option("--plot", type=click.Path(dir_okay=False), metavar="FILE.png",
              help="Synthetic run: plot loss and update norms per step, and each dynamic "
                   "learning-rate tag's rate per step when there are any (needs matplotlib).")
@click.option("--checkpoint-every", type=click.IntRange(min=1), metavar="N",
              help="Synthetic run: save the full state to OUT_DIR/checkpoint.npz every N steps.")
@click.option("--resume", is_flag=True,
              help="Synthetic run: continue from OUT_DIR/checkpoint.npz.")
@click.option("--max-memory", metavar="SIZE",
              help="Refuse to start when the estimated peak memory exceeds SIZE (default: what "
                   "the run adds held against 80% of available RAM; --backend ray: the limit of "
                   "each host's actor, its process included; the nodes' memory is checked too). "
                   f"{units.SIZE_HELP}.")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress: neither the bar (stderr a terminal) nor the timestamped lines "
                   "(otherwise; one at most every TPUEMB_LOG_EVERY seconds, default 10).")
@click.option("--strict-finite", is_flag=True,
              help="An update that leaves a parameter NaN or infinite (or an --init or "
                   "checkpoint holding one) is an error, exit 2, for CI; by default the run "
                   "keeps TensorFlow's result and warns once with the cause (also under -q, and "
                   "in --json and summary.json as nonfinite).")
@engine_option("numba: compiled kernels (falls back to numpy, with a warning, when numba cannot be "
               "imported); numpy: the readable reference, same results.")
@backend_option("local: the tables in this process; ray: each host's rows in its own Ray actor, "
                "same results bit for bit (docs/scale.md; pip install 'tpuemb[ray]').")
@click.option("--ray-address", metavar="ADDR",
              help="--backend ray: join the Ray cluster at ADDR (default: RAY_ADDRESS, else "
                   "start a local Ray instance for the run).")
@click.option("--shards", type=click.IntRange(min=1), metavar="N",
              help="--backend ray: N host actors instead of the configuration's num_hosts.")
@click.option("--runtime-env", metavar="JSON | @FILE.json",
              help="--backend ray: Ray's runtime_env of the host actors (pip, env_vars, "
                   "working_dir, ...), a JSON object; tpuemb adds itself to its py_modules.")
@click.option("--no-ship", is_flag=True,
              help="--backend ray: do not send this tpuemb to the host actors (every node has "
                   "it installed).")
@click.option("--spec", type=click.Path(dir_okay=False), metavar="SIM.pbtxt", is_eager=True,
              expose_value=False, callback=_spec_callback,
              help="Take every option from a simulation spec (docs/multiworker.md); options "
                   "given on the command line override it.")
@click.option("--compare-dropping", is_flag=True,
              help="SparseCore spec: run the same batches again without limits and report the "
                   "drift (table and slot differences, activation differences per step).")
@click.option("--allow-id-dropping/--no-allow-id-dropping", default=None,
              help="SparseCore spec: drop the ids over a limit (or refuse the step), whatever "
                   "the configuration's allow_id_dropping says.")
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
def simulate(  # noqa: PLR0913 - a click command: one parameter per option
    ctx: click.Context,
    config: str | None,
    batches_path: str | None,
    init_path: str | None,
    out_path: str | None,
    combiners: tuple[str, ...],
    bag_sizes: str,
    ids: str,
    sequence_lengths: str,
    save_batches: str | None,
    tables_output: str,
    dry_run: bool,
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
    strict_finite: bool,
    engine: str,
    backend: str,
    ray_address: str | None,
    shards: int | None,
    runtime_env: str | None,
    no_ship: bool,
    compare_dropping: bool,
    allow_id_dropping: bool | None,
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
      tpuemb simulate [CONFIG] --dry-run        (the plan and the memory estimate)
      (--dry-run also shows a --batches replay's or a --workers run's plan)
    Several workers (docs/multiworker.md), all options from a spec file:
      tpuemb simulate [CONFIG] --workers N [--replicas-to-aggregate R | --max-staleness S]
      tpuemb simulate CONFIG --spec sim.pbtxt [options overriding the spec]
    SparseCore spec (docs/sparsecore/simulate.md): limits, id dropping, their cost:
      tpuemb simulate SPEC.py [--batches B.npz --out O.npz] [--compare-dropping]
    """
    # None: the library's default, 80% of the memory available (--backend ray: what the
    # cluster's nodes have available); its refusal says so and suggests what works.
    limit = parse_size(max_memory) if max_memory is not None else None
    _check_placement(ctx, backend, limit)
    from tpuemb_cfg.commands._progress import log_every

    log_every()  # a bad TPUEMB_LOG_EVERY is refused before anything starts
    actor_env = ray_runtime_env(runtime_env) if backend == "ray" else None
    spec = ctx.meta.get(_SPEC_KEY)
    from tpuemb_cfg.executor.options import RunOptions
    from tpuemb_cfg.executor.storage import placement as make_placement
    from tpuemb_cfg.executor.workload import parse_ids, parse_sequence_lengths
    from tpuemb_cfg.sim.options import SyntheticOptions

    records = _Records(
        RunOptions(seed=seed, engine=engine, max_memory=limit, strict_finite=strict_finite),
        make_placement(backend, shards=shards, ray_address=ray_address, runtime_env=actor_env,
                       ship=False if no_ship else None),
        SyntheticOptions(
            # Not given (here or by --spec): a compiled spec's tags get the spec's learning rates.
            learning_rate=learning_rate if _source(ctx, "learning_rate") != "DEFAULT" else None,
            schedules=spec.schedules if spec is not None else (),
            schedules_source=spec.path if spec is not None else None,
            ids=parse_ids(ids), sequence_lengths=parse_sequence_lengths(sequence_lengths)),
    )
    request = _Request(config, combiners, steps, Path(out_dir), as_json, plot, quiet, dry_run,
                       bag_sizes=bag_sizes, tables=tables_output, save_batches=save_batches,
                       checkpoint_every=checkpoint_every, resume=resume, spec=spec)
    if config is not None and _is_sparsecore(config):  # its own run: limits and dropping
        _sparsecore_command(ctx, request, records, _SparseCoreRequest(
            compare_dropping, allow_id_dropping, config, batches_path, init_path, out_path))
        return
    if compare_dropping or allow_id_dropping is not None:
        raise UsageError("--compare-dropping and --allow-id-dropping apply to SparseCore specs "
                         "only (docs/sparsecore/simulate.md)")
    several = {"workers": workers, "replicas_to_aggregate": replicas_to_aggregate,
               "max_staleness": max_staleness, "init_tokens": init_tokens, "delay": delay}
    if any(value is not None for value in several.values()):
        if batches_path is not None:
            raise UsageError("--workers, --replicas-to-aggregate, --max-staleness, --init-tokens "
                             "and --delay apply to synthetic runs, not to --batches replays")
        _multi_worker_command(ctx, request, records, several)
    elif batches_path is not None:
        _replay_command(ctx, request, records, _ReplayFiles(config, batches_path, init_path,
                                                            out_path))
    else:
        _synthetic_command(ctx, request, records)


@dataclass(frozen=True)
class _Records:
    """The library's option records of one command: how the run goes (``RunOptions``), where
    the tables live (``Placement``) and what data a synthetic run draws (``SyntheticOptions``)."""

    options: RunOptions
    placement: Placement
    data: SyntheticOptions


@dataclass(frozen=True)
class _Request:
    """What a synthetic run of the command reads, writes and shows (its options as given)."""

    config: str | None
    combiners: tuple[str, ...]
    steps: int
    out_dir: Path
    as_json: bool
    plot: str | None
    quiet: bool
    dry_run: bool
    bag_sizes: str = "auto"
    tables: str = "touched"
    save_batches: str | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    spec: Any = None

    @property
    def label(self) -> str:
        """CONFIG as the messages name it."""
        return self.config if self.config is not None else _BUILT_IN


@dataclass(frozen=True)
class _ReplayFiles:
    """The files of a ``--batches`` replay: CONFIG, B.npz, I.npz, O.npz."""

    config: str | None
    batches: str
    init: str | None
    out: str | None


def ray_runtime_env(text: str | None) -> dict[str, Any] | None:
    """``--runtime-env`` (a JSON object or ``@FILE.json``), checked before anything starts."""
    if text is None:
        return None
    from tpuemb_cfg.backends.ray.runtime_env import parse_runtime_env

    return parse_runtime_env(text)


def _check_placement(ctx: click.Context, backend: str, limit: int | None) -> None:
    """``--max-memory`` within this machine and the Ray options only with ``--backend ray``."""
    if backend != "ray" and limit is not None:
        _refuse_beyond_machine(limit)
    if backend != "ray":
        wrong = [_option_name(n) for n in ("ray_address", "shards", "runtime_env", "no_ship")
                 if _given(ctx, n)]
        if wrong:
            raise UsageError(f"{', '.join(wrong)} appl{'ies' if len(wrong) == 1 else 'y'} to "
                             "--backend ray only")


def _multi_worker_command(ctx: click.Context, request: _Request, records: _Records,
                          several: dict[str, Any]) -> None:
    """``--workers`` and the other multi-worker options: checked, then the run (or its plan)."""
    wrong = [_option_name(n) for n in ("checkpoint_every", "resume", "save_batches",
                                       *_REPLAY_ONLY) if _given(ctx, n)]
    if request.save_batches is not None and "--save-batches" not in wrong:  # from a --spec
        wrong.append("--save-batches")
    if wrong:
        raise UsageError(f"{', '.join(wrong)} cannot be combined with a multi-worker run")
    max_staleness = several["max_staleness"]
    if max_staleness is not None and max_staleness < 0:
        raise UsageError(
            f"--max-staleness {max_staleness}: a gradient more than S updates old is "
            "dropped, so a negative S drops every gradient and nothing is ever trained; "
            "expected 0 or more (0: only gradients computed on the latest tables apply)")
    for option, value, low in (("--max-staleness", max_staleness, 0),
                               ("--replicas-to-aggregate", several["replicas_to_aggregate"], 1),
                               ("--init-tokens", several["init_tokens"], -1)):
        if value is not None and not low <= value <= units.MAX_INT64:
            raise UsageError(f"{option} {value}: expected {low} to {units.MAX_INT64} "
                             "(2^63 - 1: TensorFlow holds it in an int64)")
    # A spec's checkpoint, resume and batches options do not apply to several workers.
    request = replace(request, checkpoint_every=None, resume=False, save_batches=None)
    if not request.dry_run:
        _check_synthetic_outputs(request.config, request.spec, request.out_dir, request.plot,
                                 resume=False, checkpoints=False, tables=request.tables)
    several = {**several, "workers": several["workers"] or 1,
               "init_tokens": -1 if several["init_tokens"] is None else several["init_tokens"]}
    with _config_errors(request.label), _session_of(request, records):
        _synthetic(request, records, workers=several)


def _replay_command(ctx: click.Context, request: _Request, records: _Records,
                    files: _ReplayFiles) -> None:
    """``--batches B.npz``: the replay's options checked, then the replay (or its plan)."""
    wrong = [_option_name(n) for n in _SYNTHETIC_ONLY if _given(ctx, n)]
    if wrong:
        raise UsageError(f"{', '.join(wrong)} appl{'ies' if len(wrong) == 1 else 'y'} to "
                         "synthetic runs only, not to --batches replays")
    if files.config is None:
        raise UsageError("--batches needs CONFIG: tpuemb simulate CONFIG --batches B.npz "
                         "--out O.npz")
    if files.out is None and not request.dry_run:
        raise UsageError("--batches needs --out O.npz (where the final tables, slots and "
                         "activations go)")
    spec = request.spec
    if spec is not None and spec.schedules:
        raise UsageError(f"{spec.path}: learning_rate_schedule applies to synthetic runs; a "
                         "replay sends its recorded learning rates")
    if request.dry_run:
        with _config_errors(files.config):
            _replay_dry_run(files, request.combiners, records, request.as_json)
        return
    assert files.out is not None
    _check_replay_outputs(files.config, spec, files.batches, files.init, files.out)
    with _config_errors(files.config), _session_of(request, records):
        _replay(files, request.combiners, records, as_json=request.as_json, quiet=request.quiet)


def _synthetic_command(ctx: click.Context, request: _Request, records: _Records) -> None:
    """No ``--batches``, one worker: the options checked, then the run (or its plan)."""
    wrong = [_option_name(n) for n in _REPLAY_ONLY if _given(ctx, n)]
    if wrong:
        raise UsageError(f"{', '.join(wrong)} need{'s' if len(wrong) == 1 else ''} --batches "
                         "(replay mode); a synthetic run writes to --out-dir")
    if request.save_batches is not None and request.resume:
        raise UsageError("--save-batches cannot be combined with --resume: the steps before the "
                         "checkpoint are not in this process; run from the start to save every "
                         "step's batches")
    if not request.dry_run:
        _check_synthetic_outputs(request.config, request.spec, request.out_dir, request.plot,
                                 resume=request.resume,
                                 checkpoints=request.checkpoint_every is not None,
                                 tables=request.tables, save_batches=request.save_batches)
    with _config_errors(request.label), _session_of(request, records):
        _synthetic(request, records)


def _session_of(request: _Request, records: _Records) -> contextlib.AbstractContextManager[None]:
    """The backend's session of a synthetic run. None for a ``--dry-run``: nothing runs, and
    with ``--backend ray`` its plan joins the cluster only to read its nodes (``_ray_plan``)."""
    placement = records.placement
    if request.dry_run:
        return contextlib.nullcontext()
    backend = placement.backend
    assert isinstance(backend, str)
    return _backend_session(backend, placement)


def _read(config: str | None, spec: Any, *more: tuple[str, str | None]) -> list[tuple[str, str]]:
    """The files a run reads, as ``(option, path)`` pairs: no output may be one of them."""
    pairs = [("CONFIG", config), ("--spec", spec.path if spec is not None else None), *more]
    return [(label, str(path)) for label, path in pairs if path is not None]


def _check_replay_outputs(config: str, spec: Any, batches: str, init: str | None,
                          out: str) -> None:
    """Before anything is read: ``--out`` is a writable ``.npz`` path and no input."""
    from tpuemb_cfg.atomic import check_outputs

    if out == "-":
        raise UsageError("--out -: a replay writes an .npz archive; give its file name (O.npz)")
    check_outputs([("--out", out)], _read(config, spec, ("--batches", batches), ("--init", init)))
    check_outputs([("--out", out)], suffixes=(".npz",))  # after: an input named as --out says so


def _check_synthetic_outputs(config: str | None, spec: Any, out_dir: Path, plot: str | None,
                             *, resume: bool, checkpoints: bool, tables: str = "all",
                             save_batches: str | None = None) -> None:
    """Before anything is read: every file of a synthetic run can be written and is no input
    (``--resume`` reads OUT_DIR/checkpoint.npz, which later checkpoints replace by design)."""
    from tpuemb_cfg.atomic import check_outputs
    from tpuemb_cfg.commands._outputs import check_run_outputs

    checkpoint = str(out_dir / "checkpoint.npz")
    inputs = _read(config, spec, ("--resume", checkpoint if resume else None))
    check_run_outputs(out_dir, plot, inputs, tables=tables, save_batches=save_batches)
    if checkpoints and not resume:
        check_outputs([("--checkpoint-every", checkpoint)], inputs, make_dirs=True)


@contextlib.contextmanager
def _host_lost(hint: str | Callable[[], str]) -> Iterator[None]:
    """A Ray host lost during the block: its one-line error, completed with where to resume."""
    from tpuemb_cfg.backends.ray.storage import ShardLost

    try:
        yield
    except ShardLost as exc:
        raise exc.with_resume_hint(hint if isinstance(hint, str) else hint()) from None


@contextlib.contextmanager
def _phase(name: str) -> Iterator[None]:
    """A Ray host lost during the block is said to be lost in phase ``name`` (``checkpoint``,
    ``output``: what the command was writing when the storage read the hosts' rows)."""
    from tpuemb_cfg.backends.ray.storage import ShardLost

    try:
        yield
    except ShardLost as exc:
        raise exc.in_phase(name) from None


@contextlib.contextmanager
def _backend_session(backend: str, placement: Placement) -> Iterator[None]:
    """``--backend ray``: connected to Ray for the command (a local instance started and
    stopped, or the cluster at ``--ray-address``/``RAY_ADDRESS`` joined and left); an
    unreachable address fails here, before anything is written."""
    from tpuemb_cfg.executor.storage import choose_backend

    with choose_backend(backend).session(placement.options):
        yield


#: The options that set what a ``NumericalError`` blames (its ``parameter``).
_NUMERICAL_OPTIONS = {"learning_rate": "--learning-rate", "schedules": "the --spec schedule"}


@contextlib.contextmanager
def _config_errors(config_path: str) -> Iterator[None]:
    """Errors that name no file are about the configuration: name it. A learning rate that
    overflowed float32: name the option that set it."""
    try:
        yield
    except InputError as exc:
        if exc.path is None:
            exc.path = config_path
        raise
    except NumericalError as exc:
        option = _NUMERICAL_OPTIONS.get(exc.parameter or "")
        if option is None:
            raise
        raise NumericalError(f"{exc} (set by {option})", parameter=exc.parameter,
                             value=exc.value, table=exc.table) from None


class _Anchored:
    """The paths a run reads and writes, anchored to the folder the command started in.

    Code the run executes (a Python spec, a custom optimizer or combiner) may call
    ``os.chdir``: every file is read and written by its absolute path, taken before any such
    code runs, so outputs land where the user asked and the messages that are printed stay
    true. ``self[path]`` is the absolute path of ``path`` as typed; errors raised inside
    :meth:`named_as_typed` name the file as typed.
    """

    def __init__(self, *paths: str | None) -> None:
        self._real = {p: os.path.abspath(p) for p in paths if p is not None and p != "-"}

    def __getitem__(self, path: str) -> str:
        return self._real.get(path, path)

    @contextlib.contextmanager
    def named_as_typed(self) -> Iterator[None]:
        typed = {real: path for path, real in self._real.items()}
        try:
            yield
        except InputError as exc:
            if exc.path in typed:
                exc.path = typed[exc.path]
            raise


def _state_reader(backend: str | None) -> Callable[..., Any]:
    """How to read tables and slots (``--init``, a checkpoint): the Ray backend sends them to its
    hosts a block at a time, so it maps the file instead of reading it."""
    from tpuemb_cfg.npzio import map_npz, read_npz

    return map_npz if backend == "ray" else read_npz


class _HeadersRead(Exception):
    """The headers of an ``.npz`` file are read: stop before any array data."""


def _npz_headers(path: str, check: Callable[[Any], object] | None = None) -> dict[str, Any]:
    """The ``.npy`` headers of every member of ``path`` by key (``npzio.read_npz``'s checks,
    then ``check(headers)``), without decompressing any array."""
    from tpuemb_cfg.npzio import read_npz

    found: dict[str, Any] = {}

    def keep(headers: Any) -> None:
        if check is not None:
            check(headers)
        found.update(headers)
        raise _HeadersRead

    try:
        read_npz(path, check_keys=keep)
    except _HeadersRead:
        pass
    return found


def _replay(files: _ReplayFiles, combiner_args: tuple[str, ...], records: _Records, *,
            as_json: bool, quiet: bool) -> None:
    """``--batches B.npz --out O.npz``: replay the steps, write O.npz, print the summary."""
    from tpuemb_cfg.executor.engines import get_engine
    from tpuemb_cfg.executor.replay import parse_steps, replay, require_replay_memory
    from tpuemb_cfg.npzio import atomic_write_npz, read_npz
    from tpuemb_cfg.session import prepare, with_combiner_arguments

    config_path, batches_path, init_path, out_path = (files.config, files.batches, files.init,
                                                      files.out)
    assert config_path is not None and out_path is not None
    from tpuemb_cfg.commands._progress import RunLog

    log = RunLog.for_stderr(quiet)
    count = [0]  # the steps of B.npz, counted from its headers
    limit = records.options.memory_limit
    backend = records.placement.backend
    real = _Anchored(batches_path, init_path, out_path)  # before a spec's code runs
    with real.named_as_typed():
        # One parse of the file: diagnostics get line:column and suppressions, then the plan.
        prepared = with_combiner_arguments(prepare(config_path), combiner_args)
        local = backend != "ray"
        init_bytes = (sum(h.nbytes for h in _npz_headers(real[init_path]).values())
                      if init_path is not None and local else None)

        def check(headers: Any) -> None:
            """From the .npy headers, before any array is decompressed: the keys, and whether
            the replay fits (--max-memory)."""
            count[0] = len(parse_steps(headers, len(prepared.plan.features), batches_path))
            if local:
                require_replay_memory(prepared.plan, headers, limit,
                                      engine=get_engine(records.options.engine).name,
                                      init_bytes=init_bytes)

        batches = read_npz(real[batches_path], max_bytes=limit if local else None,
                           check_keys=check)
        read_state = _state_reader(backend if isinstance(backend, str) else None)
        init = read_state(real[init_path]) if init_path is not None else None
    tables: dict[str, dict[str, Any]] = {}
    for table in prepared.plan.tables:
        tables[table.name] = {"optimizer": table.optimizer.name}
    nonfinite: list[dict[str, Any]] = []  # the first NaN or infinity, with its cause

    with _host_lost("a replay writes nothing before its end: run it again"), \
            real.named_as_typed(), log.steps(count[0]) as advance:

        def record(step: int, reports: Any) -> None:
            for name, report in reports.items():
                for field, value in report.as_dict().items():
                    tables[name].setdefault(field, []).append(value)
            if advance is not None:
                advance(step + 1)

        # The memory was checked from the .npy headers above, before any array was read.
        options = replace(records.options, check_memory=False) if local else records.options
        out = replay(
            prepared, batches, init, options=options,
            placement=records.placement, sources=(batches_path, init_path),
            on_step=record, on_nonfinite=lambda event: nonfinite.append(event.as_dict()),
        )
    with _host_lost("a replay writes nothing before its end: run it again"), \
            real.named_as_typed(), _phase("output"), log.timed() as took:
        atomic_write_npz(real[out_path], out)
    log.outputs([(out_path, real[out_path])], took())
    steps = sum(1 for k in out if k.endswith("/activations") and "/f0/" in k)
    if as_json:
        summary = {"steps": steps, "config": config_path, "out": out_path, "tables": tables,
                   **({"nonfinite": nonfinite[0]} if nonfinite else {})}
        echo(json.dumps(summary, indent=2))
    elif not quiet:
        echo(f"replayed {steps} step(s) of {batches_path} on {config_path}; wrote {out_path}",
             err=True)
        _combiner_note(prepared)


def _combiner_note(prepared: Prepared) -> None:
    """After a run's output: which combiners a configuration that records none was run with."""
    note = prepared.combiner_note
    if note is not None:
        echo(f"note: {note}", err=True)


def _prepare(
    config_path: str | None, combiner_args: tuple[str, ...], bag_sizes: str = "auto"
) -> Prepared:
    """CONFIG (a configuration or a spec; else the built-in example) parsed, validated and
    planned once, with the combiners of ``--combiner`` on top of the spec's (the plan is
    re-labelled, not rebuilt) and the ``--bag-sizes`` distribution."""
    from dataclasses import replace

    from tpuemb_cfg.session import prepare, with_combiner_arguments

    prepared = prepare(config_path if config_path is not None else _load_default_config())
    prepared = with_combiner_arguments(prepared, combiner_args)
    if bag_sizes != "auto":
        prepared = replace(prepared, plan=prepared.plan.with_bags(bag_sizes=bag_sizes))
    return prepared


def _synthetic(request: _Request, records: _Records,
               workers: dict[str, Any] | None = None) -> None:
    """A synthetic run, on one worker or (``workers``: the ``WorkerOptions`` values) several:
    run with a progress bar, write OUT_DIR/tables.npz (``request.tables``: all, touched rows, or
    none) and summary.json, print the summary.

    One worker resumes from and checkpoints to OUT_DIR/checkpoint.npz and streams its batches
    to ``save_batches``; ``dry_run`` prints the plan and the memory estimate instead.
    """
    from tpuemb_cfg.commands._outputs import require_matplotlib

    if request.plot is not None and not request.dry_run:
        require_matplotlib()
    out_dir, plot = request.out_dir, request.plot
    checkpoint_path = out_dir / "checkpoint.npz"  # as typed, for messages
    real = _Anchored(str(out_dir), str(checkpoint_path), plot,
                     request.save_batches)  # before user code
    with real.named_as_typed():
        if (request.resume and not request.dry_run
                and not os.path.exists(real[str(checkpoint_path)])):
            raise UsageError(f"--resume: no checkpoint at {checkpoint_path}; run with "
                             "--checkpoint-every N first, or drop --resume")
        prepared = _prepare(request.config, request.combiners, request.bag_sizes)
        if request.dry_run:
            _dry_run(prepared, request, records, workers)
            return
        if workers is not None:
            summary = _run_workers(prepared, request, records, workers, real)
        else:
            summary = _run_one(prepared, request, records, real)
        _show(prepared, request, summary, several=workers is not None)


def _show(prepared: Prepared, request: _Request, summary: dict[str, Any], *,
          several: bool) -> None:
    """A synthetic run's summary on stdout (``--json``: as JSON), then the combiner note."""
    from tpuemb_cfg.sim.report import run_text, workers_text

    if request.as_json:
        echo(json.dumps(summary, indent=2))
    else:
        echo(workers_text(summary) if several
             else run_text(summary, str(request.out_dir / "tables.npz"), request.plot))
        if not request.quiet:
            _combiner_note(prepared)


def _write(prepared: Prepared, request: _Request, real: _Anchored, summary: dict[str, Any],
           state: Any, outputs: Any) -> None:
    """OUT_DIR's files of a synthetic run: tables.npz (as ``--tables`` says), summary.json and
    the plot (``outputs``: the ``OutputSet`` they are staged in, None: written at once)."""
    from tpuemb_cfg.commands._outputs import write_run

    tables, plot = request.tables, request.plot
    summary["tables_written"] = tables
    if tables == "touched":
        summary["rows_written"] = {
            table.name: int(len(state[f"table/{table.name}/rows"]))
            for table in prepared.plan.tables}
    write_run(Path(real[str(request.out_dir)]), summary, state if tables != "none" else None,
              request.label, real[plot] if plot is not None else None,
              shown_dir=request.out_dir, outputs=outputs)


def _run_workers(prepared: Prepared, request: _Request, records: _Records,
                 workers: dict[str, Any], real: _Anchored) -> dict[str, Any]:
    """``--workers N``: the multi-worker run, its files written; its summary."""
    from tpuemb_cfg.commands._progress import RunLog
    from tpuemb_cfg.sim.multiworker import MultiWorkerRun
    from tpuemb_cfg.sim.options import WorkerOptions

    steps, tables, plot = request.steps, request.tables, request.plot is not None
    log = RunLog.for_stderr(request.quiet)
    with _host_lost("a multi-worker run keeps no checkpoint: run it again"):
        several = MultiWorkerRun(prepared, records.options, records.placement,
                                 data=records.data, workers=WorkerOptions(**workers))

        def detail() -> str:  # a gradient computed or delivered; the chief's updates so far
            loss = f", loss {several.loss[-1]:.6g}" if several.loss else ""
            return f"updates {several.global_step:,}{loss}"

        with log.steps(2 * several.num_workers * steps, unit="gradient event",
                       detail=detail) as advance:
            several.run(steps, progress=advance, tables=tables, plot=plot)
        with _phase("output"):
            summary = several.summary()
            summary["memory"] = _memory_report(several.memory_estimate(steps, tables=tables,
                                                                       plot=plot))
            with log.timed() as took:
                _write(prepared, request, real, summary, several.saved_state(tables), None)
    log.outputs(_written(request, real), took())
    return summary


def _written(request: _Request, real: _Anchored) -> list[tuple[str, str]]:
    """The files a synthetic run has written, as ``(as typed, real path)`` pairs: what the
    outputs' log line names and measures."""
    shown = [str(request.out_dir / name) for name in ("tables.npz", "summary.json")
             if name != "tables.npz" or request.tables != "none"]
    pairs = [(path, str(Path(real[str(request.out_dir)]) / Path(path).name)) for path in shown]
    pairs += [(path, real[path]) for path in (request.plot, request.save_batches)
              if path is not None]
    return pairs


def _resume(run: Any, request: _Request, records: _Records, real: _Anchored) -> None:
    """``--resume``: ``run`` continued from OUT_DIR/checkpoint.npz, unless it is past
    ``--steps``."""
    from tpuemb_cfg.executor.core import CHECKPOINT_REMEDY

    checkpoint_path = request.out_dir / "checkpoint.npz"
    backend = records.placement.backend
    read_state = _state_reader(backend if isinstance(backend, str) else None)
    run.restore(read_state(real[str(checkpoint_path)], remedy=CHECKPOINT_REMEDY),
                str(checkpoint_path))
    steps = request.steps
    if run.step > steps:  # continuing would rewrite a longer run's outputs
        raise UsageError(
            f"--resume: the checkpoint {checkpoint_path} is at step {run.step}, "
            f"past --steps {steps}; give --steps {run.step} or more to continue "
            "that run, or another --out-dir without --resume to start a new one")


class _Checkpoints:
    """``--checkpoint-every``: where a run's checkpoints go, and the last one written (for the
    hint after a lost Ray host)."""

    def __init__(self, run: Any, request: _Request, real: _Anchored, log: RunLog) -> None:
        self.run = run
        self.log = log  # the RunLog told of each checkpoint written
        self.shown = request.out_dir / "checkpoint.npz"  # as typed, for messages
        self.out_dir = request.out_dir
        self.real_dir = Path(real[str(request.out_dir)])
        self.real = real[str(self.shown)]
        self.saved = [run.step] if request.resume else []  # the step of the checkpoint resumed

    def save(self) -> None:
        from tpuemb_cfg.npzio import atomic_write_npz

        try:
            self.real_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create the folder: {exc.strerror or exc}",
                              path=str(self.out_dir)) from None
        with _phase("checkpoint"), self.log.timed() as took:
            atomic_write_npz(self.real, self.run.checkpoint_arrays())  # atomic
        self.saved[:] = [self.run.step]
        self.log.checkpoint(str(self.shown), self.run.step, os.path.getsize(self.real), took())

    def resume_hint(self) -> str:
        if not self.saved:
            return _unsaved_hint(self.shown, resume=False)
        return (f"the last checkpoint is {self.shown} (step {self.saved[0]}): run the "
                "same command with --resume to continue from it on a fresh cluster")


def _unsaved_hint(checkpoint: Path, *, resume: bool) -> str:
    """Where to resume from when a Ray host is lost before the run saved a checkpoint
    (``resume``: it was resuming one, which is as it was)."""
    if resume:
        return (f"the checkpoint {checkpoint} is as it was: run the same command (with "
                "--resume) again on a fresh cluster")
    return "this run wrote no checkpoint (--checkpoint-every N keeps one): run it again"


def _run_one(prepared: Prepared, request: _Request, records: _Records,
             real: _Anchored) -> dict[str, Any]:
    """One worker: the synthetic run (resumed, checkpointed, its batches streamed), its files
    written; its summary."""
    from tpuemb_cfg.atomic import OutputSet
    from tpuemb_cfg.commands._outputs import batches_file, require_disk_space
    from tpuemb_cfg.commands._progress import RunLog
    from tpuemb_cfg.sim.synthetic import SyntheticRun

    steps, tables, plot = request.steps, request.tables, request.plot is not None
    save_batches = request.save_batches
    log = RunLog.for_stderr(request.quiet)
    kept: list[_Checkpoints] = []  # once the run has started (resumed)

    def hint() -> str:
        return (kept[0].resume_hint() if kept else
                _unsaved_hint(request.out_dir / "checkpoint.npz", resume=request.resume))

    # A Ray host lost in any phase: one line naming it, the phase and the checkpoint.
    with _host_lost(hint):
        run = SyntheticRun(prepared, records.options, records.placement, data=records.data)
        if request.resume:
            _resume(run, request, records, real)
        if save_batches is not None:
            require_disk_space("--save-batches", real[save_batches],
                               (steps - run.step) * run.data.batch_bytes())
        checkpoints = _Checkpoints(run, request, real, log)
        kept.append(checkpoints)

        def detail() -> str:
            return f"loss {run.history[-1]['loss']:.6g}" if run.history else ""

        # Staged together: the batches (streamed during the run), then the tables, the
        # summary and the plot, renamed into place at the end - or none of them.
        with OutputSet(make_dirs=True) as outputs:
            with batches_file(outputs, real[save_batches] if save_batches is not None
                              else None) as on_batch, \
                    log.steps(steps, start=run.step, detail=detail) as advance:
                run.run(steps, checkpoint_every=request.checkpoint_every,
                        checkpoint=checkpoints.save, progress=advance, on_batch=on_batch,
                        tables=tables, plot=plot)
            with _phase("output"):
                summary = run.summary()
                state = run.saved_state(tables)
                summary["memory"] = _memory_report(run.memory_estimate(
                    steps, tables=tables, checkpoints=request.checkpoint_every is not None,
                    plot=plot))
                began = log.clock()
                _write(prepared, request, real, summary, state, outputs)
    log.outputs(_written(request, real), log.clock() - began)  # committed with the set
    return summary


def _memory_report(estimate: Any) -> dict[str, Any]:
    """The summary's ``memory``: the run's estimate (an ``Estimate``'s parts, or total bytes),
    the same for the same run on this machine (measured figures would make equal runs write
    different summaries: ``benchmarks/bench_memory.py`` measures the peak)."""
    parts = estimate.as_dict() if hasattr(estimate, "as_dict") else {"total_bytes": estimate}
    return {"estimate": parts}


def _dry_run(prepared: Prepared, request: _Request, records: _Records,
             workers: dict[str, Any] | None = None) -> None:
    """``--dry-run``: what the run would do and need, printed; nothing runs or is written.
    ``workers``: a multi-worker run's options (its estimate is the chief's, with the workers'
    gradients in flight and accumulators)."""
    from tpuemb_cfg.executor.engines import get_engine
    from tpuemb_cfg.executor.memory import RunShape, step_ids
    from tpuemb_cfg.sim.synthetic import SyntheticData, run_estimate

    plan = prepared.plan
    steps, backend = request.steps, records.placement.backend
    local = backend != "ray"
    engine = get_engine(records.options.engine).name
    run_info: dict[str, Any] = {}
    if workers is None:
        estimate = run_estimate(plan, steps, engine=engine, data=records.data,
                                tables=request.tables,
                                checkpoints=request.checkpoint_every is not None,
                                plot=request.plot is not None, local=local)
    else:
        plan, estimate, run_info = _workers_plan(prepared, request, records, workers)
    data = SyntheticData(plan, seed=records.options.seed, ids=records.data.ids,
                         sequence_lengths=records.data.sequence_lengths)
    shape = RunShape(ids=data.ids, sequence_lengths=data.sequence_lengths)
    rows = []
    for table in plan.tables:
        per_step, distinct = step_ids(plan, table, shape)
        rows.append({**_table_info(table), "ids_per_step": round(per_step, 1),
                     "unique_ids_per_step": round(distinct, 1)})
    save_batches = request.save_batches
    info: dict[str, Any] = {
        "config": request.label,
        "steps": steps, "seed": data.seed, "engine": engine,
        "backend": backend,
        **run_info,
        "ids": str(data.ids), "sequence_lengths": str(data.sequence_lengths),
        "tables_written": request.tables,
        "tables": rows,
        "save_batches": save_batches,
        "save_batches_bytes": steps * data.batch_bytes() if save_batches is not None else None,
        "memory": _memory_plan(estimate, records.options.memory_limit),
    }
    _print_plan(info, request.as_json, _ray_plan(plan, records))


def _workers_plan(prepared: Prepared, request: _Request, records: _Records,
                  workers: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """A multi-worker ``--dry-run``'s plan (the chief's), memory estimate and run lines."""
    from tpuemb_cfg.executor.engines import get_engine
    from tpuemb_cfg.sim import multiworker
    from tpuemb_cfg.sim.options import WorkerOptions

    plan = multiworker.for_chief(prepared).plan
    count = workers["workers"]
    stale = workers.get("max_staleness")
    several = WorkerOptions(count, None if stale is not None
                            else workers.get("replicas_to_aggregate"), stale)
    estimate = multiworker.run_estimate(
        plan, request.steps, several, engine=get_engine(records.options.engine).name,
        data=records.data, tables=request.tables, plot=request.plot is not None,
        local=records.placement.backend != "ray")
    run_info: dict[str, Any] = {"workers": count, "mode": several.mode}
    if stale is not None:
        run_info["max_staleness"] = stale
    else:
        run_info["replicas_to_aggregate"] = several.replicas
        run_info["init_tokens"] = workers.get("init_tokens", -1)
    run_info["delay"] = workers.get("delay") or "fixed:0"
    return plan, estimate, run_info


def _table_info(table: Any) -> dict[str, Any]:
    """A table's line of a ``--dry-run`` plan: name, rows, dimension, optimizer, bytes."""
    slots = len(table.optimizer.slots)
    return {"name": table.name, "vocabulary": table.vocabulary,
            "dimension": table.dimension, "optimizer": table.optimizer.name,
            "bytes": (1 + slots) * table.vocabulary * table.dimension * 4}


def _memory_plan(estimate: Any, limit: int | None) -> dict[str, Any]:
    """A ``--dry-run``'s ``memory``: the estimate's parts and the limit it is held against
    (given, or 80% of the memory available plus the process)."""
    from tpuemb_cfg.limits import default_memory_limit

    default = limit is None
    if default:
        available = default_memory_limit()
        limit = None if available is None else available + estimate.process
    return {"estimate": estimate.as_dict(), "limit_bytes": limit,
            "limit": "default" if default else "--max-memory",
            "fits": limit is None or estimate.total <= limit}


def _print_plan(info: dict[str, Any], as_json: bool, ray: dict[str, Any] | None = None) -> None:
    """A ``--dry-run``'s plan on stdout (``ray``: the host actors' plan, ``_ray_plan``, shown
    before the closing line)."""
    from tpuemb_cfg.sim.report import plan_text

    if ray is not None:
        info = {**info, "ray": ray}
    if as_json:
        echo(json.dumps(info, indent=2))
        return
    lines = plan_text(info).split("\n")
    if ray is not None:
        lines[-1:-1] = _ray_plan_lines(ray)
    echo("\n".join(lines))


def _ray_plan(plan: Any, records: _Records) -> dict[str, Any] | None:
    """``--backend ray --dry-run``: each host actor's rows, estimate and reservation and the
    node it would go to (``placement.plan_hosts``), on the cluster of ``--ray-address`` or
    ``RAY_ADDRESS`` (joined to read its nodes, then left: no actor starts), else on this
    machine as the local Ray instance a run would start (Ray is not started); None for the
    local backend."""
    placement = records.placement
    if placement.backend != "ray":
        return None
    from tpuemb_cfg.backends.ray import placement as places
    from tpuemb_cfg.backends.ray.options import RayOptions

    options = placement.options if isinstance(placement.options, RayOptions) else RayOptions()
    hosts = int(options.shards if options.shards is not None else plan.num_hosts)
    address = options.ray_address or os.environ.get("RAY_ADDRESS") or None
    idle: list[int] = []
    if address is None:
        available = available_memory()
        nodes = [places.machine_node(available)] if available is not None else []
        where = "this machine (the local Ray instance a run starts; Ray was not started)"
    else:
        from tpuemb_cfg.backends.ray import connection

        with connection.ray_session(options.ray_address):
            ray = connection.import_ray()
            nodes = places.cluster_nodes(ray)
            where = connection.describe_cluster(ray)
            # a process already connected may hold idle actors a run would reuse
            idle = connection.idle_reservations(connection.session_token(ray))
    found = places.plan_hosts(plan, hosts, nodes, idle=idle)
    limit = records.options.memory_limit
    over = [h.host for h in found.hosts if limit is not None and h.reservation > limit]
    shown = found.as_dict()
    if found.refusal is not None:  # as the run's refusal would say it (--shards)
        from tpuemb_cfg.commands.flags import cli_message

        shown["refusal"] = cli_message(UsageError(found.refusal))
    return {"where": where, "max_memory_bytes": limit, "over_max_memory": over, **shown}


def _ray_plan_lines(ray: dict[str, Any]) -> list[str]:
    """The text of a ``_ray_plan``: a line per host and per node, and whether they fit."""
    from tpuemb_cfg.errors import printable
    from tpuemb_cfg.units import format_size

    hosts = ray["hosts"]
    lines = [f"ray: {len(hosts)} host actor(s) on {ray['where']}; each reserves its rows' "
             f"estimate and {format_size(ray['process_bytes'])} for its process"]
    rows = [("host", "rows", "estimate", "reservation", "node")]
    for host in hosts:
        node = host["node"]
        rows.append((str(host["host"]), f"{host['rows']:,}", format_size(host["estimate_bytes"]),
                     format_size(host["reservation_bytes"]),
                     "an idle actor, reused" if host["reused"] else
                     "does not fit" if node is None else printable(node)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    for node in ray["nodes"]:
        cpus = node["cpus"]
        note = ("no free CPU: takes no host" if cpus < 1 else
                "the driver's: tried first" if node["driver"] else "")
        lines.append(f"  node {printable(node['name'])}: {format_size(node['memory_bytes'])} of "
                     f"memory and {cpus:g} CPU{'' if cpus == 1 else 's'} available"
                     + (f" ({note})" if note else ""))
    if not ray["nodes"]:
        lines.append("  no node: this machine's available memory is unknown")
    if ray["over_max_memory"]:
        lines.append(f"  over --max-memory ({format_size(ray['max_memory_bytes'])}): host(s) "
                     + ", ".join(str(h) for h in ray["over_max_memory"]))
    lines.append("  placement: " + ("every host fits" if ray["fits"]
                                    else f"would be refused: {ray['refusal']}"))
    return lines


def _replay_dry_run(files: _ReplayFiles, combiner_args: tuple[str, ...], records: _Records,
                    as_json: bool) -> None:
    """``--batches B.npz --dry-run``: the replay's plan and memory estimate from the batches'
    ``.npy`` headers (no array is decompressed); nothing runs or is written."""
    from tpuemb_cfg.executor.engines import get_engine
    from tpuemb_cfg.executor.memory import replay_estimate
    from tpuemb_cfg.executor.replay import parse_steps
    from tpuemb_cfg.session import prepare, with_combiner_arguments

    config_path, batches_path, init_path = files.config, files.batches, files.init
    assert config_path is not None
    backend = records.placement.backend
    real = _Anchored(batches_path, init_path)  # before a spec's code runs

    def headers_of(path: str, check: Callable[[Any], object] | None = None) -> dict[str, Any]:
        return _npz_headers(real[path], check)

    with real.named_as_typed():
        prepared = with_combiner_arguments(prepare(config_path), combiner_args)
        plan = prepared.plan
        headers = headers_of(batches_path,
                             lambda h: parse_steps(h, len(plan.features), batches_path))
        init_bytes = (sum(h.nbytes for h in headers_of(init_path).values())
                      if init_path is not None else None)
    engine = get_engine(records.options.engine).name
    estimate = replay_estimate(plan, headers, engine=engine, init_bytes=init_bytes)
    if backend == "ray":  # the tables and their steps live in the actors
        from dataclasses import replace

        estimate = replace(estimate, state=0, steady=0, peak=0, pipelining=0)
    steps = len({key.partition("/")[0] for key in headers})
    rows = []
    for table in plan.tables:
        ids = [max((h.shape[0] for k, h in headers.items()
                    if k.endswith(f"/f{f}/ids") and h.shape), default=0)
               for f in table.features]
        rows.append({**_table_info(table), "ids_per_step": float(sum(ids)),
                     "unique_ids_per_step": float(min(sum(ids), table.vocabulary))})
    info: dict[str, Any] = {
        "config": config_path, "batches": batches_path, "init": init_path, "out": files.out,
        "steps": steps, "seed": records.options.seed, "engine": engine, "backend": backend,
        "batches_bytes": sum(h.nbytes for h in headers.values()),
        "tables": rows,
        "memory": _memory_plan(estimate, records.options.memory_limit),
    }
    _print_plan(info, as_json, _ray_plan(plan, records))


# SparseCore specs (docs/sparsecore/simulate.md): the run with the preprocessing's limits and
# id dropping, ``tpuemb_cfg.sim.sparsecore``.

#: Options a SparseCore run has no use for (its combiners are the tables', its data one worker's).
_SPARSECORE_REFUSED = ("combiners", "save_batches", "plot", "checkpoint_every",
                       "resume", "learning_rate", "workers", "replicas_to_aggregate",
                       "max_staleness", "init_tokens", "delay", "ray_address", "shards",
                       "runtime_env", "no_ship")


@dataclass(frozen=True)
class _SparseCoreRequest:
    """``--compare-dropping``, ``--allow-id-dropping`` (None: the configuration's) and the
    files: the spec, B.npz, I.npz, O.npz."""

    compare: bool
    allow_id_dropping: bool | None
    config: str
    batches: str | None
    init: str | None
    out: str | None


def _is_sparsecore(config: str) -> bool:
    from tpuemb_cfg.session import is_sparsecore_spec

    return is_sparsecore_spec(config)


def _sparsecore_command(ctx: click.Context, request: _Request, records: _Records,
                        files: _SparseCoreRequest) -> None:
    """A SparseCore spec: the options checked, the outputs checked before anything is read,
    then the replay (``--batches``) or the synthetic run, or the plan (``--dry-run``)."""
    wrong = [("--combiner" if n == "combiners" else _option_name(n))
             for n in _SPARSECORE_REFUSED if _given(ctx, n)]
    if _given(ctx, "backend") and records.placement.backend != "local":
        wrong.append("--backend ray")
    if request.spec is not None:
        wrong.append("--spec")
    if wrong:
        raise UsageError(f"{', '.join(wrong)}: not available for a SparseCore spec (its "
                         "combiners are its tables', its tables live in this process); "
                         "see docs/sparsecore/simulate.md")
    replay = files.batches is not None
    if replay:
        wrong = [_option_name(n) for n in ("steps", "ids", "sequence_lengths", "tables_output",
                                           "bag_sizes") if _given(ctx, n)]
        if wrong:
            raise UsageError(f"{', '.join(wrong)} appl{'ies' if len(wrong) == 1 else 'y'} to "
                             "synthetic runs only, not to --batches replays")
        if files.out is None and not request.dry_run:
            raise UsageError("--batches needs --out O.npz (where the final tables, slots and "
                             "activations go)")
    else:
        wrong = [_option_name(n) for n in _REPLAY_ONLY if _given(ctx, n)]
        if wrong:
            raise UsageError(f"{', '.join(wrong)} need{'s' if len(wrong) == 1 else ''} "
                             "--batches (replay mode); a synthetic run writes to --out-dir")
    summary_dir = request.out_dir if (not replay or _given(ctx, "out_dir")) else None
    if not request.dry_run:
        if replay:
            assert files.batches is not None and files.out is not None
            _check_replay_outputs(files.config, None, files.batches, files.init, files.out)
        if summary_dir is not None:
            _check_synthetic_outputs(files.config, None, summary_dir, None, resume=False,
                                     checkpoints=False,
                                     tables=request.tables if not replay else "none")
    with _config_errors(files.config):
        _sparsecore(request, records, files, summary_dir)


def _sparsecore(request: _Request, records: _Records, files: _SparseCoreRequest,
                summary_dir: Path | None) -> None:
    from tpuemb_cfg.session import prepare_sparsecore
    from tpuemb_cfg.sim.sparsecore.run import SparseCoreRun, describe

    real = _Anchored(files.batches, files.init, files.out,
                     str(summary_dir) if summary_dir is not None else None)
    with real.named_as_typed():
        setup = prepare_sparsecore(files.config)  # a spec's code may chdir: paths anchored
    if request.bag_sizes != "auto":  # e.g. uniform: ragged bags of 1 to the input's last axis
        plan = setup.prepared.plan.with_bags(bag_sizes=request.bag_sizes)
        setup = replace(setup, prepared=replace(setup.prepared, plan=plan))
    allow = (setup.allow_id_dropping if files.allow_id_dropping is None
             else files.allow_id_dropping)
    if request.dry_run:
        info = {**describe(setup, engine=records.options.engine, compare=files.compare),
                "config": files.config, "allow_id_dropping": allow,
                "compare_dropping": files.compare,
                "run": (f"a replay of {files.batches}" if files.batches is not None
                        else f"{request.steps} synthetic steps")}
        from tpuemb_cfg.sim.sparsecore.report import plan_text

        echo(json.dumps(info, indent=2) if request.as_json else plan_text(info))
        return
    with real.named_as_typed():
        init = None
        if files.init is not None:
            from tpuemb_cfg.npzio import read_npz

            init = read_npz(real[files.init])
        run = SparseCoreRun(setup, records.options, allow_id_dropping=allow,
                            compare=files.compare, initial_state=init,
                            state_source=files.init)
        if files.batches is not None:
            summary = _sparsecore_replay(run, files, records, real, request.quiet)
            source = files.batches
        else:
            summary = _sparsecore_synthetic(run, request, records)
            source = "synthetic data"
    summary["config"] = files.config
    config = setup.config
    header = (f"tpuemb simulate: {summary['steps']} step(s) of {source} on {files.config} "
              f"(SparseCore, {config.api}; {config.topology.describe()}, seed "
              f"{records.options.seed})")
    if summary_dir is not None:
        from tpuemb_cfg.commands._outputs import write_run
        from tpuemb_cfg.commands._progress import RunLog

        tables = request.tables if files.batches is None else "none"
        state = run.executor.state_arrays() if tables != "none" else None
        summary["tables_written"] = "all" if state is not None else "none"
        log = RunLog.for_stderr(request.quiet)
        with log.timed() as took:
            write_run(Path(real[str(summary_dir)]), summary, state, files.config,
                      shown_dir=summary_dir)
        names = ["tables.npz"] if state is not None else []
        log.outputs([(str(summary_dir / name), str(Path(real[str(summary_dir)]) / name))
                     for name in [*names, "summary.json"]], took())
    from tpuemb_cfg.sim.sparsecore.report import run_text

    echo(json.dumps(summary, indent=2) if request.as_json else run_text(summary, header))


def _sparsecore_replay(run: Any, files: _SparseCoreRequest, records: _Records, real: _Anchored,
                       quiet: bool) -> dict[str, Any]:
    """``--batches``: every recorded step with the limits, O.npz written (the replay
    contract's keys: final tables and slots, every step's activations of the kept ids)."""
    from tpuemb_cfg.commands._progress import RunLog
    from tpuemb_cfg.executor.replay import parse_steps
    from tpuemb_cfg.npzio import atomic_write_npz, read_npz

    assert files.batches is not None and files.out is not None
    count = len(run.plan.features)
    source = files.batches

    def check(headers: Any) -> None:
        parse_steps(headers, count, source)  # the keys, before any array is decompressed

    batches = read_npz(real[source], max_bytes=records.options.memory_limit, check_keys=check)
    steps = parse_steps(batches, count, source)
    out: dict[str, Any] = {}
    log = RunLog.for_stderr(quiet)
    with log.steps(len(steps)) as advance:
        for step, (inputs, rates) in enumerate(steps):
            activations = run.replay_step(inputs, rates, source=files.batches)
            for f, activation in enumerate(activations):
                out[f"s{step}/f{f}/activations"] = activation
            if advance is not None:
                advance(step + 1)
    out.update(run.executor.state_arrays())
    with log.timed() as took:
        atomic_write_npz(real[files.out], out)
    log.outputs([(files.out, real[files.out])], took())
    summary = run.summary()
    summary.update({"batches": files.batches, "out": files.out})
    return dict(summary)


def _sparsecore_synthetic(run: Any, request: _Request, records: _Records) -> dict[str, Any]:
    """No ``--batches``: ``--steps`` steps of the synthetic generator's batches."""
    from tpuemb_cfg.commands._progress import RunLog
    from tpuemb_cfg.sim.synthetic import SyntheticData

    data = SyntheticData(run.plan, seed=records.options.seed, ids=records.data.ids,
                         sequence_lengths=records.data.sequence_lengths)
    with RunLog.for_stderr(request.quiet).steps(request.steps) as advance:
        for step in range(request.steps):
            run.synthetic_step(data)
            if advance is not None:
                advance(step + 1)
    summary = run.summary()
    summary.update({"seed": records.options.seed, "ids": str(data.ids),
                    "sequence_lengths": str(data.sequence_lengths)})
    return dict(summary)
