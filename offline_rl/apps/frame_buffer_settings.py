"""Settings that every converter writing frame-pool buffers (RL Unplugged, DQN Replay) declares alike."""

from __future__ import annotations

from typing import Any

from offline_rl.settings import setting

FRAME_COMPRESSIONS = (None, "gzip", "lzf")


def frame_compression() -> Any:
    """`--compression`: HDF5's filter for the buffer's frames. Off by default: compressed frames are
    inflated again at every training start that loads them, uncompressed ones only read."""
    return setting(None, "compress the buffer's frames: gzip or lzf (none: uncompressed)", choices=FRAME_COMPRESSIONS)
