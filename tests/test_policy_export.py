"""`offline_rl.algorithms.export.standalone`: a trained policy as an ONNX file or a torch.export program that
acts as the Tianshou policy does in evaluation, read back with onnxruntime or torch alone."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from offline_rl.algorithms.cql_sac import CQLSAC
from offline_rl.algorithms.cql_sac.config import CQLSACConfig
from offline_rl.algorithms.discrete_cql import CQLQRDQN
from offline_rl.algorithms.discrete_cql.config import DiscreteCQLConfig
from offline_rl.algorithms.export.acting import DeterministicActorPolicy, evaluation_actions
from offline_rl.algorithms.export.standalone import export_policy, file_metadata, require_export_tools
from offline_rl.core.errors import OfflineRLError

FORMATS = ["policy.onnx", "policy.pt2"]
LOW, HIGH = np.array([-2.0, 0.0, -0.5], dtype=np.float32), np.array([2.0, 3.0, 0.5], dtype=np.float32)


def run_file(path: Path, obs: np.ndarray) -> np.ndarray:
    """The file's actions as a user without offline_rl gets them."""
    if path.suffix == ".onnx":
        import onnxruntime  # here: a bare GPU machine runs the .pt2 tests without it

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(["action"], {"obs": obs})[0]
    return torch.export.load(str(path)).module()(torch.as_tensor(obs)).numpy()  # no torch.no_grad() needed


def trained_looking_cql_sac(device: str = "cpu") -> CQLSAC:
    """A CQL-SAC whose actor is not at its initial, near-zero output: random weights, a fitted
    normaliser and action bounds other than ±1, so that each of them shows in the actions."""
    obs_space = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
    act_space = gym.spaces.Box(LOW, HIGH, dtype=np.float32)
    config = CQLSACConfig(actor_hidden_sizes=[32, 32], critic_layers=1)
    algorithm = CQLSAC.build(obs_space, act_space, config, device=device)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in algorithm.actor.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator).to(parameter.device) * 0.2)
    algorithm.actor.normalizer.fit(np.random.default_rng(0).normal(3.0, 2.0, size=(100, 5)))
    return algorithm


@pytest.mark.parametrize("name", FORMATS)
def test_a_continuous_policy_file_acts_as_the_evaluation_does(tmp_path: Path, name: str) -> None:
    algorithm = trained_looking_cql_sac()
    rng = np.random.default_rng(1)
    observations = rng.normal(3.0, 2.0, size=(16, 5)).astype(np.float32)
    report = export_policy(algorithm.policy, observations, tmp_path / name)
    assert report.path == tmp_path / name and report.checked_on == 16
    assert report.input == "obs float32 (batch, 5)" and report.output == "action float32 (batch, 3)"
    assert report.max_difference is not None and report.max_difference < 1e-5
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary left beside it

    # By hand: normalise, the actor's mean half, tanh, then onto the bounds [low, high].
    fresh = rng.normal(3.0, 2.0, size=(7, 5)).astype(np.float32)  # another batch size: the file's is free
    actor = algorithm.actor
    with torch.no_grad():
        normalised = (torch.as_tensor(fresh) - actor.normalizer.mean) / actor.normalizer.std
        mean = torch.nn.Sequential(*actor.net)(normalised)[:, :3]
    by_hand = LOW + (np.tanh(mean.numpy()) + 1.0) / 2.0 * (HIGH - LOW)
    actions = run_file(tmp_path / name, fresh)
    np.testing.assert_allclose(actions, by_hand, atol=1e-5)
    np.testing.assert_allclose(actions, evaluation_actions(algorithm.policy, fresh), atol=1e-5)
    assert np.ptp(actions[:, 1]) > 0.1 and actions[:, 1].min() >= 0.0  # bounds and weights both show
    single = run_file(tmp_path / name, fresh[:1])
    np.testing.assert_allclose(single, by_hand[:1], atol=1e-5)


def test_the_evaluation_actions_are_the_deterministic_ones() -> None:
    """The reference the files are checked against: Tianshou's SAC policy in eval mode acts with the
    mean (the same action twice), mapped onto the env's bounds, and leaves the policy's mode as it was."""
    algorithm = trained_looking_cql_sac()
    obs = np.random.default_rng(2).normal(size=(4, 5)).astype(np.float32)
    algorithm.policy.train()
    first, second = evaluation_actions(algorithm.policy, obs), evaluation_actions(algorithm.policy, obs)
    np.testing.assert_array_equal(first, second)
    assert algorithm.policy.training
    module = DeterministicActorPolicy(algorithm.actor, LOW, HIGH, scaling=True)
    with torch.no_grad():
        np.testing.assert_allclose(module(torch.as_tensor(obs)).numpy(), first, atol=1e-6)


