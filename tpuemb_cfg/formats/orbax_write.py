"""Write an Orbax ``CheckpointManager`` step from another one, with some arrays replaced.

The output of ``tpuemb checkpoint reshard`` for a jax-tpu-embedding checkpoint: the SOURCE step
(``.../7``: ``_CHECKPOINT_METADATA``, one folder per item) copied into a NEW step folder, except

- the arrays given to :meth:`OrbaxStepWriter.add_rows` (keys as :class:`~tpuemb_cfg.formats.orbax
  .OrbaxReader` names them, item first: ``model/embedding_layer/embedding_table/value/user_item/
  table``), written with their new shapes a block of rows at a time, and
- the files given to :meth:`OrbaxStepWriter.replace_file` (``embedding_spec/proto.pbtxt``, the
  stacking of the new topology).

Arrays the source lacks (a stack the new layout adds) are written the same way, their metadata
(``value_type``, sharding, zarr compression) taken from the source array of the same item whose
path differs in one part only (``.../user/table`` from ``.../user_item/table``); arrays given to
:meth:`OrbaxStepWriter.drop` are left out, metadata and all.

**What is rewritten, and how.** An item none of whose arrays is replaced (``embedding_spec``,
another ``StandardSave`` item) is copied file by file, byte for byte. An item holding a replaced
array (a ``PyTreeCheckpointHandler`` / ``StandardCheckpointHandler`` item: a ``_METADATA``) keeps
every file of its own (``_METADATA``, ``_sharding``, ``array_metadatas/``,
``commit_success.txt``) and its storage: the zarr version (``use_zarr3``) and OCDBT or not
(``use_ocdbt``) of the source. With OCDBT the item's key-value store is rebuilt as one OCDBT
database in the item's folder (``manifest.ocdbt``, ``d/``; Orbax's ``ocdbt.process_N/``
sub-databases are not needed once merged, and Orbax restores from the item's root database): the
other arrays' keys (zarr metadata and compressed chunks) are copied as stored, bit for bit, one
key at a time; without OCDBT the other arrays' folders are copied as files. Both are bounded by
one stored chunk, never an array. The OCDBT configuration is Orbax's
(``tensorstore_utils._add_ocdbt_write_options``: values up to 1 KiB inline, one large root node,
a single-file manifest).

A replaced array keeps the source array's zarr metadata (compressor or codecs, fill value, byte
order) with the new shape and chunks and dtype. Its **write shape** (Orbax's shard of one device:
``_METADATA`` ``write_shape``, ``array_metadatas`` ``write_shape``) is the new shape divided by
the devices its sharding in ``_sharding`` splits each dimension over (a ``NamedSharding``'s
``partition_spec`` over its ``device_mesh``); a shape that does not divide is refused (jax
refuses such an array). ``_sharding`` names no shape and is kept (a new array's entry is its
model's, a dropped one's removed): its device mesh stays the source's, which jax-tpu-embedding's
restores never use (they restore into the model's own shardings, ``StandardRestore(state)``),
while a restore without a target places the arrays on that mesh. The **chunk shape**
(``array_metadatas`` ``chunk_shape``, the zarr chunks) is the write shape with its rows cut to the
largest divisor whose chunk takes at most ``chunk_bytes`` (Orbax too cuts a write shape into
chunks below a byte size, ``subchunking.choose_chunk_shape``). Rows arrive in any blocks; they
are gathered into whole rows of chunks and written through tensorstore in transactions of at most
``buffer_bytes`` (one OCDBT commit each: few commits, since each writes a new root node): the
peak memory does not grow with the array, about twice ``buffer_bytes`` (the rows a transaction
holds, then their compressed copy) plus ``chunk_bytes`` and tensorstore's working memory
(measured: docs/performance.md, "Writing an Orbax step").

**Safety**, as every tpuemb writer (``formats.atomic``): the step is built in a private folder
with an unpredictable name (``.<step>.<random>.tmp``, which a ``CheckpointManager`` ignores: it
lists numbered folders) in the target's parent and renamed into place by :meth:`finish`
(a placeholder folder is made first with ``mkdir``, which fails on anything there, a planted
symbolic link included, and the build renamed over it). An existing target is refused, so is a
target inside the source; any error, ``KeyboardInterrupt`` included, removes the folder (and the
parents ``make_dirs`` created). The target is a step folder: the CLI passes
``<output manager folder>/<source step's name>``, the step keeping its number (:func:`step_target`).
"""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tpuemb_cfg.base import interrupt as _interrupt
from tpuemb_cfg.base.errors import InputError, OutputError
from tpuemb_cfg.formats.atomic import (
    Finishing,
    folder_mode,
    make_missing_folders,
    make_temporary_folder,
    release_temporary_folder,
    remove_made_folders,
    sync_folder,
)
from tpuemb_cfg.formats.orbax import (
    ITEM_METADATA,
    STEP_METADATA,
    OrbaxReader,
    first_line,
    load_tensorstore,
)

