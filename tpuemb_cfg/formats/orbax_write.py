"""Write an Orbax ``CheckpointManager`` step from another one, with some arrays replaced.

The output of ``tpuemb checkpoint reshard`` for a jax-tpu-embedding checkpoint: the SOURCE step
(``.../7``: ``_CHECKPOINT_METADATA``, one folder per item) copied into a NEW step folder, except

- the arrays given to :meth:`OrbaxStepWriter.add_rows` (keys as :class:`~tpuemb_cfg.formats.orbax
  .OrbaxReader` names them, item first: ``model/embedding_layer/embedding_table/value/user_item/
  table``), written with their new shapes a block of rows at a time, and
- the files given to :meth:`OrbaxStepWriter.replace_file` (``embedding_spec/proto.pbtxt``, the
  stacking of the new topology).

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
refuses such an array). ``_sharding`` itself names no shape and is kept. The **chunk shape**
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
    folder_mode,
    make_temporary_folder,
    release_temporary_folder,
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
    shape: tuple[int, ...]
    write_shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]


@dataclass
class _Item:
    """One pytree item of the source step: its metadata and, once an array of it is replaced,
    the key-value stores it is copied from and written to."""

    source: Path
    meta: dict[str, Any]
    shardings: dict[str, Any]
    replaced: dict[str, _Replaced] = field(default_factory=dict)
    source_kv: Any = None
    target_kv: Any = None

    @property
    def ocdbt(self) -> bool:
        return bool(self.meta.get("use_ocdbt", True))

    @property
    def zarr3(self) -> bool:
        return bool(self.meta.get("use_zarr3", False))


class OrbaxStepWriter:
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
        self.chunk_bytes, self.buffer_bytes = max(1, chunk_bytes), max(1, buffer_bytes)
        self._refuse_target([self.source, *map(Path, inputs)])
        self.reader = OrbaxReader(self.source)
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
        if not make_dirs:
            raise OutputError(f"cannot write here: folder {parent} does not exist; create it "
                              "first or choose another output folder", path=str(self.target))
        missing = []
        probe = parent
        while not probe.exists() and probe != probe.parent:
            missing.append(probe)
            probe = probe.parent
        try:
            parent.mkdir(parents=True)
        except OSError as exc:
            raise OutputError(f"cannot write here: {exc.strerror}", path=str(self.target)) \
                from None
        return list(reversed(missing))

    def _remove_parents(self) -> None:
        for folder in reversed(self._made):
            try:
                folder.rmdir()
            except OSError:
                pass
        self._made = []

    def _item(self, folder: Path) -> _Item:
        meta = _read_json(folder / ITEM_METADATA)
        shardings: dict[str, Any] = {}
        if (folder / SHARDING).is_file():
            for name, text in _read_json(folder / SHARDING).items():
                try:
                    shardings[base64.b64decode(name).decode("utf-8")] = json.loads(text)
                except (ValueError, TypeError):
                    raise InputError(f"a {SHARDING} entry that is not base64 name -> sharding "
                                     "JSON", path=str(folder / SHARDING)) from None
        return _Item(folder, meta, shardings)

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
        """Replace the array ``key`` by one of ``shape`` and ``dtype`` whose rows (along the
        first axis) come in ``chunks``, in order, in blocks of any size."""
        tmp = self._live()
        entry = self.reader.entry(key)
        item_name = next(n for n, i in self._items.items() if i.source == entry.item)
        item = self._items[item_name]
        if entry.name in item.replaced:
            raise ValueError(f"the array {key!r} was added already")
        shape = tuple(int(d) for d in shape)
        dtype = np.dtype(dtype)
        if not shape or any(d < 0 for d in shape) or len(shape) != len(entry.shape):
            raise ValueError(f"array {key!r}: shape {shape} does not replace one of "
                             f"{entry.shape} (the same number of dimensions, at least one)")
        replaced = self._plan(key, item, entry.name, shape, dtype)
        try:
            store = self._create(tmp / item_name, item, entry.name, shape, replaced, dtype)
            self._stream(key, store, shape, dtype, replaced.chunk_shape[0], chunks)
        except BaseException as exc:
            self.abort(exc)
            raise
        item.replaced[entry.name] = replaced

    def _plan(self, key: str, item: _Item, name: str, shape: tuple[int, ...],
              dtype: np.dtype[Any]) -> _Replaced:
        shards = _shards(item.shardings.get(name), len(shape))
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
        return _Replaced(shape, write_shape, (chunk_rows, *write_shape[1:]))

    def _kv(self, folder: Path, item: _Item, *, create: bool) -> Any:
        base = {"driver": "file", "path": str(folder.resolve()) + "/"}
        spec = ({"driver": "ocdbt", "base": base, "config": OCDBT_CONFIG} if item.ocdbt and create
                else {"driver": "ocdbt", "base": base} if item.ocdbt else base)
        return self._ts.KvStore.open(spec, context=self._context).result()

    def _create(self, folder: Path, item: _Item, name: str, shape: tuple[int, ...],
                replaced: _Replaced, dtype: np.dtype[Any]) -> Any:
        if item.target_kv is None:
            folder.mkdir(exist_ok=True)
            item.source_kv = self._kv(item.source, item, create=False)
            item.target_kv = self._kv(folder, item, create=True)
        where = f"{name}/{_ZARR_METADATA[item.zarr3]}"
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
        items = {name: item for name, item in self._items.items() if item.replaced}
        _copy_tree(self.source, tmp, lambda rel: rel.parts[0] in items or rel.as_posix()
                   in self._files)
        for name, item in items.items():
            self._copy_item(tmp / name, item)
        for relative, data in self._files.items():
            (tmp / relative).write_bytes(data)

    def _copy_item(self, folder: Path, item: _Item) -> None:
        names = set(item.replaced)

        def skip(rel: Path) -> bool:
            head = rel.parts[0]
            if rel.as_posix() in (ITEM_METADATA, *self._item_files(folder.name)):
                return True
            if item.ocdbt:
                return head in _OCDBT_FILES or head.startswith(_OCDBT_PREFIX)
            return head in names

        _copy_tree(item.source, folder, skip)
        if item.ocdbt:
            self._copy_keys(item, names)
        meta = json.loads(json.dumps(item.meta))
        for leaf in meta["tree_metadata"].values():
            name = ".".join(str(k["key"]) for k in leaf["key_metadata"])
            value = leaf["value_metadata"]
            if name in item.replaced and "write_shape" in value:
                value["write_shape"] = list(item.replaced[name].write_shape)
        (folder / ITEM_METADATA).write_text(json.dumps(meta), encoding="utf-8")
        stores = item.source / ARRAY_METADATAS
        if stores.is_dir():
            for path in sorted(stores.iterdir()):
                (folder / ARRAY_METADATAS / path.name).write_text(
                    json.dumps(_array_metadatas(_read_json(path), item.replaced)),
                    encoding="utf-8")

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

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if value is None:
            self.finish()
        else:
            self.abort(value if isinstance(value, BaseException) else None)


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


def _array_metadatas(stored: dict[str, Any], replaced: Mapping[str, _Replaced]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(stored))
    for entry in out.get("array_metadatas", []):
        meta = entry.get("array_metadata", {})
        new = replaced.get(meta.get("param_name"))
        if new is not None:
            meta["write_shape"] = list(new.write_shape)
            meta["chunk_shape"] = list(new.chunk_shape)
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
