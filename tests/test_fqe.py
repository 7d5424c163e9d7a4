"""Fitted Q evaluation (offline_rl.algorithms.fqe): its target and loss by hand, and its estimates on small MDPs
whose values are known."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_any_tianshou_buffer import partially_filled_vector_buffer
from test_d4rl_cql_example import TINY
from test_discrete_staging import frame_pool_buffer, frame_stack_buffer, plain_buffer
from torch import nn

from conftest import run_in_process
from offline_rl.algorithms.fqe.fqe import (
    BufferRows,
    FittedQEvaluation,
    FQEBatch,
    episode_starts,
    fitted_q_evaluation,
    fqe_target,
    fqe_transitions,
    sampled_rows,
)
from offline_rl.data.transitions import make_replay_buffer

GAMMA = 0.9


def test_the_target_is_the_reward_plus_the_weighted_bootstrap() -> None:
    target = fqe_target(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.9, 0.0, 0.9]), torch.tensor([10.0, 10.0, -4.0]))
    assert torch.allclose(target, torch.tensor([1.0 + 9.0, 2.0, 3.0 - 3.6]))


def test_the_data_bootstraps_through_time_outs_and_stops_at_terminals() -> None:
    buffer = chain_buffer(2)  # a 3-step episode ending terminal, then a 2-step one ending on a time-out
    indices = np.arange(5)
    transitions = fqe_transitions(buffer, indices, discrete=False, gamma=GAMMA, device=torch.device("cpu"))
    _obs, _act, returns, bootstrap, _obs_next = transitions.take(torch.arange(5))
    assert returns.tolist() == [1.0] * 5
    assert bootstrap.tolist() == pytest.approx([GAMMA, GAMMA, 0.0, GAMMA, GAMMA])


class TableQ(nn.Module):
    """Q(s, a) = table[s, a] for integer states and actions."""

    def __init__(self, table: list[list[float]]) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.tensor(table))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.table[obs.long().reshape(-1), actions.long().reshape(-1)]


def test_the_loss_is_the_mean_squared_error_against_the_target_network() -> None:
    fit = FittedQEvaluation(TableQ([[1.0, 2.0], [3.0, 4.0]]), lr=0.1, target_update_freq=2, device="cpu")
    fit.q_target.table.data = torch.tensor([[10.0, 20.0], [30.0, 40.0]])  # unlike the online table
    batch = FQEBatch(
        obs=torch.tensor([0, 1]),
        act=torch.tensor([1, 0]),
        returns=torch.tensor([1.0, -1.0]),
        bootstrap=torch.tensor([0.5, 0.0]),  # γ 0.5; the second transition is terminal
        obs_next=torch.tensor([1, 0]),
        next_act=torch.tensor([1, 1]),
    )
    # targets: 1 + 0.5·Q̄(1, 1) = 21 and -1 (terminal); online values Q(0, 1) = 2 and Q(1, 0) = 3
    assert fit.loss(batch).item() == pytest.approx(((2 - 21) ** 2 + (3 + 1) ** 2) / 2)
    fit.update(batch)
    assert fit.q_target.table[0, 0].item() == 10.0  # not yet copied
    fit.update(batch)
    assert torch.equal(fit.q_target.table, fit.q.table.detach())  # copied every 2 updates


def test_episode_starts_follow_every_end() -> None:
    assert episode_starts(np.array([False, True, False, False, True, True])).tolist() == [0, 2, 5]


def test_batch_rows_repeat_for_a_seed_across_draws() -> None:
    rows = list(sampled_rows(7, 3, 2500, seed=1, device=torch.device("cpu")))  # three draws of up to 1000
    assert len(rows) == 2500 and all(r.shape == (3,) and int(r.min()) >= 0 and int(r.max()) < 7 for r in rows)
    again = list(sampled_rows(7, 3, 2500, seed=1, device=torch.device("cpu")))
    assert all(torch.equal(a, b) for a, b in zip(rows, again, strict=True))
    assert not torch.equal(torch.stack(rows[:1000]), torch.stack(rows[1000:2000]))  # the stream goes on


def chain_buffer(episodes: int, seed: int = 0):
    """States 0 → 1 → 2 → 3 (one-hot), reward 1 a step, whatever the action: half the episodes run to
    the terminal state 3, half stop at state 2 on a time-out. π's discounted value at 0: 1 + γ + γ²."""
    generator = np.random.default_rng(seed)
    eye = np.eye(4, dtype=np.float32)
    obs, obs_next, terminated, truncated = [], [], [], []
    for episode in range(episodes):
        full = episode % 2 == 0
        steps = 3 if full else 2
        for t in range(steps):
            obs.append(eye[t]), obs_next.append(eye[t + 1])
            terminated.append(full and t == steps - 1), truncated.append(not full and t == steps - 1)
    size = len(obs)
    return make_replay_buffer(
        obs=np.array(obs),
        act=generator.uniform(-1, 1, (size, 1)).astype(np.float32),
        rew=np.ones(size, np.float32),
        terminated=np.array(terminated),
        truncated=np.array(truncated),
        obs_next=np.array(obs_next),
    )


