"""Reading and writing ``.npz`` files for the executor, byte-reproducibly and atomically.

``numpy.savez`` stamps every member of the zip archive with the current time, so two runs with
the same inputs write different bytes. ``atomic_write_npz`` writes the same ``.npy`` members
(``numpy.lib.format``) with a fixed timestamp and sorted member order, into a temporary file in
the destination directory that replaces the destination only once it is complete: a reader sees
either the old file or the new one, never a partial file (:mod:`tpuemb_cfg.formats.atomic`; a
symbolic link is written through). ``numpy.load`` reads the result. :func:`write_npz` streams the
same bytes into any handle, e.g. one of an :class:`~tpuemb_cfg.formats.atomic.OutputSet`; a value
with ``npy_chunks()`` (a table the Ray backend's hosts hold) is written a block of rows at a time,
never whole in memory.

:func:`read_npz` looks at the first bytes before handing the file to NumPy, so that random bytes
or a text file are reported as what they are instead of NumPy's advice about ``allow_pickle``,
and reads every member's ``.npy`` header (shape and dtype) before any array data: the keys and
the total size are checked first, so a few megabytes of compressed zeros cannot inflate to
gigabytes before an error could be reported.
"""

from __future__ import annotations

import io
import math
import os
import stat
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.formats.atomic import atomic_output
from tpuemb_cfg.formats.limits import default_memory_limit, read_errors

__all__ = ["NpyHeader", "NpzMembers", "NpzWriter", "atomic_write_npz", "check_total", "map_npz",
           "npz_bytes", "read_npz", "write_npz"]

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip header can hold


def write_npz(handle: IO[bytes], arrays: Mapping[str, np.ndarray]) -> None:
    """Stream an uncompressed ``.npz`` (member ``KEY.npy`` per key, sorted, fixed timestamp)."""
    with NpzWriter(handle) as writer:
        for key in sorted(arrays):
            writer.add(key, arrays[key])


class NpzWriter:
    """An uncompressed ``.npz`` written into ``handle`` one member at a time, in the order of
    :meth:`add` calls (fixed timestamps, as :func:`write_npz`): a file too large to hold in
    memory, such as every step of ``tpuemb simulate --save-batches``, is streamed as it is
    made. Close it (or use ``with``) to write the archive's directory."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._archive = zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED,
                                        allowZip64=True)

    def add(self, key: str, value: Any) -> None:
        """Write ``value`` (an array, or an array-like with ``npy_chunks()``) as ``KEY.npy``."""
        info = zipfile.ZipInfo(f"{key}.npy", date_time=_EPOCH)
        info.compress_type = zipfile.ZIP_STORED
        info.external_attr = 0o644 << 16
        with self._archive.open(info, "w", force_zip64=True) as member:
            if hasattr(value, "npy_chunks"):
                _write_chunked(member, value)
            else:
                np.lib.format.write_array(member, np.asarray(value), allow_pickle=False)

    def close(self) -> None:
        self._archive.close()

    def __enter__(self) -> NpzWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


#: What to do about a file that is not the .npz expected (``remedy`` of the readers).
SAVEZ = "write it with numpy.savez"


@dataclass(frozen=True)
class NpyHeader:
    """What the header of one ``.npy`` member declares, read without its data: ``shape``,
    ``dtype``, Fortran order, and ``offset``, where the data starts in the member."""

    info: zipfile.ZipInfo
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fortran: bool
    offset: int

    @property
    def nbytes(self) -> int:
        """The bytes of the array once decompressed."""
        return math.prod(self.shape) * self.dtype.itemsize


def _check_magic(name: str, remedy: str = SAVEZ) -> None:
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
            f"not an .npz archive (it holds a single array, .npy); {remedy}", path=name)
    shown = " ".join(f"{byte:02x}" for byte in head[:4]) if head else "nothing (empty file)"
    raise InputError(
        f"cannot read as .npz: the file starts with {shown}, while an .npz archive starts with "
        f"50 4b ('PK', a zip archive); {remedy}", path=name)


def read_npz(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    check_keys: Callable[[Mapping[str, NpyHeader]], None] | None = None,
    remedy: str = SAVEZ,
) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``, loaded eagerly (no pickled objects allowed).

    Every member's header is read first, before any array data is decompressed: a member that
    is not a plain numeric ``.npy``, or declares more bytes than it holds, is refused, then
    ``check_keys(headers)`` runs (it may raise about the keys, shapes and sizes), then the
    arrays' total size is held against ``max_bytes`` (default: the memory limit of a run,
    ``limits.default_memory_limit``), so a small compressed file cannot inflate to gigabytes
    before its keys are checked. Raises ``InputError`` naming the file, and the key where one
    is to blame; ``remedy`` is the advice of errors about a file that is no ``.npz`` at all.
    """
    name = os.fspath(path)
    _check_magic(name, remedy)
    try:
        archive = zipfile.ZipFile(name)
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"cannot read as .npz ({exc}); {remedy}", path=name) from None
    with archive:
        _refuse_aliases(name, archive.namelist())
        headers = _headers(name, archive, remedy)
        if check_keys is not None:
            check_keys(headers)
        check_total(name, headers, headers, max_bytes)
        return {key: _read_member(name, archive, header.info, key, remedy)
                for key, header in headers.items()}


