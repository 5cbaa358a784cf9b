"""Reading and writing ``.npz`` files for the executor, byte-reproducibly and atomically.

``numpy.savez`` stamps every member of the zip archive with the current time, so two runs with
the same inputs write different bytes. ``atomic_write_npz`` writes the same ``.npy`` members
(``numpy.lib.format``) with a fixed timestamp and sorted member order, into a temporary file in
the destination directory that replaces the destination only once it is complete: a reader sees
either the old file or the new one, never a partial file. ``numpy.load`` reads the result.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping
from typing import IO

import numpy as np

from .atomic import atomic_output
from .errors import InputError

__all__ = ["atomic_write_npz", "npz_bytes", "read_npz"]

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip header can hold


def _write_npz(handle: IO[bytes], arrays: Mapping[str, np.ndarray]) -> None:
    """Stream an uncompressed ``.npz`` (member ``KEY.npy`` per key, sorted, fixed timestamp)."""
    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key in sorted(arrays):
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(arrays[key]), allow_pickle=False)


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """The bytes ``atomic_write_npz`` writes for ``arrays``; equal arrays give equal bytes."""
    buffer = io.BytesIO()
    _write_npz(buffer, arrays)
    return buffer.getvalue()


def atomic_write_npz(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` as an ``.npz``: streamed into a temporary file beside it
    (no in-memory copy of the archive), then renamed over ``path``."""
    with atomic_output(path) as handle:
        _write_npz(handle, arrays)


def read_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``, loaded eagerly (no pickled objects allowed).

    Raises ``InputError`` naming the file when it is missing, not an npz archive, or holds an
    object array.
    """
    name = os.fspath(path)
    try:
        loaded = np.load(name, allow_pickle=False)
    except FileNotFoundError:
        raise InputError("file not found", path=name) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected an .npz file", path=name) from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(
            f"cannot read as .npz ({exc}); write it with numpy.savez", path=name
        ) from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise InputError(
            "not an .npz archive (it holds a single array); write it with numpy.savez",
            path=name,
        )
    arrays: dict[str, np.ndarray] = {}
    with loaded:
        for key in loaded.files:
            try:
                arrays[key] = loaded[key]
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
                raise InputError(
                    f"cannot read the array ({exc}); store plain numeric arrays",
                    path=name, key=key,
                ) from None
    return arrays
