"""What the SC rule modules share: the SparseCore limits they compare with, field-path helpers
(``sparse_core_config.max_ids_per_table["user"]``) and list wording."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tpuemb_cfg.base.sparsecore_defaults import (
    ACTIVATION_MEMORY_BYTES_LIMIT,
    DEFAULT_MAX_IDS_PER_PARTITION,
    VARIABLE_SHARD_BYTES_LIMIT,
)

if TYPE_CHECKING:
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig

_MIB = 1 << 20
_GIB = 1 << 30
#: TensorFlow's limit for a stack missing from ``max_ids_per_table`` / ``max_unique_ids_per_table``
#: (``TPUEmbeddingV2.DEFAULT_MAX_IDS_PER_TABLE``; jax-tpu-embedding's default limits are equal).
DEFAULT_LIMIT = DEFAULT_MAX_IDS_PER_PARTITION
#: Activation bytes per SparseCore at which stacking stops (both references' default, 2 MiB).
ACTIVATION_LIMIT = ACTIVATION_MEMORY_BYTES_LIMIT
#: Bytes of one table's shard per chip at which TensorFlow's stacker stops (2 GiB).
SHARD_LIMIT = VARIABLE_SHARD_BYTES_LIMIT
INT32_MAX = 2**31 - 1
#: SC010's default: a table whose padding is a quarter or more of the memory it takes.
PADDING_WASTE = 0.25
#: SC010 reports only tables whose padding is at least this many bytes (summed over the slice).
PADDING_MIN_BYTES = _MIB
#: SC012's default host budget when no ``memory_budget_bytes`` is set.
HOST_MEMORY = 64 * _GIB
#: The ``SparseCoreEmbeddingConfig`` dictionaries keyed by stacked table name.
LIMIT_SETTINGS = ("max_ids_per_table", "max_unique_ids_per_table")


def _q(name: str) -> str:
    """A name as the key of a field path: ``"user"`` (JSON quoting, so any name is readable)."""
    return json.dumps(name, ensure_ascii=False)


def _table(name: str) -> str:
    return f"tables[{_q(name)}]"


def _feature(name: str) -> str:
    return f"features[{_q(name)}]"


def _setting(name: str) -> str:
    return f"sparse_core_config.{name}"


def limit_key_path(setting: str, key: str) -> str:
    """The field path of a limit key: ``sparse_core_config.max_ids_per_table["user"]``."""
    return f"{_setting(setting)}[{_q(key)}]"


def _join(items: Sequence[str], limit: int = 6) -> str:
    shown = list(items[:limit])
    if len(items) > limit:
        shown.append(f"{len(items) - limit} more")
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _names(items: Sequence[str]) -> str:
    return _join([repr(i) for i in items])


def _api(config: SparseCoreConfig) -> str:
    return {"tensorflow": "TensorFlow's TPUEmbeddingV2", "keras_rs": "keras-rs",
            "jax": "jax-tpu-embedding"}.get(config.api, config.api)


def _roundup(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple



def _or(items: Iterable[object]) -> str:
    """``"2 or 4"``."""
    shown = [str(i) for i in items]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