def _headers(name: str, archive: zipfile.ZipFile, remedy: str) -> dict[str, NpyHeader]:
    """The header of every member, by key; ``InputError`` for a member that is no plain
    numeric array or holds less data than its header declares."""
    headers = {}
    for info in archive.infolist():
        key = info.filename.removesuffix(".npy")
        try:
            with archive.open(info) as handle:
                version = np.lib.format.read_magic(handle)
                shape, fortran, dtype = (np.lib.format.read_array_header_1_0(handle)
                                         if version == (1, 0)
                                         else np.lib.format.read_array_header_2_0(handle))
                offset = handle.tell()
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
            raise _bad_array(name, key, _npy_reason(exc), remedy) from None
        if dtype.hasobject:
            raise _bad_array(name, key, _PICKLED, remedy)
        header = NpyHeader(info, tuple(shape), dtype, bool(fortran), offset)
        if info.file_size - offset < header.nbytes:
            raise _bad_array(
                name, key,
                f"its header declares shape {header.shape} of {dtype} "
                f"({format_size(header.nbytes)}), but the member holds "
                f"{max(info.file_size - offset, 0):,} bytes of data: the file was cut short or "
                "altered", remedy)
        headers[key] = header
    return headers


_RAISE = "raise the limit (--max-memory; max_bytes= in Python)"


def check_total(name: str, headers: Mapping[str, NpyHeader], loaded: Mapping[str, NpyHeader],
                max_bytes: int | None, *, which: str | None = None,
                advice: str = _RAISE) -> None:
    """Refuse, naming the largest array, when the arrays of ``loaded`` (of ``headers``) would
    take more than ``max_bytes`` (None: ``limits.default_memory_limit``) once in memory.
    ``which``: the limit's name in the message; ``advice``: how to raise it."""
    limit = default_memory_limit() if max_bytes is None else max_bytes
    total = sum(header.nbytes for header in loaded.values())
    if limit is None or total <= limit:
        return
    key, largest = max(loaded.items(), key=lambda item: item[1].nbytes)
    if which is None:
        which = ("the memory limit of a run (80% of the memory available)" if max_bytes is None
                 else "the memory limit")
    raise InputError(
        f"the arrays of the file take {format_size(total)} once read ({len(loaded)} of "
        f"{len(headers)} arrays; the largest, this one, shape {largest.shape} of "
        f"{largest.dtype}: {format_size(largest.nbytes)}), more than {which} of "
        f"{format_size(limit)}; nothing was decompressed - if the file is right and the machine "
        f"can hold it, {advice}",
        path=name, key=key)


