"""Orbax checkpoints (jax-tpu-embedding's) read through tensorstore, an optional extra.

An Orbax ``PyTreeCheckpointHandler`` / ``StandardCheckpointHandler`` item is a folder with a JSON
``_METADATA`` (``tree_metadata``: each leaf's pytree path as ``key_metadata`` and its
``value_metadata``; ``use_ocdbt``, ``use_zarr3``) and the arrays stored as zarr (v2 or v3)
arrays, named by the path joined with ".", in an OCDBT key-value store in the item's folder (or,
without OCDBT, one folder per array). A ``CheckpointManager`` step folder holds
``_CHECKPOINT_METADATA`` and one folder per item (jax-tpu-embedding's NNX ``save_checkpoint``:
``model``, ``optimizer``, ``embedding_spec``); a manager's own folder holds numbered steps.

:class:`OrbaxReader` opens any of the three (a manager's folder at its last step) and is a
``checkpoints.embedding.CheckpointSource``: the keys are the pytree paths joined with "/", the
item first for a step folder (``model/embedding_layer/embedding_table/value/user_item/table``);
``read_rows`` reads only the rows asked for (a tensorstore slice). tensorstore is imported when
a reader is made; without it the error says which extra installs it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tpuemb_cfg.base.errors import InputError

__all__ = ["INSTALL_HINT", "OrbaxEntry", "OrbaxReader", "first_line", "is_orbax_checkpoint",
           "load_tensorstore"]

INSTALL_HINT = "reading an Orbax checkpoint needs tensorstore: pip install 'tpuemb[orbax]'"
ITEM_METADATA = "_METADATA"
STEP_METADATA = "_CHECKPOINT_METADATA"
#: Orbax ``value_type``s stored as a tensorstore array (scalars and strings live in _METADATA).
ARRAY_TYPES = ("jax.Array", "np.ndarray")
#: Largest ``_METADATA`` read (a pytree of many thousand leaves is a few MB).
METADATA_LIMIT = 256 << 20
#: Largest other file read from a step (an item saved as text, such as a proto).
FILE_LIMIT = 64 << 20


def is_orbax_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder an :class:`OrbaxReader` opens (by its metadata files only)."""
    try:
        return _layout(Path(path)) is not None
    except OSError:
        return False


def _layout(folder: Path) -> list[tuple[str, Path]] | None:
    """The items of a checkpoint folder: (key prefix, item folder), or None if it is none."""
    if not folder.is_dir():
        return None
    if (folder / ITEM_METADATA).is_file():
        return [("", folder)]
    if (folder / STEP_METADATA).is_file():
        return [(item.name + "/", item) for item in sorted(folder.iterdir())
                if (item / ITEM_METADATA).is_file()]
    steps = [p for p in folder.iterdir() if p.name.isdigit() and (p / STEP_METADATA).is_file()]
    if steps:
        return _layout(max(steps, key=lambda p: int(p.name)))
    return None


def _step_of(folder: Path, items: list[tuple[str, Path]]) -> Path | None:
    """The step folder holding ``items`` (the folder itself, its chosen step, or an item's
    parent step)."""
    parent = items[0][1].parent
    if (parent / STEP_METADATA).is_file():
        return parent
    return folder if (folder / STEP_METADATA).is_file() else None


@dataclass(frozen=True)
class OrbaxEntry:
    """One stored array: its pytree path, item folder, name in the item's store, dtype, shape."""

    item: Path
    name: str
    dtype: Any
    shape: tuple[int, ...]


def load_tensorstore() -> Any:
    """The tensorstore module (the optional extra), or an InputError saying how to install it."""
    try:
        import tensorstore  # the optional extra
    except ImportError:
        raise InputError(INSTALL_HINT) from None
    return tensorstore


