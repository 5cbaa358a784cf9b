"""The option that sets each library parameter a message can name, for every command.

The library names its own parameters in its messages (``errors.parameter``: ``workers``); the
CLI prints the option a user typed instead (``--workers``), through :func:`cli_message`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from tpuemb_cfg.errors import TpuembError

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
    "multi_feature": "--multi-feature",
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
    """``str(error)`` with every parameter it names written as the option that sets it."""
    return error.spelled(FLAGS)


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
