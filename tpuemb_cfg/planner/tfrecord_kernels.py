"""Compiled TFRecord reading for ``tpuemb plan``'s samples: the framing with both CRCs, and the
ids of ``tf.train.Example`` records decoded straight from the protobuf wire format.

Imported lazily by :mod:`planner.tfrecord` (numba is imported here only, through
``executor.engines.jit``); :mod:`planner.tfrecord` keeps the reference in Python (protobuf's
own parser), which says every error. These kernels accept only what they can decode exactly as
protobuf does and report anything else, and the caller then reads the window with the
reference:

- **Framing** (:func:`frame`): ``uint64`` length, masked CRC-32C of the length, the data,
  masked CRC-32C of the data, little-endian. CRC-32C is computed eight bytes at a time
  ("slicing-by-8": eight tables of 256 entries, table ``k`` the CRC of a byte followed by ``k``
  zero bytes), about 1 GB/s where a byte at a time runs at a few hundred MB/s.
- **Decoding** (:func:`count`, :func:`fill`), the canonical layout TensorFlow writes:
  ``Example {1: Features {1: entry {1: key, 2: Feature}*}}`` with ``Feature`` one of
  ``bytes_list`` (1), ``float_list`` (2) or ``int64_list`` (3), and ``Int64List {1: packed
  varints}`` (or unpacked ``1: varint`` fields, which protobuf accepts too). Every tag is one
  byte and every field appears where the layout says, once. A record with anything else (an
  unknown field, a second ``features``, a key that is not ASCII, a key given twice, a
  configured feature missing or of another kind, a varint of more than ten bytes, a length past
  its message) is **not decoded** here: ``count`` returns its index and the caller decodes the
  window with protobuf, which either raises the error the reference raises or decodes what
  protobuf accepts. A key no configured or known-ignored name matches is returned as well, so
  the caller can name it (``stats.ignored``) and call again.

Varints: seven bits a byte, least significant first; an ``int64`` is its ten-byte two's
complement form, so a tenth byte may only be 0 or 1 (anything above overflows 64 bits:
reported, protobuf decides).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..executor.engines.jit import njit
from ..formats.crc32c_kernels import crc_tables, span

__all__ = ["BAD", "END", "FULL", "MORE", "UNKNOWN", "count", "crc_tables", "fill", "frame"]

# frame()'s stops
FULL, MORE, END, BAD = 0, 1, 2, 3
# count()'s verdicts on a record
UNKNOWN = 2  # a key that is no name of the table
_REFER = 1  # anything the kernels do not decode: protobuf decides


_crc32c = span


@njit(cache=True, nogil=True)
def _masked(buf: np.ndarray, start: int, length: int, t: np.ndarray) -> Any:
    crc = _crc32c(buf, start, length, t)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


@njit(cache=True, nogil=True)
def _u32(buf: np.ndarray, p: int) -> Any:
    return (np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8) | (np.int64(buf[p + 2]) << 16)
            | (np.int64(buf[p + 3]) << 24))


@njit(cache=True, nogil=True)
def frame(buf: np.ndarray, pos: int, base: int, size: int, window: int, n: int,
          starts: np.ndarray, lengths: np.ndarray, t: np.ndarray) -> tuple[int, int, int]:
    """Frame records of ``buf[pos:]`` (``buf[0]`` is byte ``base`` of a file of ``size``
    bytes) into ``starts``/``lengths`` (data start in ``buf``, data length) from slot ``n``
    until ``window`` records: ``(n, pos, stop)`` with stop FULL, END (the file's end), MORE
    (the next record is not all in ``buf``) or BAD (a truncated file or a wrong CRC at
    ``pos``: the reference says which)."""
    have = buf.shape[0]
    while n < window:
        avail = have - pos
        if avail == 0:
            return n, pos, END if base + pos == size else MORE
        if avail < 12:
            return n, pos, BAD if base + have >= size else MORE
        high = _u32(buf, pos + 4)
        if high >= 0x80000000:
            return n, pos, BAD
        length = (high << 32) | _u32(buf, pos)
        if length > size - (base + pos) - 16:
            return n, pos, BAD
        if avail < 16 + length:
            return n, pos, MORE
        if _masked(buf, pos, 8, t) != _u32(buf, pos + 8) \
                or _masked(buf, pos + 12, length, t) != _u32(buf, pos + 12 + length):
            return n, pos, BAD
        starts[n] = pos + 12
        lengths[n] = length
        n += 1
        pos += 16 + length
    return n, pos, FULL


@njit(cache=True, nogil=True)
def _length(buf: np.ndarray, p: int, end: int) -> Any:
    """A length varint at ``p`` (at most 5 bytes) whose field ends by ``end``: (length, the
    position after it), or (-1, -1)."""
    value = np.int64(0)
    shift = 0
    while p < end and shift < 35:
        byte = np.int64(buf[p])
        p += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value > end - p:
                return -1, -1
            return value, p
        shift += 7
    return -1, -1


@njit(cache=True, nogil=True)
def _skip_varint(buf: np.ndarray, p: int, end: int) -> int:
    """The position after the int64 varint at ``p`` (ending by ``end``), or -1."""
    for i in range(10):
        if p + i >= end:
            return -1
        byte = buf[p + i]
        if i == 9 and byte > 1:
            return -1
        if byte < 0x80:
            return p + i + 1
    return -1


@njit(cache=True, nogil=True)
def _int64s(buf: np.ndarray, a: int, b: int) -> int:
    """The ids an ``Int64List`` in ``buf[a:b]`` holds, or -1: the general form (packed runs
    and unpacked fields in any order), a varint at a time."""
    p = a
    n = 0
    while p < b:
        tag = buf[p]
        p += 1
        if tag == 0x0A:
            length, p = _length(buf, p, b)
            if length < 0:
                return -1
            end = p + length
            while p < end:
                p = _skip_varint(buf, p, end)
                if p < 0:
                    return -1
                n += 1
        elif tag == 0x08:
            p = _skip_varint(buf, p, b)
            if p < 0:
                return -1
            n += 1
        else:
            return -1
    return n


@njit(cache=True, nogil=True)
def _packed(buf: np.ndarray, a: int, b: int) -> int:
    """The varints of a packed run ``buf[a:b]``, or -1 when its last byte continues: each
    varint ends at its one byte below 0x80, so they are counted without being decoded (a
    varint of more than ten bytes is found by :func:`fill`)."""
    n = 0
    for i in range(a, b):
        n += int(buf[i] < 0x80)
    if b > a and buf[b - 1] >= 0x80:
        return -1
    return n


@njit(cache=True, nogil=True)
def _list(buf: np.ndarray, a: int, b: int, regions: np.ndarray, r: int, k: int) -> int:
    """The ids of the ``Int64List`` in ``buf[a:b]`` (or -1), where :func:`fill` finds them
    noted in ``regions[r, k]``: one packed run (its bytes, kind 0) or the general form (the
    list's bytes, kind 1)."""
    if a < b and buf[a] == 0x0A:
        length, p = _length(buf, a + 1, b)
        if length >= 0 and p + length == b:
            n = _packed(buf, p, b)
            if n >= 0:
                regions[r, k, 0] = p
                regions[r, k, 1] = b
                regions[r, k, 2] = 0
                return n
    regions[r, k, 0] = a
    regions[r, k, 1] = b
    regions[r, k, 2] = 1
    return _int64s(buf, a, b)


@njit(cache=True, nogil=True)
def _other_list(buf: np.ndarray, a: int, b: int) -> bool:
    """Whether a ``Feature`` in ``buf[a:b]`` of a feature not configured is one list of the
    canonical layout (nothing is read from it)."""
    if a == b:
        return True
    kind = buf[a]
    length, p = _length(buf, a + 1, b)
    if length < 0 or p + length != b:
        return False
    if kind == 0x1A:
        return _int64s(buf, p, b) >= 0
    while p < b:  # a BytesList (1: bytes) or a FloatList (1: packed floats, or 1: fixed32)
        tag = buf[p]
        if tag == 0x0A:
            length, p = _length(buf, p + 1, b)
            if length < 0 or (kind == 0x12 and length % 4):
                return False
            p += length
        elif tag == 0x0D and kind == 0x12 and p + 5 <= b:
            p += 5
        else:
            return False
    return kind == 0x0A or kind == 0x12


@njit(cache=True, nogil=True)
def _name(buf: np.ndarray, a: int, b: int, names: np.ndarray, offsets: np.ndarray) -> int:
    """The index of the key ``buf[a:b]`` in the name table, or -1."""
    for k in range(offsets.shape[0] - 1):
        s = offsets[k]
        if offsets[k + 1] - s != b - a:
            continue
        same = True
        for i in range(b - a):
            if names[s + i] != buf[a + i]:
                same = False
                break
        if same:
            return k
    return -1


@njit(cache=True, nogil=True)
def _record(buf: np.ndarray, s: int, e: int, names: np.ndarray, offsets: np.ndarray,
            configured: int, counts: np.ndarray, regions: np.ndarray, r: int) -> int:
    """count() for record ``r`` in ``buf[s:e]``: 0, _REFER or UNKNOWN."""
    for k in range(configured):
        counts[r, k] = -1
    if s == e or buf[s] != 0x0A:
        return _REFER
    length, q = _length(buf, s + 1, e)
    if length < 0 or q + length != e:
        return _REFER
    while q < e:
        if buf[q] != 0x0A:
            return _REFER
        length, q = _length(buf, q + 1, e)
        if length < 0:
            return _REFER
        entry_end = q + length
        if q == entry_end or buf[q] != 0x0A:
            return _REFER
        length, ks = _length(buf, q + 1, entry_end)
        if length < 0:
            return _REFER
        ke = ks + length
        for i in range(ks, ke):
            if buf[i] >= 0x80:  # UTF-8 beyond ASCII: protobuf checks it
                return _REFER
        if ke == entry_end or buf[ke] != 0x12:
            return _REFER
        length, vs = _length(buf, ke + 1, entry_end)
        if length < 0 or vs + length != entry_end:
            return _REFER
        k = _name(buf, ks, ke, names, offsets)
        if k < 0:
            return UNKNOWN
        if k < configured:
            if counts[r, k] >= 0:
                return _REFER
            if vs == entry_end:  # no kind: an empty bag
                counts[r, k] = _list(buf, vs, vs, regions, r, k)
            else:
                if buf[vs] != 0x1A:
                    return _REFER
                length, a = _length(buf, vs + 1, entry_end)
                if length < 0 or a + length != entry_end:
                    return _REFER
                n = _list(buf, a, entry_end, regions, r, k)
                if n < 0:
                    return _REFER
                counts[r, k] = n
        elif not _other_list(buf, vs, entry_end):
            return _REFER
        q = entry_end
    for k in range(configured):
        if counts[r, k] < 0:
            return _REFER
    return 0


@njit(cache=True, nogil=True)
def count(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, names: np.ndarray,
          offsets: np.ndarray, configured: int, counts: np.ndarray,
          regions: np.ndarray) -> tuple[int, int]:
    """Check every record ``buf[starts[r]:starts[r] + lengths[r]]`` and count its ids per
    configured feature (``counts[r, k]``; the ``Int64List``'s bytes in ``regions[r, k]``):
    ``(-1, 0)``, or the first record the kernels do not decode and why (``_REFER`` or
    ``UNKNOWN``). Names ``0..configured-1`` of the table (``names[offsets[k]:offsets[k+1]]``)
    are the configured features, the rest the ignored ones seen so far."""
    for r in range(starts.shape[0]):
        verdict = _record(buf, starts[r], starts[r] + lengths[r], names, offsets, configured,
                          counts, regions, r)
        if verdict != 0:
            return r, verdict
    return -1, 0


@njit(cache=True, nogil=True)
def _decode_packed(buf: np.ndarray, a: int, b: int, out: np.ndarray, at: int) -> int:
    """Decode the packed varints of ``buf[a:b]`` into ``out[at:]``, without a branch on the
    data: every byte adds its seven bits and stores the value so far; a last byte (below
    0x80) moves on to the next slot and starts a new value. -1 when a varint has more than
    ten bytes or a tenth byte above 1 (more than 64 bits): looked for only in a run with a
    varint of nine bytes or more (``top``: the shifts seen, or-ed)."""
    value = np.uint64(0)
    shift = np.uint64(0)
    top = np.uint64(0)
    for i in range(a, b):
        byte = np.uint64(buf[i])
        more = byte >> np.uint64(7)
        top |= shift
        value |= (byte & np.uint64(0x7F)) << (shift & np.uint64(63))
        out[at] = value
        at += 1 - int(more)
        value *= more
        shift = (shift + np.uint64(7)) * more
    if top >= np.uint64(56):
        p = a
        while p < b:
            p = _skip_varint(buf, p, b)
            if p < 0:
                return -1
    return at


@njit(cache=True, nogil=True)
def _decode_general(buf: np.ndarray, a: int, b: int, out: np.ndarray, at: int) -> int:
    """Decode an ``Int64List`` of the general form (checked by :func:`_int64s`)."""
    p = a
    while p < b:
        tag = buf[p]
        if tag == 0x0A:
            length, p = _length(buf, p + 1, b)
            end = p + length
        else:
            p += 1
            end = _skip_varint(buf, p, b)
        at = _decode_general_run(buf, p, end, out, at)
        p = end
    return at


@njit(cache=True, nogil=True)
def _decode_general_run(buf: np.ndarray, a: int, b: int, out: np.ndarray, at: int) -> int:
    p = a
    while p < b:
        value = np.uint64(0)
        shift = np.uint64(0)
        while True:
            byte = buf[p]
            p += 1
            value |= np.uint64(byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += np.uint64(7)
        out[at] = value
        at += 1
    return at


@njit(cache=True, nogil=True)
def fill(buf: np.ndarray, regions: np.ndarray, counts: np.ndarray, firsts: np.ndarray,
         out: np.ndarray) -> int:
    """Decode the ids count() found: feature ``k``'s ids of record ``r`` go to ``out`` from
    ``firsts[k] + sum(counts[:r, k])`` on, as ``uint64`` (an int64's two's complement): -1,
    or a record with a varint of more than 64 bits (protobuf decides)."""
    for k in range(counts.shape[1]):
        at = firsts[k]
        for r in range(counts.shape[0]):
            if regions[r, k, 2] == 0:
                at = _decode_packed(buf, regions[r, k, 0], regions[r, k, 1], out, at)
                if at < 0:
                    return r
            else:
                at = _decode_general(buf, regions[r, k, 0], regions[r, k, 1], out, at)
    return -1
