"""Any Tianshou buffer, read exactly: valid rows in Tianshou's order, n-step windows that end where
Tianshou's end, action units by marker, re-staging on change, prioritized replay, Cal-QL returns."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.algorithm.algorithm_base import Algorithm, policy_within_training_step
from tianshou.data import Batch, PrioritizedReplayBuffer, ReplayBuffer, VectorReplayBuffer

from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.algorithms.discrete_cql import nstep_returns
from offline_rl.algorithms.staging import Transitions, monte_carlo_returns, read_transitions
from offline_rl.core.errors import DatasetError
from offline_rl.data import action_units_of, load_buffer, save_buffer, set_action_units
from offline_rl.data.action_units import ActionUnitsWarning
from offline_rl.data.transitions import make_replay_buffer

OBS_DIM, ACT_DIM = 3, 2


def step(value: float, *, act: float = 0.0, rew: float = 0.0, terminated: bool = False, truncated: bool = False):
    return Batch(
        obs=np.full(OBS_DIM, value, np.float32),
        act=np.full(ACT_DIM, act, np.float32),
        rew=np.float32(rew),
        terminated=terminated,
        truncated=truncated,
        obs_next=np.full(OBS_DIM, value + 0.5, np.float32),
        info={},
    )


def add_to(buffer: ReplayBuffer, sub_buffer: int, batch: Batch) -> None:
    """Add one step to one sub-buffer of a VectorReplayBuffer (or to a plain buffer)."""
    buffer.add(Batch.stack([batch]), buffer_ids=[sub_buffer if isinstance(buffer, VectorReplayBuffer) else 0])


def partially_filled_vector_buffer() -> VectorReplayBuffer:
    """4 sub-buffers of 10 slots holding 5 steps each; each value names (sub-buffer, step)."""
    buffer = VectorReplayBuffer(40, 4)
    for t in range(5):
        for sub in range(4):
            add_to(buffer, sub, step(10 * sub + t, rew=t, terminated=t == 2))
    return buffer


def test_partially_filled_vector_buffer_stages_exactly_its_valid_rows_in_tianshous_order() -> None:
    buffer = partially_filled_vector_buffer()
    stored = read_transitions(buffer)
    expected = buffer[buffer.sample_indices(0)]
    assert len(stored.indices) == 20  # not the 40 slots, not only sub-buffers 0-1
    np.testing.assert_array_equal(stored.obs, expected.obs)
    np.testing.assert_array_equal(stored.obs[:, 0], [10 * s + t for s in range(4) for t in range(5)])
    # each sub-buffer's newest step is a running episode's tail: an episode end for returns
    assert stored.episode_end.reshape(4, 5)[:, -1].all() and stored.episode_end.reshape(4, 5)[:, 2].all()


def test_wrapped_sub_buffers_are_read_oldest_first() -> None:
    buffer = VectorReplayBuffer(8, 2)  # 4 slots each
    for t in range(6):
        for sub in range(2):
            add_to(buffer, sub, step(10 * sub + t, rew=t))
    stored = read_transitions(buffer)
    np.testing.assert_array_equal(stored.obs[:, 0], [2, 3, 4, 5, 12, 13, 14, 15])


def cql(config: CQLSACConfig | None = None, *, bound: float = 1.0) -> CQLSAC:
    settings = {"actor_hidden_sizes": [16], "critic_layers": 1, "cql_n_actions": 2, "normalize_obs": False}
    return CQLSAC.build(
        gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
        gym.spaces.Box(-bound, bound, (ACT_DIM,), np.float32),
        config or CQLSACConfig(**settings),
    )


def test_cql_sac_trains_on_a_partially_filled_vector_buffer_from_its_valid_rows() -> None:
    algo = cql()
    buffer = partially_filled_vector_buffer()
    algo.process_buffer(buffer)
    assert algo._staged is not None and algo._staged.size == 20
    np.testing.assert_array_equal(algo._staged.obs[:, 0].numpy(), read_transitions(buffer).obs[:, 0])


def test_a_changed_buffer_is_staged_again() -> None:
    algo = cql()
    buffer = ReplayBuffer(50)
    for t in range(10):
        add_to(buffer, 0, step(t, rew=1.0))
    algo.process_buffer(buffer)
    with policy_within_training_step(algo.policy):
        algo.update(buffer, 4)
        for t in range(10, 15):  # new transitions: seen at the next update
            add_to(buffer, 0, step(t, rew=1.0))
        algo.update(buffer, 4)
    assert algo._staged is not None and algo._staged.size == 15
    buffer.rew[:15] = 7.0  # edited in place: seen when the trainer starts the next run
    algo.process_buffer(buffer)
    assert torch.all(algo._staged.rew == 7.0)


# --- n-step windows -------------------------------------------------------------------------


def tianshou_nstep(buffer: ReplayBuffer, indices: np.ndarray, n: int, gamma: float, q_of: np.ndarray) -> np.ndarray:
    """Tianshou's own n-step return with Q(s_{t+m}) = q_of[index of the window's last step]."""

    def target_q(_buffer: ReplayBuffer, last: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(q_of[last], dtype=torch.float64).reshape(-1, 1)

    batch = buffer[indices]
    result = Algorithm.compute_nstep_return(batch, buffer, indices, target_q, gamma=gamma, n_step=n)
    return result.returns.numpy().reshape(-1)


def test_an_unfinished_tail_ends_the_window_as_tianshou_says() -> None:
    buffer = ReplayBuffer(10)
    for t, reward in enumerate([1.0, 2.0, 3.0, 4.0]):
        add_to(buffer, 0, step(t, rew=reward))
    indices = np.array([2, 3])
    returns, bootstrap, last = nstep_returns(buffer, indices, 3, 0.5)
    np.testing.assert_allclose(returns, [5.0, 4.0])  # not [6, 7]: the last reward is not repeated
    np.testing.assert_array_equal(last, [3, 3])
    np.testing.assert_allclose(bootstrap, [0.25, 0.5])
    np.testing.assert_allclose(returns, tianshou_nstep(buffer, indices, 3, 0.5, np.zeros(10)))


@pytest.mark.parametrize("seed", range(3))
def test_nstep_returns_equal_tianshous_on_a_vector_buffer_with_all_kinds_of_episode_ends(seed: int) -> None:
    rng = np.random.default_rng(seed)
    buffer = VectorReplayBuffer(60, 3)
    for _ in range(17):  # sub-buffers wrap, episodes end by termination, truncation or not at all
        for sub in range(3):
            end = rng.random()
            add_to(
                buffer, sub, step(rng.normal(), rew=rng.normal(), terminated=end < 0.15, truncated=0.15 < end < 0.25)
            )
    indices = buffer.sample_indices(0)
    q_of = rng.normal(size=buffer.maxsize)
    for n in (1, 3, 5):
        returns, bootstrap, last = nstep_returns(buffer, indices, n, 0.9)
        np.testing.assert_allclose(returns + bootstrap * q_of[last], tianshou_nstep(buffer, indices, n, 0.9, q_of))


# --- action units ---------------------------------------------------------------------------


def test_datasets_are_marked_as_environment_units_and_keep_the_mark_on_disk(tmp_path) -> None:
    buffer = make_replay_buffer(
        obs=np.zeros((4, OBS_DIM), np.float32),
        act=np.full((4, ACT_DIM), 2.0, np.float32),
        rew=np.zeros(4, np.float32),
        terminated=np.zeros(4, bool),
        truncated=np.zeros(4, bool),
        obs_next=np.zeros((4, OBS_DIM), np.float32),
    )
    assert action_units_of(buffer) == "env"
    assert action_units_of(load_buffer(save_buffer(buffer, tmp_path / "b.hdf5"))) == "env"
    assert action_units_of(ReplayBuffer(3)) is None
    assert action_units_of(set_action_units(ReplayBuffer(3), "policy")) == "policy"


def test_environment_units_are_scaled_into_the_box_and_policy_units_are_not() -> None:
    buffer = ReplayBuffer(10)
    for t in range(4):
        add_to(buffer, 0, step(t, act=1.5))
    algo = cql(bound=2.0)
    algo.process_buffer(set_action_units(buffer, "env"))
    assert torch.allclose(algo._staged.act, torch.full((4, ACT_DIM), 0.75))
    buffer.act[:4] = 0.5
    algo.process_buffer(set_action_units(buffer, "policy"))
    assert torch.allclose(algo._staged.act, torch.full((4, ACT_DIM), 0.5))


def test_an_unmarked_buffer_with_bounds_other_than_one_is_read_as_tianshou_stores_it_with_a_warning() -> None:
    buffer = ReplayBuffer(10)
    for t in range(4):
        add_to(buffer, 0, step(t, act=0.5))
    algo = cql(bound=2.0)
    with pytest.warns(ActionUnitsWarning, match="set_action_units"):
        algo.process_buffer(buffer)
    assert torch.allclose(algo._staged.act, torch.full((4, ACT_DIM), 0.5))  # not shrunk to 0.25


def test_an_unmarked_buffer_whose_actions_leave_the_policy_box_is_refused_in_one_line() -> None:
    buffer = ReplayBuffer(10)
    for t in range(4):
        add_to(buffer, 0, step(t, act=1.8))
    algo = cql(bound=2.0)
    with pytest.warns(ActionUnitsWarning), pytest.raises(DatasetError, match=r"reach 1\.8.*set_action_units") as error:
        algo.process_buffer(buffer)
    assert "\n" not in str(error.value)


def test_unit_bounds_need_no_marker_and_give_no_warning(recwarn: pytest.WarningsRecorder) -> None:
    buffer = ReplayBuffer(10)
    for t in range(4):
        add_to(buffer, 0, step(t, act=0.5))
    cql().process_buffer(buffer)
    assert not [w for w in recwarn if issubclass(w.category, ActionUnitsWarning)]


@pytest.mark.parametrize("bound", [2.0, 1.0])  # scaled into the box, and a box of ±1 that needs no scaling
def test_environment_actions_beyond_the_envs_bounds_draw_one_warning_naming_the_dimension_and_the_flag(
    bound: float,
) -> None:
    buffer = ReplayBuffer(10)
    for t in range(4):
        add_to(buffer, 0, step(t, act=0.5 * bound))
    buffer.act[2, 1] = 1.25 * bound  # one dimension, one step, a quarter beyond the bound
    with pytest.warns(ActionUnitsWarning) as caught:
        cql(bound=bound).process_buffer(set_action_units(buffer, "env"))
    (message,) = [str(w.message) for w in caught]
    assert f"in 1 of {ACT_DIM} dimension(s) (dimension 1: {0.5 * bound:g}..{1.25 * bound:g}" in message
    assert "--clip-dataset-actions" in message and "action_scaling=False" not in message and "\n" not in message


def test_environment_actions_within_the_bounds_or_clipped_into_them_draw_no_warning(
    recwarn: pytest.WarningsRecorder,
) -> None:
    buffer = ReplayBuffer(10)
    for t in range(4):
        add_to(buffer, 0, step(t, act=2.0 if t else -2.0))  # on the bounds exactly
    cql(bound=2.0).process_buffer(set_action_units(buffer, "env"))
    buffer.act[1] = 3.0
    settings = {"actor_hidden_sizes": [16], "critic_layers": 1, "cql_n_actions": 2, "normalize_obs": False}
    clipping = cql(CQLSACConfig(**settings, clip_dataset_actions=True), bound=2.0)
    clipping.process_buffer(set_action_units(buffer, "env"))
    assert not [w for w in recwarn if issubclass(w.category, ActionUnitsWarning)]
    assert float(clipping._staged.act.max()) == 1.0  # 3.0 mapped to 2.0 in the box, then clipped


# --- prioritized replay ---------------------------------------------------------------------


def prioritized_buffer(size: int = 32) -> PrioritizedReplayBuffer:
    buffer = PrioritizedReplayBuffer(size, alpha=0.6, beta=0.4)
    rng = np.random.default_rng(0)
    for t in range(size):
        add_to(buffer, 0, step(rng.normal(), act=rng.uniform(-0.5, 0.5), rew=rng.normal(), terminated=t % 8 == 7))
    return buffer


def test_cql_sac_weights_its_td_loss_by_the_importance_weights() -> None:
    algo = cql()
    buffer = prioritized_buffer()
    algo.process_buffer(buffer)
    batch = algo._staged.take(torch.arange(8))
    weight = torch.linspace(0.1, 2.0, 8)
    torch.manual_seed(0)
    plain = algo.compute_losses(batch)
    torch.manual_seed(0)
    weighted = algo.compute_losses(batch, weight=weight)
    # Σ_e mean_b w_b·(Q_e − y)²: with two critics, recomputed from each critic's own errors
    q_data = algo.critic(batch.obs, batch.act.unsqueeze(1))[..., 0].detach()
    errors = q_data - (q_data.mean(0) - plain.priority)  # (E, B): y is shared by the critics
    torch.testing.assert_close(
        weighted.figures["td_loss"], (errors.pow(2) * weight).mean(dim=1).sum(), rtol=1e-5, atol=1e-6
    )
    assert not torch.isclose(weighted.figures["td_loss"], plain.figures["td_loss"])


def test_cql_sac_samples_by_priority_and_sends_back_its_td_errors() -> None:
    algo = cql()
    buffer = prioritized_buffer()
    before = buffer.weight[np.arange(32)].copy()
    algo.process_buffer(buffer)
    with policy_within_training_step(algo.policy):
        algo.update(buffer, 16)
    after = buffer.weight[np.arange(32)]
    assert (after != before).sum() >= 8  # the sampled transitions got |TD error| priorities


# --- Cal-QL ---------------------------------------------------------------------------------


def test_monte_carlo_returns_run_to_each_episode_end() -> None:
    rewards = np.array([1.0, 1.0, 1.0, 2.0, 2.0])
    ends = np.array([False, False, True, False, True])
    np.testing.assert_allclose(monte_carlo_returns(rewards, ends, 0.5), [1.75, 1.5, 1.0, 3.0, 2.0])


def test_on_a_sparse_reward_an_episode_that_failed_returns_its_reward_forever() -> None:
    # AntMaze as CORL's Cal-QL stages it: rewards 10·r − 5, so −5 short of the goal and +5 at it
    buffer = ReplayBuffer(5)
    for k, (reward, last) in enumerate([(0.0, False), (0.0, True), (0.0, False), (0.0, False), (1.0, True)]):
        buffer.add(
            Batch(obs=np.full(2, float(k)), act=np.zeros(1), rew=reward, terminated=last and reward > 0,
                  truncated=last and reward == 0, obs_next=np.full(2, k + 1.0), info={})
        )  # fmt: skip
    config = CQLSACConfig(calibrated=True, calibration_failure_reward=0.0, reward_scale=10.0, reward_bias=-5.0)
    config.normalize_obs, config.gamma = False, 0.5
    algo = CQLSAC.build(gym.spaces.Box(-9, 9, (2,)), gym.spaces.Box(-1, 1, (1,)), config)
    staged = algo.staged(buffer)
    # the failed episode: −5 / (1 − 0.5) at each step; the one that reached the goal: its discounted sum
    np.testing.assert_allclose(staged.mc_return.numpy(), [-10.0, -10.0, -5.0 - 2.5 + 1.25, -5.0 + 2.5, 5.0])
    plain = CQLSAC.build(
        gym.spaces.Box(-9, 9, (2,)), gym.spaces.Box(-1, 1, (1,)), replace(config, calibration_failure_reward=None)
    )
    np.testing.assert_allclose(plain.staged(buffer).mc_return.numpy()[:2], [-7.5, -5.0])  # without it: the finite sum


def test_cal_ql_floors_the_policy_values_in_the_gap_at_the_monte_carlo_return() -> None:
    config = CQLSACConfig(actor_hidden_sizes=[8], critic_layers=1, cql_n_actions=3, calibrated=True)
    algo = cql(config)

    class ZeroCritic(torch.nn.Module):
        num_critics, act_dim = 2, ACT_DIM

        def forward(self, obs, actions, detach_params=False):
            return torch.zeros(2, obs.shape[0], actions.shape[1]) + 0.0 * actions.sum()

    algo.critic = ZeroCritic()
    obs, obs_next = torch.zeros(2, OBS_DIM), torch.ones(2, OBS_DIM)
    act, rew, not_terminated = torch.zeros(2, ACT_DIM), torch.zeros(2), torch.ones(2)
    mc_return = torch.tensor([5.0, -5.0])
    torch.manual_seed(1)
    stats = algo.compute_losses(Transitions(obs, act, rew, not_terminated, obs_next, mc_return)).figures
    torch.manual_seed(1)
    samples = algo.sample_actions(obs, obs_next)
    # by hand: uniform values 0 + A·log 2; policy values max(0, G) − log π, per state
    uniform = torch.full((2, 3), ACT_DIM * np.log(2.0))
    floor = mc_return.clamp(min=0.0).unsqueeze(1)
    values = torch.cat([uniform, floor - samples.pi_log_prob, floor - samples.next_log_prob], dim=1)
    expected = torch.logsumexp(values, dim=1).mean()
    torch.testing.assert_close(stats["cql_gap"], expected.detach(), rtol=1e-5, atol=1e-5)
