"""The evaluation collector's own episode loop gives what Tianshou's loop gives, to the last digit
(`offline_rl.runs.evaluation_collector`): the same episodes in the same order, the same statistics
(returns, lengths, steps, the policy's action spreads), the same exploration draws, and the envs
left as Tianshou leaves them, so the next evaluation is the same too."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_exact_resume import cartpole_policy
from tianshou.env import DummyVectorEnv, SubprocVectorEnv

from offline_rl.runs.evaluation_collector import EvaluationCollector


def pendulum_policy() -> Any:
    """A CQL-SAC policy with random weights: its actions and their spread vary from state to state."""
    from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig

    env = gym.make("Pendulum-v1")
    torch.manual_seed(3)
    config = CQLSACConfig(actor_hidden_sizes=[16, 16], critic_layers=1)
    algorithm = CQLSAC.build(env.observation_space, env.action_space, config)
    algorithm.eval()
    return algorithm.policy


def make_envs(task: str, num: int, subprocesses: bool) -> Any:
    vector_env = SubprocVectorEnv if subprocesses else DummyVectorEnv
    return vector_env([lambda: gym.make(task)] * num)


def evaluations(own_loop: bool, policy: Any, task: str, num_envs: int, episodes: int, subprocesses: bool):
    """Two evaluations as Tianshou's trainer runs them, with training's numpy draws between them,
    by the same collector (seeding, exploration, generator hand-back) with our loop or Tianshou's."""
    envs = make_envs(task, num_envs, subprocesses)
    collector = EvaluationCollector(policy, envs, seed=10_000, own_loop=own_loop)
    results = []
    try:
        for round_ in range(2):
            np.random.seed(round_)
            collector.reset(reset_stats=False)
            results.append(collector.collect(n_episode=episodes))
        return results, collector.collect_step, collector.collect_episode, len(collector.buffer)
    finally:
        collector.close()


CASES = {
    # CartPole's episodes end at different steps, and ε-greedy draws numpy's coins at every step
    "ε-greedy, as many episodes as envs": ("CartPole-v1", lambda: cartpole_policy(0.5), 3, 3),
    "ε-greedy, more episodes than envs": ("CartPole-v1", lambda: cartpole_policy(0.5), 3, 8),
    "ε-greedy, fewer episodes than envs": ("CartPole-v1", lambda: cartpole_policy(0.5), 4, 2),
    "CQL-SAC's mean action and its spread": ("Pendulum-v1", pendulum_policy, 2, 3),
}


@pytest.mark.filterwarnings("ignore:n_episode=2 should be larger:UserWarning")  # the point of one case
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("subprocesses", [False, True], ids=["one process", "a process per env"])
def test_the_evaluation_loop_reproduces_tianshous(case: str, subprocesses: bool) -> None:
    task, make_policy, num_envs, episodes = CASES[case]
    policy = make_policy()
    ours, steps, episode_count, buffered = evaluations(True, policy, task, num_envs, episodes, subprocesses)
    theirs, their_steps, their_episode_count, their_buffered = evaluations(
        False, policy, task, num_envs, episodes, subprocesses
    )
    assert buffered == 0 and their_buffered > 0  # our loop ran (it keeps no buffer), and so did Tianshou's
    assert (steps, episode_count) == (their_steps, their_episode_count)
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.n_collected_episodes == reference.n_collected_episodes == episodes
        assert mine.n_collected_steps == reference.n_collected_steps
        np.testing.assert_array_equal(mine.returns, reference.returns)  # same values, same order
        assert mine.returns.dtype == reference.returns.dtype
        np.testing.assert_array_equal(mine.lens, reference.lens)
        assert mine.lens.dtype == reference.lens.dtype
        assert mine.returns_stat == reference.returns_stat
        assert mine.lens_stat == reference.lens_stat
        if reference.pred_dist_std_array is None:
            assert mine.pred_dist_std_array is None
        else:
            np.testing.assert_array_equal(mine.pred_dist_std_array, reference.pred_dist_std_array)
            assert mine.pred_dist_std_array_stat == reference.pred_dist_std_array_stat
    if "ε-greedy" in case:
        assert len(set(ours[0].lens.tolist())) > 1  # the episodes did end at different steps


