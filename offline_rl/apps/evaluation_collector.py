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
nobody reads (for Atari, frame stacks: 5.3 GiB held after ten games of Pong; BENCHMARKS.md,
`benchmarks/evaluation_time.py`). The loop keeps Tianshou's
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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tianshou.data import Batch, Collector, CollectStats, to_numpy
from tianshou.data.collector import get_stddev_from_dist


class EvaluationCollector(Collector):
    """A Tianshou `Collector` that plays the policy's evaluation exploration and reseeds its envs,
    env i with `seed + i`, at every reset (the trainer resets it before each evaluation; `--watch`
    once), and numpy's global generator with `seed` for each collection."""

    def __init__(self, policy: Any, envs: Any, seed: int, *, own_loop: bool = True, min_steps: int = 0) -> None:
        """`own_loop=False` plays every collection with Tianshou's loop (tests and benchmarks compare);
        `min_steps` > 0 makes every episode collection a budget of that many agent steps (module docstring)."""
        if min_steps and not own_loop:
            raise ValueError("a budget of steps is played by the own loop only")
        self.seeds = [seed + index for index in range(envs.env_num)]
        self.own_loop = own_loop
        self.min_steps = min_steps
        self.partial_episodes = False  # a step collection may have left episodes half-counted in Tianshou's buffer
        self.reset_owed: dict[str, Any] | None = None  # the reset an episode collection ends with, until needed
        super().__init__(policy, envs, exploration_noise=True)

    def reset_env(self, gym_reset_kwargs: dict[str, Any] | None = None) -> Any:
        self.reset_owed = None
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
            stats = self._play_episodes(n_episode, gym_reset_kwargs or {}, min_steps=self.min_steps)
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
        self, n_episode: int, gym_reset_kwargs: dict[str, Any], *, min_steps: int = 0
    ) -> CollectStats | None:
        """Tianshou's `Collector._collect` for `n_episode`, less the buffer and the info `Batch`es; with
        `min_steps` > 0, whole episodes on every env until that many steps are taken (`n_episode` unused).

        Returns None, having stepped no env, for a policy that returns a hidden state (recurrent
        policies: Tianshou's loop carries and resets their states)."""
        if self._pre_collect_obs_RO is None:
            raise ValueError("reset the collector (reset or reset_env) before collecting")
        playing = self.env_num if min_steps else min(self.env_num, n_episode)
        ready = np.arange(playing)  # the envs that play, by their index in the vector env
        meter = EvaluationBar(min_steps, "step") if min_steps else EvaluationBar(n_episode, "episode")
        observations = self._pre_collect_obs_RO[ready]
        running_return: list[Any] = [0.0] * self.env_num  # accumulated as Tianshou's buffer does, in the rewards' type
        returns: list[Any] = []
        lengths: list[int] = []
        # each episode's first observation and its rewards, in the order of `returns` (`EpisodeRecord`)
        keeps_starts = isinstance(observations, np.ndarray)  # arrays; dict observations (a Batch) are not kept
        start_of = {int(env_id): np.array(observations[local]) for local, env_id in enumerate(ready) if keeps_starts}
        rewards_of: dict[int, list[float]] = {int(env_id): [] for env_id in ready}
        starts: list[np.ndarray] = []
        episode_rewards: list[np.ndarray] = []
        action_stds: list[np.ndarray] = []
        steps = episodes = 0
        while True:
            batch = Batch(obs=observations, info=Batch())  # the policies evaluated here read no env info
            with torch.no_grad():
                result = self.policy(batch, None)
            if result.get("state") is not None:
                if steps:
                    raise RuntimeError("the policy returned a hidden state after its first step without one")
                return None
            actions = to_numpy(result.act)
            if self.exploration_noise:
                actions = self.policy.add_exploration_noise(actions, batch)
            next_observations, rewards, terminated, truncated, _ = self.env.step(self.policy.map_action(actions), ready)
            done = np.logical_or(terminated, truncated)
            distribution = result.get("dist")
            if distribution is not None:
                action_stds.append(np.atleast_2d(to_numpy(get_stddev_from_dist(distribution))))
            steps += len(ready)
            if min_steps:
                meter.update(len(ready))
            for local, env_id in enumerate(ready):
                running_return[env_id] += rewards[local]
                rewards_of[int(env_id)].append(float(rewards[local]))  # its length is the episode's
            observations = np.array(next_observations, copy=True)
            finished = np.flatnonzero(done)
            if len(finished):
                episodes += len(finished)
                if not min_steps:
                    meter.update(len(finished))
                for position in finished:
                    ended = int(ready[position])
                    returns.append(running_return[ended])
                    lengths.append(len(rewards_of[ended]))
                    running_return[ended] = 0.0
                    if keeps_starts:
                        starts.append(start_of[ended])
                    episode_rewards.append(np.asarray(rewards_of[ended]))
                    rewards_of[ended] = []
                if min_steps and steps >= min_steps:  # the budget is spent: envs that finish stop
                    keep = np.ones(len(ready), dtype=bool)
                    keep[finished] = False
                    ready, observations = ready[keep], observations[keep]
                else:
                    reset_observations, _ = self.env.reset(env_id=ready[finished], **gym_reset_kwargs)
                    observations[finished] = reset_observations
                    for position, env_id in enumerate(ready[finished]):
                        if keeps_starts:
                            start_of[int(env_id)] = np.array(observations[finished[position]])
                    # Tianshou stops envs that finished once enough episodes are under way, first ones first
                    surplus = 0 if min_steps else len(ready) - (n_episode - episodes)
                    if surplus > 0:
                        keep = np.ones(len(ready), dtype=bool)
                        keep[finished[:surplus]] = False
                        ready, observations = ready[keep], observations[keep]
            if (episodes >= n_episode and not min_steps) or len(ready) == 0:
                break
        meter.close()
        self.collect_step += steps
        self.collect_episode += episodes
        # Tianshou's loop resets (here: reseeds) the envs now; the trainer resets them again before the next
        # evaluation, and a reseeded Atari env reloads its game (~0.1 s each), so the reset waits until needed
        self.reset_owed = gym_reset_kwargs
        stats = CollectStats(n_collected_episodes=episodes, n_collected_steps=steps)
        stats.returns = np.array(returns, dtype=float)
        stats.lens = np.array(lengths, dtype=int)
        if action_stds:
            stats.pred_dist_std_array = np.concatenate(action_stds)
        if keeps_starts:
            stats.offline_rl_episodes = EpisodeRecord(np.stack(starts), episode_rewards)  # type: ignore[attr-defined]
        return stats


