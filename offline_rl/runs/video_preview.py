"""A small animated GIF of a video already written (`--video-interval`'s evaluations), for the run's
TensorBoard (its Images tab animates GIFs; `SummaryWriter.add_video` would need moviepy) and W&B.

Why a GIF beside the MP4: the MP4s are MPEG-4 Part 2, which browsers do not play (`video.VIDEO_CODEC`),
and TensorBoard and W&B show their media in a browser. Why read the MP4 back rather than keep the
frames as they are filmed: a 1000-step MuJoCo episode at 480×480 is 0.7 GB of frames; read back and
shrunk one at a time, a preview holds at most 1501 frames of 160×210 while it is made (~200 MB).
"""

from __future__ import annotations

import io
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from offline_rl.core.errors import OfflineRLError

PREVIEW_WIDTH = 160
"""Pixels across (a narrower video keeps its own width): an Atari screen's own width; MuJoCo's
480×480 frames shrink 3×, about 1 kB a frame as a GIF."""
PREVIEW_MAX_FPS = 25.0
"""The most frames a second a preview shows: a faster video (Hopper's and Walker2d's 125) keeps every
k-th frame. Browsers play GIF frames shown for under 20 ms as if they were 100 ms."""
PALETTE_SAMPLES = 8
"""Frames the preview's one palette is drawn from (`_shared_palette`)."""
PREVIEW_MAX_SECONDS = 60.0
"""How much of the episode a preview shows: a whole MuJoCo episode (HalfCheetah's 1000 steps are
50 s), the first minute of an Atari game (up to 30 min at 15 steps/s), which bounds its size (a few MB)."""


@dataclass(frozen=True)
class Preview:
    """An animated GIF and what it shows."""

    gif: bytes
    width: int
    height: int
    frames: int
    """The video's frames it shows (the GIF merges a frame that repeats the one before into it)."""
    seconds: float
    """The play time the frames cover, as the video plays it."""


def animated_preview(
    path: Path,
    *,
    width: int = PREVIEW_WIDTH,
    max_fps: float = PREVIEW_MAX_FPS,
    max_seconds: float = PREVIEW_MAX_SECONDS,
) -> Preview:
    """The first `max_seconds` of the video at `path`, `width` pixels across, at most `max_fps` frames a
    second, each frame shown for as long as the frames it stands for: it plays in real time (GIF
    delays are hundredths of a second, so each delay rounds the time elapsed since the start, which
    keeps the rounding from adding up)."""

    capture = cv2.VideoCapture(str(path))
    try:
        fps = float(capture.get(cv2.CAP_PROP_FPS))
        if not capture.isOpened() or not fps > 0:
            raise OfflineRLError(f"{path}: OpenCV cannot read this video back for its preview")
        every = max(1, math.ceil(fps / max_fps - 1e-9))
        last = math.floor(max_seconds * fps + 1e-9)  # the index of the last frame shown
        frames: list[np.ndarray] = []
        index = 0
        while index <= last:
            ok, frame = capture.read()
            if not ok:
                break
            if index % every == 0:
                frames.append(_shrunk(frame, width))
            index += 1
    finally:
        capture.release()
    if not frames:
        raise OfflineRLError(f"{path}: the video holds no frame to preview")
    palette = _shared_palette(frames)
    images = [Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE) for frame in frames]
    shown = min(index, last + 1)  # the frames read, of which every `every`-th was kept
    starts = [k * every / fps for k in range(len(images))] + [shown / fps]
    centiseconds = [round(100 * start) for start in starts]
    delays_ms = [10 * max(2, later - earlier) for earlier, later in itertools.pairwise(centiseconds)]
    encoded = io.BytesIO()
    images[0].save(encoded, format="GIF", save_all=True, append_images=images[1:], duration=delays_ms, loop=0)
    height, shrunk_width = images[0].height, images[0].width
    return Preview(encoded.getvalue(), shrunk_width, height, len(images), shown / fps)


def _shared_palette(frames: list[np.ndarray]) -> Any:
    """One palette of 256 colours for every frame, drawn from up to `PALETTE_SAMPLES` frames spread
    over the episode. A palette per frame (Pillow's default) makes a MuJoCo preview 10× larger: each
    frame's colours then differ a little, so the GIF's compression finds no runs (HalfCheetah's 1000
    frames: 10.7 MB, against 0.94 MB shared)."""

    spread = frames[:: max(1, len(frames) // PALETTE_SAMPLES)][:PALETTE_SAMPLES]
    return Image.fromarray(np.concatenate(spread, axis=0)).quantize(colors=256)


def _shrunk(frame_bgr: np.ndarray, width: int) -> np.ndarray:
    """The RGB frame `width` pixels across (never widened), its aspect kept."""

    rgb = cv2.cvtColor(frame_bgr, cv2.COLOR_BGR2RGB)
    height_now, width_now = rgb.shape[:2]
    if width_now <= width:
        return rgb
    height = max(1, round(height_now * width / width_now))
    return cv2.resize(rgb, (width, height), interpolation=cv2.INTER_AREA)
