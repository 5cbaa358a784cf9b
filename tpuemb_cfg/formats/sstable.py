"""The LevelDB table format TensorFlow's checkpoint ``.index`` file is written in
(``tensorflow/core/lib/io`` / ``xla/tsl/lib/io``: ``table_builder.cc``, ``block_builder.cc``,
``format.cc``, ``table_options.h``), read and written by tpuemb itself.

A table is a sequence of blocks, then a footer:

- **block**: entries ``varint32 shared, varint32 non_shared, varint32 value_length,
  key[shared:] (non_shared bytes), value``, each key stored as the number of bytes it shares with
  the previous key plus the rest; every ``restart_interval``-th entry (16 for data blocks, 1 for
  the index block) shares nothing and its offset is listed at the block's end: ``uint32
  restarts[n], uint32 n`` (little-endian). A block is followed by a 5-byte trailer: the
  compression type (0: none; TensorFlow writes checkpoints uncompressed) and the masked CRC-32C
  of the block's bytes and that type byte.
- A data block is closed once its size estimate (entries + restart array + 4) reaches
  ``block_size`` (262144 bytes), or before an entry whose key and value reach twice that.
- After the data blocks: an empty **metaindex** block, then the **index** block: per data block
  one entry, key a short separator between its last key and the next block's first (or the
  short successor of the table's last key), value the block's handle ``varint64 offset,
  varint64 size``.
- **footer** (48 bytes): the metaindex and index handles, zero-padded to 40 bytes, then the
  magic number 0xdb4775248b80fb57 (little-endian ``uint64``).

:func:`build_table` writes exactly TensorFlow's bytes for the same sorted entries;
:func:`read_table` checks everything (magic, handles, CRCs, varints, key order) and raises one
:class:`~tpuemb_cfg.base.errors.InputError` naming the file and the byte offset.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from ..base.errors import InputError
from .crc32c import crc32c, mask, unmask

__all__ = ["BLOCK_RESTART_INTERVAL", "BLOCK_SIZE", "FOOTER_SIZE", "MAGIC", "build_table",
           "read_table", "varint", "read_varint"]

BLOCK_SIZE = 262144
BLOCK_RESTART_INTERVAL = 16
MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
_HANDLES_SIZE = 40
_TRAILER = 5


def varint(value: int) -> bytes:
    """LevelDB's / protobuf's varint: seven bits a byte, least significant first."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes | bytearray | memoryview, pos: int, limit: int,
                bits: int = 64) -> tuple[int, int]:
    """(value, next position) of the varint at ``data[pos:limit]``; ValueError when it runs past
    ``limit`` or over ``bits`` bits."""
    value = shift = 0
    while True:
        if pos >= limit or shift >= bits:
            raise ValueError("a varint runs past its end" if pos >= limit
                             else f"a varint longer than {bits} bits")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