def test_what_the_loop_does_not_cover_goes_to_tianshous() -> None:
    """A step collection (which may stop mid-episode) is Tianshou's; the episode collection after it
    too, until the buffer is reset: Tianshou's buffer carries those episodes' returns so far."""
    policy = cartpole_policy(0.5)
    ours = EvaluationCollector(policy, make_envs("CartPole-v1", 2, False), seed=10_000)
    theirs = EvaluationCollector(policy, make_envs("CartPole-v1", 2, False), seed=10_000, own_loop=False)
    for collector in (ours, theirs):
        collector.reset()
        assert collector.collect(n_step=8).n_collected_steps == 8  # mid-episode: CartPole's last far longer
        assert len(collector.buffer) == 8
    np.testing.assert_array_equal(ours.collect(n_episode=3).returns, theirs.collect(n_episode=3).returns)
    assert len(ours.buffer) > 8  # Tianshou's loop played it
    ours.reset()  # as the trainer does before an evaluation: the buffer is emptied
    ours.collect(n_episode=3)
    assert len(ours.buffer) == 0  # our loop again


def count_resets(collector: EvaluationCollector) -> list[int]:
    """A list that gets an item at each of the collector's env resets."""
    resets: list[int] = []
    reset_env = collector.reset_env

    def counted(*args: Any, **kwargs: Any) -> Any:
        resets.append(1)
        return reset_env(*args, **kwargs)

    collector.reset_env = counted
    return resets


def test_the_reset_that_ends_an_evaluation_waits_until_it_is_needed() -> None:
    """Tianshou's loop reseeds the envs when an evaluation ends, and the trainer reseeds them again
    before the next one (an Atari env reloads its game for each); ours reseeds once, and a collection
    that starts without a reset still starts from the reseeded envs."""
    policy = cartpole_policy(0.5)
    counts = {}
    results = {}
    for own_loop in (True, False):
        collector = EvaluationCollector(policy, make_envs("CartPole-v1", 3, False), seed=10_000, own_loop=own_loop)
        resets = count_resets(collector)
        collector.reset(reset_stats=False)
        first = collector.collect(n_episode=3)
        collector.reset(reset_stats=False)  # as the trainer does before each evaluation
        second = collector.collect(n_episode=3)
        third = collector.collect(n_episode=3)  # no reset first: the envs as the last collection left them
        counts[own_loop] = len(resets)
        results[own_loop] = [result.returns.tolist() for result in (first, second, third)]
        collector.close()
    assert results[True] == results[False]
    assert results[True][0] == results[True][1] == results[True][2]
    assert counts == {True: 3, False: 5}


def budget_evaluation(policy: Any, num_envs: int, min_steps: int, subprocesses: bool = False) -> Any:
    envs = make_envs("CartPole-v1", num_envs, subprocesses)
    collector = EvaluationCollector(policy, envs, seed=10_000, min_steps=min_steps)
    try:
        collector.reset(reset_stats=False)
        return collector.collect(n_episode=num_envs)  # as the trainer asks: the budget replaces the count
    finally:
        collector.close()


def test_a_step_budget_on_one_env_plays_dopamines_loop() -> None:
    """Dopamine's runner plays whole episodes while fewer than the budget's steps are played, then
    averages them: the first episodes of the same seeded env, up to the one that reaches the budget."""
    policy = cartpole_policy(0.5)
    sequence = EvaluationCollector(policy, make_envs("CartPole-v1", 1, False), seed=10_000, own_loop=False)
    sequence.reset(reset_stats=False)
    reference = sequence.collect(n_episode=12)  # Tianshou's loop, one episode after another
    ends = np.cumsum(reference.lens)
    for budget in (1, int(ends[2]), int(ends[2]) + 1, int(ends[6]) - 5):
        played = budget_evaluation(policy, 1, budget)
        count = int(np.searchsorted(ends, budget)) + 1  # episodes until the steps reach the budget
        assert played.n_collected_episodes == count, budget
        np.testing.assert_array_equal(played.returns, reference.returns[:count])
        np.testing.assert_array_equal(played.lens, reference.lens[:count])
        assert played.n_collected_steps == ends[count - 1] >= budget
        assert count == 1 or ends[count - 2] < budget  # the last episode began before the budget was spent
    assert len(set(reference.lens[:7].tolist())) > 1  # episodes of different lengths: the cut points differ


