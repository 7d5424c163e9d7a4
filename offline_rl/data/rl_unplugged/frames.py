"""Decode RL Unplugged's PNG frames once each and give every distinct frame one pool index.

A record carries 8 PNGs but, inside an episode, only about one new frame: `o_tp1` repeats 3 frames
of `o_t`, and the next transition repeats 3 of `o_tp1`. Frames are looked up by a 128-bit digest of
their PNG bytes first (no decoding for a frame seen before), then, for new bytes, by a digest of the
decoded pixels (identical pixels encoded differently still share an entry). Only genuinely new
frames are decoded and kept, and they leave through `sink` in blocks, so memory stays bounded by the
two digest tables, not by the shard.

Decoding matches `tf.io.decode_png(channels=1)` on RL Unplugged's 8-bit grayscale PNGs (the tests
compare both on TensorFlow-written shards); anything else is refused rather than converted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import cv2
import numpy as np

FRAME_SHAPE = (84, 84)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_DIGEST_SIZE = 16


class FrameError(ValueError):
    """A frame that is not an 8-bit grayscale PNG of the expected size."""


def decode_frame(png: bytes, shape: tuple[int, int] = FRAME_SHAPE) -> np.ndarray:
    """One PNG as an (H, W) uint8 array; `FrameError` says what is wrong with it."""
    if not png.startswith(PNG_SIGNATURE):
        raise FrameError("is not a PNG")
    frame = cv2.imdecode(np.frombuffer(png, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    if frame is None:
        raise FrameError("is a damaged PNG")
    if frame.dtype != np.uint8 or frame.ndim != 2:
        channels = 1 if frame.ndim == 2 else frame.shape[2]
        raise FrameError(f"is a {frame.dtype.itemsize * 8}-bit PNG with {channels} channels, expected 8-bit grayscale")
    if frame.shape != shape:
        raise FrameError(f"is {frame.shape[1]}x{frame.shape[0]} pixels, expected {shape[1]}x{shape[0]}")
    return frame


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=_DIGEST_SIZE).digest()


class FramePool:
    """Assigns pool indices to frames, storing each distinct frame once (see the module docstring)."""

    def __init__(
        self,
        sink: Callable[[np.ndarray], None],
        frame_shape: tuple[int, int] = FRAME_SHAPE,
        block_frames: int = 2048,
    ) -> None:
        self._sink = sink
        self.frame_shape = frame_shape
        self._block = np.empty((block_frames, *frame_shape), dtype=np.uint8)
        self._in_block = 0
        self._by_png: dict[bytes, int] = {}
        self._by_pixels: dict[bytes, int] = {}
        self.size = 0
        self.decoded = 0

    def indices(self, pngs: Sequence[bytes], names: Sequence[str]) -> list[int]:
        """Pool indices of `pngs`, adding new frames; nothing is added if any frame is bad.

        `names` label the frames in errors (e.g. "o_t[2]").
        """
        by_png = self._by_png
        found: list[int | None] = []
        fresh: dict[int, tuple[bytes, bytes, np.ndarray]] = {}
        for position, png in enumerate(pngs):
            png_key = _digest(png)
            index = by_png.get(png_key)
            if index is None:
                try:
                    frame = decode_frame(png, self.frame_shape)
                except FrameError as error:
                    raise FrameError(f"frame {names[position]} {error}") from None
                self.decoded += 1
                fresh[position] = (png_key, _digest(frame.tobytes()), frame)
            found.append(index)
        for position, (png_key, pixel_key, frame) in fresh.items():
            index = by_png.get(png_key)  # the same new PNG may occur twice in one record
            if index is None:
                index = self._by_pixels.get(pixel_key)
                if index is None:
                    index = self._append(frame)
                    self._by_pixels[pixel_key] = index
                by_png[png_key] = index
            found[position] = index
        return found  # type: ignore[return-value]

    def _append(self, frame: np.ndarray) -> int:
        if self._in_block == len(self._block):
            self.flush()
        self._block[self._in_block] = frame
        self._in_block += 1
        self.size += 1
        return self.size - 1

    def flush(self) -> None:
        """Hand the frames added since the last flush to the sink."""
        if self._in_block:
            self._sink(self._block[: self._in_block])
            self._in_block = 0
