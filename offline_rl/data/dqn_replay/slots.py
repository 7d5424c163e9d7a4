"""Which slots of a Dopamine replay hold transitions, in the order they were played.

A Dopamine replay is a circular array of single frames. An episode is stored as its steps, each
slot holding the frame seen, the action taken, the (clipped) reward and whether the game ended
there; before each episode (and at the very start) `stack - 1` zero slots are added, so the first
stacks of an episode hold black frames. Once full, slot `add_count % capacity` (the cursor) is the
oldest. A slot's state is the stack of its frame and the `stack - 1` before it; its next state is
the stack one slot on.

Dopamine samples slot i (update horizon 1) only when its stack and next frame are real data: not
within `stack - 1` slots after the cursor nor the slot before it (`invalid_range`), and with no
episode end among the `stack - 1` slots before it (which leaves out the padding). The converter
keeps exactly those transitions, so a buffer holds what the DQN Replay agents and the CQL paper's
agents trained on, ordered oldest first so that episodes run forward.
"""

from __future__ import annotations

import numpy as np

STACK = 4
"""Frames per state in every DQN Replay run (Dopamine's `stack_size`)."""


def sampled_slots(terminal: np.ndarray, add_count: int, capacity: int, window: int, stack: int = STACK) -> np.ndarray:
    """The slots among the first `window` (of `capacity`) that Dopamine samples, oldest first.

    `terminal` holds at least the first `window` slots' flags (all of them when `window` is the
    whole replay, whose stacks may wrap around its end). A window shorter than the replay keeps the
    transitions whose stack and next frame lie inside it.
    """
    slots = np.arange(window, dtype=np.int64)
    full = add_count >= capacity
    cursor = add_count % capacity
    if full:
        age = (slots - cursor) % capacity
        keep = (age >= stack) & (age <= capacity - 2)
    else:
        age = slots
        keep = (slots >= stack - 1) & (slots < cursor - 1)
    if window < capacity:
        keep &= (slots >= stack - 1) & (slots + 1 < window)
    ended = np.asarray(terminal[:window] if window < capacity else terminal, dtype=bool)
    for back in range(1, stack):
        keep &= ~ended[(slots - back) % len(ended)]
    kept = slots[keep]
    return kept[np.argsort(age[keep], kind="stable")]


def frame_stacks(slots: np.ndarray, capacity: int, stack: int = STACK) -> tuple[np.ndarray, np.ndarray]:
    """The frame slots of each transition's state and next state (oldest frame first), as the int32
    pool indices a buffer stores (8 bytes a transition less than int64 on a 1M checkpoint's 4M)."""
    offsets = np.arange(1 - stack, 1, dtype=np.int32)
    obs = slots.astype(np.int32)[:, None] + offsets
    obs %= capacity
    return obs, (obs + 1) % capacity


def episode_cuts(slots: np.ndarray, terminal: np.ndarray, capacity: int) -> np.ndarray:
    """Where a kept transition is not followed by the next slot's although its episode goes on:
    the newest data, where the replay stopped (truncated, so its value is still bootstrapped)."""
    followed = np.r_[slots[1:] == (slots[:-1] + 1) % capacity, False]
    return ~followed & ~np.asarray(terminal[slots], dtype=bool)