def zero_action_estimate(buffer, action_size: int, **settings):
    """FQE of the continuous policy that always acts 0, with γ = GAMMA."""
    zeros = lambda obs: np.zeros((len(obs), action_size), np.float32)  # noqa: E731
    return fitted_q_evaluation(buffer, zeros, discrete=False, action_size=action_size, gamma=GAMMA, **settings)


def test_a_time_out_is_not_an_end_of_the_value() -> None:
    settings = {"lr": 3e-3, "target_update_freq": 50, "hidden_sizes": [32]}
    estimate = zero_action_estimate(chain_buffer(40), 1, updates=1500, batch_size=64, **settings)
    truth = 1 + GAMMA + GAMMA**2  # 2.71; treating the time-outs as terminals would give 2.305
    assert estimate.value == pytest.approx(truth, abs=0.08)
    assert estimate.behaviour_return == pytest.approx((truth + 1 + GAMMA) / 2)  # the data's own episodes
    assert estimate.starts == 40 and estimate.updates == 1500 and estimate.gamma == GAMMA


def bandit_buffer(size: int, *, discrete: bool, seed: int = 0):
    """One-step episodes from one state; the reward is the action (continuous: a ∈ [-1, 1]; discrete:
    the index 0, 1 or 2). The data's actions are uniform."""
    generator = np.random.default_rng(seed)
    act = generator.integers(0, 3, size) if discrete else generator.uniform(-1, 1, (size, 1)).astype(np.float32)
    return make_replay_buffer(
        obs=np.ones((size, 2), np.float32),
        act=act,
        rew=np.asarray(act, np.float32).reshape(size),
        terminated=np.ones(size, bool),
        truncated=np.zeros(size, bool),
        obs_next=np.ones((size, 2), np.float32),
    )


def bandit_estimate(buffer, policy: float, *, discrete: bool, device: str = "cpu"):
    """FQE of the constant policy `policy` on a bandit buffer."""
    shape = (-1,) if discrete else (-1, 1)
    return fitted_q_evaluation(
        buffer,
        lambda obs: np.full(len(obs), policy, np.int64 if discrete else np.float32).reshape(shape),
        discrete=discrete,
        action_size=3 if discrete else 1,
        gamma=GAMMA,
        updates=800,
        batch_size=64,
        lr=3e-3,
        hidden_sizes=[32],
        device=device,
    )


@pytest.mark.parametrize(("discrete", "policy", "value"), [(False, 0.5, 0.5), (True, 2, 2.0), (True, 0, 0.0)])
def test_the_estimate_is_the_evaluated_policys_not_the_datas(discrete: bool, policy: float, value: float) -> None:
    buffer = bandit_buffer(600, discrete=discrete)
    estimate = bandit_estimate(buffer, policy, discrete=discrete)
    assert estimate.value == pytest.approx(value, abs=0.1)
    assert estimate.behaviour_return == pytest.approx(float(np.mean(buffer.rew)))


def test_continuous_actions_meet_the_data_in_its_units(monkeypatch) -> None:
    """π acts in the env's units; a buffer a Tianshou collector filled holds the policy's [-1, 1] box."""
    from types import SimpleNamespace

    import gymnasium as gym

    from offline_rl.algorithms.export import acting
    from offline_rl.data import set_action_units
    from offline_rl.runs.value_estimate import policy_in_data_units

    monkeypatch.setattr(acting, "evaluation_actions", lambda policy, obs: np.array([[2.0], [-1.0]]))
    policy = SimpleNamespace(action_space=gym.spaces.Box(-2.0, 2.0, (1,)))
    dataset = bandit_buffer(4, discrete=False)
    assert policy_in_data_units(policy, dataset, discrete=False)(np.zeros((2, 2))).tolist() == [[2.0], [-1.0]]
    collected = set_action_units(bandit_buffer(4, discrete=False), "policy")
    assert policy_in_data_units(policy, collected, discrete=False)(np.zeros((2, 2))).tolist() == [[1.0], [-0.5]]


