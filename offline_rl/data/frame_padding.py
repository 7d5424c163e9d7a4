"""How a frame-stacked dataset fills the stack at an episode start, read from the data itself.

A policy learns what "the first frames of a game" look like from its data, so its evaluation env
must pad the same way. Dopamine's agents, and so DQN Replay and RL Unplugged, pad with black
frames; gymnasium's `FrameStackObservation` (and `atari_qrdqn.py`'s collections) repeat the first
frame. Rather than trust a label, the stacks at episode starts are inspected.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

PADDINGS = ("reset", "zero")
DOPAMINE_PADDING = "zero"
"""Dopamine's replay pads each episode's first stack with black frames: the converters of DQN Replay
and RL Unplugged record it in the files they write (`frame_padding`), for the buffers whose own
starts cannot tell (a small part of a checkpoint may hold no episode start)."""
_STARTS_INSPECTED = 64


def stack_padding(stack: np.ndarray) -> str | None:
    """ "zero" or "reset" for an episode-start stack (oldest frame first), None when it cannot tell
    (the first frame is itself black, or the frames all differ: not an episode start)."""
    stack = np.asarray(stack)
    leading, first = stack[:-1], stack[-1]
    if len(leading) == 0:
        return None
    black_first = not first.any()
    if not leading.any() and not black_first:
        return "zero"
    if bool(np.all(leading == first)) and not black_first:
        return "reset"
    return None


def frame_padding_of(buffer: Any) -> str | None:
    """The padding of a frame-stacked Tianshou buffer's episode starts, by majority over up to 64
    starts that tell; None for a buffer with no telling start (or no frame stacks)."""
    order = np.asarray(buffer.sample_indices(0))
    if len(order) == 0:
        return None
    done = np.asarray(buffer.done[order], dtype=bool)
    starts = order[np.r_[True, done[:-1]]][:_STARTS_INSPECTED]
    observations = np.asarray(buffer[starts].obs)
    if observations.ndim < 4:  # (batch, stack, H, W): vector observations have no stack
        return None
    votes = Counter(padding for padding in map(stack_padding, observations) if padding is not None)
    return votes.most_common(1)[0][0] if votes else None