class EvaluationBar:
    """A bar counting an evaluation's episodes, or its steps against a budget of them: an Atari
    evaluation takes minutes (125 000 steps, or ten games of a good agent). It shows only once an
    evaluation has run a few seconds, so a short one prints nothing. The episodes under way when a
    budget is spent play on past it, and the bar's total follows them rather than turning into a
    bare count."""

    SHOW_AFTER_S = 3.0

    def __init__(self, total: int, unit: str) -> None:
        from offline_rl.progress import progress_bar

        self.bar = progress_bar(total=total, desc="evaluation", unit=unit, leave=False, delay=self.SHOW_AFTER_S)

    def update(self, count: int) -> None:
        self.bar.total = max(self.bar.total, self.bar.n + count)
        self.bar.update(count)

    def close(self) -> None:
        self.bar.close()


@dataclass(frozen=True)
class EpisodeRecord:
    """What the evaluation's own loop keeps of its episodes beside Tianshou's statistics, in the order
    of their returns: each one's first observation and its rewards, step by step. An algorithm compares
    its value estimate at the start states with the discounted returns (`CQLSAC.start_values`); a
    collection played by Tianshou's loop has none."""

    start_obs: np.ndarray
    rewards: list[np.ndarray]


def episode_record(stats: Any) -> EpisodeRecord | None:
    """The `EpisodeRecord` of a collection, None where Tianshou's loop played it."""
    return getattr(stats, "offline_rl_episodes", None)
