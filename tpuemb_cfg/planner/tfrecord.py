"""TFRecord samples for ``tpuemb plan`` (:mod:`planner.inputs` opens them): CRC-32C (Castagnoli),
masked as TensorFlow masks it; the writer (TensorFlow's ``TFRecordWriter`` bytes); what
compression a file that is no TFRecord was written with; and the reader.

The reader reads a window of :func:`~planner.samples.rows_per_read` records at a time. The
**reference** (:func:`read_tfrecord_reference`: :func:`frames` and :func:`decode`) frames the
records in Python, checks both CRCs vectorised over the window (:func:`crc32c_many`) and
decodes each record with protobuf's parser; it says every error. :func:`read_tfrecord` runs the
compiled kernels of :mod:`planner.tfrecord_kernels` where numba is available (imported here
lazily, so nothing else pays for numba) and hands each window they do not decode to the
reference, from the window's first record, so errors, their records and the windows' contents
are the reference's (``tests/test_tfrecord_compiled.py`` compares the two).
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

import numpy as np

from ..formats.crc32c import CRC_TABLE, crc32c, masked_crc32c
from ..formats.crc32c import mask_many as mask
from .samples import (
    FeatureBatch,
    SampleError,
    SampleSchema,
    SampleStats,
    Tick,
    check_batch,
    rows_per_read,
)

__all__ = ["compression", "crc32c", "crc32c_many", "decode", "frames", "mask", "masked_crc32c",
           "probe_tfrecord", "read_tfrecord", "read_tfrecord_reference", "write_tfrecord"]


_CRC_TABLE = CRC_TABLE


def crc32c_many(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC-32C of ``buffer[starts[i]:starts[i] + lengths[i]]`` for every ``i`` at once.

    Byte-at-a-time table lookups, vectorised across the records: iteration ``j`` advances
    every record longer than ``j`` by one byte (records sorted longest first, so those are a
    prefix). The cost is one NumPy pass per byte of the longest record in the window, which
    suits TFRecord files of many small examples (a window of 8192 records of ~200 bytes checks
    at ~100 MB/s); a single record of megabytes checks at ~1 MB/s.
    """
    order = np.argsort(-lengths, kind="stable")
    starts_sorted, lengths_sorted = starts[order], lengths[order]
    crc = np.full(len(starts), 0xFFFFFFFF, dtype=np.uint32)
    longest = int(lengths_sorted[0]) if len(lengths_sorted) else 0
    # active[j]: how many records are longer than j
    active = np.searchsorted(-lengths_sorted, -np.arange(longest), side="left")
    for j in range(longest):
        k = int(active[j])
        c = crc[:k]
        byte = buffer[starts_sorted[:k] + j].astype(np.uint32)
        crc[:k] = _CRC_TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
    out = np.empty_like(crc)
    out[order] = crc ^ np.uint32(0xFFFFFFFF)
    return out


def write_tfrecord(handle: IO[bytes], rows: Iterable[Mapping[str, Sequence[int]]]) -> None:
    """Write one ``tf.train.Example`` per row (feature name -> ids, an ``int64_list``) into
    ``handle`` with TFRecord framing: what TensorFlow's ``TFRecordWriter`` writes."""
    from ..proto.example_pb2 import Example

    for row in rows:
        example = Example()
        for name, ids in row.items():
            example.features.feature[name].int64_list.value.extend(int(i) for i in ids)
        data = example.SerializeToString()
        length = struct.pack("<Q", len(data))
        handle.write(length + struct.pack("<I", masked_crc32c(length)) + data
                     + struct.pack("<I", masked_crc32c(data)))


def compression(head: bytes) -> str | None:
    """The compression a file starting with ``head`` (its first 12 bytes) is written with, or
    None: a first record whose length carries its own right CRC is a TFRecord, whatever its
    bytes; else gzip's magic 1f 8b and method 08 (deflate), or a zlib header (method 8 in the
    low nibble, a window of at most 32 KiB, and a check: ``(CMF x 256 + FLG) % 31 == 0``)."""
    if len(head) >= 12 and struct.unpack("<I", head[8:12])[0] == masked_crc32c(head[:8]):
        return None
    if head[:3] == b"\x1f\x8b\x08":
        return "gzip"
    if len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 \
            and (head[0] * 256 + head[1]) % 31 == 0:
        return "zlib"
    return None


# --- reading ------------------------------------------------------------------------------------