def estimate_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("fitted Q evaluation of ")]


def test_d4rl_cql_estimates_a_trained_run_on_its_data_without_playing(tmp_path) -> None:
    trained = run_in_process("examples/d4rl_cql.py", *TINY, "--epoch", "1", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-2000:]
    (policy,) = (tmp_path / "log").rglob("policy.pth")
    files_before = {path: path.read_bytes() for path in policy.parent.iterdir()}
    args = ("--resume-path", str(policy), "--fqe-updates", "40", "--fqe-hidden-sizes", "16")
    estimated = run_in_process("examples/d4rl_cql.py", *args, cwd=tmp_path)
    assert estimated.returncode == 0, estimated.stderr[-2000:]
    (line,) = estimate_lines(estimated.stdout)
    assert f"fitted Q evaluation of {policy} on Pendulum-v1-random: discounted return " in line
    assert "episode starts (γ 0.99, 40 updates, last TD loss " in line and "; the data's own episodes: " in line
    assert "evaluation before training" not in estimated.stdout and "done:" not in estimated.stdout  # no env played
    assert {path: path.read_bytes() for path in policy.parent.iterdir()} == files_before  # nothing written
    saved = run_in_process("examples/d4rl_cql.py", *args, "--fqe-output", "out/estimate.json", cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr[-2000:]
    figures = json.loads((tmp_path / "out/estimate.json").read_text())
    assert figures["policy"] == str(policy) and figures["data"] == "Pendulum-v1-random"
    assert f"discounted return {figures['fqe_value']:.2f} estimated" in estimate_lines(saved.stdout)[0]
    assert figures["fqe_updates"] == 40 and figures["gamma"] == 0.99 and figures["episode_starts"] > 0
    both = run_in_process("examples/d4rl_cql.py", *args, "--watch", cwd=tmp_path)
    assert both.returncode == 2 and "Traceback" not in both.stderr
    assert both.stderr.strip().splitlines()[-1] == "error: give one of --watch, --export-policy and --fqe-updates"


def test_atari_cql_estimates_a_discrete_run(tmp_path) -> None:
    from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset

    collect_dataset(CollectConfig(task="CartPole-v1", output=tmp_path / "cartpole.hdf5", size=400, progress=False))
    small = ("--num-quantiles", "4", "--hidden-sizes", "16", "--test-num", "1", "--batch-size", "16")
    trained = run_in_process(
        "examples/atari_cql.py", "--load-buffer-name", "cartpole.hdf5", "--epoch", "1", "--step-per-epoch", "10",
        *small, cwd=tmp_path,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    (policy,) = (tmp_path / "log").rglob("policy.pth")
    estimated = run_in_process(
        "examples/atari_cql.py", "--resume-path", str(policy), "--fqe-updates", "30", "--fqe-lr", "0.001", cwd=tmp_path
    )
    assert estimated.returncode == 0, estimated.stderr[-2000:]
    (line,) = estimate_lines(estimated.stdout)
    assert " on CartPole-v1-random: discounted return " in line and "(γ 0.99, 30 updates" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--fqe-updates", "5"), "--fqe-updates needs --resume-path"),
        (("--fqe-updates", "-1"), "--fqe-updates -1: expected at least 0"),
        (("--fqe-lr", "0"), "--fqe-lr 0.0: expected a positive number"),
        (("--fqe-output", "estimate.json"), "--fqe-output: add --fqe-updates N (the estimate)"),
    ],
)
def test_bad_estimate_flags_are_one_line(tmp_path, args, message) -> None:
    result = run_in_process("examples/d4rl_cql.py", *args, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]


