"""The options of ``tpuemb simulate`` and their checks: what is parsed and refused before a
run is opened (``tpuemb_cfg.run``). Shared with ``tpuemb bench``: the size, seed, engine and
backend options and ``--runtime-env``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import InputError, NumericalError, UsageError
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.commands._outputs import check_run_outputs
from tpuemb_cfg.commands.flags import cli_message
from tpuemb_cfg.formats.atomic import check_outputs
from tpuemb_cfg.formats.limits import total_memory

__all__ = ["SPEC_KEY", "backend_option", "check_placement", "check_replay_outputs",
           "check_synthetic_outputs", "config_errors", "engine_option", "given", "option_name",
           "parse_size", "ray_runtime_env", "refuse_given", "say", "seed_option",
           "simulate_options", "source_of"]

F = TypeVar("F", bound=Callable[..., Any])

SPEC_KEY = "tpuemb_cfg.sim.spec"  # where --spec leaves its LoadedSpec in click's ctx.meta


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


def ray_runtime_env(text: str | None) -> dict[str, Any] | None:
    """``--runtime-env`` (a JSON object or ``@FILE.json``), checked before anything starts."""
    from tpuemb_cfg.executor.storage import choose_backend

    return choose_backend("ray").runtime_env(text)


def source_of(ctx: click.Context, name: str) -> str:
    """Where the value of option ``name`` came from: ``COMMANDLINE``, ``DEFAULT_MAP`` (a
    ``--spec`` file), ``DEFAULT``, ..."""
    source = ctx.get_parameter_source(name)
    return "DEFAULT" if source is None else source.name


def given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was given (not left at its default or a spec's value)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def option_name(name: str) -> str:
    """The option of parameter ``name`` as typed (``init_path``: ``--init``)."""
    return {"init_path": "--init", "out_path": "--out", "tables_output": "--tables",
            "combiners": "--combiner"}.get(name, "--" + name.replace("_", "-"))


def refuse_given(ctx: click.Context, names: Sequence[str], text: str) -> None:
    """``UsageError`` naming the options of ``names`` given: ``{options} {verb}{text}``, the
    verb ``applies``/``apply`` when ``text`` starts with ``appl``, ``needs``/``need`` with
    ``need``, else ``text`` as is."""
    wrong = [option_name(n) for n in names if given(ctx, n)]
    if not wrong:
        return
    one = len(wrong) == 1
    if text.startswith("appl "):
        text = ("applies" if one else "apply") + text[4:]
    elif text.startswith("need "):
        text = ("needs" if one else "need") + text[4:]
    raise UsageError(f"{', '.join(wrong)} {text}")


def _refuse_beyond_machine(limit: int) -> None:
    """An explicit --max-memory above this machine's physical memory would only trade a clear
    refusal for the kernel's out-of-memory kill: refuse it."""
    total = total_memory()
    if total is not None and limit > total:
        raise UsageError(
            f"--max-memory {format_size(limit)} is more than this machine has "
            f"({format_size(total)} of memory); give at most that, or spread the tables over "
            "several machines with --backend ray (docs/scale.md)"
        )


def check_placement(ctx: click.Context, backend: str, limit: int | None) -> None:
    """``--max-memory`` within this machine (the tables in this process) and a backend's own
    options only with that backend."""
    from tpuemb_cfg.executor.storage import backend_options, choose_backend

    tools = choose_backend(backend)
    if tools.in_process and limit is not None:
        _refuse_beyond_machine(limit)
    owners = backend_options()
    wrong = [n for n in owners if owners[n] != tools.name and given(ctx, n)]
    if wrong:
        owner = owners[wrong[0]]
        raise UsageError(f"{', '.join(option_name(n) for n in wrong)} "
                         f"appl{'ies' if len(wrong) == 1 else 'y'} to --backend {owner} only")


def _read(config: str | None, spec: Any, *more: tuple[str, str | None]) -> list[tuple[str, str]]:
    """The files a run reads, as ``(option, path)`` pairs: no output may be one of them."""
    pairs = [("CONFIG", config), ("--spec", spec.path if spec is not None else None), *more]
    return [(label, str(path)) for label, path in pairs if path is not None]


