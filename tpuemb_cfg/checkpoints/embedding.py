"""The embedding variables of a TensorFlow checkpoint, found by the names TensorFlow gives them.

A checkpoint written by ``tf.train.Checkpoint`` keys each variable by its object path, its
escaped local name and ``/.ATTRIBUTES/VARIABLE_VALUE`` (``model.checkpoint.checkpoint_key``).
The embedding object's variables are, for the mid-level API (``TPUEmbedding``,
``TPUEmbeddingForServing``), one per table and one per slot (``user``, ``user/accumulators``),
and for ``TPUEmbeddingV2`` one per stacked table and slot (``item_user``,
``item_user/accumulators``) with the layouts under ``_sparse_core_table_layouts``
(docs/diff/checkpoints.md section 1).

:func:`find_embedding` reads only the index (the keys, dtypes and shapes) and the layouts
string: it never loads a table. Everything here talks to a checkpoint through
:class:`CheckpointSource`, which ``formats.bundle.BundleReader`` is (and an in-memory dictionary
is, for tests).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.model.checkpoint import (
    DEFAULT_OBJECT_PATH,
    LAYOUTS_KEY,
    PARAMETERS,
    VALUE_SUFFIX,
    CheckpointVariable,
    CheckpointView,
    LayoutRecord,
    layouts_from_proto,
)
from tpuemb_cfg.model.jax_checkpoint import (
    JAX_SPEC_FILE,
    layouts_from_embedding_spec,
    parse_embedding_spec,
    spec_algorithms,
    tensorflow_slot_name,
)

from .sharding import stack_shape, stacks_of

__all__ = ["JAX_KIND", "CheckpointSource", "EmbeddingCheckpoint", "EmbeddingVariable", "Entry",
           "MemoryEntry", "MemorySource", "find_embedding", "find_jax_embedding", "unescape"]


class Entry(Protocol):
    """A tensor's index entry: its dtype (a NumPy dtype, or ``"string"``) and shape."""

    @property
    def dtype(self) -> Any: ...

    @property
    def shape(self) -> tuple[int, ...]: ...


class CheckpointSource(Protocol):
    """What this package reads of a checkpoint (``formats.bundle.BundleReader`` has it)."""

    def keys(self) -> Sequence[str]: ...

    def entry(self, key: str) -> Entry: ...

    def read(self, key: str) -> Any: ...

    def read_rows(self, key: str, start: int, stop: int) -> np.ndarray: ...


@dataclass(frozen=True)
class MemoryEntry:
    dtype: Any
    shape: tuple[int, ...]


@dataclass
class MemorySource:
    """A checkpoint held in memory: key -> array (or list of bytes for a string tensor)."""

    tensors: Mapping[str, Any]
    name: str = "<memory>"

    def keys(self) -> Sequence[str]:
        return sorted(self.tensors)

    def entry(self, key: str) -> MemoryEntry:
        value = self.tensors[key]
        if isinstance(value, list):
            return MemoryEntry("string", (len(value),))
        if isinstance(value, bytes):
            return MemoryEntry("string", ())
        array = np.asarray(value)
        return MemoryEntry(array.dtype, tuple(array.shape))

    def read(self, key: str) -> Any:
        return self.tensors[key]

    def read_rows(self, key: str, start: int, stop: int) -> np.ndarray:
        return np.asarray(self.tensors[key])[start:stop]


