"""The evaluation collector: every evaluation plays its episodes from the same seeded starts.

Why: Tianshou's collector seeds its envs once, so each evaluation starts where the previous one
left the envs' generators. Then the score of a checkpoint depends on how many evaluations came
before it, a resumed run (whose envs are seeded afresh) evaluates other episodes than the run it
continues, and `--watch` of a saved policy does not reproduce the score the run printed for it.
Reseeding env i with `seed + i` before each evaluation is the D4RL protocol of CORL, IQL and
TD3+BC (`eval_env.seed(seed)` at every evaluation): the same weights always get the same score,
evaluations of one run differ only by the weights, and a resumed run scores exactly as the
uninterrupted one.

It also plays the policy's evaluation exploration, which Tianshou applies only in a collector made
with `exploration_noise=True`: ε-greedy at `--eps-test` for the discrete policies (ε = 0.001 is the
DQN-Replay / CQL evaluation protocol; Tianshou's Atari examples evaluate this way too), nothing for
SAC, whose evaluation takes the mean action. Tianshou draws ε-greedy's coins from numpy's global
generator; an evaluation seeds it afresh and hands it back to training as it found it, so the
score is a function of the weights and `--seed` alone (`--watch` of `policy.pth` prints the score
the run printed for it), and how long the evaluation episodes ran never shifts training's draws.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tianshou.data import Collector


class EvaluationCollector(Collector):
    """A Tianshou `Collector` that plays the policy's evaluation exploration and reseeds its envs,
    env i with `seed + i`, at every reset (the trainer resets it before each evaluation; `--watch`
    once), and numpy's global generator with `seed` for each collection."""

    def __init__(self, policy: Any, envs: Any, seed: int) -> None:
        self.seeds = [seed + index for index in range(envs.env_num)]
        super().__init__(policy, envs, exploration_noise=True)

    def reset_env(self, gym_reset_kwargs: dict[str, Any] | None = None) -> Any:
        self.env.seed(self.seeds)
        return super().reset_env(gym_reset_kwargs=gym_reset_kwargs)

    def collect(self, *args: Any, **kwargs: Any) -> Any:
        training_state = np.random.get_state()
        np.random.seed(self.seeds[0] % 2**32)  # numpy's legacy seeding takes 32 bits; --seed + 10 000 may not fit
        try:
            return super().collect(*args, **kwargs)
        finally:
            np.random.set_state(training_state)