def test_frame_stacks_are_estimated_with_the_nature_cnn() -> None:
    """Atari data: π and Q see the buffer's 4-frame stacks; the starts are its episodes' first steps."""
    from offline_rl.data import FrameStackBufferBuilder

    generator = np.random.default_rng(0)
    builder = FrameStackBufferBuilder(max_frames=64)
    obs = generator.integers(0, 255, (4, 84, 84), dtype=np.uint8)
    for step in range(30):
        frame = generator.integers(0, 255, (1, 84, 84), dtype=np.uint8)
        following = np.concatenate([obs[1:], frame])
        builder.add(obs, step % 3, 1.0, step in (9, 29), step == 19, following)
        obs = following
    buffer = builder.build()
    seen = []

    def act(stacks: np.ndarray) -> np.ndarray:
        seen.append(stacks.shape[1:])
        return np.zeros(len(stacks), np.int64)

    estimate = fitted_q_evaluation(buffer, act, discrete=True, action_size=3, gamma=GAMMA, updates=2, batch_size=4)
    assert estimate.starts == 3 and set(seen) == {(4, 84, 84)} and np.isfinite(estimate.value)


def tianshou_frame_stack_buffer():
    """Tianshou's own frame stacking (`stack_num` 3, built at sampling time), which cannot be staged."""
    from tianshou.data import Batch, ReplayBuffer

    buffer = ReplayBuffer(16, stack_num=3)
    for step in range(11):
        buffer.add(
            Batch(
                obs=np.full(2, step, np.float32),
                act=step % 3,
                rew=float(step),
                terminated=step == 4,
                truncated=step == 8,
                obs_next=np.full(2, step + 0.5, np.float32),
                info=Batch(),
            )
        )
    return buffer


@pytest.mark.parametrize(
    "make_buffer",
    [plain_buffer, frame_stack_buffer, frame_pool_buffer, partially_filled_vector_buffer, tianshou_frame_stack_buffer],
)
def test_fqe_batches_are_the_buffers_transitions(make_buffer) -> None:
    """Whether staged (on the device or in host memory) or read per batch, a batch is the buffer's own."""
    buffer = make_buffer()
    indices = np.asarray(buffer.sample_indices(0))
    transitions = fqe_transitions(buffer, indices, discrete=False, gamma=GAMMA, device=torch.device("cpu"))
    assert isinstance(transitions, BufferRows) == (make_buffer is tianshou_frame_stack_buffer)
    rows = torch.tensor([0, len(indices) - 1, 2, 2, 1])
    obs, act, returns, bootstrap, obs_next = transitions.take(rows)
    expected = buffer[indices[rows.numpy()]]
    np.testing.assert_array_equal(obs.numpy(), expected.obs)
    np.testing.assert_array_equal(obs_next.numpy(), expected.obs_next)
    np.testing.assert_allclose(act.numpy(), np.asarray(expected.act, np.float32))
    np.testing.assert_allclose(returns.numpy(), expected.rew, rtol=1e-6)
    np.testing.assert_allclose(bootstrap.numpy(), GAMMA * (1.0 - expected.terminated), rtol=1e-6)


def test_a_partially_filled_vector_buffer_is_estimated_from_its_valid_rows_and_episodes() -> None:
    """4 sub-buffers of 10 slots holding 5 steps each (rewards 0..4, terminal at step 2): 8 episodes, two
    per sub-buffer, none bridged across sub-buffers or into their empty slots."""
    estimate = zero_action_estimate(partially_filled_vector_buffer(), 2, updates=3, batch_size=8, hidden_sizes=[8])
    assert estimate.starts == 8
    assert estimate.behaviour_return == pytest.approx(((GAMMA + 2 * GAMMA**2) + (3 + 4 * GAMMA)) / 2)


def test_a_tianshou_frame_stacked_buffer_is_estimated_through_its_own_sampling() -> None:
    seen = []

    def act(obs: np.ndarray) -> np.ndarray:
        seen.append(obs.shape[1:])
        return np.zeros(len(obs), np.int64)

    buffer = tianshou_frame_stack_buffer()
    estimate = fitted_q_evaluation(
        buffer, act, discrete=True, action_size=3, gamma=GAMMA, updates=3, batch_size=4, hidden_sizes=[8]
    )
    assert set(seen) == {(3, 2)} and estimate.starts == 3 and np.isfinite(estimate.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fqe_on_cuda_estimates_as_on_the_cpu() -> None:
    buffer = bandit_buffer(600, discrete=True)
    estimates = {device: bandit_estimate(buffer, 2, discrete=True, device=device).value for device in ("cpu", "cuda")}
    assert estimates["cuda"] == pytest.approx(2.0, abs=0.1)
    assert estimates["cuda"] == pytest.approx(estimates["cpu"], abs=0.05)
