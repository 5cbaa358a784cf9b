"""Reading and writing ``.npz`` files for the executor, byte-reproducibly and atomically.

``numpy.savez`` stamps every member of the zip archive with the current time, so two runs with
the same inputs write different bytes. ``atomic_write_npz`` writes the same ``.npy`` members
(``numpy.lib.format``) with a fixed timestamp and sorted member order, into a temporary file in
the destination directory that replaces the destination only once it is complete: a reader sees
either the old file or the new one, never a partial file (:mod:`tpuemb_cfg.atomic`; a symbolic
link is written through). ``numpy.load`` reads the result. :func:`write_npz` streams the same
bytes into any handle, e.g. one of an :class:`~tpuemb_cfg.atomic.OutputSet`; a value with
``npy_chunks()`` (a table the Ray backend's hosts hold) is written a block of rows at a time,
never whole in memory.

:func:`read_npz` looks at the first bytes before handing the file to NumPy, so that random bytes
or a text file are reported as what they are instead of NumPy's advice about ``allow_pickle``.
"""

from __future__ import annotations

import io
import os
import stat
import zipfile
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from .atomic import atomic_output
from .errors import InputError
from .limits import read_errors

__all__ = ["atomic_write_npz", "map_npz", "npz_bytes", "read_npz", "write_npz"]

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip header can hold


def write_npz(handle: IO[bytes], arrays: Mapping[str, np.ndarray]) -> None:
    """Stream an uncompressed ``.npz`` (member ``KEY.npy`` per key, sorted, fixed timestamp)."""
    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key in sorted(arrays):
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            with archive.open(info, "w", force_zip64=True) as member:
                value = arrays[key]
                if hasattr(value, "npy_chunks"):
                    _write_chunked(member, value)
                else:
                    np.lib.format.write_array(member, np.asarray(value), allow_pickle=False)


def _write_chunked(member: IO[bytes], value: Any) -> None:
    """The ``.npy`` bytes of an array-like that yields its C-order data in blocks (``shape``,
    ``dtype``, ``npy_chunks()``: e.g. a table held by the Ray backend's hosts), written a block
    at a time; the same bytes ``write_array`` writes for the whole array."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(value.dtype)),
              "fortran_order": False, "shape": tuple(value.shape)}
    np.lib.format.write_array_header_1_0(member, header)
    for block in value.npy_chunks():
        member.write(np.ascontiguousarray(block, dtype=value.dtype).tobytes())


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """The bytes ``atomic_write_npz`` writes for ``arrays``; equal arrays give equal bytes."""
    buffer = io.BytesIO()
    write_npz(buffer, arrays)
    return buffer.getvalue()


def atomic_write_npz(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` as an ``.npz``: streamed into a temporary file beside it
    (no in-memory copy of the archive), then renamed over ``path``."""
    with atomic_output(path) as handle:
        write_npz(handle, arrays)


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first entry, or an empty zip
_NPY_MAGIC = b"\x93NUMPY"


def _check_magic(name: str) -> None:
    """Refuse what is not an .npz archive from its first bytes, with what was found."""
    with read_errors(name, "an .npz file", missing="file not found"), open(name, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise InputError(
                "not a regular file; save the arrays to an .npz file (numpy.savez) and pass "
                "its name", path=name)
        head = handle.read(8)
    if head.startswith(_ZIP_MAGIC):
        return
    if head.startswith(_NPY_MAGIC):
        raise InputError(
            "not an .npz archive (it holds a single array, .npy); write it with numpy.savez",
            path=name)
    shown = " ".join(f"{byte:02x}" for byte in head[:4]) if head else "nothing (empty file)"
    raise InputError(
        f"cannot read as .npz: the file starts with {shown}, while an .npz archive starts with "
        "50 4b ('PK', a zip archive); write it with numpy.savez", path=name)


def read_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``, loaded eagerly (no pickled objects allowed).

    Raises ``InputError`` naming the file when it is missing, not an npz archive, or holds an
    object array.
    """
    name = os.fspath(path)
    _check_magic(name)
    try:
        loaded = np.load(name, allow_pickle=False)  # missing or a folder: _check_magic said so
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
                raise _bad_array(name, key, _npy_reason(exc)) from None
    return arrays


def map_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``, as read-only memory maps of the file where its
    member is stored uncompressed (what ``atomic_write_npz`` writes), else loaded: reading a
    block of rows reads only those bytes, so a checkpoint larger than memory can be sent to the
    Ray backend's hosts a block at a time. Checks and errors as for :func:`read_npz`."""
    name = os.fspath(path)
    _check_magic(name)
    try:
        archive = zipfile.ZipFile(name)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"cannot read as .npz ({exc}); write it with numpy.savez",
                         path=name) from None
    arrays: dict[str, np.ndarray] = {}
    with archive, open(name, "rb") as raw:
        for info in archive.infolist():
            key = info.filename.removesuffix(".npy")
            if info.compress_type != zipfile.ZIP_STORED:
                arrays[key] = _read_member(name, archive, info.filename, key)
                continue
            raw.seek(info.header_offset + 26)  # the local header's name and extra lengths
            skip = int.from_bytes(raw.read(2), "little") + int.from_bytes(raw.read(2), "little")
            raw.seek(info.header_offset + 30 + skip)
            try:
                version = np.lib.format.read_magic(raw)
                shape, fortran, dtype = (np.lib.format.read_array_header_1_0(raw)
                                         if version == (1, 0)
                                         else np.lib.format.read_array_header_2_0(raw))
            except ValueError as exc:
                raise _bad_array(name, key, _npy_reason(exc)) from None
            if dtype.hasobject:
                raise _bad_array(name, key, _PICKLED)
            if 0 in shape:
                arrays[key] = np.zeros(shape, dtype=dtype)
            else:
                arrays[key] = np.memmap(name, dtype=dtype, mode="r", offset=raw.tell(),
                                        shape=tuple(shape), order="F" if fortran else "C")
    return arrays


def _read_member(name: str, archive: zipfile.ZipFile, member: str, key: str) -> np.ndarray:
    """One compressed member of an open archive, loaded (``map_npz``'s fallback)."""
    try:
        with archive.open(member) as handle:
            array: np.ndarray = np.lib.format.read_array(handle, allow_pickle=False)
            return array
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise _bad_array(name, key, _npy_reason(exc)) from None


_PICKLED = "it holds Python objects (a pickled object array), not numbers"


def _bad_array(name: str, key: str, reason: str) -> InputError:
    """The error for member ``key`` of ``name`` that is not a plain numeric array."""
    return InputError(f"cannot read the array ({reason}); store plain numeric arrays",
                      path=name, key=key)


def _npy_reason(exc: BaseException) -> str:
    """NumPy's reason, without its advice to allow pickles (tpuemb never loads them)."""
    text = str(exc)
    return _PICKLED if "allow_pickle" in text else text
