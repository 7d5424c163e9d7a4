"""Atari pipeline end to end, and discrete CQL learning on a cheap task."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.algorithm.algorithm_base import policy_within_training_step
from tianshou.data import Collector
from tianshou.env import DummyVectorEnv

from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig
from offline_rl.data import dataset_info, load_buffer
from offline_rl.data.transitions import make_replay_buffer


def test_pong_collect_save_train_evaluate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Atari pipeline in one process (the command-line wrapper has its own tests): collect with
    the QR-DQN script, train discrete CQL on the buffer, evaluate on whole games."""
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.examples import atari_cql as atari_cql_program
    from offline_rl.examples import atari_qrdqn as atari_qrdqn_program

    monkeypatch.chdir(tmp_path)
    buffer_path = tmp_path / "pong.hdf5"
    collect = ["--task", "PongNoFrameskip-v4", "--watch", "--eps-test", "1.0", "--buffer-size", "1000"]
    small = ["--training-num", "2", "--num-quantiles", "8"]
    summary = atari_qrdqn_program.main([*collect, *small, "--save-buffer-name", str(buffer_path)])
    assert summary["transitions"] == 1000 and summary["bytes_per_transition"] < 9000  # each frame once
    buffer = load_buffer(buffer_path)
    assert len(buffer) == 1000 and buffer[np.array([0])].obs.shape == (1, 4, 84, 84)

    assert dataset_info(buffer)["task"] == "PongNoFrameskip-v4"  # the collection says what it played

    budget = ["--epoch", "1", "--update-per-epoch", "20", "--test-num", "1", "--num-quantiles", "8"]
    data = ["--load-buffer-name", str(buffer_path), "--min-q-weight", "50"]  # the README's command: no --task
    result = atari_cql_program.main([*data, *budget, "--logdir", str(tmp_path / "log")])
    assert result["updates"] == 20 and result["last"] is not None and result["task"] == "PongNoFrameskip-v4"

    # The trained policy as an ONNX file: it takes the evaluation env's uint8 frame stacks.
    onnx_file = tmp_path / "pong.onnx"
    last = Path(result["log_path"]) / "policy_last.pth"
    exported = atari_cql_program.main(["--resume-path", str(last), "--export-policy", str(onnx_file)])
    assert exported["format"] == "ONNX" and exported["task"] == "PongNoFrameskip-v4"
    import onnxruntime

    session = onnxruntime.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    (obs_input,) = session.get_inputs()
    assert obs_input.type == "tensor(uint8)" and obs_input.shape[1:] == [4, 84, 84]
    # Its description rebuilds the evaluation env, wrappers and protocol included, and the file plays it.
    spec = gym.envs.registration.EnvSpec.from_json(session.get_modelmeta().custom_metadata_map["env_spec"])
    env = gym.make(spec)
    assert env.observation_space.shape == (4, 84, 84) and spec.kwargs["repeat_action_probability"] == 0.25
    obs, _ = env.reset(seed=0)
    action = session.run(["action"], {"obs": np.asarray(obs)[None]})[0]
    assert action.shape == (1,) and 0 <= int(action[0]) < 6
    env.close()

    # Breakout has 4 of Pong's 6 actions: the fix named is the buffer's own game, not a new collection.
    with pytest.raises(OfflineRLError, match=r"but ALE/Breakout-v5 has 4 actions; it was recorded on Pong"):
        atari_cql_program.main(["--task", "ALE/Breakout-v5", *data, *budget])

    with pytest.raises(OfflineRLError, match=r"create one with: python examples/atari_qrdqn\.py"):
        atari_cql_program.main(["--task", "PongNoFrameskip-v4", "--load-buffer-name", str(tmp_path / "absent.hdf5")])


