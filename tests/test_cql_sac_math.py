"""CQL-SAC loss terms against hand-computed references on tiny networks with fixed weights."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.algorithms.cql_sac.algorithm import ActionSamples
from offline_rl.algorithms.cql_sac.networks import tanh_gaussian_log_prob, tanh_gaussian_sample
from offline_rl.algorithms.staging import Transitions

OBS, ACT, B, N = 2, 1, 2, 2


def tiny_algorithm(**overrides) -> CQLSAC:
    settings = {
        "actor_hidden_sizes": [4],
        "critic_layers": 1,
        "critic_width": 3,
        "num_critics": 2,
        "cql_n_actions": N,
        "temperature": 0.5,
        "cql_weight": 2.0,
        "gamma": 0.9,
        "alpha": 0.3,
        "auto_alpha": False,
        "normalize_obs": False,
    }
    config = CQLSACConfig(**{**settings, **overrides})
    algo = CQLSAC.build(gym.spaces.Box(-10, 10, (OBS,), np.float32), gym.spaces.Box(-1, 1, (ACT,), np.float32), config)
    with torch.no_grad():
        for index, (weight, bias) in enumerate(zip(algo.critic.weights, algo.critic.biases, strict=True)):
            weight.copy_(torch.linspace(-0.8, 0.9, weight.numel()).reshape(weight.shape) * (index + 1))
            bias.copy_(torch.linspace(-0.1, 0.2, bias.numel()).reshape(bias.shape))
    algo.critic_target.load_state_dict(algo.critic.state_dict())
    return algo


def reference_q(algo: CQLSAC, member: int, obs: np.ndarray, action: np.ndarray) -> float:
    """Q_member(s, a) with explicit loops: the network read off its stored weights."""
    hidden = np.concatenate([obs, action]).astype(np.float64)
    layers = list(zip(algo.critic.weights, algo.critic.biases, strict=True))
    for depth, (weight, bias) in enumerate(layers):
        w = weight[member].detach().double().numpy()
        b = bias[member, 0].detach().double().numpy()
        out = np.array([sum(hidden[i] * w[i, j] for i in range(len(hidden))) + b[j] for j in range(w.shape[1])])
        hidden = out if depth == len(layers) - 1 else np.maximum(out, 0.0)
    return float(hidden[0])


FIXED = {
    "obs": np.array([[0.5, -1.0], [1.5, 0.25]], np.float32),
    "act": np.array([[0.3], [-0.6]], np.float32),
    "rew": np.array([1.0, -0.5], np.float32),
    "not_terminated": np.array([1.0, 0.0], np.float32),
    "obs_next": np.array([[0.6, -0.9], [1.2, 0.5]], np.float32),
    "random": np.array([[[0.9], [-0.7]], [[0.1], [-0.95]]], np.float32),
    "pi": np.array([[[0.2], [-0.4]], [[0.7], [0.05]]], np.float32),
    "pi_logp": np.array([[0.3, -0.2], [0.8, 0.1]], np.float32),
    "next": np.array([[[0.5], [-0.1]], [[-0.3], [0.6]]], np.float32),
    "next_logp": np.array([[-0.4, 0.6], [0.2, -0.7]], np.float32),
}


def fixed_samples(algo: CQLSAC) -> ActionSamples:
    t = {key: torch.as_tensor(value) for key, value in FIXED.items()}
    mean = torch.zeros(B, ACT, requires_grad=True)
    return ActionSamples(mean, torch.zeros(B, ACT), t["pi"], t["pi_logp"], t["next"], t["next_logp"], t["random"])


def losses_of(algo: CQLSAC, *columns: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(losses, figures) of a batch of prepared columns, in the algorithm's current phase."""
    out = algo.compute_losses(Transitions(*columns), **algo.loss_options())
    return out.parts, out.figures


def run_losses(algo: CQLSAC):
    algo.sample_actions = lambda obs, obs_next: fixed_samples(algo)  # type: ignore[method-assign]
    t = {key: torch.as_tensor(value) for key, value in FIXED.items()}
    return losses_of(algo, t["obs"], t["act"], t["rew"], t["not_terminated"], t["obs_next"])


