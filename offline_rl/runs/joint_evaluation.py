"""A seed batch's evaluations played together (`--num-seeds`): S policies on S × --test-num envs of one
vector env, every step of all of them one call of it, so envs in processes of their own step in
parallel across the seeds, where S evaluations one after another would each use --test-num of them.

Seed i plays on its own --test-num envs, reseeded `seed_i + 10 000 + j` before every evaluation, with
its ε-greedy coins from a generator seeded as its single run's evaluation seeds numpy's: each seed's
evaluation is the one its single run makes of the same weights, episode for episode
(`tests/test_joint_evaluation.py`). Each seed's trainer holds a `Seat`: the first seat to ask for an
evaluation plays the whole batch's, and every seat takes its own seed's statistics.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
from tianshou.data import CollectStats
from tianshou.utils.torch_utils import torch_train_mode

from offline_rl.runs.episodes import EvaluationQuota, PlayingGroup
from offline_rl.runs.evaluation_collector import EVALUATION_SEED_OFFSET, EvaluationCollector


class JointEvaluation(EvaluationCollector):
    """The evaluation of every seed of a batch (see the module docstring): `policies[i]` plays on envs
    i·T … i·T + T − 1 of `envs` (T = `test_num`), reseeded from `seeds[i]`."""

    def __init__(
        self,
        policies: list[Any],
        envs: Any,
        seeds: list[int],
        test_num: int,
        *,
        min_steps: int = 0,
        cut_at_budget: bool = False,
    ) -> None:
        super().__init__(policies[0], envs, 0, min_steps=min_steps, cut_at_budget=cut_at_budget)
        self.seeds = [seed + EVALUATION_SEED_OFFSET + env for seed in seeds for env in range(test_num)]
        self.run_seeds = list(seeds)
        self.test_num = test_num
        self.live = dict(enumerate(policies))
        """The seeds still evaluated, by their index in the batch (a diverged seed leaves)."""
        self.pending: dict[int, CollectStats] = {}

    def seat(self, index: int) -> Seat:
        return Seat(self, index)

    def drop(self, index: int) -> None:
        """Seed `index` is evaluated no more (it left the batch)."""
        self.live.pop(index, None)
        self.pending.pop(index, None)

    def collect(self, n_episode: int | None = None, **kwargs: Any) -> Any:
        """`n_episode` episodes for each seed: Tianshou's collector is asked for all of them together.
        Every seed's policy evaluates in evaluation mode (Tianshou's collect sets the first one's)."""
        total = None if n_episode is None else n_episode * len(self.run_seeds)  # one per env, as a single run's
        with contextlib.ExitStack() as modes:
            for policy in self.live.values():
                modes.enter_context(torch_train_mode(policy, enabled=False))
            stats = super().collect(n_episode=total, **kwargs)
        for own in self.pending.values():  # as Tianshou's collect completes its statistics
            own.set_collect_time(float(stats.collect_time))  # every seed's evaluation took the joint one's time
            own.refresh_all_sequence_stats()
        return stats

    def _playing_groups(self, n_episode: int, min_steps: int, cut_at_budget: bool) -> list[PlayingGroup]:
        """Each live seed's policy on its own envs, its exploration coins from a generator seeded as its
        single run's evaluation seeds numpy's."""
        n_episode //= len(self.run_seeds)  # each seed's
        return [
            PlayingGroup(
                policy,
                np.arange(index * self.test_num, (index + 1) * self.test_num),
                EvaluationQuota(n_episode, min_steps, cut=cut_at_budget, bar=False),
                random_state=np.random.RandomState(
                    (self.run_seeds[index] + EVALUATION_SEED_OFFSET) % 2**32
                ).get_state(),
            )
            for index, policy in self.live.items()
        ]

    def _statistics(self, played: list[CollectStats]) -> CollectStats:
        """Each seed's statistics kept for its seat; the whole evaluation's returned."""
        self.pending = dict(zip(self.live, played, strict=True))
        every = CollectStats(
            n_collected_episodes=sum(own.n_collected_episodes for own in played),
            n_collected_steps=sum(own.n_collected_steps for own in played),
        )
        every.returns = np.concatenate([own.returns for own in played])
        every.lens = np.concatenate([own.lens for own in played])
        return every

    def _play_episodes(self, *args: Any, **kwargs: Any) -> CollectStats | None:
        stats = super()._play_episodes(*args, **kwargs)
        if stats is None:  # Tianshou's loop would play member 0's policy on every env
            raise ValueError("a seed batch evaluates policies without a hidden state")
        return stats


class Seat:
    """Seed `index`'s evaluation collector, as its trainer uses one: `collect` gives its seed's part of
    the batch's evaluation, played when the first seat asks (the others' trainers evaluate the same
    weights right after); `reset` and `close` are the joint evaluation's own business."""

    def __init__(self, joint: JointEvaluation, index: int) -> None:
        self.joint, self.index = joint, index
        self.collect_time = 0.0  # its evaluations' totals, which Tianshou's trainer reports
        self.collect_step = self.collect_episode = 0

    def reset(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: the joint evaluation resets and reseeds every env before it plays."""

    def collect(self, n_episode: int | None = None, **kwargs: Any) -> CollectStats:
        if self.index not in self.joint.pending:
            self.joint.reset(reset_stats=False)
            self.joint.collect(n_episode=n_episode, **kwargs)
        stats = self.joint.pending.pop(self.index)
        self.collect_time += float(stats.collect_time)
        self.collect_step += int(stats.n_collected_steps)
        self.collect_episode += int(stats.n_collected_episodes)
        return stats

    def close(self) -> None:
        """Nothing: the joint evaluation closes its envs."""
