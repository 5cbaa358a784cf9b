"""The option that sets each library parameter a message can name, for every command.

The library names its own parameters in its messages (``errors.parameter``: ``workers``); the
CLI prints the option a user typed instead (``--workers``), through :func:`cli_message`.
"""

from __future__ import annotations

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