class NpzMembers:
    """An ``.npz`` opened to read one member at a time (``tpuemb plan`` streams a batches file
    step by step, in memory independent of its length): the file is checked as by
    :func:`read_npz` (first bytes, duplicate keys, every member's ``.npy`` header) when opened,
    ``headers`` holds those headers by key, and :meth:`read` loads one member. Use it with
    ``with`` (or call :meth:`close`)."""

    def __init__(self, path: str | os.PathLike[str], *, remedy: str = SAVEZ) -> None:
        self.name = os.fspath(path)
        self._remedy = remedy
        _check_magic(self.name, remedy)
        try:
            self._archive = zipfile.ZipFile(self.name)
        except (OSError, zipfile.BadZipFile, EOFError) as exc:
            raise InputError(f"cannot read as .npz ({exc}); {remedy}", path=self.name) from None
        try:
            _refuse_aliases(self.name, self._archive.namelist())
            self.headers: dict[str, NpyHeader] = _headers(self.name, self._archive, remedy)
        except BaseException:
            self._archive.close()
            raise

    def read(self, key: str) -> np.ndarray:
        """The array of member ``key`` (one of :attr:`headers`), loaded."""
        return _read_member(self.name, self._archive, self.headers[key].info, key, self._remedy)

    def close(self) -> None:
        self._archive.close()

    def __enter__(self) -> NpzMembers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def map_npz(path: str | os.PathLike[str], *, max_bytes: int | None = None,
            remedy: str = SAVEZ) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``, as read-only memory maps of the file where its
    member is stored uncompressed (what ``atomic_write_npz`` writes), else loaded: reading a
    block of rows reads only those bytes, so a checkpoint larger than memory can be sent to the
    Ray backend's hosts a block at a time. Checks and errors as for :func:`read_npz`; only the
    compressed members (loaded) count against ``max_bytes``."""
    name = os.fspath(path)
    _check_magic(name, remedy)
    try:
        archive = zipfile.ZipFile(name)
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"cannot read as .npz ({exc}); {remedy}", path=name) from None
    arrays: dict[str, np.ndarray] = {}
    with archive, open(name, "rb") as raw:
        _refuse_aliases(name, archive.namelist())
        headers = _headers(name, archive, remedy)
        compressed = {key: header for key, header in headers.items()
                      if header.info.compress_type != zipfile.ZIP_STORED}
        check_total(name, headers, compressed, max_bytes)
        for key, header in headers.items():
            info = header.info
            if key in compressed:
                arrays[key] = _read_member(name, archive, info, key, remedy)
                continue
            raw.seek(info.header_offset + 26)  # the local header's name and extra lengths
            skip = int.from_bytes(raw.read(2), "little") + int.from_bytes(raw.read(2), "little")
            start = info.header_offset + 30 + skip + header.offset
            if 0 in header.shape:
                arrays[key] = np.zeros(header.shape, dtype=header.dtype)
            else:
                arrays[key] = np.memmap(name, dtype=header.dtype, mode="r", offset=start,
                                        shape=header.shape,
                                        order="F" if header.fortran else "C")
    return arrays


def _refuse_aliases(name: str, members: list[str]) -> None:
    """Refuse two members of one archive that give the same key (``x.npy`` and ``x``, or the
    same name twice): reading both, the second would silently replace the first."""
    seen: dict[str, str] = {}
    for member in members:
        key = member.removesuffix(".npy")
        if key in seen:
            both = (f"twice as {member!r}" if seen[key] == member
                    else f"as {seen[key]!r} and as {member!r}")
            raise InputError(
                f"the archive holds this key {both}; one array would silently replace the "
                "other - write each array once (numpy.savez)", path=name, key=key)
        seen[key] = member


def _read_member(name: str, archive: zipfile.ZipFile, member: zipfile.ZipInfo, key: str,
                 remedy: str) -> np.ndarray:
    """One member of an open archive, loaded (its header was checked by ``_headers``)."""
    try:
        with archive.open(member) as handle:
            array: np.ndarray = np.lib.format.read_array(handle, allow_pickle=False)
            return array
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise _bad_array(name, key, _npy_reason(exc), remedy) from None


_PICKLED = "it holds Python objects (a pickled object array), not numbers"


def _bad_array(name: str, key: str, reason: str, remedy: str) -> InputError:
    """The error for member ``key`` of ``name`` that is not a plain numeric array (``remedy``:
    the readers' advice, unless it is the default one for files users write)."""
    advice = "store plain numeric arrays" if remedy == SAVEZ else remedy
    return InputError(f"cannot read the array ({reason}); {advice}", path=name, key=key)


def _npy_reason(exc: BaseException) -> str:
    """NumPy's reason, without its advice to allow pickles (tpuemb never loads them)."""
    text = str(exc)
    return _PICKLED if "allow_pickle" in text else text
