"""Read gzip-compressed TFRecord files without TensorFlow.

A TFRecord file is a sequence of frames: a little-endian uint64 payload length, the masked CRC-32C
of those 8 bytes, the payload, and the masked CRC-32C of the payload. RL Unplugged gzips the whole
file. TensorFlow's reader pulls one record at a time through several layers of C++ and Python; here
the file is inflated in large blocks and frames are cut with `struct` directly out of one buffer,
with both checksums verified by the hardware CRC-32C of `google-crc32c`.

Damage is reported per record instead of raised, so that the caller decides between stopping with
an error that names the record and skipping it (`--skip-corrupt`): a bad payload checksum spoils
one record, while a bad length checksum, damaged compressed data or a stream that ends early leaves
nothing trustworthy to read after it (`Record.fatal`). Every record decoded before such damage is
still delivered, and the message names the compressed byte offset and the last intact record.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import google_crc32c

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_HEADER_SIZE = _HEADER.size  # 12: length + its CRC
_FOOTER_SIZE = _FOOTER.size
_MASK_DELTA = 0xA282EAD8
_READ_BLOCK = 4 << 20
_MAX_RECORD = 1 << 30  # a length beyond this is damage, not a record
_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_SLICE = 64 << 10
_SALVAGE_STEP = 64


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
    """Inflates a file block by block (concatenated gzip members included), and says where damage is.

    Each block is inflated in small slices, so that everything before a damaged spot is delivered:
    zlib raises without returning the output of the call that met the damage, so the slice that
    fails is inflated again from a copy of the inflater's state, in small steps (`_salvage`).
    """

    def __init__(self, path: str | os.PathLike[str], on_bytes_read: Callable[[int], None] | None) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._inflater = zlib.decompressobj(wbits=31)
        self._on_bytes_read = on_bytes_read
        self._offset = 0  # compressed bytes inflated so far
        self._inside_member = False
        self.error: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        first = True
        while True:
            block = self._file.read(_READ_BLOCK)
            if self._on_bytes_read is not None and block:
                self._on_bytes_read(len(block))
            if first and not block.startswith(_GZIP_MAGIC):
                self.error = "not gzip-compressed (RL Unplugged shards are gzip TFRecord files)"
                return
            first = False
            if not block:
                if self._inside_member:
                    self.error = f"the gzip stream ends early at compressed byte {self._offset} (truncated file)"
                return
            yield from self._inflate(block)
            if self.error is not None:
                return

    def _inflate(self, block: bytes) -> Iterator[bytes]:
        position = 0
        while position < len(block):
            piece = block[position : position + _INFLATE_SLICE]
            if not self._inside_member and not piece.startswith(_GZIP_MAGIC[: len(piece)]):
                self.error = f"bytes that are not a gzip member follow the data, at compressed byte {self._offset}"
                return
            state = self._inflater.copy()
            self._inside_member = True
            try:
                out = self._inflater.decompress(piece)
            except zlib.error as error:
                yield from self._salvage(state, piece, str(error))
                return
            if out:
                yield out
            used = len(piece) - len(self._inflater.unused_data) if self._inflater.eof else len(piece)
            self._offset += used
            position += used
            if self._inflater.eof:
                self._inflater = zlib.decompressobj(wbits=31)
                self._inside_member = False

    def _salvage(self, inflater: Any, piece: bytes, problem: str) -> Iterator[bytes]:
        """Inflate `piece` again up to the damage, in `_SALVAGE_STEP`-byte steps and then byte by
        byte inside the step that fails, so no output before the damaged byte is lost; record where
        the damage is."""
        position = 0
        for step in (_SALVAGE_STEP, 1):
            while position < len(piece):
                state = inflater.copy()
                try:
                    out = inflater.decompress(piece[position : position + step])
                except zlib.error:
                    inflater = state
                    break
                if out:
                    yield out
                if inflater.eof:  # damage in a later member: the main loop reports it
                    return
                position += step
        where = self._offset + position
        if "check" in problem:
            self.error = f"the gzip trailer near compressed byte {where} does not match the data ({problem})"
        else:
            self.error = f"the gzip stream is damaged near compressed byte {where} ({problem})"

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
            intact = f"; records 0-{index - 1} before it are intact" if index else "; no record before it"
            yield Record(index, None, blocks.error + intact, fatal=True)
        elif len(pending) > start:
            yield Record(index, None, "the file ends inside a record (truncated file)", fatal=True)
    finally:
        blocks.close()
