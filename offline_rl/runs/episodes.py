"""How an evaluation plays its episodes (`EvaluationCollector`'s own loop, and a seed batch's joint
evaluation): one or several groups of envs in one vector env, each group a policy playing by Tianshou's
rules for `n_episode` episodes (or a budget of steps), every step of all groups taken by one call of
the vector env, so that envs in processes of their own step in parallel across the groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tianshou.data import Batch, CollectStats, to_numpy
from tianshou.data.collector import get_stddev_from_dist

from offline_rl.core.progress import progress_bar


@dataclass
class PlayingGroup:
    """One policy's envs, `env_ids` of a vector env (all of them for a single run's evaluation), and
    how much they play (`quota`). `random_state`: numpy's global generator for this group's exploration
    draws (ε-greedy's coins), swapped in around its actions, so a group draws what it would alone."""

    policy: Any
    env_ids: np.ndarray
    quota: EvaluationQuota
    random_state: Any = None
    ready: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    observations: Any = None
    ledger: EpisodeLedger | None = None
    action_stds: list[np.ndarray] = field(default_factory=list)
    stopped: bool = False

    def playing(self) -> bool:
        return not self.stopped and len(self.ready) > 0 and not self.quota.met()


def play_episodes(
    env: Any, groups: list[PlayingGroup], first_observations: Any, gym_reset_kwargs: dict[str, Any], noise: bool
) -> list[CollectStats] | None:
    """Play every group's episodes from `first_observations` (the vector env's, just reset), each group
    exactly as it would alone (which envs play, when surplus envs stop, the order of its episodes, its
    exploration draws); the steps of all groups go to the vector env together. Returns each group's
    statistics, or None, having stepped no env, for a policy that returns a hidden state."""
    for group in groups:
        group.ready = group.env_ids[: group.quota.envs_playing(len(group.env_ids))]
        group.observations = first_observations[group.ready]
        group.ledger = EpisodeLedger(env.env_num, keeps_starts=isinstance(group.observations, np.ndarray))
        group.ledger.begin(group.ready, group.observations)
    while True:
        playing = [group for group in groups if group.playing()]
        if not playing:
            break
        actions = []
        for group in playing:
            action = _group_action(group, noise)
            if action is None:
                if group.quota.steps:
                    raise RuntimeError("the policy returned a hidden state after its first step without one")
                return None
            actions.append(action)
        ready = np.concatenate([group.ready for group in playing])
        stepped = env.step(np.concatenate(actions), ready)
        bounds = np.cumsum([0, *(len(group.ready) for group in playing)])
        for group, start, end in zip(playing, bounds[:-1], bounds[1:], strict=True):
            _after_step(env, group, [part[start:end] for part in stepped[:4]], gym_reset_kwargs)
    results = []
    for group in groups:
        assert group.ledger is not None
        stats = group.ledger.statistics(group.quota.steps)
        if group.action_stds:
            stats.pred_dist_std_array = np.concatenate(group.action_stds)
        results.append(stats)
    return results


def _group_action(group: PlayingGroup, noise: bool) -> np.ndarray | None:
    """The group's env actions for its observations, its exploration drawn from its own generator."""
    if group.random_state is None:
        action = evaluation_action(group.policy, group.observations, noise)
    else:
        outside = np.random.get_state()
        np.random.set_state(group.random_state)
        try:
            action = evaluation_action(group.policy, group.observations, noise)
        finally:
            group.random_state = np.random.get_state()
            np.random.set_state(outside)
    if action is None:
        return None
    actions, spread = action
    if spread is not None:
        group.action_stds.append(spread)
    return actions


def _after_step(env: Any, group: PlayingGroup, stepped: list[Any], gym_reset_kwargs: dict[str, Any]) -> None:
    """A group's part of a step: rewards into its ledger, finished episodes ended, their envs reset or
    stopped by its quota (Tianshou's rules)."""
    next_observations, rewards, terminated, truncated = stepped
    quota, ledger, ready = group.quota, group.ledger, group.ready
    assert ledger is not None
    quota.add_steps(len(ready))
    ledger.add(ready, rewards)
    observations = np.array(next_observations, copy=True)
    finished = np.flatnonzero(np.logical_or(terminated, truncated))
    if len(finished):
        ledger.end(ready[finished])
        quota.add_episodes(len(finished))
    if quota.cuts_now():  # the episodes under way are left out,
        if not ledger.returns:  # unless none ended: rlkit keeps a first one that ran the whole budget
            ledger.end(ready)
            quota.add_episodes(len(ready))
        group.stopped = True
        return
    if len(finished):
        if quota.budget_spent():  # envs that finish stop
            stopping = finished
        else:
            reset_observations, _ = env.reset(env_id=ready[finished], **gym_reset_kwargs)
            observations[finished] = reset_observations
            ledger.begin(ready[finished], observations[finished])
            stopping = finished[: quota.surplus(len(ready))]
        if len(stopping):
            keep = np.ones(len(ready), dtype=bool)
            keep[stopping] = False
            ready, observations = ready[keep], observations[keep]
    group.ready, group.observations = ready, observations


def evaluation_action(policy: Any, observations: Any, noise: bool) -> tuple[Any, np.ndarray | None] | None:
    """The env actions of `policy` for `observations`, with its evaluation exploration (`noise`), and its
    action spread where it has a distribution; None for a policy that returns a hidden state."""
    batch = Batch(obs=observations, info=Batch())  # the policies evaluated here read no env info
    with torch.no_grad():
        result = policy(batch, None)
    if result.get("state") is not None:
        return None
    actions = to_numpy(result.act)
    if noise:
        actions = policy.add_exploration_noise(actions, batch)
    distribution = result.get("dist")
    spread = None if distribution is None else np.atleast_2d(to_numpy(get_stddev_from_dist(distribution)))
    return policy.map_action(actions), spread


class EvaluationQuota:
    """How much an evaluation plays, counted as it plays: `n_episode` episodes by Tianshou's rule (as
    many envs as episodes, up to all, and an env that finishes stops once enough episodes are under
    way, the first ones first), or with `min_steps`, whole episodes on every env until that many steps
    are taken (an env that finishes then stops; the others finish theirs), or with `cut` too, episodes
    until then (those under way are cut there). Its bar counts what the quota counts."""

    def __init__(self, n_episode: int, min_steps: int, *, cut: bool = False, bar: bool = True) -> None:
        self.n_episode = n_episode
        self.min_steps = min_steps
        self.cut = cut
        self.steps = self.episodes = 0
        self.bar: EvaluationBar | None = None  # none for a group of a joint evaluation, which shows its own
        if bar:
            self.bar = EvaluationBar(min_steps, "step") if min_steps else EvaluationBar(n_episode, "episode")

    def envs_playing(self, env_num: int) -> int:
        return env_num if self.min_steps else min(env_num, self.n_episode)

    def add_steps(self, count: int) -> None:
        self.steps += count
        if self.min_steps and self.bar is not None:
            self.bar.update(count)

    def add_episodes(self, count: int) -> None:
        self.episodes += count
        if not self.min_steps and self.bar is not None:
            self.bar.update(count)

    def budget_spent(self) -> bool:
        """Whether no env starts another episode: the budget of steps is spent."""
        return bool(self.min_steps) and self.steps >= self.min_steps

    def cuts_now(self) -> bool:
        """Whether the budget is spent and what is under way is cut (`cut`): rlkit's rule."""
        return self.cut and self.budget_spent()

    def surplus(self, playing: int) -> int:
        """How many of the envs that just finished stop, of `playing` envs: those beyond the episodes
        still to start (none under a budget of steps, which stops them all when it is spent)."""
        return 0 if self.min_steps else max(playing - (self.n_episode - self.episodes), 0)

    def met(self) -> bool:
        """Whether enough episodes are played (a budget of steps ends when its envs have stopped)."""
        return not self.min_steps and self.episodes >= self.n_episode

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class EpisodeLedger:
    """Each playing env's episode so far, and the episodes finished, in the order they end: the returns
    and lengths of Tianshou's statistics and the `EpisodeRecord`. Returns accumulate as Tianshou's
    buffer adds them, in the rewards' own type."""

    def __init__(self, env_num: int, *, keeps_starts: bool) -> None:
        self.keeps_starts = keeps_starts  # array observations; dict observations (a Batch) are not kept
        self.running_return: list[Any] = [0.0] * env_num
        self.rewards_of: dict[int, list[float]] = {}  # its length is the episode's so far
        self.start_of: dict[int, np.ndarray] = {}
        self.returns: list[Any] = []
        self.lengths: list[int] = []
        self.starts: list[np.ndarray] = []
        self.episode_rewards: list[np.ndarray] = []

    def begin(self, env_ids: np.ndarray, first_observations: Any) -> None:
        for row, env_id in enumerate(env_ids):
            self.rewards_of[int(env_id)] = []
            if self.keeps_starts:
                self.start_of[int(env_id)] = np.array(first_observations[row])

    def add(self, env_ids: np.ndarray, rewards: np.ndarray) -> None:
        for row, env_id in enumerate(env_ids):
            self.running_return[env_id] += rewards[row]
            self.rewards_of[int(env_id)].append(float(rewards[row]))

    def end(self, env_ids: np.ndarray) -> None:
        for env_id in env_ids:
            ended = int(env_id)
            self.returns.append(self.running_return[ended])
            self.lengths.append(len(self.rewards_of[ended]))
            self.running_return[ended] = 0.0
            if self.keeps_starts:
                self.starts.append(self.start_of[ended])
            self.episode_rewards.append(np.asarray(self.rewards_of.pop(ended)))

    def statistics(self, steps: int) -> CollectStats:
        stats = CollectStats(n_collected_episodes=len(self.returns), n_collected_steps=steps)
        stats.returns = np.array(self.returns, dtype=float)
        stats.lens = np.array(self.lengths, dtype=int)
        if self.keeps_starts:
            stats.offline_rl_episodes = EpisodeRecord(np.stack(self.starts), self.episode_rewards)  # type: ignore[attr-defined]
        return stats


class EvaluationBar:
    """A bar counting an evaluation's episodes, or its steps against a budget of them: an Atari
    evaluation takes minutes (125 000 steps, or ten games of a good agent). It shows only once an
    evaluation has run a few seconds, so a short one prints nothing. The episodes under way when a
    budget is spent play on past it, and the bar's total follows them rather than turning into a
    bare count."""

    SHOW_AFTER_S = 3.0

    def __init__(self, total: int, unit: str) -> None:
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