def probe_tfrecord(paths: Sequence[str], schema: SampleSchema) -> tuple[str, int]:
    for path in paths:
        with open(path, "rb") as handle:
            kind = compression(handle.read(12))
        if kind is not None:
            raise SampleError(
                f"a {kind}-compressed file (TFRecordOptions compression_type {kind.upper()!r}): "
                "TFRecord files are read uncompressed; decompress it first "
                f"({'gunzip' if kind == 'gzip' else 'zlib.decompress'}) or write it "
                "uncompressed", path=path)
    return "bytes", sum(os.path.getsize(p) for p in paths)


#: Bytes read from a TFRecord file at a time (a record larger than this is read whole).
_CHUNK = 1 << 22


def frames(path: str, window: int, start: tuple[int, int] = (0, 0)
           ) -> Iterator[tuple[int, list[bytes], list[int]]]:
    """(index of the first record, records' data, their byte offsets) per window of at most
    ``window`` records, every CRC verified: the reference framing. The file is read
    :data:`_CHUNK` bytes at a time and the frames cut from memory. A length that runs past the
    end of the file is reported before its data is read (its own CRC first: a wrong one means
    no TFRecord). ``start``: the index and byte offset of the record to start at."""
    index = start[0]
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        handle.seek(start[1])
        buffer, base, pos = b"", start[1], 0  # buffer[pos] is byte base + pos of the file

        def fill(need: int) -> None:
            nonlocal buffer, base, pos
            if len(buffer) - pos < need:
                buffer = buffer[pos:] + handle.read(max(_CHUNK, need))
                base, pos = base + pos, 0

        while True:
            heads: list[bytes] = []
            datas: list[bytes] = []
            offsets: list[int] = []
            crcs: list[int] = []
            while len(datas) < window:
                fill(12)
                if pos == len(buffer):
                    break
                offset = base + pos
                where = f"record {index + len(datas)} (byte {offset})"
                if len(buffer) - pos < 12:
                    raise SampleError(f"the file ends {len(buffer) - pos} byte(s) into a record's "
                                      "12-byte header: a truncated file", path=path, where=where)
                head = buffer[pos:pos + 12]
                (length,) = struct.unpack_from("<Q", buffer, pos)
                if offset + 16 + length > size:
                    _bad_header(path, head, where)
                    raise SampleError(
                        f"the record declares {length} bytes of data but the file ends "
                        f"{size - offset - 12} bytes after its header: a truncated file",
                        path=path, where=where)
                fill(16 + length)
                heads.append(head)
                datas.append(buffer[pos + 12:pos + 12 + length])
                offsets.append(offset)
                crcs.append(struct.unpack_from("<I", buffer, pos + 12 + length)[0])
                pos += 16 + length
            if not datas:
                return
            _verify(path, index, heads, datas, offsets, crcs)
            yield index, datas, offsets
            index += len(datas)


def _bad_header(path: str, head: bytes, where: str) -> None:
    """Raise when the length's own CRC is wrong (the length is then not to be trusted)."""
    expected = masked_crc32c(head[:8])
    found = struct.unpack("<I", head[8:12])[0]
    if found != expected:
        raise SampleError(
            f"the CRC of the length is 0x{found:08x}, expected 0x{expected:08x}: not a TFRecord "
            "file, or a corrupted one", path=path, where=where)


def _verify(path: str, first: int, heads: list[bytes], datas: list[bytes], offsets: list[int],
            crcs: list[int]) -> None:
    """Check both masked CRCs of every record of a window, vectorised."""
    lengths = np.array([len(d) for d in datas], dtype=np.int64)
    blob = np.frombuffer(b"".join(h[:8] for h in heads) + b"".join(datas), dtype=np.uint8)
    n = len(datas)
    starts = np.concatenate([np.arange(n, dtype=np.int64) * 8,
                             8 * n + np.concatenate([[0], np.cumsum(lengths)[:-1]])])
    sums = mask(crc32c_many(blob, starts.astype(np.int64),
                              np.concatenate([np.full(n, 8, np.int64), lengths])))
    found_len = np.array([struct.unpack("<I", h[8:12])[0] for h in heads], dtype=np.uint32)
    found_data = np.array(crcs, dtype=np.uint32)
    for i in np.flatnonzero((sums[:n] != found_len) | (sums[n:] != found_data)):
        which, found, expected = (("length", found_len[i], sums[i]) if sums[i] != found_len[i]
                                  else ("data", found_data[i], sums[n + i]))
        raise SampleError(
            f"the CRC of the {which} is 0x{int(found):08x}, expected 0x{int(expected):08x}: a "
            "corrupted file (or not a TFRecord file)", path=path,
            where=f"record {first + int(i)} (byte {offsets[int(i)]})")


