"""TensorFlow's checkpoint format (the "tensor bundle", ``tensorflow/core/util/tensor_bundle``),
read and written by tpuemb itself: no library outside TensorFlow reads it, and tpuemb never
depends on TensorFlow. docs/checkpoints.md describes the format with its sources.

A checkpoint ``PREFIX`` is two kinds of file:

- ``PREFIX.index``: a LevelDB-format table (:mod:`formats.sstable`) from key to serialized
  message: key ``""`` a ``BundleHeaderProto`` (number of data shards, endianness, version),
  every other key a ``BundleEntryProto`` (dtype, shape, shard, offset, size, masked CRC-32C of
  the tensor's bytes; ``slices`` for a partitioned tensor);
- ``PREFIX.data-NNNNN-of-NNNNN``: the tensors' bytes, back to back. A numeric tensor is its
  little-endian C-order bytes (CRC-32C over them); a string tensor is the varint64 length of
  every element, the masked CRC-32C of those lengths (each taken as a ``uint32``, or ``uint64``
  above 2^32-1), then the elements' bytes (the entry's CRC covers the lengths as taken, the
  length checksum and the bytes).

A TF2 object-based checkpoint (``tf.train.Checkpoint``) adds ``_CHECKPOINTABLE_OBJECT_GRAPH``, a
scalar string holding a ``TrackableObjectGraph``, and keys each variable by its object path:
``embedding/item_user.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE``.

:class:`BundleReader` reads one tensor (or a range of rows of one) at a time, in chunks of
:data:`CHUNK_BYTES`, checking CRCs; every bad input is one
:class:`~tpuemb_cfg.base.errors.InputError` naming the file and the key or byte offset.
:class:`BundleWriter` writes TensorFlow's bytes for the same tensors added in the same order
(tests/test_checkpoint_bundle.py compares with checkpoints TensorFlow 2.21 wrote), atomically
(:mod:`formats.atomic`: temporary files in the target folder, renamed at the end, removed on any
error or Ctrl-C; a symbolic link at a target is refused, never followed).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from io import BufferedReader
from typing import IO, Any

import numpy as np

from ..base.errors import InputError, OutputError
from .atomic import Finishing, OutputSet, check_outputs
from .crc32c import crc32c, mask, unmask
from .ordered_code import decode_slice_key
from .sstable import build_table, read_table, read_varint, varint

__all__ = ["CHUNK_BYTES", "HEADER_KEY", "OBJECT_GRAPH_KEY", "VALUE_SUFFIX", "BundleEntry",
           "BundleReader", "BundleWriter", "data_path", "index_path", "write_object_checkpoint"]

#: Bytes read or checksummed at a time.
CHUNK_BYTES = 8 << 20
#: The key of the BundleHeaderProto.
HEADER_KEY = ""
#: ``trackable_utils.OBJECT_GRAPH_PROTO_KEY``.
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
#: ``trackable.base.VARIABLE_VALUE_KEY`` as a key's end.
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_VARIABLE_VALUE = "VARIABLE_VALUE"
#: ``kTensorBundleVersion``: the producer version TensorFlow writes and reads.
_BUNDLE_VERSION = 1
_MAX_INDEX_BYTES = 1 << 30
_MAX_SHARDS = 1 << 20
_STRING = 7
#: DataType number -> NumPy dtype (little-endian), for the dtypes a checkpoint of embeddings holds.
_DTYPES: dict[int, np.dtype[Any]] = {
    1: np.dtype("<f4"), 2: np.dtype("<f8"), 3: np.dtype("<i4"), 4: np.dtype("u1"),
    5: np.dtype("<i2"), 6: np.dtype("i1"), 8: np.dtype("<c8"), 9: np.dtype("<i8"),
    10: np.dtype("?"), 17: np.dtype("<u2"), 18: np.dtype("<c16"), 19: np.dtype("<f2"),
    22: np.dtype("<u4"), 23: np.dtype("<u8"),
}
_NUMBERS = {dtype.str.lstrip("<|="): number for number, dtype in _DTYPES.items()}


def index_path(prefix: str | os.PathLike[str]) -> str:
    """``PREFIX.index``."""
    return f"{os.fspath(prefix)}.index"


def data_path(prefix: str | os.PathLike[str], shard: int = 0, shards: int = 1) -> str:
    """``PREFIX.data-NNNNN-of-NNNNN`` (``naming.cc`` ``DataFilename``)."""
    return f"{os.fspath(prefix)}.data-{shard:05d}-of-{shards:05d}"


def _dtype_name(number: int) -> str:
    from ..proto.tensor_bundle_pb2 import DataType

    try:
        return DataType.Name(number)  # type: ignore[arg-type]
    except ValueError:
        return f"DataType {number}"


@dataclass(frozen=True)
class BundleEntry:
    """Where one tensor lies: ``dtype`` a NumPy dtype or ``"string"``; ``crc32c`` the masked
    CRC-32C as stored; ``sliced``: a partitioned tensor (its slices stored under other keys)."""

    key: str
    dtype: np.dtype[Any] | str
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: int
    sliced: bool = False

    @property
    def count(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)


class BundleReader:
    """A checkpoint opened for reading (a context manager: closes its shard files).

    ``keys()`` lists the tensors (the header aside), ``entry(key)`` says where one lies,
    ``read(key)`` reads it whole (CRC checked), ``read_rows`` part of one, ``verify`` checks one
    without keeping it; ``object_graph()`` and ``variables()`` read a TF2 checkpoint's object
    graph. Memory: the index (a few hundred bytes a tensor) and what one call returns, plus one
    chunk of :data:`CHUNK_BYTES`.
    """

    def __init__(self, prefix: str | os.PathLike[str]) -> None:
        self.prefix = os.fspath(prefix)
        self.index = index_path(prefix)
        self._files: dict[int, tuple[BufferedReader, int]] = {}
        raw = self._index_bytes()
        table = read_table(raw, self.index)
        if not table or table[0][0] != b"":
            raise InputError("has no header entry (key \"\"): not a TensorFlow checkpoint "
                             "index", path=self.index)
        self._header(table[0][1])
        self._raw: dict[str, bytes] = {}
        self._slices: dict[str, list[tuple[str, list[tuple[int, int]], bytes]]] = {}
        for key, value in table[1:]:
            if key.startswith(b"\x00"):  # a slice of a partitioned tensor (ordered_code)
                try:
                    name, extents = decode_slice_key(key)
                except (ValueError, UnicodeDecodeError) as exc:
                    raise InputError(f"a key starting with a 0 byte is not a tensor slice's "
                                     f"key: {exc}: {key!r}", path=self.index) from None
                label = name + "[" + ", ".join(
                    f"{a}:{a + n}" if n >= 0 else ":" for a, n in extents) + "]"
                self._slices.setdefault(name, []).append((label, extents, value))
                continue
            try:
                name = key.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"a key is not UTF-8 text: {key!r}", path=self.index) from None
            self._raw[name] = value
        self._entries: dict[str, BundleEntry] = {}

    def _index_bytes(self) -> bytes:
        try:
            with open(self.index, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size > _MAX_INDEX_BYTES:
                    raise InputError(f"is {size} bytes: larger than any checkpoint index "
                                     f"({_MAX_INDEX_BYTES} bytes at most)", path=self.index)
                return handle.read()
        except FileNotFoundError:
            raise InputError(f"not found: no checkpoint with prefix {self.prefix!r} (its index "
                             "file is missing)", path=self.index) from None
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", path=self.index) from None

    def _header(self, value: bytes) -> None:
        from google.protobuf.message import DecodeError

        from ..proto.tensor_bundle_pb2 import BundleHeaderProto

        header = BundleHeaderProto()
        try:
            header.ParseFromString(value)
        except DecodeError:
            raise InputError("the header entry (key \"\") is not a BundleHeaderProto",
                             path=self.index, key="") from None
        if not 1 <= header.num_shards <= _MAX_SHARDS:
            raise InputError(f"the header says {header.num_shards} data shards (expected 1 to "
                             f"{_MAX_SHARDS})", path=self.index, key="")
        if header.endianness != BundleHeaderProto.LITTLE:
            raise InputError("written on a big-endian machine: tpuemb reads little-endian "
                             "checkpoints only", path=self.index, key="")
        version = header.version
        if version.min_consumer > _BUNDLE_VERSION or _BUNDLE_VERSION in version.bad_consumers:
            raise InputError(f"written by a newer TensorFlow (bundle format: min consumer "
                             f"{version.min_consumer}, this reader is version "
                             f"{_BUNDLE_VERSION})", path=self.index, key="")
        self.num_shards = int(header.num_shards)

    # -- entries ---------------------------------------------------------------------------------

    def keys(self) -> list[str]:
        """Every tensor's key, in the index's (bytewise) order, the header's aside."""
        return list(self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw

    def entry(self, key: str) -> BundleEntry:
        """Where the tensor ``key`` lies (checked against its dtype, shape and shard)."""
        found = self._entries.get(key)
        if found is None:
            found = self._entries[key] = self._parse(key)
        return found

    def _parse(self, key: str) -> BundleEntry:
        if key not in self._raw:
            near = ", ".join(list(self._raw)[:5])
            raise InputError(f"no tensor {key!r} in the checkpoint (it has {len(self._raw)}: "
                             f"{near}{', ...' if len(self._raw) > 5 else ''})",
                             path=self.index, key=key)
        return self._parse_value(key, self._raw[key])

    def _parse_value(self, key: str, value: bytes) -> BundleEntry:
        from google.protobuf.message import DecodeError

        from ..proto.tensor_bundle_pb2 import BundleEntryProto

        proto = BundleEntryProto()
        try:
            proto.ParseFromString(value)
        except DecodeError:
            raise InputError(f"the entry of {key!r} is not a BundleEntryProto",
                             path=self.index, key=key) from None
        if proto.shape.unknown_rank or any(d.size < 0 for d in proto.shape.dim):
            raise InputError(f"the tensor {key!r} has an invalid shape "
                             f"{[d.size for d in proto.shape.dim]}", path=self.index, key=key)
        shape = tuple(int(d.size) for d in proto.shape.dim)
        dtype: np.dtype[Any] | str
        if proto.dtype == _STRING:
            dtype, least = "string", math.prod(shape) + 4
        elif proto.dtype in _DTYPES:
            dtype = _DTYPES[proto.dtype]
            least = math.prod(shape) * dtype.itemsize
        else:
            raise InputError(f"the tensor {key!r} has dtype {_dtype_name(proto.dtype)}, which "
                             "tpuemb does not read (numbers, bools and strings only)",
                             path=self.index, key=key)
        entry = BundleEntry(key, dtype, shape, int(proto.shard_id), int(proto.offset),
                            int(proto.size), int(proto.crc32c), bool(proto.slices))
        if entry.sliced:
            return entry
        if not 0 <= entry.shard < self.num_shards or entry.offset < 0:
            raise InputError(f"the entry of {key!r} points to shard {entry.shard} at offset "
                             f"{entry.offset}; the checkpoint has {self.num_shards} shard(s)",
                             path=self.index, key=key)
        wrong = entry.size != least if dtype != "string" else entry.size < least
        if wrong:
            raise InputError(f"the entry of {key!r} says {entry.size} bytes, but a "
                             f"{_dtype_name(proto.dtype)} tensor of shape {list(shape)} takes "
                             f"{'at least ' if dtype == 'string' else ''}{least}",
                             path=self.index, key=key)
        return entry

    # -- data ------------------------------------------------------------------------------------

    def _shard(self, entry: BundleEntry) -> BufferedReader:
        """The open shard of ``entry``, its bytes checked to hold the tensor."""
        opened = self._files.get(entry.shard)
        path = data_path(self.prefix, entry.shard, self.num_shards)
        if opened is None:
            try:
                handle = open(path, "rb")  # noqa: SIM115 (closed by close())
            except FileNotFoundError:
                raise InputError(f"missing data shard {entry.shard} of {self.num_shards} (needed "
                                 f"by {entry.key!r}): copy every file of the checkpoint",
                                 path=path) from None
            except OSError as exc:
                raise InputError(f"cannot read: {exc.strerror}", path=path) from None
            opened = self._files[entry.shard] = (handle, os.fstat(handle.fileno()).st_size)
        handle, size = opened
        if entry.offset + entry.size > size:
            raise InputError(f"the tensor {entry.key!r} (bytes {entry.offset}.."
                             f"{entry.offset + entry.size}) lies past the end of its "
                             f"{size}-byte shard: the file is truncated", path=path,
                             offset=entry.offset)
        return handle

    def _read_into(self, entry: BundleEntry, out: memoryview, start: int) -> int:
        """Fill ``out`` from ``start`` bytes into the tensor; the CRC of what was read."""
        handle = self._shard(entry)
        handle.seek(entry.offset + start)
        crc, done = 0, 0
        while done < len(out):
            part = out[done:done + CHUNK_BYTES]
            got = handle.readinto(part)
            if not got:
                raise InputError(f"the tensor {entry.key!r} ends early (the shard shrank "
                                 "while being read)",
                                 path=data_path(self.prefix, entry.shard, self.num_shards),
                                 offset=entry.offset + start + done)
            crc = crc32c(part[:got], crc)
            done += got
        return crc

    def _check(self, entry: BundleEntry, crc: int) -> None:
        if crc != unmask(entry.crc32c):
            raise InputError(f"the tensor {entry.key!r} does not match its CRC-32C (stored "
                             f"{unmask(entry.crc32c):#010x}, computed {crc:#010x}): the data "
                             "file is corrupt",
                             path=data_path(self.prefix, entry.shard, self.num_shards),
                             offset=entry.offset)

    def read(self, key: str) -> np.ndarray | list[bytes]:
        """The whole tensor ``key``, its CRC checked (every slice's, for a partitioned tensor):
        an array, or for a string tensor its elements in C order (a scalar: a list of one)."""
        entry = self.entry(key)
        if entry.dtype == "string":
            if entry.sliced:
                self._pieces(entry)  # refuses
            return self._strings(entry)
        assert isinstance(entry.dtype, np.dtype)
        out = np.empty(entry.shape, dtype=entry.dtype)
        if entry.sliced:
            for index, part in self._pieces(entry):
                out[index] = self._whole(part)
            return out
        return self._whole(entry)

    def _whole(self, entry: BundleEntry) -> np.ndarray:
        assert isinstance(entry.dtype, np.dtype)
        out = np.empty(entry.shape, dtype=entry.dtype)
        self._check(entry, self._read_into(entry, out.reshape(-1).view(np.uint8).data, 0))
        return out

    def read_rows(self, key: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` (along the first axis) of the numeric tensor ``key``.

        Not CRC-checked: the CRC covers the whole tensor, so a part cannot be checked alone;
        :meth:`verify` checks the whole tensor in bounded memory first when it matters.
        """
        entry = self.entry(key)
        if entry.dtype == "string" or not entry.shape:
            raise InputError(f"rows of {key!r} cannot be read: it is a "
                             f"{'string' if entry.dtype == 'string' else 'scalar'} tensor",
                             path=self.index, key=key)
        rows = entry.shape[0]
        if not 0 <= start <= stop <= rows:
            raise InputError(f"rows {start}:{stop} are outside {key!r}, which has {rows} rows",
                             path=self.index, key=key)
        if not entry.sliced:
            return self._rows(entry, start, stop)
        assert isinstance(entry.dtype, np.dtype)
        out = np.empty((stop - start, *entry.shape[1:]), dtype=entry.dtype)
        for index, part in self._pieces(entry):
            low, high = max(start, index[0].start), min(stop, index[0].stop)
            if low < high:
                out[(slice(low - start, high - start), *index[1:])] = self._rows(
                    part, low - index[0].start, high - index[0].start)
        return out

    def _rows(self, entry: BundleEntry, start: int, stop: int) -> np.ndarray:
        assert isinstance(entry.dtype, np.dtype)
        out = np.empty((stop - start, *entry.shape[1:]), dtype=entry.dtype)
        row_bytes = math.prod(entry.shape[1:]) * entry.dtype.itemsize
        self._read_into(entry, out.reshape(-1).view(np.uint8).data, start * row_bytes)
        return out

    def verify(self, key: str) -> None:
        """Check the tensor ``key`` against its CRC-32C (each slice's), one chunk in memory at
        a time."""
        entry = self.entry(key)
        for part in ([p for _, p in self._pieces(entry)] if entry.sliced else [entry]):
            self._verify(part)

    def _verify(self, entry: BundleEntry) -> None:
        if entry.dtype == "string":
            self._strings(entry)
            return
        buffer = memoryview(bytearray(min(CHUNK_BYTES, entry.size)))
        crc, done = 0, 0
        handle = self._shard(entry)
        while done < entry.size:
            part = buffer[:min(len(buffer), entry.size - done)]
            handle.seek(entry.offset + done)
            got = handle.readinto(part)
            if not got:
                raise InputError(f"the tensor {entry.key!r} ends early",
                                 offset=entry.offset + done,
                                 path=data_path(self.prefix, entry.shard, self.num_shards))
            crc = crc32c(part[:got], crc)
            done += got
        self._check(entry, crc)

    def _pieces(self, entry: BundleEntry) -> list[tuple[tuple[slice, ...], BundleEntry]]:
        """The slices of a partitioned tensor: (where in the full tensor, the slice's entry),
        checked to lie inside it, not to overlap and to cover it."""
        def bad(message: str) -> InputError:
            return InputError(f"the partitioned tensor {entry.key!r}: {message}",
                              path=self.index, key=entry.key)

        if entry.dtype == "string":
            raise bad("a partitioned string tensor; tpuemb reads partitioned numbers only")
        pieces: list[tuple[tuple[slice, ...], BundleEntry]] = []
        covered = 0
        for label, extents, value in self._slices.get(entry.key, []):
            if len(extents) != len(entry.shape):
                raise bad(f"slice {label} has {len(extents)} dimensions, the tensor "
                          f"{len(entry.shape)}")
            index = []
            for (begin, length), dim in zip(extents, entry.shape, strict=True):
                end = dim if length < 0 else begin + length
                if begin < 0 or end > dim or end < begin or (length < 0 and begin):
                    raise bad(f"slice {label} lies outside the shape {list(entry.shape)}")
                index.append(slice(begin, end))
            part = self._entries.get(label)
            if part is None:
                part = self._entries[label] = self._parse_value(label, value)
            shape = tuple(int(i.stop - i.start) for i in index)
            volume = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if part.sliced or part.dtype != entry.dtype or part.shape != shape:
                raise bad(f"slice {label} is stored as {part.dtype} {list(part.shape)}, "
                          f"expected {entry.dtype} {list(shape)}")
            for other, _ in pieces:
                if all(a.start < b.stop and b.start < a.stop
                       for a, b in zip(index, other, strict=True)) and volume:
                    raise bad(f"slice {label} overlaps another slice")
            pieces.append((tuple(index), part))
            covered += volume
        if covered != entry.count:
            raise bad(f"its {len(pieces)} slices hold {covered} of its {entry.count} elements "
                      "(a slice is missing from the index)")
        return pieces

    def _strings(self, entry: BundleEntry) -> list[bytes]:
        """A string tensor's elements (``ReadStringTensor``), every CRC checked."""
        data = bytearray(entry.size)
        self._read_into(entry, memoryview(data), 0)
        path = data_path(self.prefix, entry.shard, self.num_shards)
        lengths, pos, crc = [], 0, 0
        for _ in range(entry.count):
            try:
                length, pos = read_varint(data, pos, len(data))
            except ValueError as exc:
                raise InputError(f"the string tensor {entry.key!r} has a corrupt length: {exc}",
                                 path=path, offset=entry.offset + pos) from None
            lengths.append(length)
            crc = crc32c(struct.pack("<I" if length <= 0xFFFFFFFF else "<Q", length), crc)
        if pos + 4 > len(data):
            raise InputError(f"the string tensor {entry.key!r} ends inside its lengths",
                             path=path, offset=entry.offset + pos)
        stored = data[pos:pos + 4]
        if unmask(struct.unpack("<I", stored)[0]) != crc:
            raise InputError(f"the lengths of the string tensor {entry.key!r} do not match their "
                             "CRC-32C: the data file is corrupt", path=path,
                             offset=entry.offset + pos)
        crc = crc32c(stored, crc)
        pos += 4
        if pos + sum(lengths) != len(data):
            raise InputError(f"the string tensor {entry.key!r}'s lengths add up to "
                             f"{pos + sum(lengths)} bytes, its entry says {len(data)}",
                             path=path, offset=entry.offset)
        out = []
        for length in lengths:
            out.append(bytes(data[pos:pos + length]))
            pos += length
        self._check(entry, crc32c(memoryview(data)[pos - sum(lengths):], crc))
        return out

    # -- the object graph ------------------------------------------------------------------------

    def object_graph(self) -> Any:
        """The ``TrackableObjectGraph`` of a TF2 checkpoint, or None (a TF1 checkpoint)."""
        from google.protobuf.message import DecodeError

        from ..proto.trackable_object_graph_pb2 import TrackableObjectGraph

        if OBJECT_GRAPH_KEY not in self._raw:
            return None
        value = self.read(OBJECT_GRAPH_KEY)
        if not isinstance(value, list) or len(value) != 1:
            raise InputError(f"{OBJECT_GRAPH_KEY} is not a scalar string", path=self.index,
                             key=OBJECT_GRAPH_KEY)
        graph = TrackableObjectGraph()
        try:
            graph.ParseFromString(value[0])
        except DecodeError:
            raise InputError(f"{OBJECT_GRAPH_KEY} is not a TrackableObjectGraph",
                             path=self.index, key=OBJECT_GRAPH_KEY) from None
        return graph

    def variables(self) -> dict[str, str]:
        """Object path (local names joined by ``/``: ``embedding/item_user/accumulators``) ->
        checkpoint key, for every object with a ``VARIABLE_VALUE`` in the object graph (found
        breadth first from the root, as TensorFlow numbers the nodes); {} without a graph."""
        graph = self.object_graph()
        if graph is None:
            return {}
        nodes = graph.nodes
        out: dict[str, str] = {}
        queue: list[tuple[int, str]] = [(0, "")]
        seen = {0}
        while queue and nodes:
            node, path = queue.pop(0)
            for attribute in nodes[node].attributes:
                if attribute.name == _VARIABLE_VALUE and path:
                    out[path] = attribute.checkpoint_key
            for child in nodes[node].children:
                if not 0 <= child.node_id < len(nodes):
                    raise InputError(f"the object graph's node {node} names child node "
                                     f"{child.node_id}; the graph has {len(nodes)}",
                                     path=self.index, key=OBJECT_GRAPH_KEY)
                if child.node_id not in seen:
                    seen.add(child.node_id)
                    queue.append((child.node_id, f"{path}/{child.local_name}".lstrip("/")))
        return out

    def close(self) -> None:
        for handle, _ in self._files.values():
            handle.close()
        self._files.clear()

    def __enter__(self) -> BundleReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- writing ------------------------------------------------------------------------------------

def _refuse_link(path: str) -> None:
    if os.path.islink(path):
        raise OutputError(f"is a symbolic link: tpuemb does not write a checkpoint through a "
                          f"link (it could land anywhere); remove it (rm {path}) or choose "
                          "another prefix", path=path)


def _number(dtype: np.dtype[Any]) -> int:
    number = _NUMBERS.get(dtype.str.lstrip("<|=>"))
    if number is None:
        raise ValueError(f"dtype {dtype} has no TensorFlow DataType tpuemb writes")
    return number


class BundleWriter(Finishing):
    """Writes ``PREFIX.index`` and ``PREFIX.data-00000-of-00001`` (a context manager).

    Tensors are written in the order added (:meth:`add`, :meth:`add_rows` streaming a large one),
    the index at :meth:`finish` (called on leaving the block without an exception): the files
    appear together, data first, or not at all. ``inputs``: files the outputs must not replace.
    """

    def __init__(self, prefix: str | os.PathLike[str], *,
                 inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
        self.prefix = os.fspath(prefix)
        self._data_path, self._index_path = data_path(prefix), index_path(prefix)
        for path in (self._data_path, self._index_path):
            _refuse_link(path)
        check_outputs([self._data_path, self._index_path], list(inputs))
        self._entries: dict[str, bytes] = {}
        self._size = 0
        self._outputs = OutputSet()
        self._file = self._outputs.open(self._data_path)
        self._abandoned = False
        self._data: IO[bytes] | None = self._file.__enter__()

    def _entry(self, key: str, number: int, shape: Sequence[int], size: int, crc: int) -> None:
        from ..proto.tensor_bundle_pb2 import BundleEntryProto

        entry = BundleEntryProto(dtype=number, offset=self._size, size=size,  # type: ignore[arg-type]
                                 crc32c=mask(crc))
        entry.shape.SetInParent()
        for dim in shape:
            entry.shape.dim.add(size=int(dim))
        self._entries[key] = entry.SerializeToString()
        self._size += size

    def _new_key(self, key: str) -> IO[bytes]:
        if not isinstance(key, str) or not key:
            raise ValueError(f"a tensor's key must be a non-empty string, not {key!r}")
        if key in self._entries:
            raise ValueError(f"the key {key!r} was added already")
        if self._data is None:
            raise ValueError("the writer was abandoned after an error" if self._abandoned
                             else "the writer is finished")
        return self._data

    def add(self, key: str, value: np.ndarray | bytes | Sequence[bytes]) -> None:
        """Add the tensor ``key``: an array, ``bytes`` (a scalar string) or a sequence of
        ``bytes`` (a 1-D string tensor); an array of ``bytes`` objects keeps its shape."""
        handle = self._new_key(key)
        if isinstance(value, bytes):
            self._add_strings(handle, key, [value], ())
            return
        if not isinstance(value, np.ndarray):
            self._add_strings(handle, key, list(value), (len(value),))
            return
        if value.dtype.kind == "O":
            self._add_strings(handle, key, list(value.reshape(-1)), value.shape)
            return
        if value.dtype.kind in "SU":
            raise ValueError(f"string tensor {key!r}: give an array of dtype object holding "
                             f"bytes, not {value.dtype} (NumPy drops trailing zero bytes)")
        self.add_rows(key, value.shape, value.dtype, [value] if value.ndim else [value])

    def _add_strings(self, handle: IO[bytes], key: str, items: list[bytes],
                     shape: Sequence[int]) -> None:
        """``WriteStringTensor``: varint lengths, their masked CRC, the bytes."""
        crc = 0
        lengths = bytearray()
        for item in items:
            if not isinstance(item, bytes):
                raise ValueError(f"string tensor {key!r}: elements must be bytes, not "
                                 f"{type(item).__name__}")
            lengths += varint(len(item))
            crc = crc32c(struct.pack("<I" if len(item) <= 0xFFFFFFFF else "<Q", len(item)), crc)
        checksum = struct.pack("<I", mask(crc))
        crc = crc32c(checksum, crc)
        handle.write(bytes(lengths) + checksum)
        for item in items:
            handle.write(item)
            crc = crc32c(item, crc)
        self._entry(key, _STRING, shape, len(lengths) + 4 + sum(map(len, items)), crc)

    def add_rows(self, key: str, shape: Sequence[int], dtype: Any,
                 chunks: Iterable[np.ndarray]) -> None:
        """Add the numeric tensor ``key`` of ``shape`` and ``dtype`` from ``chunks``: arrays of
        consecutive rows (along the first axis) that together make the tensor, written as they
        come (one chunk in memory at a time)."""
        handle = self._new_key(key)
        dtype = np.dtype(dtype)
        number = _number(dtype)
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"tensor {key!r}: negative dimension in shape {shape}")
        little = dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype
        expected = math.prod(shape) * dtype.itemsize
        crc, written = 0, 0
        try:
            for chunk in chunks:
                chunk = np.asarray(chunk)
                if chunk.dtype != dtype or (shape and chunk.shape[1:] != shape[1:]) \
                        or (not shape and chunk.shape != ()):
                    raise ValueError(f"tensor {key!r}: a chunk of {chunk.dtype} {chunk.shape} "
                                     f"does not fit rows of {dtype} {shape}")
                raw = np.ascontiguousarray(chunk, dtype=little).reshape(-1).view(np.uint8)
                for start in range(0, raw.size, CHUNK_BYTES):
                    part = raw[start:start + CHUNK_BYTES]
                    handle.write(part.data)
                    written += part.size
                    crc = crc32c(part, crc)
                if written > expected:
                    break
            if written != expected:
                raise ValueError(f"tensor {key!r}: the chunks hold {written} bytes, its shape "
                                 f"{shape} of {dtype} takes {expected}")
        except BaseException as exc:  # bytes of a tensor with no entry: the file is unusable
            if written:
                self.abort(exc)
                self._abandoned = True
            raise
        self._entry(key, number, shape, written, crc)

    def finish(self) -> None:
        """Write the index and rename both files into place."""
        from ..proto.tensor_bundle_pb2 import BundleHeaderProto

        if self._data is None:
            if self._abandoned:
                raise ValueError("the writer was abandoned after an error: nothing was written")
            return
        self._data = None
        try:
            self._file.__exit__(None, None, None)  # the data file is staged
            header = BundleHeaderProto(num_shards=1)
            header.version.producer = _BUNDLE_VERSION
            table = [(b"", header.SerializeToString())]
            table += sorted((k.encode("utf-8"), v) for k, v in self._entries.items())
            _refuse_link(self._index_path)
            self._outputs.write_bytes(self._index_path, build_table(table))
            self._outputs.commit()  # the data file, then the index
        except BaseException:
            self._outputs.discard()
            raise

    def abort(self, error: BaseException | None = None) -> None:
        """Remove everything written so far (``error``: the exception that stops the write)."""
        if self._data is not None:
            self._data = None
            error = error or RuntimeError("the checkpoint write was abandoned")
            self._file.__exit__(type(error), error, error.__traceback__)  # removes the file
        self._outputs.discard()

    def __enter__(self) -> BundleWriter:
        return self


# --- TF2 object checkpoints ---------------------------------------------------------------------

def _escape(local_name: str) -> str:
    """``trackable_utils.escape_local_name``: ``.`` -> ``..``, ``/`` -> ``.S``."""
    return local_name.replace(".", "..").replace("/", ".S")


def _object_graph(path: Sequence[str], names: Sequence[str], keys: Sequence[str],
                  full_names: Sequence[str]) -> bytes:
    from ..proto.trackable_object_graph_pb2 import TrackableObjectGraph

    graph = TrackableObjectGraph()
    for i, name in enumerate(path):
        node = graph.nodes.add()
        node.children.add(node_id=i + 1, local_name=name)
        node.has_checkpoint_values.value = True
    owner = graph.nodes.add()
    owner.has_checkpoint_values.value = True
    first = len(path) + 1
    for i, name in enumerate(names):
        owner.children.add(node_id=first + i, local_name=name)
    for key, full in zip(keys, full_names, strict=True):
        node = graph.nodes.add()
        node.attributes.add(name=_VARIABLE_VALUE, full_name=full, checkpoint_key=key)
        node.has_checkpoint_values.value = True
    return graph.SerializeToString()


def write_object_checkpoint(prefix: str | os.PathLike[str],
                            variables: Mapping[str, np.ndarray | Iterator[np.ndarray]], *,
                            object_path: str = "embedding",
                            strings: Mapping[str, bytes] | None = None,
                            shapes: Mapping[str, tuple[tuple[int, ...], Any]] | None = None,
                            inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Write a TF2 object-based checkpoint that ``tf.train.Checkpoint(**{object_path: obj})
    .restore(prefix)`` reads into an object whose children are the ``variables`` (local names as
    TensorFlow gives them: ``item_user``, ``item_user/accumulators``) and ``strings`` (scalar
    string trackables such as ``_sparse_core_table_layouts``).

    The object graph is TensorFlow's for such an object: the root, one node per part of
    ``object_path``, the object with its children in the order given (variables, then strings),
    one node each holding ``VARIABLE_VALUE`` (``full_name`` the variable's name, the local name);
    the tensors are written in that order, the graph last. A variable given as an iterator of
    row chunks is streamed; its ``(shape, dtype)`` is then ``shapes[name]``.
    """
    strings = dict(strings or {})
    path = [p for p in object_path.split("/") if p] if object_path else []
    names = list(variables) + list(strings)
    if len(set(names)) != len(names):
        raise ValueError("a name is both a variable and a string")
    base = "".join(f"{_escape(p)}/" for p in path)
    keys = [f"{base}{_escape(name)}{VALUE_SUFFIX}" for name in names]
    full_names = list(variables) + [""] * len(strings)
    with BundleWriter(prefix, inputs=inputs) as writer:
        for name, key in zip(variables, keys, strict=False):
            value = variables[name]
            if isinstance(value, np.ndarray):
                writer.add(key, value)
            else:
                shape, dtype = (shapes or {})[name]
                writer.add_rows(key, shape, dtype, value)
        for name, key in zip(strings, keys[len(variables):], strict=True):
            writer.add(key, strings[name])
        writer.add(OBJECT_GRAPH_KEY, _object_graph(path, names, keys, full_names))