def unescape(escaped: str) -> str:
    """``trackable_utils.escape_local_name`` undone: ``.S`` -> ``/``, ``..`` -> ``.``."""
    out = []
    i = 0
    while i < len(escaped):
        if escaped[i] == "." and i + 1 < len(escaped) and escaped[i + 1] in ".S":
            out.append("." if escaped[i + 1] == "." else "/")
            i += 2
        else:
            out.append(escaped[i])
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class EmbeddingVariable:
    """One embedding variable found: its local ``name`` (``item_user/accumulators``), its
    checkpoint ``key``, the stacked table or table it holds (``owner``), ``slot``
    (``parameters`` or the slot's name), ``shape`` and ``dtype`` as stored."""

    name: str
    key: str
    owner: str
    slot: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class EmbeddingCheckpoint:
    """The embedding part of a checkpoint: ``kind`` ``sparsecore`` (a layouts variable was
    found), ``unsharded`` or :data:`JAX_KIND` (an Orbax checkpoint of jax-tpu-embedding);
    ``object_path``; the ``variables`` found; the ``layouts`` (table name -> its layout,
    TensorFlow's order: by table name); ``layouts_bytes``: the layouts as stored (TensorFlow's
    serialized message, jax-tpu-embedding's spec text); ``other_keys``: every other key of the
    checkpoint (the rest of the model, the optimizer's iterations, the object graph)."""

    source: str
    kind: str
    object_path: str
    variables: tuple[EmbeddingVariable, ...]
    layouts: tuple[LayoutRecord, ...] = ()
    layouts_bytes: bytes = b""
    other_keys: tuple[str, ...] = field(default=())

    def variable(self, name: str) -> EmbeddingVariable | None:
        return next((v for v in self.variables if v.name == name), None)

    def view(self) -> CheckpointView:
        """The checkpoint as ``model.checkpoint`` compares it (its variables and layouts)."""
        owners: dict[str, tuple[str, ...]] = {}
        for layout in self.layouts:
            owners.setdefault(layout.stacked_table_name, ())
            owners[layout.stacked_table_name] += (layout.table_name,)
        variables = tuple(
            CheckpointVariable(v.name, owners.get(v.owner, (v.owner,)), v.slot,
                               (int(v.shape[0]), int(v.shape[1])) if len(v.shape) == 2
                               else (int(v.shape[0]) if v.shape else 0, 0))
            for v in self.variables)
        if self.kind == JAX_KIND:
            return CheckpointView("jax", variables, self.layouts, self.object_path)
        if self.kind == "sparsecore":
            return CheckpointView("sparsecore", variables, self.layouts, self.object_path)
        return CheckpointView("unsharded", variables, self.layouts, self.object_path)

    @property
    def stacked(self) -> bool:
        """Whether the variables are stacked tables laid out by ``layouts`` (a
        jax-tpu-embedding checkpoint of per-table arrays has none)."""
        return self.kind == "sparsecore" or (self.kind == JAX_KIND and bool(self.layouts))


def _object_paths(keys: Iterable[str]) -> list[str]:
    """The object paths holding a layouts variable (``embedding`` for
    ``embedding/_sparse_core_table_layouts/.ATTRIBUTES/VARIABLE_VALUE``)."""
    tail = f"{LAYOUTS_KEY}{VALUE_SUFFIX}"
    return sorted(k[: -len(tail)].rstrip("/") for k in keys if k.endswith(tail))


def _variables_under(source: CheckpointSource, object_path: str,
                     keys: Sequence[str]) -> list[EmbeddingVariable]:
    """Every 2-D variable directly under ``object_path`` (local names with ``/`` for slots)."""
    prefix = f"{object_path}/" if object_path else ""
    out: list[EmbeddingVariable] = []
    for key in keys:
        if not key.startswith(prefix) or not key.endswith(VALUE_SUFFIX):
            continue
        escaped = key[len(prefix): -len(VALUE_SUFFIX)]
        if "/" in escaped:  # a child of a child: not the embedding object's own variable
            continue
        name = unescape(escaped)
        if name == LAYOUTS_KEY:
            continue
        entry = source.entry(key)
        shape = tuple(int(d) for d in entry.shape)
        if len(shape) != 2:
            continue
        owner, _, slot = name.partition("/")
        out.append(EmbeddingVariable(name, key, owner, slot or PARAMETERS, shape,
                                     str(entry.dtype)))
    # each owner's parameters first, then its slots (a key order puts '.S' before '/')
    return sorted(out, key=lambda v: (v.owner, v.slot != PARAMETERS, v.name))