def decode(path: str, schema: SampleSchema, stats: SampleStats, first: int,
           datas: Sequence[bytes], offsets: Sequence[int]) -> dict[str, FeatureBatch]:
    """A window's records (``first``: the index of ``datas[0]``) decoded by protobuf: the
    reference, which says every error."""
    from google.protobuf.message import DecodeError

    from ..proto.example_pb2 import Example

    columns: dict[str, list[Any]] = {f.name: [] for f in schema.features}
    named = list(columns.items())
    for i, data in enumerate(datas):
        try:
            features = Example.FromString(data).features.feature
        except DecodeError as exc:
            raise SampleError(f"not a tf.train.Example ({exc})", path=path,
                              where=f"record {first + i} (byte {offsets[i]})") from None
        if len(features) > len(named):
            stats.ignored.update(k for k in features if k not in columns)
        for name, column in named:
            if name not in features:  # (indexing a message map would add the key)
                _bad_feature(path, f"record {first + i} (byte {offsets[i]})", features, name)
            ids = features[name].int64_list.value
            if not ids and features[name].WhichOneof("kind") not in ("int64_list", None):
                _bad_feature(path, f"record {first + i} (byte {offsets[i]})", features, name)
            column.append(ids)
    chunk = {}
    for f in schema.features:
        lists = columns[f.name]
        splits = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum([len(v) for v in lists], out=splits[1:])
        values = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64,
                             count=int(splits[-1]))
        chunk[f.name] = check_batch(f, values, splits, None, path=path,
                                    where=f"feature {f.name}",
                                    at=_record_of(first, offsets, splits))
    return chunk


def read_tfrecord(path: str, schema: SampleSchema, stats: SampleStats,
                  tick: Tick) -> Iterator[dict[str, FeatureBatch]]:
    """The file's records in windows of :func:`rows_per_read` records, each a chunk of the
    configured features' bags: compiled (:mod:`planner.tfrecord_kernels`) where numba is
    available, else (and for every window the kernels do not decode) the reference."""
    try:
        from . import tfrecord_kernels
    except ImportError:  # numba missing or switched off (NUMBA_DISABLE_JIT)
        yield from read_tfrecord_reference(path, schema, stats, tick)
        return
    yield from _Compiled(tfrecord_kernels, path, schema, stats).read(tick)


def read_tfrecord_reference(path: str, schema: SampleSchema, stats: SampleStats,
                            tick: Tick) -> Iterator[dict[str, FeatureBatch]]:
    """:func:`read_tfrecord` in Python alone (protobuf decodes): the reference."""
    for first, datas, offsets in frames(path, rows_per_read(schema)):
        yield decode(path, schema, stats, first, datas, offsets)
        tick(sum(len(d) + 16 for d in datas))


def _bad_feature(path: str, where: str, features: Any, name: str) -> None:
    """Raise for feature ``name`` of a record: missing, or not an ``int64_list``."""
    if name not in features:
        have = ", ".join(sorted(features)) or "no feature"
        raise SampleError(f"feature {name!r} is missing (the record has {have}); expected one "
                          "int64_list feature per configured feature", path=path, where=where)
    raise SampleError(f"feature {name!r} is a {features[name].WhichOneof('kind')}, expected an "
                      "int64_list of ids", path=path, where=where)


def _record_of(first: int, offsets: Sequence[int],
               splits: np.ndarray) -> Callable[[int], tuple[str, str]]:
    """Where id ``index`` of a window's column is: its record and its position there."""
    def at(index: int) -> tuple[str, str]:
        record = int(np.searchsorted(splits, index, side="right")) - 1
        return (f"record {first + record} (byte {offsets[record]})",
                f"position {index - int(splits[record])}")

    return at



