"""The option that sets each library parameter a message can name, for every command; how
the commands print what a user may have written.

The library names its own parameters in its messages (``errors.parameter``: ``workers``); the
CLI prints the option a user typed instead (``--workers``), through :func:`cli_message`.

Text a command prints (reports, errors, notes, warnings, progress) goes through :func:`echo`
(or :func:`tpuemb_cfg.errors.printable` where it is written otherwise): table and feature
names, paths and option values are shown with their control characters escaped (``\\x1b``),
never sent to the terminal. JSON is written by :func:`~tpuemb_cfg.errors.printable_json`.
"""

from __future__ import annotations

import click

from tpuemb_cfg.errors import TpuembError, printable, printable_json

__all__ = ["FLAGS", "LINES", "cli_message", "echo", "printable_json"]

#: What :func:`echo` leaves as it is: the line breaks and tabs that lay out a text.
LINES = "\n\t"

#: Library parameter -> the option that sets it.
FLAGS: dict[str, str] = {
    "backend": "--backend",
    "checkpoint_every": "--checkpoint-every",
    "combiners": "--combiner",
    "delay": "--delay",
    "dim": "--dim",
    "ids": "--ids",
    "ignore": "--ignore",
    "init_tokens": "--init-tokens",
    "max_memory": "--max-memory",
    "max_staleness": "--max-staleness",
    "multi_feature": "--multi-feature",
    "ray_address": "--ray-address",
    "replicas_to_aggregate": "--replicas-to-aggregate",
    "runtime_env": "--runtime-env",
    "select": "--select",
    "sequence_lengths": "--sequence-lengths",
    "shards": "--shards",
    "steps": "--steps",
    "tables": "--tables",
    "threads": "--threads",
    "vocab": "--vocab",
    "workers": "--workers",
    "zipf": "--zipf",
}


def cli_message(error: TpuembError) -> str:
    """``str(error)`` with every parameter it names written as the option that sets it, and
    every character the terminal could take for a command escaped (:func:`printable`)."""
    return printable(error.spelled(FLAGS), keep=LINES)


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of ``text`` (lines of it) with every other character the terminal could
    take for a command escaped (:func:`printable`)."""
    click.echo(printable(text, keep=LINES), err=err, nl=nl)