def _init_files(init: str | None) -> list[str]:
    """The files ``--init`` reads: an ``.npz``, a checkpoint's index and data shards, or an
    Orbax checkpoint folder's files."""
    if init is None:
        return []
    # NumPy: only when --init is given
    from tpuemb_cfg.checkpoints.state import checkpoint_files, is_checkpoint

    return checkpoint_files(init) if is_checkpoint(init) else [init]


def check_replay_outputs(config: str, spec: Any, batches: str, init: str | None,
                         out: str) -> None:
    """Before anything is read: ``--out`` is a writable ``.npz`` path and no input."""
    if out == "-":
        raise UsageError("--out -: a replay writes an .npz archive; give its file name (O.npz)")
    check_outputs([("--out", out)], _read(config, spec, ("--batches", batches),
                                          *(("--init", path) for path in _init_files(init))))
    check_outputs([("--out", out)], suffixes=(".npz",))  # after: an input named as --out says so


def check_synthetic_outputs(config: str | None, spec: Any, out_dir: Path,  # noqa: PLR0913
                            plot: str | None,
                            *, resume: bool, checkpoints: bool, tables: str = "all",
                            save_batches: str | None = None, init: str | None = None) -> None:
    """Before anything is read: every file of a synthetic run can be written and is no input
    (``--resume`` reads OUT_DIR/checkpoint.npz, which later checkpoints replace by design;
    ``init``: a SparseCore run's ``--init``, an ``.npz`` or a checkpoint's files)."""
    checkpoint = str(out_dir / "checkpoint.npz")
    inputs = _read(config, spec, ("--resume", checkpoint if resume else None),
                   *(("--init", path) for path in _init_files(init)))
    check_run_outputs(out_dir, plot, inputs, tables=tables, save_batches=save_batches)
    if checkpoints and not resume:
        check_outputs([("--checkpoint-every", checkpoint)], inputs, make_dirs=True)


#: The options that set what a ``NumericalError`` blames (its ``parameter``).
_NUMERICAL_OPTIONS = {"learning_rate": "--learning-rate", "schedules": "the --spec schedule"}


@contextlib.contextmanager
def config_errors(config_path: str) -> Iterator[None]:
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


def say(error: UsageError) -> str:
    """A refusal as the command would print it (``flags.cli_message``)."""
    return cli_message(error)


def _spec_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """``--spec``: the spec's values become the defaults of the other options.

    The option is eager, so this runs before the options it provides defaults for; the loaded
    spec (its schedules and path) waits in ``ctx.meta`` for the command.
    """
    if value is not None:
        from tpuemb_cfg.sim.spec import load_spec

        loaded = load_spec(value)
        ctx.default_map = {**(ctx.default_map or {}), **loaded.options}
        ctx.meta[SPEC_KEY] = loaded


def simulate_options(command: F) -> F:
    """Every argument and option of ``tpuemb simulate``, in the order ``--help`` lists them
    (the parameters click's decorators left on :func:`_declared`)."""
    params = list(getattr(_declared, "__click_params__"))  # noqa: B009 - click's own attribute
    setattr(command, "__click_params__",  # noqa: B010
            [*getattr(command, "__click_params__", []), *params])
    return command


@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--batches", "batches_path", type=click.Path(dir_okay=False), metavar="B.npz",
              help="Replay the recorded steps of B.npz (the replay contract, docs/simulate.md).")
@click.option("--init", "init_path", type=click.Path(), metavar="I.npz | CKPT",
              help="Start from these tables and slots (missing entries get defaults): an .npz "
                   "of tpuemb's state, a TensorFlow checkpoint (its prefix or .index file; "
                   "per-table or SparseCore stacked, unstacked by its layouts) or a "
                   "jax-tpu-embedding Orbax checkpoint folder (unstacked by its embedding "
                   "spec; pip install 'tpuemb[orbax]').")
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

def _declared() -> None:
    """Holds the parameters of ``tpuemb simulate`` (``simulate_options``)."""
