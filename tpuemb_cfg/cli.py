"""The `tpuemb` command: a click group whose subcommands are imported only when they run.

Start-up matters in pre-commit hooks: `tpuemb validate` must not pay for NumPy or the executor, so
each family of commands lives in its own module under tpuemb_cfg.commands and is imported on use.
This module holds no logic of its own beyond turning library errors into exit codes:
0 success, 1 findings (validate) or a difference (--check), 2 unreadable input, an unwritable
output (a file, or standard output/error: :mod:`tpuemb_cfg.base.streams`) or bad usage, 128 + N
stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).

**Ctrl-C at any moment** prints one line and exits 130, with no traceback and no partial output
(:mod:`tpuemb_cfg.base.interrupt`): while the command starts, SIGINT exits at once; once it runs,
the first Ctrl-C raises ``KeyboardInterrupt`` (every ``with`` block removes its temporary files)
and is caught here; a second one exits at once. SIGTERM and SIGHUP take the same path
(``Terminated``, a ``KeyboardInterrupt``). In-process callers (``CliRunner``, ``main(args=[...])``)
keep Python's own signal handling; only the ``KeyboardInterrupt`` conversion applies to them.

**Garbage collection** (the `tpuemb` process only): the objects the command's imports built, and
at the end every object, are frozen (``gc.freeze``): the collections during the run and the
interpreter's finalization do not walk the modules' objects again, which after a command that
imported numba cost about 0.2 s at exit (docs/performance.md).
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import warnings
from typing import Any, NoReturn

import click

from tpuemb_cfg import __version__, missing_dependency
from tpuemb_cfg.base import interrupt as _interrupt
from tpuemb_cfg.base import streams as _streams
from tpuemb_cfg.base.errors import TpuembError, printable
from tpuemb_cfg.commands.flags import cli_message, echo

# command name -> (module, attribute, one-line help shown in `tpuemb --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "validate": ("tpuemb_cfg.commands.validate", "validate",
                 "Check configurations against every rule TensorFlow enforces."),
    "rules": ("tpuemb_cfg.commands.validate", "rules", "List the validation rules."),
    "explain": ("tpuemb_cfg.commands.validate", "explain", "Explain one validation rule."),
    "convert": ("tpuemb_cfg.commands.formats", "convert",
                "Convert a configuration between text, binary and JSON."),
    "fmt": ("tpuemb_cfg.commands.formats", "fmt", "Format text configurations canonically."),
    "compile": ("tpuemb_cfg.commands.compile", "compile_",
                "Compile a Python/TOML embedding spec to a configuration."),
    "inspect": ("tpuemb_cfg.commands.compile", "inspect",
                "Summarise a configuration: tables, features, tags, sizes."),
    "simulate": ("tpuemb_cfg.commands.simulate", "simulate",
                 "Run the configured training updates on the CPU."),
    "plan": ("tpuemb_cfg.commands.plan", "plan",
             "Memory, load and limits from a sample of real ids."),
    "diff": ("tpuemb_cfg.commands.diff", "diff_command",
             "What a configuration change does on the TPU and to the checkpoint."),
    "checkpoint": ("tpuemb_cfg.commands.checkpoint", "checkpoint",
                   "Read, check, reshard and write real TensorFlow embedding checkpoints."),
    "bench": ("tpuemb_cfg.commands.bench", "bench", "Benchmark the executor."),
    "completion": ("tpuemb_cfg.commands.shell", "completion",
                   "Print the shell completion script (bash, zsh, fish)."),
}


def _interrupted(exc: KeyboardInterrupt) -> NoReturn:
    """Report a caught ``KeyboardInterrupt`` (Ctrl-C; SIGTERM or SIGHUP: ``Terminated``): one
    line, status 128 + N."""
    if signal.getsignal(signal.SIGINT) is _interrupt.raise_once:
        _interrupt.install(_interrupt.exit_now)  # a second signal while reporting: exit at once
    signum = _interrupt.received(exc)
    # A signal between a temporary file's creation and the ``with`` block that owns it (or
    # between that block and the set that stages it) leaves the file to no one: remove every
    # temporary output still registered.
    remove = getattr(sys.modules.get("tpuemb_cfg.formats.atomic"), "remove_temporaries", None)
    if remove is not None:
        remove()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        click.echo(_interrupt.message(signum), err=True)
    except OSError:
        pass
    sys.exit(_interrupt.status(signum))


def _stream_failed(error: _streams.StreamError, process: bool) -> NoReturn:
    """A write to standard output or error failed: one line on standard error (when that is
    not the one that failed), status 2 - never 1, which for `validate` means findings."""
    _streams.report(error)
    if process:
        _streams.silence(error.stream)
    sys.exit(2)


class LazyGroup(click.Group):
    """A group that lists COMMANDS without importing them and imports one only to run it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr, _ = entry
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            return _unavailable(cmd_name)
        if self._process:
            gc.freeze()  # what the imports built lives as long as the process: no GC pass walks it
        command = getattr(module, attr, None)
        if command is None:
            command = getattr(module, cmd_name, None)
        return command if isinstance(command, click.Command) else _unavailable(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    _process = False  # main() runs as the `tpuemb` process (not in-process)

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except _streams.StreamError as exc:  # `tpuemb --help > /dev/full`
            _stream_failed(exc, self._process)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return super().invoke(ctx)
        except TpuembError as exc:
            click.echo(cli_message(exc), err=True)
            ctx.exit(2)
        except click.ClickException as exc:  # click's refusal of an option value quotes it
            setattr(exc, "message", printable(exc.message, keep="\n"))  # noqa: B010 (Final)
            raise
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except SystemError as exc:  # a signal raised inside C code calling back into Python
            interrupt = _interrupt.wrapped(exc)
            if interrupt is None:
                raise
            _interrupted(interrupt)
        except MemoryError as exc:  # the estimates refuse first; this is what they missed
            click.echo(f"tpuemb: out of memory ({str(exc) or 'MemoryError'}); reduce the sizes "
                       "(vocabulary_size, dimension, --workers, --vocab) or free memory and run "
                       "again", err=True)
            ctx.exit(2)
        except _streams.StreamError as exc:
            _stream_failed(exc, self._process)
        except ImportError as exc:
            message = missing_dependency(exc)
            if message is None:
                raise
            click.echo(f"tpuemb: {message}", err=True)
            ctx.exit(2)

    def main(self, args: Any = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        """Run the command; as the `tpuemb` process (``args`` None), also own SIGINT, SIGTERM
        and SIGHUP.

        Standard output and error are guarded (:mod:`tpuemb_cfg.base.streams`): a write that fails
        is one line and status 2, also when it fails in the final flush.
        """
        self._process = args is None
        _interrupt.forget_received()
        previous = _interrupt.install(_interrupt.raise_once) if args is None else None
        try:
            with _streams.guarded(process=self._process):
                try:
                    result = super().main(args, prog_name, complete_var, standalone_mode,
                                          **extra)
                except SystemExit:
                    sys.stdout.flush()  # what is still buffered must reach its reader too
                    raise
                sys.stdout.flush()
                return result
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except SystemError as exc:
            interrupt = _interrupt.wrapped(exc)
            if interrupt is None:
                raise
            _interrupted(interrupt)
        except _streams.StreamError as exc:  # a usage message, or the final flush
            _stream_failed(exc, self._process)
        finally:
            if previous is not None:
                _interrupt.install(previous)
            if self._process:
                # The process ends next: freezing every object spares Python's finalization its
                # garbage collections over them (0.2 s after a plan that imported numba);
                # outputs are already closed, and atexit handlers still run.
                gc.freeze()


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A warning of tpuemb's own (the engine fallback, a custom table on the NumPy path) as one
    line for the user, not Python's file:line and source excerpt; others as Python shows them."""
    if f"{os.sep}tpuemb_cfg{os.sep}" in filename:
        echo(f"warning: {message}", err=True)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _unavailable(name: str) -> click.Command:
    @click.command(name=name, context_settings={"ignore_unknown_options": True},
                   add_help_option=False)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def stub(args: tuple[str, ...]) -> None:
        raise click.UsageError(f"the '{name}' command is not available in this build")

    return stub


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="tpuemb",
                      message="%(prog)s %(version)s (TensorFlow 2.21 TPU embedding schema)")
def main() -> None:
    """tpuemb: read, validate, compile, simulate and plan TensorFlow TPU embedding configurations.

    Every command reads text (.pbtxt), binary (.pb/.binpb) and JSON (.json) configurations
    (validate, inspect, simulate and plan also Python/TOML specs, SparseCore ones included) and
    exits 0 on success, 1 when validate finds problems, plan's gate fails or a --check sees a
    difference, 2 when
    an input cannot be read, an output cannot be written or the options are wrong, and 130 when
    interrupted (143 on SIGTERM, 129 on SIGHUP). Outputs are written atomically and never
    replace an input. Inputs larger than 256 MiB are refused; the environment variable
    TPUEMB_MAX_INPUT (e.g. 1G) raises the limit. Every size (TPUEMB_MAX_INPUT, --max-memory)
    is bytes or a number with a binary unit K, M, G, T (1G = 1GiB = 1GB = 2^30 bytes); every
    --seed is a whole number from 0 to 2^64 - 1.

    Start with `tpuemb simulate` (runs the built-in example) or `tpuemb validate FILE`.
    """