def find_embedding(source: CheckpointSource, *, object_path: str | None = None,
                   tables: Iterable[str] = (), label: str | None = None
                   ) -> EmbeddingCheckpoint:
    """The embedding variables of ``source``.

    ``object_path``: where the embedding object sits (``embedding``, ``model/embedding_layer``);
    by default the path of the checkpoint's layouts variable (a ``TPUEmbeddingV2`` checkpoint),
    else the path under which the variables named after ``tables`` (a mid-level API checkpoint)
    are, else ``embedding``. Raises ``InputError`` when a path cannot be chosen (two layouts
    variables) or the layouts do not parse."""
    shown = label or getattr(source, "name", None) or "<checkpoint>"
    keys = list(source.keys())
    given = object_path is not None
    paths = _object_paths(keys)
    if object_path is None:
        if len(paths) > 1:
            raise InputError(f"the checkpoint holds {len(paths)} SparseCore embeddings (at "
                             f"{', '.join(repr(p) for p in paths)}); name one with the object "
                             "path", path=shown)
        object_path = paths[0] if paths else _path_of_tables(keys, set(tables))
    layouts_key = f"{object_path}/{LAYOUTS_KEY}{VALUE_SUFFIX}" if object_path else \
        f"{LAYOUTS_KEY}{VALUE_SUFFIX}"
    layouts: tuple[LayoutRecord, ...] = ()
    raw = b""
    if layouts_key in keys:
        raw = _layouts_bytes(source.read(layouts_key), shown, layouts_key)
        layouts = _parse_layouts(raw, shown, layouts_key)
    variables = _variables_under(source, object_path, keys)
    if given and not variables and layouts_key not in keys:
        holding = sorted({k[: -len(VALUE_SUFFIX)].rpartition("/")[0] or "(the root)"
                          for k in keys if k.endswith(VALUE_SUFFIX)})
        raise InputError(f"no embedding variable under object path {object_path!r}; the "
                         f"checkpoint's variables are under: {', '.join(holding) or 'nothing'}",
                         path=shown)
    taken = {v.key for v in variables} | ({layouts_key} if raw else set())
    return EmbeddingCheckpoint(shown, "sparsecore" if raw else "unsharded", object_path,
                               tuple(variables), layouts, raw,
                               tuple(k for k in keys if k not in taken))


def _path_of_tables(keys: Sequence[str], tables: set[str]) -> str:
    """The object path whose direct variables name the most of ``tables``."""
    counts: dict[str, int] = {}
    for key in keys:
        if not key.endswith(VALUE_SUFFIX):
            continue
        path, _, escaped = key[: -len(VALUE_SUFFIX)].rpartition("/")
        if unescape(escaped).partition("/")[0] in tables:
            counts[path] = counts.get(path, 0) + 1
    if not counts:
        return DEFAULT_OBJECT_PATH
    return max(sorted(counts), key=lambda p: counts[p])


def _layouts_bytes(value: Any, shown: str, key: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, list | tuple) and len(value) == 1 and isinstance(value[0], bytes):
        return value[0]
    array = np.asarray(value, dtype=object)
    if array.shape == () and isinstance(array.item(), bytes):
        return bytes(array.item())
    raise InputError(f"{key}: expected one string (the serialized SparseCoreTableLayouts), "
                     f"found {type(value).__name__} of shape {np.shape(value)}", path=shown)


def _parse_layouts(raw: bytes, shown: str, key: str) -> tuple[LayoutRecord, ...]:
    from google.protobuf.message import DecodeError

    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts

    message = SparseCoreTableLayouts()
    try:
        message.ParseFromString(raw)
    except DecodeError as exc:
        raise InputError(f"{key}: the layouts do not parse as SparseCoreTableLayouts ({exc})",
                         path=shown) from None
    return layouts_from_proto(message)


def _per_table(items: Sequence[tuple[str, str, str | None]], layouts: Sequence[LayoutRecord],
               source: CheckpointSource) -> bool:
    """Whether the ``<name>/table`` arrays are the spec's tables themselves (each of its table's
    own shape), not its stacks (a stack of one unpadded table named as it is both: a stack)."""
    stacks = {t.stacked_table_name: (t.num_sparse_cores * t.total_rows_per_sparse_core_shard,
                                     t.unsharded_padded_shape[1]) for t in layouts}
    shapes = {t.table_name: tuple(t.unsharded_shape) for t in layouts}
    tables = [(name, tuple(source.entry(key).shape)) for key, name, slot in items
              if slot is None]
    if all(stacks.get(name) == shape for name, shape in tables):
        return False
    return bool(tables) and all(shapes.get(name) == shape for name, shape in tables)


def _check_against_arrays(layouts: Sequence[LayoutRecord],
                          items: Sequence[tuple[str, str, str | None]],
                          source: CheckpointSource, where: str) -> None:
    """The spec's stacks are layouts the arithmetic serves (``sharding.check_stack``), and each
    ``<stack>/table`` or slot array it describes has the shape it gives (N x R, the padded
    width); else ``InputError`` naming the spec (a hand-edited or foreign spec)."""
    try:
        stacks = stacks_of(layouts)
    except InputError as exc:
        raise InputError(f"not a layout of a stacked table: {exc.message}", path=where) from None
    for key, stack, _ in items:
        if stack in stacks:
            want, have = stack_shape(stacks[stack]), tuple(source.entry(key).shape)
            if have != want:
                raise InputError(f"stack {stack!r} is {list(want)} by the spec, its array "
                                 f"{key!r} is {list(have)}", path=where)


