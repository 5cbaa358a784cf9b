"""The `tpuemb` command: a click group whose subcommands are imported only when they run.

Start-up matters in pre-commit hooks: `tpuemb validate` must not pay for NumPy or the executor, so
each family of commands lives in its own module under tpuemb_cfg.commands and is imported on use.
This module holds no logic of its own beyond turning library errors into exit codes:
0 success, 1 findings (validate) or a difference (--check), 2 unreadable input or bad usage,
130 interrupted.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from tpuemb_cfg import __version__
from tpuemb_cfg.errors import TpuembError

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
    "bench": ("tpuemb_cfg.commands.bench", "bench", "Benchmark the executor."),
    "completion": ("tpuemb_cfg.commands.shell", "completion",
                   "Print the shell completion script (bash, zsh, fish)."),
}


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
        command = getattr(module, attr, None)
        if command is None:
            command = getattr(module, cmd_name, None)
        return command if isinstance(command, click.Command) else _unavailable(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TpuembError as exc:
            click.echo(str(exc), err=True)
            ctx.exit(2)
        except KeyboardInterrupt:
            click.echo("tpuemb: interrupted; no output file was left half-written", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            sys.stderr.close()
            ctx.exit(1)


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
    """tpuemb: read, validate, compile and simulate TensorFlow TPU embedding configurations.

    Every command reads text (.pbtxt), binary (.pb/.binpb) and JSON (.json) configurations and
    exits 0 on success, 1 when validate finds problems or a --check sees a difference, and 2 when
    an input cannot be read or the options are wrong.

    Start with `tpuemb simulate` (runs the built-in example) or `tpuemb validate FILE`.
    """