def logsumexp_t(values: list[float], temperature: float) -> float:
    return temperature * math.log(sum(math.exp(v / temperature) for v in values))


def reference_critic_loss(algo: CQLSAC, importance_sample: bool, clip=(-math.inf, math.inf)) -> dict[str, float]:
    cfg, f = algo.config, FIXED
    td_loss, gaps = 0.0, []
    for e in range(2):
        per_state = []
        for b in range(B):
            next_q = min(reference_q(algo, m, f["obs_next"][b], f["next"][b, 0]) for m in range(2))
            target = f["rew"][b] + cfg.gamma * f["not_terminated"][b] * next_q
            q_data = reference_q(algo, e, f["obs"][b], f["act"][b])
            td_loss += (q_data - target) ** 2 / B
            q_rand = [reference_q(algo, e, f["obs"][b], f["random"][b, k]) for k in range(N)]
            q_pi = [reference_q(algo, e, f["obs"][b], f["pi"][b, k]) for k in range(N)]
            q_next = [reference_q(algo, e, f["obs"][b], f["next"][b, k]) for k in range(N)]
            if importance_sample:
                values = (
                    [q + ACT * math.log(2.0) for q in q_rand]
                    + [q - f["pi_logp"][b, k] for k, q in enumerate(q_pi)]
                    + [q - f["next_logp"][b, k] for k, q in enumerate(q_next)]
                )
                assert len(values) == 3 * N
            else:
                values = [*q_rand, q_data, *q_next, *q_pi]
            per_state.append(min(max(logsumexp_t(values, cfg.temperature) - q_data, clip[0]), clip[1]))
        gaps.append(sum(per_state) / B)
    return {"td": td_loss, "gap": sum(gaps) / 2, "critic": td_loss + cfg.cql_weight * sum(gaps)}


@pytest.mark.parametrize("importance_sample", [True, False])
def test_critic_loss_matches_hand_computation(importance_sample: bool) -> None:
    algo = tiny_algorithm(importance_sample=importance_sample)
    losses, stats = run_losses(algo)
    expected = reference_critic_loss(algo, importance_sample)
    assert stats["td_loss"].item() == pytest.approx(expected["td"], rel=1e-5)
    assert stats["cql_gap"].item() == pytest.approx(expected["gap"], rel=1e-5)
    assert losses["critic"].item() == pytest.approx(expected["critic"], rel=1e-5)


def test_clipping_applies_per_state_before_the_batch_mean() -> None:
    algo = tiny_algorithm(clip_diff_min=-0.1, clip_diff_max=0.6)
    losses, _ = run_losses(algo)
    expected = reference_critic_loss(algo, True, clip=(-0.1, 0.6))
    unclipped = reference_critic_loss(algo, True)
    assert expected["critic"] != pytest.approx(unclipped["critic"])  # the clip is active here
    assert losses["critic"].item() == pytest.approx(expected["critic"], rel=1e-5)


def test_logsumexp_is_per_state_over_its_own_samples() -> None:
    algo = tiny_algorithm()
    obs = torch.as_tensor(FIXED["obs"])
    q = torch.randn(2, B, N)
    logp = torch.zeros(B, N)
    base = algo.conservative_gap(torch.zeros(2, B), q, q, q, logp, logp)
    # Raising state 1's values changes the batch-mean gap by exactly state 1's own change.
    bumped = q.clone()
    bumped[:, 1] += 3.0
    changed = algo.conservative_gap(torch.zeros(2, B), bumped, bumped, bumped, logp, logp)
    np.testing.assert_allclose((changed - base).numpy(), [1.5, 1.5], rtol=1e-5)  # +3 on one of B = 2 states
    assert obs.shape[0] == B


def test_actor_loss_uses_min_critic_and_entropy() -> None:
    algo = tiny_algorithm()
    losses, _ = run_losses(algo)
    f = FIXED
    expected = np.mean(
        [
            algo.config.alpha * f["pi_logp"][b, 0]
            - min(reference_q(algo, e, f["obs"][b], f["pi"][b, 0]) for e in range(2))
            for b in range(B)
        ]
    )
    assert losses["actor"].item() == pytest.approx(expected, rel=1e-5)