class _Compiled:
    """:func:`read_tfrecord` through the kernels: a window is framed and checked in a reused
    buffer of about :data:`_CHUNK` bytes (more when one window's records need it), its ids
    counted and decoded into one array; a window the kernels refer (see
    :mod:`planner.tfrecord_kernels`) is framed and decoded again by the reference, from its first
    record, so every error is the reference's, at the same record."""

    def __init__(self, kernels: Any, path: str, schema: SampleSchema, stats: SampleStats) -> None:
        self.k = kernels
        self.path, self.schema, self.stats = path, schema, stats
        self.tables = kernels.crc_tables()
        self.keys = [f.name.encode("utf-8") for f in schema.features]  # then the ignored ones
        self._names()

    def _names(self) -> None:
        self.names = np.frombuffer(b"".join(self.keys), dtype=np.uint8)
        self.offsets = np.zeros(len(self.keys) + 1, dtype=np.int64)
        np.cumsum([len(k) for k in self.keys], out=self.offsets[1:])

    def read(self, tick: Tick) -> Iterator[dict[str, FeatureBatch]]:
        for window in self._windows():
            if isinstance(window[1], list):  # the reference took over (a refused window)
                first, datas, offsets = window
                yield decode(self.path, self.schema, self.stats, first, datas, offsets)
                tick(sum(len(d) + 16 for d in datas))
            else:
                first, buffer, starts, lengths, base = window
                yield self._decode(first, buffer, starts, lengths, base)
                tick(int(lengths.sum()) + 16 * len(lengths))

    def _windows(self) -> Iterator[tuple[Any, ...]]:
        """(first, buffer, data starts, lengths, the file offset of ``buffer[0]``) per window,
        or the reference's windows from the first one the framing kernel refuses."""
        size = os.path.getsize(self.path)
        window = rows_per_read(self.schema)
        starts = np.empty(window, dtype=np.int64)
        lengths = np.empty(window, dtype=np.int64)
        index = 0
        with open(self.path, "rb") as handle:
            buffer = np.empty(0, dtype=np.uint8)
            base = pos = 0  # buffer[0] is byte base of the file; the window starts at pos
            n, at = 0, 0  # records framed in this window; where framing goes on
            while True:
                n, at, stop = self.k.frame(buffer, at, base, size, window, n, starts,
                                           lengths, self.tables)
                if stop == self.k.BAD:
                    yield from frames(self.path, window, (index, base + pos))
                    return
                if stop == self.k.MORE:  # keep the window's records, read on
                    need = 16 if buffer.shape[0] - at < 12 else 16 + int(
                        np.frombuffer(buffer[at:at + 8].tobytes(), "<u8")[0])
                    more = handle.read(max(_CHUNK, need))
                    buffer = np.concatenate([buffer[pos:], np.frombuffer(more, np.uint8)])
                    starts[:n] -= pos
                    base, at, pos = base + pos, at - pos, 0
                    continue
                if n:
                    yield index, buffer, starts[:n].copy(), lengths[:n].copy(), base
                    index += n
                if stop == self.k.END:
                    return
                pos, n = at, 0

    def _decode(self, first: int, buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                base: int) -> dict[str, FeatureBatch]:
        configured = len(self.schema.features)
        counts = np.empty((len(starts), configured), dtype=np.int64)
        regions = np.empty((len(starts), configured, 3), dtype=np.int64)
        places = (starts + (base - 12)).tolist()  # the records' byte offsets in the file
        while True:
            record, verdict = self.k.count(buffer, starts, lengths, self.names, self.offsets,
                                           configured, counts, regions)
            if record < 0:
                break
            if verdict == self.k.UNKNOWN and self._learn(buffer, starts, lengths, record):
                continue
            datas = [buffer[s:s + n].tobytes() for s, n in zip(starts, lengths, strict=True)]
            return decode(self.path, self.schema, self.stats, first, datas, places)
        splits = np.zeros((configured, len(starts) + 1), dtype=np.int64)
        np.cumsum(counts.T, axis=1, out=splits[:, 1:])
        firsts = np.zeros(configured + 1, dtype=np.int64)
        np.cumsum(splits[:, -1], out=firsts[1:])
        out = np.empty(int(firsts[-1]), dtype=np.uint64)
        if self.k.fill(buffer, regions, counts, firsts, out) >= 0:
            datas = [buffer[s:s + n].tobytes() for s, n in zip(starts, lengths, strict=True)]
            return decode(self.path, self.schema, self.stats, first, datas, places)
        ids = out.view(np.int64)
        return {f.name: check_batch(f, ids[firsts[i]:firsts[i + 1]], splits[i], None,
                                    path=self.path, where=f"feature {f.name}",
                                    at=_record_of(first, places, splits[i]))
                for i, f in enumerate(self.schema.features)}

    def _learn(self, buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
               record: int) -> bool:
        """Add the keys of ``record`` that no name of the table matches to the ignored names
        (False when protobuf cannot decode the record: the reference will say why)."""
        from google.protobuf.message import DecodeError

        from ..proto.example_pb2 import Example

        data = buffer[starts[record]:starts[record] + lengths[record]].tobytes()
        try:
            keys = list(Example.FromString(data).features.feature)
        except DecodeError:
            return False
        known = {k.decode("utf-8") for k in self.keys}
        new = [k for k in keys if k not in known]
        if not new:
            return False
        self.stats.ignored.update(new)
        self.keys.extend(k.encode("utf-8") for k in new)
        self._names()
        return True