class OrbaxReader:
    """An Orbax checkpoint folder opened for reading through tensorstore (see the module)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        folder = Path(path)
        if not folder.exists():
            raise InputError("not found: no such checkpoint folder", path=self.path)
        if not folder.is_dir():
            raise InputError("not a folder: an Orbax checkpoint is a folder", path=self.path)
        items = _layout(folder)
        if not items:
            raise InputError(f"not an Orbax checkpoint: no {ITEM_METADATA} or {STEP_METADATA} "
                             f"in the folder (nor in a numbered step folder)", path=self.path)
        self._ts = load_tensorstore()
        self._stores: dict[str, Any] = {}
        self._entries: dict[str, OrbaxEntry] = {}
        self.items = {prefix.rstrip("/"): item for prefix, item in items}
        #: the CheckpointManager step folder read (None: an item folder outside any step)
        self.step: Path | None = _step_of(folder, items)
        for prefix, item in items:
            self._read_item(prefix, item)

    # -- metadata -------------------------------------------------------------------------
    def _read_item(self, prefix: str, item: Path) -> None:
        meta_path = item / ITEM_METADATA
        try:
            if meta_path.stat().st_size > METADATA_LIMIT:
                raise InputError(f"is larger than {METADATA_LIMIT} bytes", path=str(meta_path))
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            tree = meta["tree_metadata"]
            if not isinstance(tree, dict):
                raise TypeError("tree_metadata is not an object")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"not an Orbax item's metadata: {exc}", path=str(meta_path)) from None
        driver = "zarr3" if meta.get("use_zarr3") else "zarr"
        for leaf in tree.values():
            try:
                keys = [str(k["key"]) for k in leaf["key_metadata"]]
                value_type = leaf["value_metadata"]["value_type"]
            except (KeyError, TypeError):
                raise InputError("a tree_metadata leaf without key_metadata or value_type",
                                 path=str(meta_path)) from None
            if value_type not in ARRAY_TYPES or leaf["value_metadata"].get("skip_deserialize"):
                continue
            key = prefix + "/".join(keys)
            name = ".".join(keys)
            store = self._open(item, name, driver, bool(meta.get("use_ocdbt", True)), key)
            self._stores[key] = store
            self._entries[key] = OrbaxEntry(item, name, _numpy_dtype(store.dtype),
                                            tuple(int(n) for n in store.shape))

    def _open(self, item: Path, name: str, driver: str, ocdbt: bool, key: str) -> Any:
        base = item.resolve().as_uri() + "/"
        kvstore: dict[str, Any] = ({"driver": "ocdbt", "base": base, "path": name} if ocdbt
                                   else {"driver": "file", "path": str(item.resolve() / name)})
        spec = {"driver": driver, "kvstore": kvstore, "open": True}
        try:
            return self._ts.open(spec, read=True).result()
        except Exception as exc:  # tensorstore raises ValueError / its own status errors
            raise InputError(f"array {key!r} cannot be opened: {first_line(exc)}",
                             path=str(item)) from None

    # -- CheckpointSource -----------------------------------------------------------------
    def keys(self) -> list[str]:
        return sorted(self._entries)

    def entry(self, key: str) -> OrbaxEntry:
        try:
            return self._entries[key]
        except KeyError:
            raise InputError(f"no array {key!r} in the checkpoint", path=self.path) from None

    def read(self, key: str) -> np.ndarray:
        return self._read(key, None)

    def read_rows(self, key: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of a stored array (only those are read)."""
        return self._read(key, (start, stop))

    def _read(self, key: str, rows: tuple[int, int] | None) -> np.ndarray:
        entry = self.entry(key)
        store = self._stores[key]
        if rows is not None:
            if not entry.shape:
                raise InputError(f"array {key!r} is a scalar: it has no rows", path=self.path)
            start, stop = max(0, rows[0]), min(entry.shape[0], rows[1])
            store = store[start:max(start, stop)]
        try:
            return np.asarray(store.read().result())
        except Exception as exc:
            raise InputError(f"array {key!r} cannot be read: {first_line(exc)}",
                             path=str(entry.item)) from None

    def read_file(self, relative: str, limit: int = FILE_LIMIT) -> bytes | None:
        """A small file of the step (``embedding_spec/proto.pbtxt``: a ``ProtoSave`` item), or
        None when the step has no such file; a planted symlink or a file over ``limit`` bytes
        is refused (``InputError``)."""
        if self.step is None:
            return None
        path = self.step / relative
        try:
            if path.is_symlink() or not path.is_file():
                if path.is_symlink():
                    raise InputError("is a symbolic link: refused", path=str(path))
                return None
            if path.stat().st_size > limit:
                raise InputError(f"is larger than {limit} bytes", path=str(path))
            return path.read_bytes()
        except OSError as exc:
            raise InputError(f"cannot be read: {exc.strerror or exc}", path=str(path)) from None

    def close(self) -> None:
        self._stores.clear()

    def __enter__(self) -> OrbaxReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _numpy_dtype(dtype: Any) -> Any:
    numpy_dtype = getattr(dtype, "numpy_dtype", None)
    return np.dtype(numpy_dtype) if numpy_dtype is not None else str(dtype)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (tensorstore's run to many lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