def rlkit_paths(lengths: list[int], returns: list[float], num_steps: int) -> list[tuple[float, int]]:
    """rlkit's `MdpPathCollector.collect_new_paths(max_path_length, num_steps, discard_incomplete_paths=True)`
    as the CQL authors' D4RL scripts call it (max_path_length = num_steps), on a sequence of episodes
    of CartPole (+1 a step, so a cut episode's return is its length): each rollout is capped at the
    steps left; one cut short of max_path_length without ending is dropped, and collection stops."""
    max_path_length = num_steps
    paths: list[tuple[float, int]] = []
    collected, index = 0, 0
    while collected < num_steps:
        cap = min(max_path_length, num_steps - collected)
        length = min(lengths[index], cap)
        ended = length == lengths[index]
        if length != max_path_length and not ended:
            break
        collected += length
        paths.append((returns[index] if ended else float(length), length))
        index += 1
    return paths


def test_episodes_cut_at_the_budget_are_left_out_as_rlkit_does() -> None:
    """--test-steps-cut on one env scores exactly the paths rlkit keeps of the same seeded episodes: those
    that end within the budget, or the first alone, cut, when it outlasts the budget."""
    policy = cartpole_policy(0.5)
    sequence = EvaluationCollector(policy, make_envs("CartPole-v1", 1, False), seed=10_000, own_loop=False)
    sequence.reset(reset_stats=False)
    reference = sequence.collect(n_episode=12)
    lengths, returns = reference.lens.tolist(), reference.returns.tolist()
    ends = np.cumsum(lengths)
    budgets = (lengths[0] - 3, int(ends[2]), int(ends[2]) + 1, int(ends[5]) - 4)
    for budget in budgets:
        collector = EvaluationCollector(
            policy, make_envs("CartPole-v1", 1, False), seed=10_000, min_steps=budget, cut_at_budget=True
        )
        collector.reset(reset_stats=False)
        played = collector.collect(n_episode=1)
        collector.close()
        expected = rlkit_paths(lengths, returns, budget)
        assert list(zip(played.returns.tolist(), played.lens.tolist(), strict=True)) == expected, budget
        assert played.n_collected_steps == budget  # the steps played, the cut ones included
    assert rlkit_paths(lengths, returns, budgets[0]) == [(float(budgets[0]), budgets[0])]  # the first, cut
    assert len(rlkit_paths(lengths, returns, budgets[2])) == 3  # the fourth began and was cut: left out
    assert lengths[0] > 3 and len(set(lengths[:6])) > 1
    with pytest.raises(ValueError, match="give min_steps"):
        EvaluationCollector(policy, make_envs("CartPole-v1", 1, False), seed=0, cut_at_budget=True)


def per_env_episodes(policy: Any, num_envs: int, seed: int, count: int) -> list[list[tuple[float, int]]]:
    """Each env's episodes, played on its own from its seed: (return, length), in order."""
    episodes = []
    for index in range(num_envs):
        single = EvaluationCollector(policy, make_envs("CartPole-v1", 1, False), seed=seed + index, own_loop=False)
        single.reset(reset_stats=False)
        stats = single.collect(n_episode=count)
        episodes.append(list(zip(stats.returns.tolist(), stats.lens.tolist(), strict=True)))
        single.close()
    return episodes