def test_actor_loss_sends_no_gradient_into_critics() -> None:
    algo = tiny_algorithm()
    samples = algo.sample_actions(torch.as_tensor(FIXED["obs"]), torch.as_tensor(FIXED["obs_next"]))
    algo.sample_actions = lambda obs, obs_next: samples  # type: ignore[method-assign]
    t = {key: torch.as_tensor(value) for key, value in FIXED.items()}
    losses, _ = losses_of(algo, t["obs"], t["act"], t["rew"], t["not_terminated"], t["obs_next"])
    losses["actor"].backward()
    assert all(p.grad is None for p in algo.critic.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in algo.actor.parameters())


def test_behaviour_cloning_warmup_maximises_dataset_log_likelihood() -> None:
    algo = tiny_algorithm(bc_steps=10)
    obs = torch.as_tensor(FIXED["obs"])
    act = torch.tensor([[1.0], [-0.6]])  # an action on the bound: clipped to 1 - 1e-3 for atanh
    losses, _ = losses_of(algo, obs, act, torch.zeros(B), torch.ones(B), torch.as_tensor(FIXED["obs_next"]))
    assert torch.isfinite(losses["actor"])
    state = algo.state_dict()
    state["num_updates"] = torch.tensor(10)
    algo.load_state_dict(state)  # as a resumed run past its warm-up: the Q term returns
    losses_after, _ = losses_of(algo, obs, act, torch.zeros(B), torch.ones(B), torch.as_tensor(FIXED["obs_next"]))
    assert losses_after["actor"].item() != pytest.approx(losses["actor"].item())


def test_behaviour_cloning_loss_value() -> None:
    algo = tiny_algorithm(bc_steps=10)
    samples = fixed_samples(algo)
    mean = torch.tensor([[0.1], [-0.2]])
    log_std = torch.tensor([[-0.5], [0.3]])
    samples = samples._replace(mean=mean, log_std=log_std)
    algo.sample_actions = lambda obs, obs_next: samples  # type: ignore[method-assign]
    act = torch.tensor([[1.0], [-0.6]])
    losses, _ = losses_of(
        algo, torch.as_tensor(FIXED["obs"]), act, torch.zeros(B), torch.ones(B), torch.as_tensor(FIXED["obs_next"])
    )
    clipped = np.array([1.0 - 1e-3, -0.6])
    expected = []
    for b in range(B):
        mu, std, a = mean[b, 0].item(), math.exp(log_std[b, 0].item()), clipped[b]
        u = math.atanh(a)
        log_prob = -0.5 * ((u - mu) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi) - math.log(1 - a * a)
        expected.append(algo.config.alpha * FIXED["pi_logp"][b, 0] - log_prob)
    assert losses["actor"].item() == pytest.approx(float(np.mean(expected)), rel=1e-4)


def test_tanh_gaussian_log_prob_matches_torch_distributions() -> None:
    torch.manual_seed(0)
    mean, log_std = torch.randn(64, 3), torch.randn(64, 3) * 0.5
    actions, log_prob = tanh_gaussian_sample(mean, log_std, 5)
    base = torch.distributions.Normal(mean.unsqueeze(1), log_std.exp().unsqueeze(1))
    reference = torch.distributions.TransformedDistribution(base, [torch.distributions.TanhTransform()])
    inside = actions.abs().amax(-1) < 0.999
    expected = reference.log_prob(actions).sum(-1)
    torch.testing.assert_close(log_prob[inside], expected[inside], rtol=1e-3, atol=1e-3)
    again = tanh_gaussian_log_prob(
        mean.unsqueeze(1).expand_as(actions), log_std.unsqueeze(1).expand_as(actions), actions
    )
    torch.testing.assert_close(again[inside], log_prob[inside], rtol=1e-3, atol=1e-3)


