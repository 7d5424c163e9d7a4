"""The online trainer's replay buffer answers `hasnull()` as Tianshou's full scan does, from the
batches as they were added."""

from __future__ import annotations

import numpy as np
from tianshou.data import Batch, VectorReplayBuffer

from offline_rl.data.online_replay import NullCheckedVectorReplayBuffer


def step_batch(rng: np.random.Generator, envs: int, *, nan_reward: bool = False) -> Batch:
    rew = rng.normal(size=envs)
    if nan_reward:
        rew[envs - 1] = np.nan
    return Batch(
        obs=rng.normal(size=(envs, 3)),
        act=rng.integers(0, 2, size=envs),
        rew=rew,
        terminated=np.zeros(envs, dtype=bool),
        truncated=np.zeros(envs, dtype=bool),
        obs_next=rng.normal(size=(envs, 3)),
        info=Batch(),
    )


def test_hasnull_matches_the_full_scan_as_batches_arrive_and_after_reset() -> None:
    rng = np.random.default_rng(0)
    ours, theirs = NullCheckedVectorReplayBuffer(40, 4), VectorReplayBuffer(40, 4)
    answers = []
    for step in range(12):
        batch = step_batch(rng, 4, nan_reward=step == 7)
        ours.add(batch)
        theirs.add(batch)
        answers.append((ours.hasnull(), theirs.hasnull()))
    assert [a for a, _ in answers] == [b for _, b in answers]
    assert answers[6] == (False, False) and answers[7] == (True, True)
    ours.reset()
    assert not ours.hasnull()
    ours.add(step_batch(rng, 4))
    assert not ours.hasnull()