def scripted_cartpole_dataset(episodes: int, noise: float, seed: int):
    """A balancing controller with ε-random actions: decent data, far from perfect."""
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    columns: dict[str, list] = {k: [] for k in ("obs", "act", "rew", "terminated", "truncated", "obs_next")}
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            action = int(obs[2] + 0.5 * obs[3] > 0)
            if rng.random() < noise:
                action = int(rng.integers(2))
            next_obs, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(columns, (obs, action, reward, terminated, truncated, next_obs), strict=True):
                columns[key].append(value)
            obs, total, done = next_obs, total + reward, terminated or truncated
        returns.append(total)
    arrays = {k: np.asarray(v) for k, v in columns.items()}
    buffer = make_replay_buffer(
        obs=arrays["obs"].astype(np.float32),
        act=arrays["act"].astype(np.int64),
        rew=arrays["rew"],
        terminated=arrays["terminated"],
        truncated=arrays["truncated"],
        obs_next=arrays["obs_next"].astype(np.float32),
    )
    return buffer, float(np.mean(returns))


def test_discrete_cql_beats_its_cartpole_data() -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    buffer, data_return = scripted_cartpole_dataset(episodes=60, noise=0.5, seed=0)
    env = gym.make("CartPole-v1")
    algo = CQLQRDQN.build(
        env.observation_space,
        env.action_space,
        DiscreteCQLConfig(
            num_quantiles=16,
            lr=1e-3,
            cql_weight=5.0,
            target_update_freq=100,
            n_step=1,
            hidden_sizes=[64, 64],
            eps_test=0.0,
        ),
    )
    with policy_within_training_step(algo.policy):
        for _ in range(2000):
            algo.update(buffer, 64)
    envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(5)])
    envs.seed(list(range(100, 105)))
    collector = Collector(algo.policy, envs)
    collector.reset()
    learned = float(np.mean(collector.collect(n_episode=5).returns))
    assert learned > data_return, (learned, data_return)


def test_cartpole_collect_save_train_evaluate(tmp_path: Path, monkeypatch) -> None:
    """The discrete scripts take vector tasks: QR-DQN on an MLP collects a plain buffer, discrete CQL
    learns from it with CartPole's own rewards (no clipping by default) and evaluates on CartPole."""
    from offline_rl.algorithms.discrete_cql.algorithm import clips_rewards
    from offline_rl.cli import atari_cql
    from offline_rl.core.errors import IgnoredFlagWarning, OfflineRLError
    from offline_rl.examples import atari_cql as atari_cql_program
    from offline_rl.examples import atari_qrdqn as atari_qrdqn_program

    monkeypatch.chdir(tmp_path)
    buffer_path = tmp_path / "cartpole.hdf5"
    collect = ["--task", "CartPole-v1", "--watch", "--eps-test", "1.0", "--buffer-size", "600"]
    with pytest.warns(
        IgnoredFlagWarning, match="^--frames-stack 1, --episode-life: apply to Atari games only; CartPole"
    ):
        atari_only = ["--frames-stack", "1", "--episode-life"]
        summary = atari_qrdqn_program.main(
            [*collect, "--training-num", "3", "--save-buffer-name", str(buffer_path), *atari_only]
        )
    buffer = load_buffer(buffer_path)
    assert len(buffer) == summary["transitions"] == 600 and buffer.obs.shape == (600, 4)
    # Each env's episodes are contiguous: every next observation is the following step's observation.
    follows = ~buffer.done[:-1]
    np.testing.assert_array_equal(buffer.obs_next[:-1][follows], buffer.obs[1:][follows])
    assert buffer.done[-1] and buffer.done.sum() >= 3  # each env's last episode is closed

    config = atari_cql.config_from_args(["--task", "CartPole-v1", "--load-buffer-name", str(buffer_path)])
    assert not clips_rewards(config.algorithm, gym.make("CartPole-v1").observation_space)
    budget = ["--epoch", "1", "--update-per-epoch", "50", "--test-num", "2", "--num-quantiles", "8"]
    evaluation = ["--test-steps", "700"]  # whole episodes on the 2 envs until 700 steps are played
    # The frame stack and the evaluation protocol are the Atari games': CartPole plays as gymnasium makes it.
    atari_only = ["--frames-stack", "2", "--eval-env", "NoFrameskip"]
    with pytest.warns(IgnoredFlagWarning, match="^--frames-stack 2, --eval-env NoFrameskip: apply to Atari games"):
        logdir = ["--logdir", str(tmp_path / "log")]
        result = atari_cql_program.main(
            ["--load-buffer-name", str(buffer_path), *budget, *evaluation, *logdir, *atari_only]
        )
    assert result["updates"] == 50 and result["last"] is not None
    steps = result["last"]["return_mean"] * result["last"]["episodes"]  # CartPole pays 1 a step
    assert 700 <= steps < 700 + 2 * 500 and result["last"]["episodes"] >= 2  # at most 2 episodes run past it
    from tensorboard.backend.event_processing import event_accumulator

    (run_dir,) = (tmp_path / "log" / "CartPole-v1" / "cql" / "0").iterdir()
    events = event_accumulator.EventAccumulator(str(run_dir))
    events.Reload()
    assert [item.value for item in events.scalars.Items("eval/episodes")] == [result["last"]["episodes"]]
    assert result["task"] == "CartPole-v1"  # the buffer's own task, not the default Pong
    last = result["last"]  # the value check: CartPole's +1 per step, discounted at γ = 0.99, beside the critics'
    assert 0 < last["discounted_return"] < last["return_mean"] and np.isfinite(last["value_estimate"])
    with pytest.raises(OfflineRLError, match=r"observes \(6,\); it was recorded on CartPole-v1: give --task CartPole"):
        atari_cql_program.main(["--task", "Acrobot-v1", "--load-buffer-name", str(buffer_path), *budget])


