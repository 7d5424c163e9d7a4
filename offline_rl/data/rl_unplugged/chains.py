"""Put shuffled transitions back in episode order, so n-step returns can walk forward through them.

RL Unplugged shuffles records inside a shard, but a transition's successor is recognisable: same
`episode_id`, and its `o_t` is this transition's `o_tp1` (the same 4 pool frames). Transitions are
reordered so that every recognised successor follows its predecessor directly; where the successor
is absent from the shard, or cannot be told apart (two transitions of one episode with identical
stacks), the run of transitions ends there and is marked `truncated` (the data stops; it is not a
terminal, so the value of its last `o_tp1` is still bootstrapped). Tianshou's `buffer.next` then
never crosses from one episode into another, and never links transitions on a guess.
"""

from __future__ import annotations

import numpy as np

_AMBIGUOUS = -2


def _key_table(episode_id: np.ndarray, stacks: np.ndarray) -> dict[tuple[int, ...], int]:
    table: dict[tuple[int, ...], int] = {}
    for index, key in enumerate(map(tuple, np.column_stack([episode_id.astype(np.int64), stacks]).tolist())):
        table[key] = _AMBIGUOUS if key in table else index
    return table


def successors(
    episode_id: np.ndarray, obs_frames: np.ndarray, obs_next_frames: np.ndarray, terminated: np.ndarray
) -> np.ndarray:
    """For each transition, the index of the one that follows it in its episode, or -1."""
    size = len(episode_id)
    by_obs = _key_table(episode_id, obs_frames)
    next_keys = map(tuple, np.column_stack([episode_id.astype(np.int64), obs_next_frames]).tolist())
    follower = np.full(size, -1, dtype=np.int64)
    for index, key in enumerate(next_keys):
        candidate = by_obs.get(key, -1)
        if candidate >= 0 and candidate != index and not terminated[index]:
            follower[index] = candidate
    # A transition claimed by two predecessors (converging stacks) is linked to neither.
    linked = follower[follower >= 0]
    claims = np.bincount(linked, minlength=size)
    follower[(follower >= 0) & (claims[np.maximum(follower, 0)] > 1)] = -1
    return follower


def episode_order(follower: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A permutation listing every chain of `follower` links contiguously, and where each chain ends.

    Returns (order, ends): `order[k]` is the original index stored at position k; `ends[k]` is True
    where position k's transition has no follower in the new order (a cycle, possible only with
    repeated stacks, is cut at an arbitrary point).
    """
    size = len(follower)
    has_predecessor = np.zeros(size, dtype=bool)
    has_predecessor[follower[follower >= 0]] = True
    order = np.empty(size, dtype=np.int64)
    ends = np.zeros(size, dtype=bool)
    visited = np.zeros(size, dtype=bool)
    position = 0
    starts = list(np.flatnonzero(~has_predecessor)) + list(range(size))  # heads first, then what cycles
    links = follower.tolist()
    for start in starts:
        if visited[start]:
            continue
        current = int(start)
        while current >= 0 and not visited[current]:
            visited[current] = True
            order[position] = current
            position += 1
            current = links[current]
        ends[position - 1] = True
    return order, ends