class _Block:
    """``block_builder.cc``: prefix-compressed entries with restart points."""

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.buffer = bytearray()
        self.restarts = [0]
        self.counter = 0
        self.last = b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.counter < self.interval:
            limit = min(len(self.last), len(key))
            while shared < limit and self.last[shared] == key[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.counter = 0
        self.buffer += varint(shared) + varint(len(key) - shared) + varint(len(value))
        self.buffer += key[shared:] + value
        self.last = key
        self.counter += 1

    def size_estimate(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def empty(self) -> bool:
        return not self.buffer

    def finish(self) -> bytes:
        tail = b"".join(struct.pack("<I", r) for r in self.restarts)
        return bytes(self.buffer) + tail + struct.pack("<I", len(self.restarts))


def _separator(start: bytes, limit: bytes) -> bytes:
    """``FindShortestSeparator``: a short key in ``[start, limit)``."""
    n = min(len(start), len(limit))
    i = 0
    while i < n and start[i] == limit[i]:
        i += 1
    if i < n and start[i] < 0xFF and start[i] + 1 < limit[i]:
        return start[:i] + bytes([start[i] + 1])
    return start


def _successor(key: bytes) -> bytes:
    """``FindShortSuccessor``: a short key >= ``key``."""
    for i, byte in enumerate(key):
        if byte != 0xFF:
            return key[:i] + bytes([byte + 1])
    return key


def build_table(entries: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The table of ``entries`` (keys strictly increasing, bytewise) as TensorFlow's
    ``TableBuilder`` writes it with ``kNoCompression``."""
    out = bytearray()
    index = _Block(1)
    data = _Block(BLOCK_RESTART_INTERVAL)
    pending: tuple[int, int] | None = None
    last: bytes | None = None

    def write_block(block: _Block) -> tuple[int, int]:
        raw = block.finish()
        handle = (len(out), len(raw))
        out.extend(raw)
        out.extend(b"\x00" + struct.pack("<I", mask(crc32c(b"\x00", crc32c(raw)))))
        return handle

    def flush() -> tuple[int, int] | None:
        nonlocal data
        if data.empty():
            return None
        handle = write_block(data)
        data = _Block(BLOCK_RESTART_INTERVAL)
        return handle

    for key, value in entries:
        if last is not None:
            if key <= last:
                raise ValueError(f"table keys must increase: {key!r} after {last!r}")
            if len(key) + len(value) >= 2 * BLOCK_SIZE:
                pending = flush() or pending
        if pending is not None:
            index.add(_separator(last or b"", key), varint(pending[0]) + varint(pending[1]))
            pending = None
        last = key
        data.add(key, value)
        if data.size_estimate() >= BLOCK_SIZE:
            pending = flush()
    pending = flush() or pending
    meta = write_block(_Block(BLOCK_RESTART_INTERVAL))
    if pending is not None:
        index.add(_successor(last or b""), varint(pending[0]) + varint(pending[1]))
    handle = write_block(index)
    handles = varint(meta[0]) + varint(meta[1]) + varint(handle[0]) + varint(handle[1])
    out.extend(handles.ljust(_HANDLES_SIZE, b"\x00") + struct.pack("<Q", MAGIC))
    return bytes(out)


# --- reading ------------------------------------------------------------------------------------

def _block(data: bytes, offset: int, size: int, path: str, what: str) -> bytes:
    """The checked contents of the block at ``offset`` (``size`` bytes before its trailer)."""
    end = offset + size + _TRAILER
    if offset < 0 or size < 0 or end > len(data) - FOOTER_SIZE:
        raise InputError(
            f"the {what} block (bytes {offset}..{end}) lies outside the table's "
            f"{len(data) - FOOTER_SIZE} bytes of blocks: the file is truncated or corrupt",
            path=path, offset=offset)
    contents = data[offset:offset + size]
    kind = data[offset + size]
    stored = struct.unpack_from("<I", data, offset + size + 1)[0]
    actual = crc32c(bytes([kind]), crc32c(contents))
    if unmask(stored) != actual:
        raise InputError(
            f"the {what} block's CRC-32C does not match (stored {unmask(stored):#010x}, "
            f"computed {actual:#010x}): the file is corrupt", path=path, offset=offset)
    if kind != 0:
        raise InputError(
            f"the {what} block is compressed (type {kind}; 1 is Snappy): TensorFlow writes "
            "checkpoint indexes uncompressed and tpuemb reads only those", path=path,
            offset=offset)
    return contents


def _entries(block: bytes, base: int, path: str, what: str) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of one block's contents (``base``: its offset in the file)."""
    if len(block) < 4:
        raise InputError(f"the {what} block is shorter than its restart count", path=path,
                         offset=base)
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    limit = len(block) - 4 - 4 * restarts
    if restarts == 0 or limit < 0:
        raise InputError(f"the {what} block has a bad restart count ({restarts})", path=path,
                         offset=base)
    out: list[tuple[bytes, bytes]] = []
    pos, last = 0, b""
    while pos < limit:
        at = pos
        try:
            shared, pos = read_varint(block, pos, limit, 32)
            rest, pos = read_varint(block, pos, limit, 32)
            size, pos = read_varint(block, pos, limit, 32)
        except ValueError as exc:
            raise InputError(f"the {what} block's entry is corrupt: {exc}", path=path,
                             offset=base + at) from None
        if shared > len(last) or pos + rest + size > limit:
            raise InputError(f"the {what} block's entry runs past the block (shared {shared}, "
                             f"key bytes {rest}, value bytes {size})", path=path,
                             offset=base + at)
        key = last[:shared] + block[pos:pos + rest]
        value = block[pos + rest:pos + rest + size]
        if out and key <= last:
            raise InputError(f"the {what} block's keys are out of order ({key!r} after "
                             f"{last!r})", path=path, offset=base + at)
        out.append((key, value))
        last = key
        pos += rest + size
    return out


def _handle(value: bytes, path: str, offset: int, what: str) -> tuple[int, int]:
    try:
        start, pos = read_varint(value, 0, len(value))
        size, _ = read_varint(value, pos, len(value))
    except ValueError as exc:
        raise InputError(f"the {what} handle is corrupt: {exc}", path=path,
                         offset=offset) from None
    return start, size


def read_table(data: bytes, path: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of the table ``data`` (the bytes of the file ``path``), in order."""
    if len(data) < FOOTER_SIZE:
        raise InputError(f"is {len(data)} bytes long, shorter than a table's 48-byte footer: "
                         "not a TensorFlow checkpoint index, or truncated", path=path)
    footer = len(data) - FOOTER_SIZE
    magic = struct.unpack_from("<Q", data, footer + _HANDLES_SIZE)[0]
    if magic != MAGIC:
        raise InputError(f"bad magic number {magic:#018x} (expected {MAGIC:#018x}): not a "
                         "TensorFlow checkpoint index, or truncated", path=path,
                         offset=footer + _HANDLES_SIZE)
    try:
        meta_offset, pos = read_varint(data, footer, footer + _HANDLES_SIZE)
        meta_size, pos = read_varint(data, pos, footer + _HANDLES_SIZE)
        index_offset, pos = read_varint(data, pos, footer + _HANDLES_SIZE)
        index_size, _ = read_varint(data, pos, footer + _HANDLES_SIZE)
    except ValueError as exc:
        raise InputError(f"the footer's block handles are corrupt: {exc}", path=path,
                         offset=footer) from None
    _block(data, meta_offset, meta_size, path, "metaindex")  # checked, then unused
    index = _block(data, index_offset, index_size, path, "index")
    out: list[tuple[bytes, bytes]] = []
    for separator, value in _entries(index, index_offset, path, "index"):
        offset, size = _handle(value, path, index_offset, "index entry's block")
        block = _block(data, offset, size, path, "data")
        entries = _entries(block, offset, path, "data")
        if out and entries and entries[0][0] <= out[-1][0]:
            raise InputError(f"the data blocks' keys are out of order at {entries[0][0]!r}",
                             path=path, offset=offset)
        if entries and entries[-1][0] > separator:
            raise InputError(f"a data block's last key {entries[-1][0]!r} is above its index "
                             f"key {separator!r}", path=path, offset=offset)
        out.extend(entries)
    return out