def greedy(algorithm: CQLQRDQN, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        values = algorithm.policy.model(obs)[0].mean(dim=-1)
    return values.argmax(dim=-1).numpy()


@pytest.mark.parametrize("name", FORMATS)
def test_an_atari_policy_file_takes_frame_stacks_and_acts_greedily(tmp_path: Path, name: str) -> None:
    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    algorithm = CQLQRDQN.build(obs_space, gym.spaces.Discrete(6), DiscreteCQLConfig(num_quantiles=8))
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(12, 4, 84, 84), dtype=np.uint8)
    report = export_policy(algorithm.policy, frames, tmp_path / name)
    assert report.input == "obs uint8 (batch, 4, 84, 84)" and report.output == "action int64 (batch)"
    assert report.max_difference is None
    fresh = rng.integers(0, 256, size=(5, 4, 84, 84), dtype=np.uint8)
    actions = run_file(tmp_path / name, fresh)
    np.testing.assert_array_equal(actions, greedy(algorithm, fresh))
    np.testing.assert_array_equal(actions, evaluation_actions(algorithm.policy, fresh))


@pytest.mark.parametrize("name", FORMATS)
def test_a_vector_task_policy_file_acts_greedily(tmp_path: Path, name: str) -> None:
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    torch.manual_seed(0)
    algorithm = CQLQRDQN.build(obs_space, gym.spaces.Discrete(3), DiscreteCQLConfig(hidden_sizes=[16]))
    obs = np.random.default_rng(3).normal(scale=10.0, size=(40, 4)).astype(np.float32)
    export_policy(algorithm.policy, obs, tmp_path / name)
    actions = run_file(tmp_path / name, obs)
    assert len(set(actions.tolist())) > 1  # the check below tells actions apart
    np.testing.assert_array_equal(actions, greedy(algorithm, obs))


