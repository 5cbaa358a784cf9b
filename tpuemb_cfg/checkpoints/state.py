"""A checkpoint's embedding as tpuemb's state, and tpuemb's state as a checkpoint's variables.

tpuemb's state names a table's values ``table/NAME`` and its slots ``slot/NAME/SLOT`` (the
executor's ``state_arrays``; TensorFlow's slot names). A TensorFlow checkpoint holds them per
table (the mid-level API: ``NAME``, ``NAME/SLOT``) or stacked (``TPUEmbeddingV2``: ``STACK``,
``STACK/SLOT`` with the layouts); a jax-tpu-embedding (Orbax) checkpoint holds them stacked,
named as ``TPUEmbeddingV2``'s once found (``model.jax_checkpoint``).
:func:`state_from_checkpoint` unstacks a checkpoint into the
state (``tpuemb simulate --init CKPT``); :func:`checkpoint_variables` stacks a state into the
variables a configuration's checkpoint holds (``tpuemb checkpoint export``).

Stacking and unstacking are ``sharding.shard`` / ``sharding.unshard`` (TensorFlow's
``_shard_from_cpu_to_sc`` / ``_unshard_from_sc_to_cpu``): the padding rows and columns are zeros.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.formats.bundle import BundleReader, index_path
from tpuemb_cfg.formats.orbax import OrbaxReader, is_orbax_checkpoint
from tpuemb_cfg.model.checkpoint import PARAMETERS, CheckpointView
from tpuemb_cfg.model.jax_checkpoint import JAX_SPEC_FILE

from .embedding import CheckpointSource, EmbeddingCheckpoint, find_embedding, find_jax_embedding
from .sharding import shard, stacks_of, unshard

__all__ = ["checkpoint_files", "checkpoint_prefix", "checkpoint_state_bytes",
           "checkpoint_variables", "is_checkpoint", "read_checkpoint_state",
           "state_from_checkpoint", "state_key"]


def state_key(table: str, slot: str) -> str:
    """tpuemb's state-file key of a table's parameters or one of its slots."""
    return f"table/{table}" if slot == PARAMETERS else f"slot/{table}/{slot}"


def _float32(value: Any, where: str, key: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != np.float32:
        raise InputError(f"{key}: {array.dtype} found, expected float32 (an embedding table or "
                         "slot)", path=where)
    return array


def state_from_checkpoint(source: CheckpointSource, found: EmbeddingCheckpoint,
                          tables: Iterable[tuple[str, int, int, Sequence[str]]]
                          ) -> dict[str, np.ndarray]:
    """The state of ``tables`` ((name, rows, dim, slot names): what the run expects) from the
    checkpoint: per table its parameters and slots, unstacked by the layouts when the
    checkpoint is stacked. A table or slot the checkpoint does not hold is left out (the run
    gives it its initial value, as ``--init`` does for a missing entry); a table whose shape
    differs is refused (``InputError`` naming the table, the shapes and the fix)."""
    where = found.source
    wanted = list(tables)
    out: dict[str, np.ndarray] = {}
    if not found.stacked:
        for name, rows, dim, slots in wanted:
            for slot in (PARAMETERS, *slots):
                variable = found.variable(name if slot == PARAMETERS else f"{name}/{slot}")
                if variable is None:
                    continue
                array = _float32(source.read(variable.key), where, variable.key)
                if array.shape != (rows, dim):
                    raise InputError(
                        f"{variable.key}: shape {tuple(array.shape)}, the configuration's table "
                        f"{name!r} is ({rows}, {dim}); reshard or export the checkpoint for "
                        "this configuration first", path=where)
                out[state_key(name, slot)] = array
        return out
    layouts = {t.table_name: t for t in found.layouts}
    stacks = stacks_of(found.layouts)
    unstacked: dict[str, dict[str, np.ndarray]] = {}  # one stacked variable's tables at a time
    for name, rows, dim, slots in wanted:
        layout = layouts.get(name)
        if layout is None:
            continue
        if tuple(layout.unsharded_shape) != (rows, dim):
            raise InputError(
                f"table {name!r}: the checkpoint's layout holds {tuple(layout.unsharded_shape)}, "
                f"the configuration ({rows}, {dim}); the restore would give a tensor of the wrong "
                "size (CKPT002)", path=where)
        members = stacks[layout.stacked_table_name]
        for slot in (PARAMETERS, *slots):
            local = layout.stacked_table_name + ("" if slot == PARAMETERS else f"/{slot}")
            variable = found.variable(local)
            if variable is None:
                continue
            if variable.key not in unstacked:
                unstacked.clear()
                stacked = _float32(source.read(variable.key), where, variable.key)
                unstacked[variable.key] = {
                    t.table_name: table for t, table in zip(members, unshard(stacked, members),
                                                            strict=True)}
            out[state_key(name, slot)] = unstacked[variable.key][name]
    return out


def checkpoint_variables(state: Mapping[str, np.ndarray], view: CheckpointView
                         ) -> dict[str, np.ndarray]:
    """The variables ``view`` (a configuration's checkpoint) holds, by local name, filled from
    ``state`` (tpuemb's keys); a table or slot ``state`` lacks is refused (``InputError``)."""
    out: dict[str, np.ndarray] = {}
    stacks = stacks_of(view.layouts) if view.stacked else {}
    for variable in view.variables:
        if not view.stacked:
            key = state_key(variable.tables[0], variable.slot)
            out[variable.name] = _needed(state, key, variable.shape)
            continue
        members = stacks[variable.name.partition("/")[0]]
        out[variable.name] = shard({t.table_name: _needed(state, state_key(t.table_name,
                                                                           variable.slot),
                                                          t.unsharded_shape)
                                    for t in members}, members)
    return out


def _needed(state: Mapping[str, np.ndarray], key: str, shape: tuple[int, int]) -> np.ndarray:
    if key not in state:
        raise InputError(f"the state has no {key!r}: expected one per table and slot of the "
                         "configuration", key=key)
    array = np.asarray(state[key])
    if array.shape != tuple(shape) or array.dtype != np.float32:
        raise InputError(f"{key}: {array.dtype} {tuple(array.shape)} found, expected float32 "
                         f"{tuple(shape)}", key=key)
    return array


def is_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a checkpoint rather than an ``.npz`` state file: a TensorFlow
    checkpoint (its ``.index`` file, or a prefix with one) or a jax-tpu-embedding (Orbax)
    checkpoint folder."""
    text = os.fspath(path)
    return text.endswith(".index") or (not text.endswith(".npz") and (
        os.path.isfile(index_path(text)) or is_orbax_checkpoint(text)))


def checkpoint_prefix(path: str | os.PathLike[str]) -> str:
    """The prefix of checkpoint ``path`` (a prefix, or its ``.index`` file); ``InputError``
    when no ``PREFIX.index`` exists."""
    text = os.fspath(path)
    prefix = text[: -len(".index")] if text.endswith(".index") else text
    if not os.path.isfile(index_path(prefix)):
        hint = (" (a folder: give the checkpoint's prefix inside it, e.g. "
                f"{os.path.join(text, 'ckpt-100')})" if os.path.isdir(text) else "")
        raise InputError(f"no checkpoint here: expected {index_path(prefix)} and its .data-* "
                         f"files{hint}", path=text)
    return prefix


def checkpoint_files(path: str | os.PathLike[str]) -> list[str]:
    """The files of checkpoint ``path`` (a prefix, or its ``.index`` file: its index and the
    data shards present; an Orbax folder: every file under it): what no output may replace."""
    text = os.fspath(path)
    if is_orbax_checkpoint(text):
        return sorted(os.path.join(folder, name) for folder, _, names in os.walk(text)
                      for name in names)
    prefix = text[: -len(".index")] if text.endswith(".index") else text
    return [index_path(prefix), *sorted(glob.glob(glob.escape(prefix) + ".data-*"))]


def _float32_bytes(reader: Any) -> int:
    total = 0
    for key in reader.keys():
        entry = reader.entry(key)
        if len(entry.shape) == 2 and str(entry.dtype) == "float32":
            total += 4 * entry.shape[0] * entry.shape[1]
    return total


def checkpoint_state_bytes(path: str | os.PathLike[str]) -> int:
    """The bytes of the 2-D float32 variables of checkpoint ``path`` (what reading its
    embedding as a state may take, before unstacking), from its metadata alone."""
    if is_orbax_checkpoint(path):
        with OrbaxReader(path) as orbax_reader:
            return _float32_bytes(orbax_reader)
    with BundleReader(checkpoint_prefix(path)) as reader:
        return _float32_bytes(reader)


def read_checkpoint_state(path: str | os.PathLike[str],
                          tables: Iterable[tuple[str, int, int, Sequence[str]]], *,
                          object_path: str | None = None) -> dict[str, np.ndarray]:
    """:func:`state_from_checkpoint` of checkpoint ``path`` (``tpuemb simulate --init CKPT``):
    the embedding found by TensorFlow's names (``embedding.find_embedding``) or, in an Orbax
    folder, jax-tpu-embedding's (``embedding.find_jax_embedding``: its spec's layouts),
    unstacked."""
    wanted = list(tables)
    shown = os.fspath(path)
    if is_orbax_checkpoint(path):
        with OrbaxReader(path) as orbax_reader:
            found = find_jax_embedding(orbax_reader, object_path=object_path, label=shown)
            if not found.layouts_bytes:
                raise InputError(f"no {JAX_SPEC_FILE} beside the arrays: the stacking of the "
                                 "jax-tpu-embedding checkpoint is not known", path=shown)
            return _state(orbax_reader, found, wanted, shown)
    with BundleReader(checkpoint_prefix(path)) as reader:
        found = find_embedding(reader, object_path=object_path, tables=[t[0] for t in wanted],
                               label=shown)
        return _state(reader, found, wanted, shown)


def _state(source: CheckpointSource, found: EmbeddingCheckpoint,
           wanted: list[tuple[str, int, int, Sequence[str]]], shown: str
           ) -> dict[str, np.ndarray]:
    if not found.variables:
        raise InputError(f"no embedding variable of the configuration's tables "
                         f"({', '.join(t[0] for t in wanted)}) under {found.object_path!r}",
                         path=shown)
    return state_from_checkpoint(source, found, wanted)
