"""The option that sets each library parameter a message can name, for every command; how
the commands print what a user may have written.

The library names its own parameters in its messages (``errors.parameter``: ``workers``); the
CLI prints the option a user typed instead (``--workers``), through :func:`cli_message`.

Text a command prints (reports, errors, notes, warnings, progress) goes through :func:`echo`
(or :func:`tpuemb_cfg.base.errors.printable` where it is written otherwise): table and feature
names, paths and option values are shown with their control characters escaped (``\\x1b``),
never sent to the terminal. JSON is written by :func:`~tpuemb_cfg.base.errors.printable_json`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from tpuemb_cfg.base.errors import TpuembError, UsageError, printable, printable_json

__all__ = ["FLAGS", "LINES", "cli_message", "echo", "keras_backend_option", "printable_json"]

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
    "keras_backend": "--keras-backend",
    "max_memory": "--max-memory",
    "max_staleness": "--max-staleness",
    "ray_address": "--ray-address",
    "replicas_to_aggregate": "--replicas-to-aggregate",
    "runtime_env": "--runtime-env",
    "select": "--select",
    "sequence_lengths": "--sequence-lengths",
    "shards": "--shards",
    "steps": "--steps",
    "strict_finite": "--strict-finite",
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


def keras_backend_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--keras-backend jax|tensorflow``, shared by every command that reads a spec: the Keras
    backend a keras-rs spec runs on, over the spec's ``keras_backend`` and Keras' own choice
    (``KERAS_BACKEND``, ``keras.json``); see ``embedding.keras_rs_jax``. Put it under
    ``@click.command``: the command runs inside ``using_keras_backend``."""

    @click.option("--keras-backend", "keras_backend", type=click.Choice(["jax", "tensorflow"]),
                  default=None, help="Run keras-rs specs as keras-rs does on this Keras backend "
                  "(default: the spec's keras_backend, else KERAS_BACKEND, else keras.json, "
                  "else tensorflow).")
    @functools.wraps(command)
    def run(*args: Any, keras_backend: str | None = None, **kwargs: Any) -> Any:
        if keras_backend is None:
            return command(*args, **kwargs)
        from tpuemb_cfg.embedding.keras_rs_jax import using_keras_backend

        with using_keras_backend(keras_backend):
            return command(*args, **kwargs)

    return run


def object_path(text: str | None) -> str | None:
    """``--object-path``: attribute names separated by ``/`` (a checkpoint's object graph
    path, such as ``model/embedding_layer``); None stays None."""
    if text is None:
        return None
    if (not text or any(not part or part != part.strip() for part in text.split("/"))
            or not text.isprintable()):
        raise UsageError(f"--object-path {text!r}: expected attribute names separated by '/', "
                         "e.g. embedding or model/embedding_layer")
    return text