@pytest.mark.parametrize("name", FORMATS)
def test_a_file_that_acts_otherwise_is_not_kept(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a file whose actions are off (here its bounds, as if the policy's action
    scaling were lost) is an error naming it, and nothing is left at its path."""
    import offline_rl.algorithms.export.standalone as deployment

    algorithm = trained_looking_cql_sac()
    unscaled = DeterministicActorPolicy(algorithm.actor, np.zeros(3), np.ones(3), scaling=False)
    monkeypatch.setattr(deployment, "acting_module", lambda policy: unscaled)
    obs = np.random.default_rng(4).normal(size=(8, 5)).astype(np.float32)
    with pytest.raises(OfflineRLError, match=r"not written, its actions differ from the policy's by up to"):
        export_policy(algorithm.policy, obs, tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_a_discrete_file_that_acts_otherwise_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import offline_rl.algorithms.export.standalone as deployment

    algorithm = CQLQRDQN.build(
        gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(3), DiscreteCQLConfig(hidden_sizes=[16])
    )

    class Worst(deployment.GreedyDiscretePolicy):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.action_values(obs).argmin(dim=-1)

    monkeypatch.setattr(deployment, "acting_module", lambda policy: Worst(policy.model))
    obs = np.random.default_rng(5).normal(size=(8, 4)).astype(np.float32)
    with pytest.raises(OfflineRLError, match=r"greedy actions differ from the policy's on \d+ of 8"):
        export_policy(algorithm.policy, obs, tmp_path / "policy.onnx")
    assert list(tmp_path.iterdir()) == []


def test_formats_and_tools_are_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OfflineRLError, match=r"--export-policy policy\.pth: expected a file name ending in \.onnx"):
        require_export_tools("policy.pth")
    require_export_tools("policy.pt2")
    require_export_tools("policy.ONNX")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    needs = r"ONNX export needs onnxscript: pip install onnxscript \(this project's \[onnx\] extra\)"
    with pytest.raises(OfflineRLError, match=needs):
        require_export_tools("policy.onnx")
    require_export_tools("policy.pt2")  # torch alone writes a torch.export program


def test_a_policy_of_a_kind_without_an_export_is_refused() -> None:
    from offline_rl.algorithms.export.acting import acting_module

    with pytest.raises(TypeError, match="cannot export a object"):
        acting_module(object())


@pytest.mark.parametrize("name", FORMATS)
def test_policies_built_with_tianshous_own_networks_export_too(tmp_path: Path, name: str) -> None:
    """The drop-ins' users build Tianshou's networks (`Net`, `ContinuousActorProbabilistic`): their
    policies export the same way. A SAC policy set to sample in evaluation exports its mean action."""
    from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
    from tianshou.algorithm.modelfree.sac import SACPolicy
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic

    torch.manual_seed(0)
    env = gym.make("Pendulum-v1")
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=(3,), hidden_sizes=[16]), action_shape=(1,), unbounded=True
    )
    sampling = SACPolicy(actor=actor, action_space=env.action_space, deterministic_eval=False)  # scaled to ±2
    obs = np.random.default_rng(6).normal(size=(16, 3)).astype(np.float32)
    report = export_policy(sampling, obs, tmp_path / name)
    assert report.max_difference is not None and report.max_difference < 1e-5
    assert not sampling.deterministic_eval  # put back as it was
    with torch.no_grad():
        mean = actor(torch.as_tensor(obs))[0][0].numpy()
    np.testing.assert_allclose(run_file(tmp_path / name, obs), 2.0 * np.tanh(mean), atol=1e-5)

    model = Net(state_shape=(4,), action_shape=(3,), hidden_sizes=[16], softmax=False, num_atoms=8)
    qrdqn = QRDQNPolicy(model=model, action_space=gym.spaces.Discrete(3))
    states = np.random.default_rng(7).normal(size=(32, 4)).astype(np.float32)
    export_policy(qrdqn, states, tmp_path / f"discrete-{name}")
    with torch.no_grad():
        greedy_actions = model(states)[0].mean(dim=-1).argmax(dim=-1).numpy()
    np.testing.assert_array_equal(run_file(tmp_path / f"discrete-{name}", states), greedy_actions)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_policy_trained_on_a_gpu_in_tf32_exports_and_checks_in_float32(tmp_path: Path) -> None:
    """On a GPU the examples multiply in TF32, whose rounding can move actions: the check compares the
    file with the policy computed as the file computes (CPU, float32), so a correct file is kept,
    and the policy stays on its device."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        algorithm = trained_looking_cql_sac("cuda")
        obs = np.random.default_rng(8).normal(3.0, 2.0, size=(64, 5)).astype(np.float32)
        report = export_policy(algorithm.policy, obs, tmp_path / "policy.pt2")
        assert report.max_difference is not None and report.max_difference < 1e-5
        assert next(algorithm.actor.parameters()).device.type == "cuda"
        assert torch.get_float32_matmul_precision() == "high"
        frames = np.random.default_rng(9).integers(0, 256, size=(16, 4, 84, 84), dtype=np.uint8)
        atari = CQLQRDQN.build(
            gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6), DiscreteCQLConfig(), device="cuda"
        )
        export_policy(atari.policy, frames, tmp_path / "atari.pt2")
        with torch.no_grad():
            cpu_values = atari.policy.model.cpu()(frames)[0].mean(dim=-1)
        chosen = run_file(tmp_path / "atari.pt2", frames)
        np.testing.assert_allclose(cpu_values[np.arange(16), chosen], cpu_values.max(dim=-1).values, atol=1e-5)
    finally:
        torch.set_float32_matmul_precision(previous)


@pytest.mark.parametrize("name", FORMATS)
def test_a_file_describes_itself(tmp_path: Path, name: str) -> None:
    """What the file takes and gives, how it acts, and what the caller adds (the examples: task,
    checkpoint, env spec), readable without offline_rl as each format's own metadata."""
    algorithm = trained_looking_cql_sac()
    obs = np.random.default_rng(10).normal(size=(4, 5)).astype(np.float32)
    report = export_policy(algorithm.policy, obs, tmp_path / name, metadata={"task": "Made-up-v0"})
    described = file_metadata(tmp_path / name)
    assert described == report.metadata
    assert described["task"] == "Made-up-v0" and described["producer"].startswith("offline_rl ")
    assert described["obs"] == "float32 (batch, 5)" and described["action"] == "float32 (batch, 3)"
    assert "mapped from [-1, 1] onto the bounds low [-2.0, 0.0, -0.5], high [2.0, 3.0, 0.5]" in described["acting"]
    if name.endswith(".onnx"):
        import onnxruntime

        session = onnxruntime.InferenceSession(str(tmp_path / name), providers=["CPUExecutionProvider"])
        assert session.get_modelmeta().custom_metadata_map["task"] == "Made-up-v0"
    else:
        import json

        extra = {"offline_rl.json": ""}
        torch.export.load(str(tmp_path / name), extra_files=extra)
        assert json.loads(extra["offline_rl.json"])["task"] == "Made-up-v0"
