"""The critics' estimate of the evaluation episodes' discounted return beside that return (CQL's
lower-bound claim, checked where it is made): the episodes the evaluation loop keeps, the estimate's
arithmetic, and the line and curves a run shows."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_evaluation_loop import evaluations, pendulum_policy
from test_exact_resume import cartpole_policy

from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.runs.evaluation_collector import episode_record


@pytest.mark.parametrize(("make_policy", "task", "envs", "episodes"), [
    (lambda: cartpole_policy(0.5), "CartPole-v1", 3, 3),
    (lambda: cartpole_policy(0.5), "CartPole-v1", 3, 8),  # envs play on: later episodes start at a reset
    (pendulum_policy, "Pendulum-v1", 2, 2),
])  # fmt: skip
def test_the_evaluation_keeps_each_episodes_first_observation_and_rewards(
    make_policy: object, task: str, envs: int, episodes: int
) -> None:
    (stats, _), *_ = evaluations(True, make_policy(), task, envs, episodes, subprocesses=False)  # type: ignore[operator]
    record = episode_record(stats)
    assert record is not None and len(record.start_obs) == len(record.rewards) == episodes
    np.testing.assert_allclose([rewards.sum() for rewards in record.rewards], stats.returns)  # the returns' order
    assert [len(rewards) for rewards in record.rewards] == stats.lens.tolist()
    first_starts = []  # each env's first episode starts where a fresh env seeded as the collector seeds it does:
    for index in range(envs):  # Tianshou's worker resets with the seed, then the collector resets it again
        env = gym.make(task)
        env.reset(seed=10_000 + index)
        first_starts.append(env.reset()[0])
    for start in first_starts[: min(envs, episodes)]:
        assert any(np.array_equal(start, kept) for kept in record.start_obs)
    if episodes > envs:  # the later ones start at the observations the envs were reset to
        assert not any(np.array_equal(kept, other) for kept in record.start_obs[envs:] for other in first_starts)
    (theirs, _), *_ = evaluations(False, make_policy(), task, envs, episodes, subprocesses=False)  # type: ignore[operator]
    assert episode_record(theirs) is None  # Tianshou's loop keeps none: the check is left out, not guessed


class ConstantCritics(torch.nn.Module):
    """Q₁ = 10 + s + a and Q₂ = 7 + s + a on the first observation and action: their minimum is 7 + s + a."""

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        base = obs[:, :1] + actions[..., 0]
        return torch.stack([10.0 + base, 7.0 + base])


def test_the_estimate_is_the_critics_minimum_mapped_back_to_the_envs_rewards() -> None:
    obs_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    config = CQLSACConfig(actor_hidden_sizes=[8], critic_layers=1, gamma=0.5, reward_scale=2.0, reward_bias=-1.0)
    algorithm = CQLSAC.build(obs_space, act_space, config)
    algorithm.critic = ConstantCritics()
    algorithm._gaussian_params = lambda norm_obs: (norm_obs[:, 1:2] * 0.0 + 0.5, norm_obs[:, 1:2] * 0.0)
    algorithm.normalizer.fit(np.array([[0.0, 0.0], [4.0, 2.0]]))  # mean (2, 1), std (2, 1)
    starts = np.array([[6.0, 5.0], [2.0, 1.0]])  # normalised first columns: 2 and 0
    rewards = [np.array([1.0, 2.0, 3.0]), np.array([4.0])]
    values = algorithm.start_values(starts, rewards, reward_unit=3.0)  # as --normalize-reward would have set it
    assert values is not None and values.rewards == ""  # the env's own reward units
    estimated, actual = values.estimated, values.actual
    # discounted returns at γ = 0.5: 1 + 2·0.5 + 3·0.25 = 2.75 and 4; the steps' weights sum to 1.75 and 1
    np.testing.assert_allclose(actual, [2.75, 4.0])
    # Q = 7 + s + tanh(0.5); the critics learn r·(3·2) − 1, so Q − (−1)·Σγ^t, over 6, is the env's units
    q = 7.0 + np.array([2.0, 0.0]) + np.tanh(0.5)
    np.testing.assert_allclose(estimated, (q + np.array([1.75, 1.0])) / 6.0, rtol=1e-6)
    assert (
        algorithm.start_values(starts, rewards, reward_unit=0.0) is None
    )  # critics that learn no reward estimate nothing


def test_a_run_prints_and_logs_the_discounted_return_beside_the_critics_estimate(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing import event_accumulator
    from test_d4rl_cql_example import TINY, run_example

    result = run_example(*TINY, "--epoch", "2", "--test-num", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("evaluation ")]
    pattern = r"evaluation .+: return -?[\d.]+ ± [\d.]+; discounted return -?[\d.]+, the critics' estimate -?[\d.]+"
    assert len(lines) == 3 and all(re.fullmatch(pattern, line) for line in lines), lines
    (run_dir,) = (tmp_path / "log" / "Pendulum-v1" / "cql" / "0").iterdir()
    events = event_accumulator.EventAccumulator(str(run_dir))
    events.Reload()
    for tag in ("eval/discounted_return", "eval/value_estimate"):
        assert [int(item.step) for item in events.scalars.Items(tag)] == [15, 30]
    summary = [line for line in result.stdout.splitlines() if line.startswith("done:")]
    assert "discounted return" not in summary[0]  # the summary keeps to the scores


@pytest.mark.parametrize("clip", [False, True], ids=["CartPole's rewards", "clipped as Atari's"])
def test_discrete_cqls_estimate_is_the_greedy_mean_quantile_in_the_learners_reward_units(clip: bool) -> None:
    from offline_rl.algorithms.discrete_cql import CQLQRDQN
    from offline_rl.algorithms.discrete_cql.config import DiscreteCQLConfig

    env = gym.make("CartPole-v1")
    config = DiscreteCQLConfig(num_quantiles=2, hidden_sizes=[8], gamma=0.5, reward_clip=clip)
    algorithm = CQLQRDQN.build(env.observation_space, env.action_space, config)

    class Quantiles(torch.nn.Module):  # means 2 and 6 (+ s): the greedy one is 6 + s
        def forward(self, obs: np.ndarray) -> tuple[torch.Tensor, None]:
            shift = torch.as_tensor(obs[:, :1], dtype=torch.float32).unsqueeze(-1)
            return torch.tensor([[[1.0, 3.0], [5.0, 7.0]]]) + shift, None

    algorithm.model = Quantiles()
    values = algorithm.start_values(
        np.array([[0.5, 0, 0, 0], [-1.0, 0, 0, 0]]), [np.array([2.0, 3.0]), np.array([-4.0])]
    )
    np.testing.assert_allclose(values.estimated, [6.5, 5.0])
    # γ = 0.5: 2 + 3·0.5 = 3.5 and -4 as recorded; 1 + 1·0.5 = 1.5 and -1 clipped to [-1, 1] as learned
    np.testing.assert_allclose(values.actual, [1.5, -1.0] if clip else [3.5, -4.0])
    assert values.rewards == ("rewards clipped to [-1, 1], as learned" if clip else "")
