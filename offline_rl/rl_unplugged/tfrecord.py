"""Read gzip-compressed TFRecord files without TensorFlow.

A TFRecord file is a sequence of frames: a little-endian uint64 payload length, the masked CRC-32C
of those 8 bytes, the payload, and the masked CRC-32C of the payload. RL Unplugged gzips the whole
file. TensorFlow's reader pulls one record at a time through several layers of C++ and Python; here
the file is inflated in large blocks and frames are cut with `struct` directly out of one buffer,
with both checksums verified by the hardware CRC-32C of `google-crc32c`.

Damage is reported per record instead of raised, so that the caller decides between stopping with
an error that names the record and skipping it (`--skip-corrupt`): a bad payload checksum spoils
one record, while a bad length checksum or a stream that ends early leaves nothing trustworthy to
read after it (`Record.fatal`).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import google_crc32c

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_HEADER_SIZE = _HEADER.size  # 12: length + its CRC
_FOOTER_SIZE = _FOOTER.size
_MASK_DELTA = 0xA282EAD8
_READ_BLOCK = 4 << 20
_MAX_RECORD = 1 << 30  # a length beyond this is damage, not a record


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C rotated right by 15 bits plus a constant (TensorFlow's `crc32c::Mask`)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass(frozen=True)
class Record:
    """One framed payload (`data`), or the reason there is none (`problem`).

    `fatal` problems end the file: the framing after them cannot be trusted.
    """

    index: int
    data: bytes | None
    problem: str | None = None
    fatal: bool = False


class _GzipBlocks:
    """Inflates a file block by block (concatenated gzip members included)."""

    def __init__(self, path: str | os.PathLike[str], on_bytes_read: Callable[[int], None] | None) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._inflater = zlib.decompressobj(wbits=31)
        self._on_bytes_read = on_bytes_read
        self.error: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        inside_member = False
        produced = False
        while True:
            block = self._file.read(_READ_BLOCK)
            if self._on_bytes_read is not None and block:
                self._on_bytes_read(len(block))
            if not block:
                if inside_member:
                    self.error = "the gzip stream ends early (truncated file)"
                return
            while block:
                inside_member = True
                try:
                    out = self._inflater.decompress(block)
                except zlib.error as error:
                    if not produced:
                        self.error = "not gzip-compressed (RL Unplugged shards are gzip TFRecord files)"
                    else:
                        self.error = f"the gzip stream is corrupt ({error})"
                    return
                if out:
                    produced = True
                    yield out
                if self._inflater.eof:
                    inside_member = False
                    block = self._inflater.unused_data
                    self._inflater = zlib.decompressobj(wbits=31)
                else:
                    block = b""

    def close(self) -> None:
        self._file.close()


def read_records(
    path: str | os.PathLike[str], *, on_bytes_read: Callable[[int], None] | None = None
) -> Iterator[Record]:
    """Every record of a gzip TFRecord file in order; `on_bytes_read` sees compressed bytes as they are read."""
    blocks = _GzipBlocks(path, on_bytes_read)
    pending = bytearray()
    start = 0
    index = 0
    try:
        for chunk in blocks:
            pending += chunk
            end = len(pending)
            while end - start >= _HEADER_SIZE:
                length, length_crc = _HEADER.unpack_from(pending, start)
                if masked_crc32c(bytes(pending[start : start + 8])) != length_crc or length > _MAX_RECORD:
                    yield Record(index, None, "length checksum mismatch (the framing is damaged)", fatal=True)
                    return
                stop = start + _HEADER_SIZE + length + _FOOTER_SIZE
                if stop > end:
                    break
                data = bytes(pending[start + _HEADER_SIZE : start + _HEADER_SIZE + length])
                (data_crc,) = _FOOTER.unpack_from(pending, stop - _FOOTER_SIZE)
                if masked_crc32c(data) == data_crc:
                    yield Record(index, data)
                else:
                    yield Record(index, None, "data checksum mismatch")
                index += 1
                start = stop
            if start > _READ_BLOCK:
                del pending[:start]
                start = 0
        if blocks.error is not None:
            yield Record(index, None, blocks.error, fatal=True)
        elif len(pending) > start:
            yield Record(index, None, "the file ends inside a record (truncated file)", fatal=True)
    finally:
        blocks.close()