#: jax-tpu-embedding's embedding variables in a pytree: ``<object path>/<stack>/table`` and
#: ``<object path>/<stack>/slot/<slot name>`` (``EmbeddingVariables(table, slot)`` per stacked
#: table; NNX's ``SparseCoreEmbed`` puts them at ``<layer>/embedding_table/value``).
_JAX_VARIABLE = re.compile(r"^(?:(?P<path>.*)/)?(?P<stack>[^/]+)/(?:table|slot/(?P<slot>[^/]+))$")
JAX_KIND = "jax-tpu-embedding"


def find_jax_embedding(source: CheckpointSource, *, object_path: str | None = None,
                       label: str | None = None, spec: bytes | None = None
                       ) -> EmbeddingCheckpoint:
    """The stacked tables and slots of a jax-tpu-embedding checkpoint (keys: pytree paths
    joined with "/", as ``formats.orbax.OrbaxReader`` gives them), named as TensorFlow names a
    stacked table's variables (``<stack>``, ``<stack>/accumulators``: ``model.jax_checkpoint``).

    ``object_path``: the dictionary of ``EmbeddingVariables``
    (``model/embedding_layer/embedding_table/value``); by default the one path holding
    ``<stack>/table`` arrays. ``spec``: jax-tpu-embedding's ``EmbeddingSpecProto`` in text form
    (by default the source's ``embedding_spec/proto.pbtxt``, when it has ``read_file``): the
    layouts, and each stack's optimizer, which names its slots; without it ``layouts`` is empty
    and the slots keep jax-tpu-embedding's names."""
    shown = label or getattr(source, "name", None) or getattr(source, "path", None) \
        or "<checkpoint>"
    shown = str(shown)
    keys = list(source.keys())
    found: dict[str, list[tuple[str, str, str | None]]] = {}
    for key in keys:
        match = _JAX_VARIABLE.match(key)
        if match and len(source.entry(key).shape) == 2:
            found.setdefault(match["path"] or "", []).append((key, match["stack"], match["slot"]))
    paths = sorted(p for p, items in found.items() if any(s is None for _, _, s in items))
    if object_path is None:
        if len(paths) > 1:
            raise InputError(f"the checkpoint holds {len(paths)} jax-tpu-embedding embeddings (at "
                             f"{', '.join(repr(p) for p in paths)}); name one with the object "
                             "path", path=shown)
        if not paths:
            raise InputError("no jax-tpu-embedding embedding variables (no 2-D '<stack>/table' "
                             "array) in the checkpoint", path=shown)
        object_path = paths[0]
    elif object_path not in paths:
        raise InputError(f"no jax-tpu-embedding embedding under object path {object_path!r}; "
                         f"the checkpoint's are under: {', '.join(paths) or 'nothing'}",
                         path=shown)
    if spec is None and hasattr(source, "read_file"):
        spec = source.read_file(JAX_SPEC_FILE)
    layouts: tuple[LayoutRecord, ...] = ()
    algorithms: dict[str, str] = {}
    if spec is not None:
        step = getattr(source, "step", None)
        where = os.path.join(step if step is not None else shown, JAX_SPEC_FILE)
        message = parse_embedding_spec(spec, path=where)
        layouts = layouts_from_embedding_spec(message, path=where)
        by_table = spec_algorithms(message)
        algorithms = {}  # a stack's slots are named by its tables' optimizer (one per stack)
        for t in layouts:
            if t.table_name in by_table:
                algorithms.setdefault(t.stacked_table_name, by_table[t.table_name])
        if _per_table(found.get(object_path, []), layouts, source):
            # jax-tpu-embedding's converter without a target topology: one unpadded array per
            # table (and slot), the source's spec kept beside them
            layouts, algorithms = (), by_table
        else:
            _check_against_arrays(layouts, found.get(object_path, []), source, where)
    variables = []
    for key, stack, slot in found.get(object_path, []):
        entry = source.entry(key)
        named = None if slot is None else tensorflow_slot_name(algorithms.get(stack), slot)
        name = stack if named is None else f"{stack}/{named}"
        variables.append(EmbeddingVariable(name, key, stack, named or PARAMETERS,
                                           tuple(int(d) for d in entry.shape), str(entry.dtype)))
    variables.sort(key=lambda v: (v.owner, v.slot != PARAMETERS, v.name))
    taken = {v.key for v in variables}
    return EmbeddingCheckpoint(shown, JAX_KIND, object_path, tuple(variables), layouts,
                               spec or b"", tuple(k for k in keys if k not in taken))