def test_random_actions_cover_the_box_uniformly() -> None:
    torch.manual_seed(0)
    algo = tiny_algorithm(cql_n_actions=50)
    obs = torch.zeros(400, OBS)
    random_actions = algo.sample_actions(obs, obs).random_actions.numpy().ravel()
    assert random_actions.min() < -0.99 and random_actions.max() > 0.99
    counts, _ = np.histogram(random_actions, bins=10, range=(-1, 1))
    fractions = counts / len(random_actions)
    np.testing.assert_allclose(fractions, 0.1, atol=0.01)  # a constant +1 puts everything in the last bin
    assert abs(random_actions.mean()) < 0.02  # ~5 standard errors for 20 000 draws


def test_max_target_backup_takes_min_over_critics_then_max_over_samples() -> None:
    algo = tiny_algorithm(cql_n_actions=3, max_target_backup=True, backup_entropy=True)
    table = torch.tensor([[[1.0, 5.0, 3.0]], [[4.0, 2.0, 6.0]]])  # (E=2, B=1, N=3)

    class StubCritic(torch.nn.Module):
        def forward(self, obs, actions, detach_params=False):
            return table[:, :, : actions.shape[1]]

    algo.critic_target = StubCritic()
    log_prob = torch.tensor([[0.1, 0.2, 0.7]])
    target = algo.td_target(
        torch.tensor([1.0]),
        torch.tensor([1.0]),
        torch.zeros(1, OBS),
        torch.zeros(1, 3, ACT),
        log_prob,
        torch.tensor(0.5),
    )
    # min over critics: [1, 2, 3] -> max 3 at sample 2 (max-then-min would give 5)
    assert target.item() == pytest.approx(1.0 + 0.9 * (3.0 - 0.5 * 0.7))
    algo.config.max_target_backup = False
    algo.config.backup_entropy = False
    target = algo.td_target(
        torch.tensor([1.0]),
        torch.tensor([1.0]),
        torch.zeros(1, OBS),
        torch.zeros(1, 3, ACT),
        log_prob,
        torch.tensor(0.5),
    )
    assert target.item() == pytest.approx(1.0 + 0.9 * 1.0)  # first sample, min(1, 4)