def budget_schedule(episodes: list[list[tuple[float, int]]], min_steps: int) -> list[tuple[float, int]]:
    """The budget's rule, tick by tick on lockstepped envs: an env that ends an episode starts its next
    one only while fewer than `min_steps` steps are played in all; episodes in the order they end."""
    next_episode = [0] * len(episodes)
    left = [episode[0][1] for episode in episodes]
    playing, steps, ended = list(range(len(episodes))), 0, []
    while playing:
        steps += len(playing)
        for env in playing:
            left[env] -= 1
        for env in [env for env in playing if left[env] == 0]:
            ended.append(episodes[env][next_episode[env]])
            next_episode[env] += 1
            if steps < min_steps:
                left[env] = episodes[env][next_episode[env]][1]
            else:
                playing.remove(env)
    return ended


@pytest.mark.parametrize(("budget", "subprocesses"), [(50, False), (400, False), (1000, False), (400, True)], ids=str)
def test_several_envs_share_a_step_budget(budget: int, subprocesses: bool) -> None:
    """On several envs each plays whole episodes of its own seeded sequence, and starts another only
    while the budget is not spent; a greedy policy makes each env's sequence its own."""
    policy = cartpole_policy(0.0)
    num_envs = 3
    played = budget_evaluation(policy, num_envs, budget, subprocesses)
    expected = budget_schedule(per_env_episodes(policy, num_envs, 10_000, 60), budget)
    assert played.returns.tolist() == [episode[0] for episode in expected]
    assert played.lens.tolist() == [episode[1] for episode in expected]
    assert played.n_collected_steps == sum(played.lens) >= budget
    assert played.n_collected_episodes == len(expected) >= num_envs  # every env ends the episode it began


def test_a_step_budget_scores_the_same_weights_the_same_and_needs_the_own_loop() -> None:
    policy = cartpole_policy(0.5)
    collector = EvaluationCollector(policy, make_envs("CartPole-v1", 2, False), seed=10_000, min_steps=300)
    first, second = [], []
    for results in (first, second):
        collector.reset(reset_stats=False)
        results.extend(collector.collect(n_episode=2).returns.tolist())
    assert first == second and sum(first) >= 300  # CartPole's +1 a step: the returns sum the steps
    with pytest.raises(ValueError, match="budget of steps cannot be played here"):
        collector.collect(n_episode=2, render=1e-9)  # rendering is Tianshou's loop
    collector.close()
    with pytest.raises(ValueError, match="own loop only"):
        EvaluationCollector(policy, make_envs("CartPole-v1", 1, False), seed=0, own_loop=False, min_steps=10)


@pytest.mark.parametrize("min_steps", [0, 300], ids=["episodes", "a step budget"])
def test_a_long_evaluation_counts_its_episodes_or_steps_on_a_bar(
    min_steps: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Atari evaluation takes minutes; its bar (here shown at once, and as log lines: stderr is no
    terminal) ends at the episodes played, or at the steps, past the budget where episodes ran on."""
    from offline_rl.runs import episodes

    monkeypatch.setattr(episodes.EvaluationBar, "SHOW_AFTER_S", 0.0)
    collector = EvaluationCollector(
        cartpole_policy(0.5), make_envs("CartPole-v1", 2, False), seed=10_000, min_steps=min_steps
    )
    collector.reset()
    stats = collector.collect(n_episode=3)
    collector.close()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    done = stats.n_collected_steps if min_steps else 3
    assert last.startswith("evaluation: 100%") and f"{done}/{done} [" in last, last
    assert ("step" if min_steps else "episode") in last.split("[", 1)[1]  # the unit of its rate


def test_rendering_plays_episodes_even_where_the_run_cuts_its_evaluations_at_a_budget() -> None:
    """`--watch --render` of a run made with the CQL authors' presets (which set --test-steps-cut): a
    window plays --test-num episodes, and asks for no budget to cut."""
    from offline_rl.runs.config import RunConfig
    from offline_rl.runs.training import evaluation_collector

    run = RunConfig(test_num=1, test_steps=1000, test_steps_cut=True)
    for rendering, expected in ((False, (1000, True)), (True, (0, False))):
        make_env = functools.partial(gym.make, "CartPole-v1")
        collector = evaluation_collector(cartpole_policy(0.0), make_env, run, rendering=rendering)
        assert (collector.min_steps, collector.cut_at_budget) == expected
        collector.close()
