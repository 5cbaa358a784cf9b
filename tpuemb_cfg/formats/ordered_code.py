"""The keys TensorFlow stores a slice of a partitioned tensor under (``checkpoint::
EncodeTensorNameSlice``, ``tensorflow/core/util/saved_tensor_slice_util.cc``), decoded with
``OrderedCode`` (``tensorflow/core/lib/strings/ordered_code.cc``).

A slice key is ``WriteNumIncreasing(0)`` (the byte 0x00, so slice keys sort before every tensor
name), ``WriteString(name)`` (0x00 escaped as 00 ff, 0xff as ff 00, ended by 00 01),
``WriteNumIncreasing(rank)`` (a length byte, then the number big-endian), and per dimension
``WriteSignedNumIncreasing`` of the start and of the length (-1: the whole dimension). A signed
number is ``n`` bytes whose first ``n`` bits are ones (a number >= 0) or zeros (below 0), then a
sign bit, then the two's complement value: 0..63 is the one byte ``0x80 + v``, -1 is ``0x7f``.
"""

from __future__ import annotations

__all__ = ["decode_slice_key", "encode_slice_key"]


def _string(data: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while pos < len(data):
        byte = data[pos]
        if byte == 0x00 and pos + 1 < len(data):
            nxt = data[pos + 1]
            if nxt == 0x01:
                return bytes(out), pos + 2
            if nxt == 0xFF:
                out.append(0x00)
                pos += 2
                continue
            raise ValueError("a bad escape in an encoded string")
        if byte == 0xFF and pos + 1 < len(data) and data[pos + 1] == 0x00:
            out.append(0xFF)
            pos += 2
            continue
        if byte in (0x00, 0xFF):
            raise ValueError("a bad escape in an encoded string")
        out.append(byte)
        pos += 1
    raise ValueError("an encoded string without its end")


def _number(data: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(data) or data[pos] > 8 or pos + 1 + data[pos] > len(data):
        raise ValueError("a bad encoded number")
    n = data[pos]
    return int.from_bytes(data[pos + 1:pos + 1 + n], "big"), pos + 1 + n


def _signed(data: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(data):
        raise ValueError("a signed number past the key's end")
    negative = not data[pos] & 0x80
    flip = 0xFF if negative else 0x00
    n, i = 0, pos
    while i < len(data):  # count the leading ones (zeros for a negative number)
        byte = data[i] ^ flip
        if byte == 0xFF:
            n, i = n + 8, i + 1
            continue
        bit = 0x80
        while byte & bit:
            n, bit = n + 1, bit >> 1
        break
    if not 1 <= n <= 10 or pos + n > len(data):
        raise ValueError("a bad encoded signed number")
    value = int.from_bytes(data[pos:pos + n], "big")
    header = ((1 << n) - 1) << (8 * n - n)
    if negative:
        return (value | header) - (1 << (8 * n)), pos + n
    return value & ~header, pos + n


def decode_slice_key(key: bytes) -> tuple[str, list[tuple[int, int]]]:
    """(tensor name, per dimension (start, length or -1)) of a slice key; ValueError when
    ``key`` is not one."""
    if not key.startswith(b"\x00"):
        raise ValueError("not a slice key")
    name, pos = _string(key, 1)
    rank, pos = _number(key, pos)
    extents = []
    for _ in range(rank):
        start, pos = _signed(key, pos)
        length, pos = _signed(key, pos)
        extents.append((start, length))
    if pos != len(key):
        raise ValueError("bytes after the slice's extents")
    return name.decode("utf-8"), extents


def _encode_signed(value: int) -> bytes:
    x = ~value if value < 0 else value
    n = 1
    while x >= 1 << (7 * n - 1):
        n += 1
    raw = (value % (1 << (8 * n))).to_bytes(n, "big")
    header = ((1 << n) - 1) << (8 * n - n)
    return (int.from_bytes(raw, "big") ^ header).to_bytes(n, "big")


def encode_slice_key(name: str, extents: list[tuple[int, int]]) -> bytes:
    """The slice key of ``name`` and ``extents`` (the inverse of :func:`decode_slice_key`)."""
    escaped = b"".join(b"\x00\xff" if b == 0 else b"\xff\x00" if b == 0xFF else bytes([b])
                       for b in name.encode("utf-8"))
    rank = len(extents).to_bytes(8, "big").lstrip(b"\x00")
    out = b"\x00" + escaped + b"\x00\x01" + bytes([len(rank)]) + rank
    return out + b"".join(_encode_signed(s) + _encode_signed(n) for s, n in extents)
