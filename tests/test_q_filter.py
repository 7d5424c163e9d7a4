"""Q-filtered evaluation (`--eval-q-filter K`, jrl's `eval_with_q_filter`): the best of K actions from
π(·|s) and K uniform ones by the critics' minimum, drawn from numpy's generator and never torch's."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.algorithm.algorithm_base import policy_within_training_step
from tianshou.algorithm.modelfree.sac import SACPolicy
from tianshou.data import Batch

from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.algorithms.cql_sac.q_filter import CriticScores, QFilteredSACPolicy, q_filtered_actions
from offline_rl.algorithms.networks import ObservationNormalizer


class SignedCritics(torch.nn.Module):
    """Two critics, Q₁ = a − s and Q₂ = s − a on the first action and observation: their minimum is
    −|a − s| (the candidate nearest s wins), their mean is 0 for every action (the first one wins)."""

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        gap = actions[..., 0] - obs[:, :1]
        return torch.stack([gap, -gap])


def test_the_best_candidate_by_the_critics_minimum_is_played() -> None:
    mean, std = torch.tensor([[0.0], [1.0]]), torch.tensor([[1.0], [0.5]])
    normal = torch.tensor([[[0.5], [-1.0]], [[2.0], [0.0]]])  # π's candidates: tanh(mean + std·ε)
    uniform = torch.tensor([[[0.9], [-0.2]], [[-0.9], [0.8]]])
    normalizer = ObservationNormalizer(1)
    normalizer.fit(np.array([[8.0], [12.0]]))  # mean 10, std 2
    raw_obs = torch.tensor([[10.0], [11.0]])  # normalised: 0 and 0.5, the critics' view
    scores = CriticScores(SignedCritics(), normalizer).of(raw_obs)
    actions = q_filtered_actions(mean, std, normal, uniform, scores)
    # state 0: candidates tanh(0.5) = 0.462, tanh(-1) = -0.762, 0.9, -0.2; nearest 0 is the uniform -0.2.
    # state 1: tanh(2) = 0.964, tanh(1) = 0.762, -0.9, 0.8; nearest 0.5 is π's tanh(1) (0.8 is 0.3 away).
    torch.testing.assert_close(actions, torch.tensor([[-0.2], [float(np.tanh(1.0))]]))
    # Without the normaliser the critics would see s = 10 and 11: the largest candidates would win.
    unnormalised = q_filtered_actions(mean, std, normal, uniform, CriticScores(SignedCritics(), None).of(raw_obs))
    torch.testing.assert_close(unnormalised, torch.tensor([[0.9], [float(np.tanh(2.0))]]))


def cql_sac(eval_q_filter: int, device: str = "cpu") -> CQLSAC:
    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    act_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    config = CQLSACConfig(actor_hidden_sizes=[16], critic_layers=1, eval_q_filter=eval_q_filter)
    torch.manual_seed(0)
    return CQLSAC.build(obs_space, act_space, config, device=device)


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]


@pytest.mark.parametrize("device", DEVICES)
def test_the_evaluation_plays_the_filtered_action_from_numpys_draws_and_leaves_torchs_alone(device: str) -> None:
    algorithm = cql_sac(eval_q_filter=6, device=device)
    policy = algorithm.policy
    assert isinstance(policy, QFilteredSACPolicy)
    assert not any(name.startswith("critic") for name in policy.state_dict())  # the critics are the algorithm's
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    policy.eval()
    torch_states = torch.get_rng_state(), (torch.cuda.get_rng_state() if device == "cuda" else None)
    np.random.seed(7)
    played = policy(Batch(obs=obs, info=Batch())).act
    assert played.device.type == device and torch.equal(torch.get_rng_state(), torch_states[0])
    if device == "cuda":
        assert torch.equal(torch.cuda.get_rng_state(), torch_states[1])

    np.random.seed(7)  # the same draws, by hand
    normal, uniform = np.random.standard_normal((5, 6, 2)), np.random.uniform(-1.0, 1.0, (5, 6, 2))
    with torch.no_grad():
        (loc, scale), _ = policy.actor(obs)
        candidates = torch.cat(
            [torch.tanh(loc[:, None] + scale[:, None] * torch.as_tensor(normal, dtype=torch.float32, device=device)),
             torch.as_tensor(uniform, dtype=torch.float32, device=device)], dim=1,
        )  # fmt: skip
        q = algorithm.critic(algorithm.normalizer(torch.as_tensor(obs, device=device)), candidates).amin(dim=0)
    expected = candidates[torch.arange(5, device=device), q.argmax(dim=1)]
    torch.testing.assert_close(played, expected)
    mean_action = torch.tanh(loc)
    assert not torch.allclose(played, mean_action)


def test_training_steps_sample_as_sac_and_k_zero_is_sacs_own_policy() -> None:
    algorithm = cql_sac(eval_q_filter=4)
    obs = np.zeros((3, 3), dtype=np.float32)
    numpy_state = np.random.get_state()
    with policy_within_training_step(algorithm.policy):
        torch.manual_seed(1)
        sampled = algorithm.policy(Batch(obs=obs, info=Batch())).act
    assert np.random.get_state()[1].tolist() == numpy_state[1].tolist()  # no filter draws in training
    plain = cql_sac(eval_q_filter=0)
    assert type(plain.policy) is SACPolicy
    with policy_within_training_step(plain.policy):
        torch.manual_seed(1)
        torch.testing.assert_close(plain.policy(Batch(obs=obs, info=Batch())).act, sampled)


def test_a_filtered_policy_exports_its_mean_action_and_says_so(tmp_path: Path) -> None:
    from offline_rl.algorithms.export.standalone import QFilterNotExportedWarning, export_policy

    algorithm = cql_sac(eval_q_filter=4)
    obs = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)
    with pytest.warns(QFilterNotExportedWarning, match="Q filter of 4 samples .* plays the mean action"):
        report = export_policy(algorithm.policy, obs, tmp_path / "policy.pt2")
    assert report.max_difference is not None and report.max_difference < 1e-5
    assert "acts as the policy's mean action does" in report.describe()
    assert algorithm.policy.q_filter_samples == 4  # the check's mean action leaves the filter on
    actions = torch.export.load(str(tmp_path / "policy.pt2")).module()(torch.as_tensor(obs))
    with torch.no_grad():
        (loc, _), _ = algorithm.policy.actor(obs)
    np.testing.assert_allclose(actions.numpy(), algorithm.policy.map_action(torch.tanh(loc).numpy()), atol=1e-6)


def test_a_policy_without_the_filter_cannot_be_given_one() -> None:
    algorithm = cql_sac(eval_q_filter=0)
    with pytest.raises(ValueError, match="eval_q_filter needs a QFilteredSACPolicy"):
        CQLSAC(
            policy=algorithm.policy,
            critic=algorithm.critic,
            normalizer=algorithm.normalizer,
            config=CQLSACConfig(actor_hidden_sizes=[16], critic_layers=1, eval_q_filter=3),
        )


def test_a_filtered_run_trains_as_an_unfiltered_one_and_watch_reprints_its_scores(tmp_path: Path) -> None:
    """The filter changes what evaluations play, never what training draws; the checkpoint keeps K."""
    import re

    from test_d4rl_cql_example import TINY
    from test_exact_resume import assert_same_checkpoints, evaluations, run_folder, run_ok

    script, machine = "examples/d4rl_cql.py", [*TINY, "--threads", "1", "--epoch", "2", "--test-num", "2"]
    filtered = run_ok(script, *machine, "--eval-q-filter", "8", "--logdir", "filtered", cwd=tmp_path)
    plain = run_ok(script, *machine, "--logdir", "plain", cwd=tmp_path)
    checkpoints = [run_folder(tmp_path / name) / "checkpoint.pth" for name in ("filtered", "plain")]
    assert_same_checkpoints(*checkpoints, exact=True)
    assert evaluations(filtered).keys() == evaluations(plain).keys() and evaluations(filtered) != evaluations(plain)

    def last(stdout: str) -> str:
        (match,) = re.findall(r"last evaluation (return -?[\d.]+ ± [\d.]+)", stdout)
        return match

    policy_last = str(run_folder(tmp_path / "filtered") / "policy_last.pth")
    watched = run_ok(script, "--watch", "--resume-path", policy_last, "--test-num", "2", cwd=tmp_path)
    assert f"{last(filtered)} over 2 episodes" in watched  # K = 8 comes back from the checkpoint
    unfiltered = run_ok(
        script, "--watch", "--resume-path", policy_last, "--test-num", "2", "--eval-q-filter", "0", cwd=tmp_path
    )
    assert f"{last(plain)} over 2 episodes" in unfiltered  # the same weights' mean action: the plain run's score
