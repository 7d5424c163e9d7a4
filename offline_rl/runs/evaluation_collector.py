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

Its episodes are played by a loop of its own (`_play_episodes`), not Tianshou's: an evaluation only
needs the episodes' returns and lengths (and, for CQL-SAC's value check, each one's first observation
and rewards: `EpisodeRecord`), and Tianshou's loop spends about half of a HalfCheetah
evaluation building `Batch`es of the envs' info dicts and adding every step to a replay buffer that
nobody reads (for Atari, gigabytes of frame stacks; `benchmarks/evaluation_time.py` compares both).
The loop keeps Tianshou's
semantics step for step (which envs play, when surplus envs stop, the order of the episodes, the
policy's exploration draws, the statistics' types, the seeded reset that ends a collection, made
when the next collection needs it unless a reset comes first), so scores are the same to the last
digit (tests compare the two); whatever it does not cover (`n_step`, random actions, rendering, hooks,
recurrent policies) goes to Tianshou's loop.

With `min_steps` (`--test-steps`), an evaluation is a budget of agent steps instead of a count of
episodes: the Atari protocol of Dopamine, DQN Replay and the CQL paper, whose runner plays whole games
until 125 000 agent steps are taken and averages the games played, so a game of long episodes is
scored on fewer of them. On one env that is their loop exactly; on several, every env plays whole
episodes and starts another only while fewer than `min_steps` steps have been taken in all. Only the
own loop plays step budgets (the trainer's `n_episode` is then ignored).

With `cut_at_budget` (`--test-steps-cut`), the episode under way when the budget is spent is cut there
and left out, unless no episode has ended (then it ran the whole budget, and is scored as it stands):
rlkit's `MdpPathCollector` with `discard_incomplete_paths`, the evaluation of the CQL authors' D4RL code
(1000 steps on one env each epoch, episodes of at most 1000 steps). A policy whose episodes end early
is scored on those that end within the budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tianshou.data import Collector, CollectStats

from offline_rl.runs.episodes import EpisodeRecord, EvaluationQuota, PlayingGroup, episode_record, play_episodes

EVALUATION_SEED_OFFSET = 10_000
"""A run's evaluation envs are seeded from its --seed plus this: apart from the training envs an online run
seeds from --seed."""


class EvaluationCollector(Collector):
    """A Tianshou `Collector` that plays the policy's evaluation exploration and reseeds its envs,
    env i with `seed + i`, at every reset (the trainer resets it before each evaluation; `--watch`
    once), and numpy's global generator with `seed` for each collection."""

    def __init__(
        self,
        policy: Any,
        envs: Any,
        seed: int,
        *,
        own_loop: bool = True,
        min_steps: int = 0,
        cut_at_budget: bool = False,
    ) -> None:
        """`own_loop=False` plays every collection with Tianshou's loop (tests and benchmarks compare);
        `min_steps` > 0 makes every episode collection a budget of that many agent steps, whose episodes
        under way finish, or with `cut_at_budget` are cut and left out (module docstring)."""
        if min_steps and not own_loop:
            raise ValueError("a budget of steps is played by the own loop only")
        if cut_at_budget and not min_steps:
            raise ValueError("episodes are cut at a budget of steps: give min_steps")
        self.cut_at_budget = cut_at_budget
        self.seeds = [seed + index for index in range(envs.env_num)]
        self.own_loop = own_loop
        self.min_steps = min_steps
        self.partial_episodes = False  # a step collection may have left episodes half-counted in Tianshou's buffer
        self.reset_owed: dict[str, Any] | None = None  # the reset an episode collection ends with, until needed
        self.before_reset: Callable[[], None] | None = None
        """Called as the envs are about to be reset: before each evaluation, which begins with a reset
        (`--video-interval` chooses there whether the evaluation is filmed, and its envs: `play_filmed`)."""
        self.own_envs = envs
        self.filming_envs: Any | None = None
        """Envs of the same task in this process, made to render, where the run's other evaluations play
        on envs in processes of their own (`--video-interval` where the cores allow): `play_filmed`."""
        super().__init__(policy, envs, exploration_noise=True)

    def play_filmed(self, filmed: bool) -> None:
        """Play from the coming reset on the envs that can be filmed, or on the collector's own (which
        are the same unless `filming_envs` is set). The reset seeds env i with `seed + i` on either, so
        an evaluation plays the same episodes filmed or not."""
        if self.filming_envs is not None:
            self.env = self.filming_envs if filmed else self.own_envs

    def close(self) -> None:
        """Close the collector, its envs and its envs for filming."""
        super().close()
        for envs in (self.own_envs, self.filming_envs):
            if envs is not None and envs is not self.env:
                envs.close()

    def reset_env(self, gym_reset_kwargs: dict[str, Any] | None = None) -> Any:
        self.reset_owed = None
        if self.before_reset is not None:
            self.before_reset()
        self.env.seed(self.seeds)
        return super().reset_env(gym_reset_kwargs=gym_reset_kwargs)

    def collect(self, *args: Any, **kwargs: Any) -> Any:
        training_state = np.random.get_state()
        np.random.seed(self.seeds[0] % 2**32)  # numpy's legacy seeding takes 32 bits; --seed + 10 000 may not fit
        try:
            return super().collect(*args, **kwargs)
        finally:
            np.random.set_state(training_state)

    def _collect(
        self,
        n_step: int | None = None,
        n_episode: int | None = None,
        random: bool = False,
        render: float | None = None,
        gym_reset_kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if self.reset_owed is not None:
            self.reset_env(self.reset_owed)
        if n_episode is not None and self._own_loop_covers(random, render):
            stats = self._play_episodes(
                n_episode, gym_reset_kwargs or {}, min_steps=self.min_steps, cut_at_budget=self.cut_at_budget
            )
            if stats is not None:
                return stats
        if n_episode is not None and self.min_steps:
            raise ValueError("a budget of steps cannot be played here (rendering, hooks or a recurrent policy)")
        self.partial_episodes |= n_step is not None
        return super()._collect(
            n_step=n_step, n_episode=n_episode, random=random, render=render, gym_reset_kwargs=gym_reset_kwargs
        )

    def _own_loop_covers(self, random: bool, render: float | None) -> bool:
        """Whether an episode collection can be played by `_play_episodes`."""
        return (
            self.own_loop
            and not random
            and not render
            and self._on_step_hook is None
            and self._on_episode_done_hook is None
            and self._pre_collect_hidden_state_RH is None
            and self.collect_stats_class is CollectStats
            and not self.partial_episodes  # Tianshou's loop adds their steps so far to their returns
            and not self.env.is_async
        )

    def reset_buffer(self, keep_statistics: bool = False) -> None:
        super().reset_buffer(keep_statistics=keep_statistics)
        self.partial_episodes = False

    def _play_episodes(
        self, n_episode: int, gym_reset_kwargs: dict[str, Any], *, min_steps: int = 0, cut_at_budget: bool = False
    ) -> CollectStats | None:
        """Tianshou's `Collector._collect` for `n_episode`, less the buffer and the info `Batch`es; with
        `min_steps` > 0, whole episodes on every env until that many steps are taken (`n_episode` unused),
        or with `cut_at_budget` episodes until then, the ones under way left out (`offline_rl.runs.episodes`).

        Returns None, having stepped no env, for a policy that returns a hidden state (recurrent
        policies: Tianshou's loop carries and resets their states)."""
        if self._pre_collect_obs_RO is None:
            raise ValueError("reset the collector (reset or reset_env) before collecting")
        groups = self._playing_groups(n_episode, min_steps, cut_at_budget)
        try:
            first = self._pre_collect_obs_RO
            played = play_episodes(self.env, groups, first, gym_reset_kwargs, self.exploration_noise)
        finally:
            for group in groups:
                group.quota.close()
        if played is None:
            return None
        self.collect_step += sum(group.quota.steps for group in groups)
        self.collect_episode += sum(group.quota.episodes for group in groups)
        # Tianshou's loop resets (here: reseeds) the envs now; the trainer resets them again before the next
        # evaluation, and a reseeded Atari env reloads its game (~0.1 s each), so the reset waits until needed
        self.reset_owed = gym_reset_kwargs
        return self._statistics(played)

    def _playing_groups(self, n_episode: int, min_steps: int, cut_at_budget: bool) -> list[PlayingGroup]:
        """Who plays on which envs: the policy on all of them."""
        quota = EvaluationQuota(n_episode, min_steps, cut=cut_at_budget)
        return [PlayingGroup(self.policy, np.arange(self.env_num), quota)]

    def _statistics(self, played: list[CollectStats]) -> CollectStats:
        """The collection's statistics from its groups'."""
        return played[0]


__all__ = ["EVALUATION_SEED_OFFSET", "EpisodeRecord", "EvaluationCollector", "episode_record"]