__all__ = ["BUFFER_BYTES", "CHUNK_BYTES", "OCDBT_CONFIG", "OrbaxStepWriter", "step_target"]

#: The largest zarr chunk a replaced array is written in (its rows cut to fit).
CHUNK_BYTES = 32 << 20
#: The most bytes written in one tensorstore transaction (one OCDBT commit) before it commits.
BUFFER_BYTES = 128 << 20
#: Orbax's OCDBT configuration for a database it writes (see the module docstring).
OCDBT_CONFIG = {"max_inline_value_bytes": 1024, "max_decoded_node_bytes": 100_000_000,
                "manifest_kind": "single"}
SHARDING = "_sharding"
ARRAY_METADATAS = "array_metadatas"
#: What an OCDBT item folder holds of the database itself (rebuilt, not copied).
_OCDBT_FILES = ("manifest.ocdbt", "d", "ocdbt_data", "ocdbt_meta", "ocdbt_tmp_meta")
_OCDBT_PREFIX = "ocdbt.process_"
_ZARR_METADATA = {False: ".zarray", True: "zarr.json"}


def step_target(source_step: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """The step folder a reshard into the manager folder ``out`` writes: the source step's
    number kept (``out/7`` for ``.../7``)."""
    return Path(out) / Path(source_step).name


@dataclass
class _Replaced:
    """A written array: its shapes, the source array whose metadata it follows (``like``: its
    own name when it replaces one) and, for a new array, its pytree path (``parts``)."""

    shape: tuple[int, ...]
    write_shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    like: str
    parts: tuple[str, ...] | None = None


@dataclass
class _Item:
    """One pytree item of the source step: its metadata and, once an array of it is replaced,
    the key-value stores it is copied from and written to."""

    source: Path
    meta: dict[str, Any]
    #: The source's arrays and other leaves by param name (the path joined with "."): the
    #: pytree path and the tree_metadata entry (its name there and its value).
    leaves: dict[str, tuple[tuple[str, ...], str, dict[str, Any]]]
    #: ``_sharding`` as stored: base64 of the param name -> the sharding's JSON text.
    sharding_text: dict[str, str]
    replaced: dict[str, _Replaced] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)
    source_kv: Any = None
    target_kv: Any = None

    def sharding(self, name: str) -> Any:
        text = self.sharding_text.get(_encoded(name))
        return json.loads(text) if text is not None else None

    @property
    def rebuilt(self) -> bool:
        return bool(self.replaced or self.dropped)

    @property
    def ocdbt(self) -> bool:
        return bool(self.meta.get("use_ocdbt", True))

    @property
    def zarr3(self) -> bool:
        return bool(self.meta.get("use_zarr3", False))