def test_discrete_cql_trains_on_d4rl_format_and_minari_data_and_each_cql_points_to_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A discrete task's dataset in D4RL's format or Minari's (here made by `offline_rl.collect`)
    trains discrete CQL with the loaders CQL-SAC uses, evaluated on the env it records. Before,
    atari_cql.py took Tianshou buffers only ("no such file; create one with ... PongNoFrameskip-v4"
    for a Minari dataset), and d4rl_cql.py stopped at the discrete env without naming the script that
    learns from such data."""
    from offline_rl.core.errors import OfflineRLError
    from offline_rl.examples import atari_cql as atari_cql_program
    from offline_rl.examples import d4rl_cql as d4rl_cql_program
    from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OFFLINE_RL_CACHE_DIR", str(tmp_path / "cache"))
    budget = ["--epoch", "1", "--update-per-epoch", "30", "--test-num", "2", "--num-quantiles", "8"]
    for output_format, name in (("d4rl", "cartpole.hdf5"), ("minari", "cartpole-minari")):
        source = collect_dataset(
            CollectConfig(
                task="CartPole-v1", output=tmp_path / name, size=400, output_format=output_format, progress=False
            )
        )
        result = atari_cql_program.main(["--load-buffer-name", str(source), *budget, "--logdir", str(tmp_path / "log")])
        assert result["updates"] == 30 and result["task"] == "CartPole-v1"  # the data's env, not Pong
        with pytest.raises(
            OfflineRLError, match=rf"discrete CQL: python examples/atari_cql.py --load-buffer-name {source}$"
        ):
            d4rl_cql_program.main(["--dataset", str(source), "--epoch", "1"])
        with pytest.raises(OfflineRLError, match=rf"^--buffer-from-rl-unplugged: {source} is not a buffer written"):
            atari_cql_program.main(["--load-buffer-name", str(source), "--buffer-from-rl-unplugged", *budget])
    with pytest.raises(OfflineRLError, match=r"cartpole.hdf5: a D4RL-format file is trained on alone; several sources"):
        atari_cql_program.main(
            ["--load-buffer-name", str(tmp_path / "cartpole.hdf5"), str(tmp_path / "cartpole-minari")]
        )

    pendulum = collect_dataset(CollectConfig(task="Pendulum-v1", output=tmp_path / "pendulum.hdf5", size=50))
    with pytest.raises(
        OfflineRLError, match=rf"continuous \(floats, shape \(1,\)\); .* examples/d4rl_cql.py --dataset {pendulum}$"
    ):
        atari_cql_program.main(["--load-buffer-name", str(pendulum), *budget])
    with pytest.raises(OfflineRLError, match=r"got Discrete\(2\); discrete tasks train with python examples/atari_cql"):
        d4rl_cql_program.main(["--task", "CartPole-v1", "--epoch", "1"])
    assert not (tmp_path / "cache").exists()  # refused before a default dataset was generated for it