def test_actions_are_mapped_into_the_policy_box() -> None:
    algo = CQLSAC.build(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
    mapped = algo.preparation().to_policy_actions(torch.tensor([[-2.0], [0.0], [1.0], [2.0]]))
    np.testing.assert_allclose(mapped.numpy().ravel(), [-1.0, 0.0, 0.5, 1.0])
    # and back: SACPolicy scales the policy's [-1, 1] output to the env's bounds
    np.testing.assert_allclose(algo.policy.map_action(np.array([[-1.0], [0.5], [1.0]])).ravel(), [-2.0, 1.0, 2.0])


def test_log_std_offset_shifts_the_actors_log_std() -> None:
    """CORL's actor starts narrower: log σ = network output − 1 (then clamped as usual)."""
    obs = torch.zeros(4, OBS)
    plain = tiny_algorithm(log_std_offset=0.0)
    shifted = tiny_algorithm(log_std_offset=-1.0)
    shifted.actor.net.load_state_dict(plain.actor.net.state_dict())
    _, log_std = plain.actor.distribution_params(obs)
    _, shifted_log_std = shifted.actor.distribution_params(obs)
    torch.testing.assert_close(shifted_log_std, log_std - 1.0)


def test_corl_defaults_alpha_tuned_at_the_actors_rate_and_the_initial_multiplier() -> None:
    algo = tiny_algorithm(
        auto_alpha=True, alpha=1.0, actor_lr=2e-5, with_lagrange=True, lagrange_multiplier_init=math.e
    )
    assert algo._alpha_optim.param_groups[0]["lr"] == 2e-5  # --alpha-lr none: the actor's rate, as CORL
    assert float(algo.alpha) == pytest.approx(1.0)
    assert float(algo.lagrange_multiplier.detach()) == pytest.approx(math.e)
    assert tiny_algorithm(auto_alpha=True, alpha_lr=1e-3)._alpha_optim.param_groups[0]["lr"] == 1e-3


def test_corl_reward_normalisation_spans_the_finished_episodes_return_range() -> None:
    from offline_rl.data.stats import corl_reward_unit

    # episodes: [1, 2] (return 3), [4] (return 4), [0.5, 0.5] (return 1), then [100] cut off by the data
    rew = np.array([1, 2, 4, 0.5, 0.5, 100], np.float32)
    episode_end = np.array([0, 1, 1, 0, 1, 1], bool)
    finished = np.array([0, 1, 1, 0, 1, 0], bool)
    assert corl_reward_unit(rew, episode_end, finished) == pytest.approx(1000 / (4 - 1))


def three_episode_buffer(rew: np.ndarray) -> Any:
    """Rewards `rew` (five) in three episodes of two, one and two steps, each ending in a terminal."""
    from offline_rl.data.transitions import make_replay_buffer

    size = len(rew)
    return make_replay_buffer(
        obs=np.zeros((size, OBS), np.float32),
        act=np.zeros((size, ACT), np.float32),
        rew=rew,
        terminated=np.array([0, 1, 1, 0, 1], bool),
        truncated=np.zeros(size, bool),
        obs_next=np.zeros((size, OBS), np.float32),
        info={},
    )


def test_normalize_reward_scales_the_staged_rewards_before_scale_and_bias() -> None:
    rew = np.array([1, 2, 4, 0.5, 0.5], np.float32)
    buffer = three_episode_buffer(rew)
    algo = tiny_algorithm(normalize_reward=True, reward_scale=2.0, reward_bias=-1.0)
    staged = algo.staged(buffer).rew.cpu().numpy()
    np.testing.assert_allclose(staged, rew * (1000 / 3) * 2.0 - 1.0, rtol=1e-6)
    plain = tiny_algorithm(reward_scale=2.0, reward_bias=-1.0).staged(buffer).rew.cpu().numpy()
    np.testing.assert_allclose(plain, rew * 2.0 - 1.0, rtol=1e-6)


class ZeroCritic(torch.nn.Module):
    """Target critics that value everything at 0, so a TD target is its reward alone."""

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        return torch.zeros(2, obs.shape[0], actions.shape[1])


def zero_value_target(algo: CQLSAC, rew: torch.Tensor) -> torch.Tensor:
    size = rew.shape[0]
    return algo.td_target(
        rew,
        torch.ones(size),
        torch.zeros(size, OBS),
        torch.zeros(size, N, ACT),
        torch.zeros(size, N),
        torch.tensor(0.0),
        noise_scale=algo.reward_noise_scale,
    )


def test_reward_noise_is_fresh_at_every_update_and_scaled_with_the_reward() -> None:
    """TF-Agents' reward noise: ε ~ N(0, σ²) joins the raw reward, which --reward-scale then scales, so
    the prepared reward r·scale + bias gains scale·σ·ε; each update draws its own."""
    algo = tiny_algorithm(reward_noise_std=0.5, reward_scale=-2.0, reward_bias=3.0)
    algo.critic_target = ZeroCritic()
    assert algo.reward_noise_scale == pytest.approx(1.0)  # |−2| × 0.5
    prepared = torch.full((40_000,), 1.0 * -2.0 + 3.0)
    torch.manual_seed(0)
    first, second = zero_value_target(algo, prepared), zero_value_target(algo, prepared)
    assert not torch.equal(first, second)
    for target in (first, second):
        assert float(target.mean()) == pytest.approx(1.0, abs=0.02)  # ~4 standard errors
        assert float(target.std()) == pytest.approx(1.0, abs=0.02)


def test_reward_noise_follows_corls_reward_unit() -> None:
    buffer = three_episode_buffer(np.array([1, 2, 4, 0.5, 0.5], np.float32))
    algo = tiny_algorithm(normalize_reward=True, reward_scale=2.0, reward_noise_std=0.1)
    algo.staged(buffer)
    assert algo.reward_noise_scale == pytest.approx(0.1 * (1000 / 3) * 2.0)


def test_without_reward_noise_the_target_draws_nothing() -> None:
    """σ = 0 (the default) leaves the random stream alone: runs without noise draw what they always drew."""
    algo = tiny_algorithm()
    algo.critic_target = ZeroCritic()
    state = torch.random.get_rng_state()
    target = zero_value_target(algo, torch.tensor([1.0, -0.5]))
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.testing.assert_close(target, torch.tensor([1.0, -0.5]))