class OrbaxStepWriter(Finishing):
    """Writes a new Orbax step folder ``target`` from the step folder ``source`` (a context
    manager; see the module). ``inputs``: other inputs the target must not lie inside;
    ``make_dirs``: create the target's missing parent folders (removed again on an error)."""

    def __init__(self, source: str | os.PathLike[str], target: str | os.PathLike[str], *,
                 inputs: Iterable[str | os.PathLike[str]] = (), make_dirs: bool = False,
                 chunk_bytes: int = CHUNK_BYTES, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.source, self.target = Path(source), Path(target)
        if not (self.source / STEP_METADATA).is_file():
            raise InputError(f"not an Orbax step folder: no {STEP_METADATA} (give the step "
                             "folder, e.g. <manager folder>/7)", path=str(self.source))
        for name, value in (("chunk_bytes", chunk_bytes), ("buffer_bytes", buffer_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TypeError(f"{name} is a positive int (bytes), not {value!r}")
        self.chunk_bytes, self.buffer_bytes = chunk_bytes, buffer_bytes
        self._refuse_target([self.source, *map(Path, inputs)])
        self.reader = OrbaxReader(self.source)
        self._keys = set(self.reader.keys())
        self._ts = load_tensorstore()
        self._context = self._ts.Context()
        self._items = {name: self._item(folder) for name, folder in self.reader.items.items()}
        self._files: dict[str, bytes] = {}
        self._made = self._make_parents(make_dirs)
        try:
            self._tmp: Path | None = make_temporary_folder(self.target.parent, self.target.name)
        except BaseException:
            self._remove_parents()
            raise
        self._abandoned = False

    # -- checks ---------------------------------------------------------------------------
    def _refuse_target(self, inputs: list[Path]) -> None:
        shown = str(self.target)
        if os.path.lexists(self.target):
            what = "a symbolic link" if self.target.is_symlink() else "there already"
            raise OutputError(f"is {what}: tpuemb writes a new checkpoint step and never over "
                              "anything; remove it or choose another output folder", path=shown)
        real = Path(os.path.realpath(self.target))
        for item in inputs:
            folder = Path(os.path.realpath(item))
            if real == folder or folder in real.parents:
                raise OutputError(f"is inside the input {item}: writing there would change the "
                                  "input; choose an output folder outside it", path=shown)

    def _make_parents(self, make_dirs: bool) -> list[Path]:
        parent = self.target.parent
        if parent.is_dir():
            return []
        existing = next(p for p in (parent, *parent.parents) if p.exists() or p == p.parent)
        if existing.exists() and not existing.is_dir():
            raise OutputError(f"cannot write here: {existing} is a file, not a folder; choose "
                              "another output folder", path=str(self.target))
        if not make_dirs:
            raise OutputError(f"cannot write here: folder {parent} does not exist; create it "
                              "first or choose another output folder", path=str(self.target))
        try:
            return make_missing_folders(parent)
        except OSError as exc:
            raise OutputError(f"cannot write here: {exc.strerror}", path=str(self.target)) \
                from None

    def _remove_parents(self) -> None:
        remove_made_folders(self._made)
        self._made = []

    def _item(self, folder: Path) -> _Item:
        meta = _read_json(folder / ITEM_METADATA)
        leaves = {}
        for tree_key, leaf in meta["tree_metadata"].items():  # OrbaxReader checked them
            parts = tuple(str(k["key"]) for k in leaf["key_metadata"])
            leaves[".".join(parts)] = (parts, tree_key, leaf)
        texts: dict[str, str] = {}
        if (folder / SHARDING).is_file():
            texts = _read_json(folder / SHARDING)
            try:
                for name, text in texts.items():
                    base64.b64decode(name, validate=True).decode("utf-8")
                    json.loads(text)
            except (ValueError, TypeError, AttributeError):
                raise InputError(f"a {SHARDING} entry that is not base64 name -> sharding "
                                 "JSON", path=str(folder / SHARDING)) from None
        return _Item(folder, meta, leaves, texts)

    # -- writing --------------------------------------------------------------------------
    def _live(self) -> Path:
        if self._tmp is None:
            raise ValueError("the writer was abandoned after an error" if self._abandoned
                             else "the writer is finished")
        return self._tmp

    def replace_file(self, relative: str, data: bytes) -> None:
        """Write ``data`` as the file ``relative`` (to the step folder; e.g.
        ``embedding_spec/proto.pbtxt``) instead of the source's."""
        self._live()
        parts = Path(relative).parts
        if not parts or Path(relative).is_absolute() or ".." in parts:
            raise ValueError(f"a file to replace is a path inside the step, not {relative!r}")
        if parts[0] in self._items and len(parts) == 2 and parts[1] in (
                ITEM_METADATA, SHARDING, *(_OCDBT_FILES if self._items[parts[0]].ocdbt else ())):
            raise ValueError(f"{relative!r} is the metadata or storage of an item: it is "
                             "written from the arrays, not replaced")
        if not (self.source / relative).parent.is_dir():
            raise InputError(f"cannot replace {relative!r}: the step has no folder "
                             f"{Path(relative).parent}", path=str(self.source))
        self._files[Path(relative).as_posix()] = bytes(data)

    def add_rows(self, key: str, shape: Iterable[int], dtype: Any,
                 chunks: Iterable[np.ndarray]) -> None:
        """Write the array ``key`` of ``shape`` and ``dtype`` whose rows (along the first axis)
        come in ``chunks``, in order, in blocks of any size: in place of the source's array
        ``key``, or as a new array (a new stack) when the source has none: its metadata
        (``value_type``, sharding, zarr compression) then follows the source array of the same
        item whose path differs from ``key`` in one part only (``.../user/table`` follows
        ``.../user_item/table``)."""
        tmp = self._live()
        item_name, name, like, parts = self._resolve(key)
        item = self._items[item_name]
        if name in item.replaced or name in item.dropped:
            raise ValueError(f"the array {key!r} was added or dropped already")
        shape = tuple(int(d) for d in shape)
        dtype = np.dtype(dtype)
        ndim = len(self.reader.entry(f"{item_name}/{'/'.join(item.leaves[like][0])}").shape)
        if not shape or any(d < 0 for d in shape) or len(shape) != ndim:
            raise ValueError(f"array {key!r}: shape {shape} does not replace an array of "
                             f"{ndim} dimensions (the same number of dimensions, at least one)")
        replaced = self._plan(key, item, like, shape, dtype)
        replaced.parts = parts
        try:
            store = self._create(tmp / item_name, item, name, shape, replaced, dtype)
            self._stream(key, store, shape, dtype, replaced.chunk_shape[0], chunks)
        except BaseException as exc:
            self.abort(exc)
            raise
        item.replaced[name] = replaced

    def drop(self, key: str) -> None:
        """Leave the source's array ``key`` out of the new step (a stack the new layout does
        not have): its data, its metadata and its sharding."""
        self._live()
        entry = self.reader.entry(key)
        item = next(i for i in self._items.values() if i.source == entry.item)
        if entry.name in item.replaced or entry.name in item.dropped:
            raise ValueError(f"the array {key!r} was added or dropped already")
        item.dropped.add(entry.name)

    def _resolve(self, key: str) -> tuple[str, str, str, tuple[str, ...] | None]:
        """(item, param name, the source array it follows, its path if new) of ``key``."""
        item_name, _, rest = key.partition("/")
        item = self._items.get(item_name)
        parts = tuple(rest.split("/")) if rest else ()
        name = ".".join(parts)
        if item is None or not parts:
            raise InputError(f"no array {key!r} in the checkpoint, nor an item {item_name!r} "
                             f"to add it to (its items: {', '.join(sorted(self._items))})",
                             path=str(self.source))
        if key in self._keys:
            return item_name, name, name, None
        if name in item.leaves:
            raise InputError(f"{key!r} is a value stored in the item's metadata, not an array",
                             path=str(item.source))
        siblings = sorted((p[-1] != parts[-1], n) for n, (p, _, leaf) in item.leaves.items()
                          if f"{item_name}/{'/'.join(p)}" in self._keys
                          and len(p) == len(parts)
                          and sum(a != b for a, b in zip(p, parts, strict=True)) == 1)
        if not siblings:
            raise InputError(f"no array {key!r} in the checkpoint, and none whose path differs "
                             "from it in one part only to take its metadata from (a new stack "
                             "follows another stack's arrays)", path=str(item.source))
        return item_name, name, siblings[0][1], parts

    def _plan(self, key: str, item: _Item, like: str, shape: tuple[int, ...],
              dtype: np.dtype[Any]) -> _Replaced:
        shards = _shards(item.sharding(like), len(shape))
        for dim, (size, parts) in enumerate(zip(shape, shards, strict=True)):
            if size % parts:
                raise InputError(f"array {key!r}: dimension {dim} of the new shape {shape} "
                                 f"({size}) does not split over the {parts} devices its sharding "
                                 f"in {SHARDING} puts it on; jax refuses such an array",
                                 path=str(item.source))
        write_shape = tuple(size // parts for size, parts in zip(shape, shards, strict=True))
        row_bytes = math.prod(write_shape[1:]) * dtype.itemsize
        rows = write_shape[0]
        cap = max(1, self.chunk_bytes // max(1, row_bytes))
        chunk_rows = max((d for d in _divisors(rows) if d <= cap), default=1) if rows else 1
        return _Replaced(shape, write_shape, (chunk_rows, *write_shape[1:]), like)

    def _kv(self, folder: Path, item: _Item, *, create: bool) -> Any:
        base = {"driver": "file", "path": str(folder.resolve()) + "/"}
        spec = ({"driver": "ocdbt", "base": base, "config": OCDBT_CONFIG} if item.ocdbt and create
                else {"driver": "ocdbt", "base": base} if item.ocdbt else base)
        return self._ts.KvStore.open(spec, context=self._context).result()

    def _open_stores(self, folder: Path, item: _Item) -> None:
        if item.target_kv is None:
            folder.mkdir(exist_ok=True)
            try:
                item.source_kv = self._kv(item.source, item, create=False)
                item.target_kv = self._kv(folder, item, create=True)
            except Exception as exc:  # tensorstore's status errors
                raise OutputError(f"cannot write the item {folder.name!r}: {first_line(exc)}",
                                  path=str(self.target)) from None

    def _create(self, folder: Path, item: _Item, name: str, shape: tuple[int, ...],
                replaced: _Replaced, dtype: np.dtype[Any]) -> Any:
        self._open_stores(folder, item)
        where = f"{replaced.like}/{_ZARR_METADATA[item.zarr3]}"
        try:
            stored = json.loads(item.source_kv.read(where).result().value)
        except Exception as exc:  # tensorstore's status errors, a bad JSON
            raise InputError(f"the zarr metadata {where!r} of the array cannot be read: "
                             f"{first_line(exc)}", path=str(item.source)) from None
        metadata = _zarr_metadata(stored, shape, replaced.chunk_shape, dtype, zarr3=item.zarr3)
        spec = {"driver": "zarr3" if item.zarr3 else "zarr", "metadata": metadata, "create": True}
        try:
            return self._ts.open(spec, kvstore=item.target_kv / f"{name}/",
                                 context=self._context).result()
        except Exception as exc:
            raise OutputError(f"cannot write the array {name!r}: {first_line(exc)}",
                              path=str(self.target)) from None

    def _stream(self, key: str, store: Any, shape: tuple[int, ...], dtype: np.dtype[Any],
                band_rows: int, chunks: Iterable[np.ndarray]) -> None:
        """Gather ``chunks`` into bands of ``band_rows`` rows (one row of zarr chunks) and write
        each band whole, committing a transaction every ``buffer_bytes``."""
        row_shape = shape[1:]
        written, filled = 0, 0
        band = np.empty((band_rows, *row_shape), dtype=dtype)
        writes = _Transactions(self._ts, self.buffer_bytes, self.target)
        for chunk in chunks:
            chunk = np.asarray(chunk)
            if chunk.dtype != dtype or chunk.shape[1:] != row_shape:
                raise ValueError(f"array {key!r}: a chunk of {chunk.dtype} {chunk.shape} does "
                                 f"not fit rows of {dtype} {shape}")
            if written + filled + len(chunk) > shape[0]:
                raise ValueError(f"array {key!r}: the chunks hold more than its "
                                 f"{shape[0]} rows")
            at = 0
            while at < len(chunk):
                take = min(band_rows - filled, len(chunk) - at)
                band[filled:filled + take] = chunk[at:at + take]
                filled, at = filled + take, at + take
                if filled == band_rows:
                    writes.write(store, written, band)
                    written, filled = written + filled, 0
                    band = np.empty_like(band)
        if filled:
            writes.write(store, written, band[:filled])
            written += filled
        writes.commit()
        if written != shape[0]:
            raise ValueError(f"array {key!r}: the chunks hold {written} rows, its shape "
                             f"{shape} has {shape[0]}")

    # -- finishing ------------------------------------------------------------------------
    def finish(self) -> Path:
        """Copy the rest, write the metadata and rename the step into place: the target."""
        if self._tmp is None:
            if self._abandoned:
                raise ValueError("the writer was abandoned after an error: nothing was written")
            return self.target
        tmp = self._tmp
        try:
            self._copy_step(tmp)
            os.chmod(tmp, folder_mode())
            with _interrupt.held():
                self._rename(tmp)
                self._tmp = None
                release_temporary_folder(tmp, remove=False)
        except BaseException as exc:
            self.abort(exc)
            raise
        self._close()
        self._made = []
        sync_folder(self.target.parent)
        return self.target

    def _close(self) -> None:
        for item in self._items.values():
            item.source_kv = item.target_kv = None
        self.reader.close()

    def _rename(self, tmp: Path) -> None:
        try:
            os.mkdir(self.target)  # fails on anything there, a planted link included
        except FileExistsError:
            raise OutputError("appeared while the checkpoint was written: tpuemb never writes "
                              "over anything; remove it or choose another output folder",
                              path=str(self.target)) from None
        except OSError as exc:
            raise OutputError(f"cannot write: {exc.strerror}", path=str(self.target)) from None
        try:
            os.rename(tmp, self.target)  # over the empty placeholder only
        except OSError as exc:
            try:
                os.rmdir(self.target)
            except OSError:
                pass
            raise OutputError(f"cannot write: {exc.strerror}", path=str(self.target)) from None

    def _copy_step(self, tmp: Path) -> None:
        items = {name: item for name, item in self._items.items() if item.rebuilt}
        _copy_tree(self.source, tmp, lambda rel: rel.parts[0] in items or rel.as_posix()
                   in self._files)
        for name, item in items.items():
            self._copy_item(tmp / name, item)
        for relative, data in self._files.items():
            (tmp / relative).write_bytes(data)

    def _copy_item(self, folder: Path, item: _Item) -> None:
        names = set(item.replaced) | item.dropped
        reshaped = any(r.parts is not None for r in item.replaced.values()) or item.dropped
        rewritten = {ITEM_METADATA, *self._item_files(folder.name),
                     *((SHARDING,) if reshaped else ())}

        def skip(rel: Path) -> bool:
            head = rel.parts[0]
            if rel.as_posix() in rewritten:
                return True
            if item.ocdbt:
                return head in _OCDBT_FILES or head.startswith(_OCDBT_PREFIX)
            return head in names

        _copy_tree(item.source, folder, skip)
        if item.ocdbt:
            self._open_stores(folder, item)
            self._copy_keys(item, names)
        (folder / ITEM_METADATA).write_text(json.dumps(_tree_metadata(item)), encoding="utf-8")
        if reshaped and item.sharding_text:
            texts = {k: v for k, v in item.sharding_text.items()
                     if base64.b64decode(k).decode("utf-8") not in item.dropped}
            for name, new in item.replaced.items():
                if new.parts is not None and _encoded(new.like) in item.sharding_text:
                    texts[_encoded(name)] = item.sharding_text[_encoded(new.like)]
            (folder / SHARDING).write_text(json.dumps(texts, separators=(",", ":")),
                                           encoding="utf-8")
        stores = item.source / ARRAY_METADATAS
        if stores.is_dir():
            for path in sorted(stores.iterdir()):
                (folder / ARRAY_METADATAS / path.name).write_text(
                    json.dumps(_array_metadatas(_read_json(path), item)), encoding="utf-8")

    def _item_files(self, item: str) -> tuple[str, ...]:
        """The item's files rewritten from its metadata (the array_metadatas files)."""
        folder = self._items[item].source / ARRAY_METADATAS
        if not folder.is_dir():
            return ()
        return tuple(f"{ARRAY_METADATAS}/{p.name}" for p in folder.iterdir())

    def _copy_keys(self, item: _Item, replaced: set[str]) -> None:
        """Every key of the source database but the replaced arrays', as stored."""
        writes = _Transactions(self._ts, self.buffer_bytes, self.target)
        for key in item.source_kv.list().result():
            name = key.decode("utf-8", "replace").split("/", 1)[0]
            if name in replaced:
                continue
            value = item.source_kv.read(key).result().value
            writes.put(item.target_kv, key, value)
        writes.commit()

    def abort(self, error: BaseException | None = None) -> None:
        """Remove everything written so far (``error``: the exception that stops the write;
        without one the write was given up, and :meth:`finish` does nothing)."""
        tmp, self._tmp = self._tmp, None
        if tmp is not None:
            self._abandoned = error is not None
            self._close()
            release_temporary_folder(tmp, remove=True)
        self._remove_parents()

    def __enter__(self) -> OrbaxStepWriter:
        return self


class _Transactions:
    """Writes in tensorstore transactions of at most ``limit`` bytes each (one OCDBT commit
    each): bounded memory, and few commits (each commit writes a new root node)."""

    def __init__(self, ts: Any, limit: int, path: Path) -> None:
        self._ts, self._limit, self._path = ts, limit, path
        self._txn: Any = None
        self._bytes = 0

    def _open(self) -> Any:
        if self._txn is None:
            self._txn = self._ts.Transaction()
        return self._txn

    def _count(self, size: int) -> None:
        self._bytes += size
        if self._bytes >= self._limit:
            self.commit()

    def write(self, store: Any, row: int, rows: np.ndarray) -> None:
        try:
            store.with_transaction(self._open())[row:row + len(rows)].write(rows).result()
        except Exception as exc:  # tensorstore's status errors
            raise self._error(exc) from None
        self._count(rows.nbytes)

    def put(self, kv: Any, key: bytes, value: bytes) -> None:
        try:
            kv.with_transaction(self._open()).write(key, value).result()
        except Exception as exc:
            raise self._error(exc) from None
        self._count(len(value))

    def commit(self) -> None:
        txn, self._txn, self._bytes = self._txn, None, 0
        if txn is not None:
            try:
                txn.commit_sync()
            except Exception as exc:
                raise self._error(exc) from None

    def _error(self, exc: Exception) -> OutputError:
        return OutputError(f"cannot write: {first_line(exc)}", path=str(self._path))


def _shards(sharding: Mapping[str, Any] | None, ndim: int) -> tuple[int, ...]:
    """How many devices a ``_sharding`` entry splits each dimension over (1 when not split)."""
    shards = [1] * ndim
    if not sharding or sharding.get("sharding_type") != "NamedSharding":
        return tuple(shards)
    mesh = dict(zip(sharding.get("axis_names", ()), sharding.get("shape", ()), strict=False))
    for dim, axes in enumerate(sharding.get("partition_spec", ())[:ndim]):
        for axis in [axes] if isinstance(axes, str) else axes or ():
            shards[dim] *= int(mesh.get(axis, 1))
    return tuple(shards)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in small]


def _zarr_metadata(source: dict[str, Any], shape: tuple[int, ...], chunks: tuple[int, ...],
                   dtype: np.dtype[Any], *, zarr3: bool) -> dict[str, Any]:
    """The source array's zarr metadata with the new shape, chunks and dtype."""
    meta = dict(source)
    meta["shape"] = list(shape)
    if zarr3:
        meta["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": list(chunks)}}
        meta["data_type"] = dtype.name
        codecs = []
        for codec in meta.get("codecs", []):
            if codec.get("name") == "sharding_indexed":  # Orbax: one inner chunk per shard
                codec = {**codec, "configuration": {**codec["configuration"],
                                                    "chunk_shape": list(chunks)}}
            codecs.append(codec)
        meta["codecs"] = codecs
    else:
        meta["chunks"] = list(chunks)
        if np.dtype(source.get("dtype", dtype.str)) != dtype:
            meta["dtype"] = dtype.str
    return meta


def _encoded(name: str) -> str:
    """A param name as ``_sharding`` names it."""
    return base64.b64encode(name.encode("utf-8")).decode("ascii")


def _tree_metadata(item: _Item) -> dict[str, Any]:
    """The item's ``_METADATA`` for the new step: dropped leaves out, written arrays' write
    shapes, new arrays' leaves (their model's, on their own path: Orbax names a leaf by the
    tuple of its keys), in order of those names when any was added."""
    meta: dict[str, Any] = json.loads(json.dumps(item.meta))
    tree = {k: v for k, v in meta["tree_metadata"].items()
            if ".".join(str(p["key"]) for p in v["key_metadata"]) not in item.dropped}
    for name, new in item.replaced.items():
        if new.parts is None:
            _, tree_key, _ = item.leaves[name]
            leaf = tree[tree_key]
        else:
            leaf = json.loads(json.dumps(item.leaves[new.like][2]))
            leaf["key_metadata"] = [{**k, "key": part}
                                    for k, part in zip(leaf["key_metadata"], new.parts,
                                                       strict=True)]
            tree[str(new.parts)] = leaf
        if "write_shape" in leaf["value_metadata"]:
            leaf["value_metadata"]["write_shape"] = list(new.write_shape)
    added = any(new.parts is not None for new in item.replaced.values())
    meta["tree_metadata"] = dict(sorted(tree.items())) if added else tree
    return meta


def _array_metadatas(stored: dict[str, Any], item: _Item) -> dict[str, Any]:
    """An ``array_metadatas`` file for the new step (as :func:`_tree_metadata`)."""
    out: dict[str, Any] = json.loads(json.dumps(stored))
    entries = [e for e in out.get("array_metadatas", [])
               if e.get("array_metadata", {}).get("param_name") not in item.dropped]
    by_name = {e.get("array_metadata", {}).get("param_name"): e for e in entries}
    for name, new in item.replaced.items():
        if new.parts is not None and new.like in by_name:
            entry = json.loads(json.dumps(by_name[new.like]))
            entry["array_metadata"]["param_name"] = name
            entries.append(entry)
            by_name[name] = entry
        meta = by_name.get(name, {}).get("array_metadata")
        if meta is not None:
            meta["write_shape"] = list(new.write_shape)
            meta["chunk_shape"] = list(new.chunk_shape)
    added = any(new.parts is not None for new in item.replaced.values())
    out["array_metadatas"] = sorted(entries, key=lambda e: str(
        e.get("array_metadata", {}).get("param_name"))) if added else entries
    return out


def _copy_tree(source: Path, target: Path, skip: Callable[[Path], bool],
               relative: Path = Path()) -> None:
    """Copy the files under ``source`` (no symbolic link, no special file) but those ``skip``
    names (by their path relative to the top)."""
    target.mkdir(exist_ok=True)
    with os.scandir(source) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            rel = relative / entry.name
            if skip(rel):
                continue
            if entry.is_symlink():
                raise InputError("is a symbolic link: an Orbax checkpoint holds none, and tpuemb "
                                 "does not copy through one", path=entry.path)
            if entry.is_dir():
                _copy_tree(Path(entry.path), target / entry.name, skip, rel)
            elif entry.is_file():
                shutil.copyfile(entry.path, target / entry.name)
            else:
                raise InputError("is not a file nor a folder: an Orbax checkpoint holds none",
                                 path=entry.path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"not JSON: {exc}", path=str(path)) from None
