"""The published Atari protocol: sticky-action evaluation, frame stacks that start as the data's,
reward clipping and life-loss signals for the online behaviour trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import AtariPreprocessing

from offline_rl.cli import atari_cql, atari_qrdqn
from offline_rl.data import load_buffer
from offline_rl.data.frame_padding import frame_padding_of, stack_padding
from offline_rl.data.frame_stack import FrameStackBufferBuilder
from offline_rl.envs.atari import LifeLossTerminal, atari_game, clip_reward, make_atari_env


def preprocessing_of(env: gym.Env) -> AtariPreprocessing:
    while not isinstance(env, AtariPreprocessing):
        env = env.env  # type: ignore[attr-defined]
    return env


def test_the_default_evaluation_is_dqn_replays_sticky_action_protocol() -> None:
    config = atari_cql.config_from_args([])
    assert config.eval_env == "sticky"
    assert config.task is None and atari_cql.DEFAULT_TASK == "PongNoFrameskip-v4"  # a buffer's own game, else Pong
    env = atari_cql.make_evaluation_env(config, atari_cql.DEFAULT_TASK, padding="zero")
    ale = env.unwrapped.ale  # type: ignore[attr-defined]
    assert env.unwrapped.spec.id == "ALE/Pong-v5"  # type: ignore[union-attr]
    assert ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert ale.getInt("max_num_frames_per_episode") == 108_000
    assert env.unwrapped._frameskip == 1  # type: ignore[attr-defined]
    preprocessing = preprocessing_of(env)
    assert preprocessing.frame_skip == 4 and preprocessing.noop_max == 0 and not preprocessing.terminal_on_life_loss
    assert env.action_space == make_atari_env("PongNoFrameskip-v4").action_space  # the data's action set
    env.close()


def test_noframeskip_keeps_tianshous_classic_protocol() -> None:
    config = atari_cql.config_from_args(["--eval-env", "NoFrameskip", "--task", "ALE/Breakout-v5"])
    env = atari_cql.make_evaluation_env(config, "ALE/Breakout-v5", padding="reset")
    assert env.unwrapped.spec.id == "BreakoutNoFrameskip-v4"  # type: ignore[union-attr]
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0  # type: ignore[attr-defined]
    assert preprocessing_of(env).noop_max == 30
    env.close()
    assert atari_game("PongNoFrameskip-v4") == atari_game("ALE/Pong-v5") == atari_game("Pong") == "Pong"


@pytest.mark.parametrize("padding", ["zero", "reset"])
def test_the_evaluation_env_pads_episode_starts_as_asked(padding: str) -> None:
    env = make_atari_env("PongNoFrameskip-v4", protocol="sticky", padding=padding)
    obs, _ = env.reset(seed=0)
    assert stack_padding(obs) == padding
    env.close()


def test_rl_unplugged_data_and_its_evaluation_start_episodes_alike(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    from offline_rl.data.rl_unplugged.shard_converter import convert_shard
    from offline_rl.data.rl_unplugged.testing import random_episode, serialize, shuffled_records, write_shard

    rng = np.random.default_rng(0)
    episodes = [random_episode(rng, i, steps, terminal) for i, (steps, terminal) in enumerate([(12, True), (9, False)])]
    shard = tmp_path / "run_1-00000-of-00100"
    write_shard(shard, [serialize(fields) for fields in shuffled_records(episodes)])
    convert_shard(shard, tmp_path / "shard.hdf5")
    buffer = load_buffer(tmp_path / "shard.hdf5")
    # DQN Replay (Dopamine) pads the first stacks of an episode with black frames ...
    assert frame_padding_of(buffer) == "zero"
    padding = atari_cql.evaluation_padding(buffer, None)
    # ... and so does the evaluation env built for this data
    config = atari_cql.config_from_args(["--buffer-from-rl-unplugged"])
    env = atari_cql.make_evaluation_env(config, "PongNoFrameskip-v4", padding)
    first_stack, _ = env.reset(seed=1)
    start = buffer[np.array([0])].obs[0]
    assert stack_padding(first_stack) == stack_padding(start) == "zero"
    assert not first_stack[:3].any() and not start[:3].any()
    env.close()


def test_collected_data_repeats_the_first_frame_and_so_does_its_evaluation() -> None:
    env = make_atari_env("PongNoFrameskip-v4")
    builder = FrameStackBufferBuilder()
    obs, _ = env.reset(seed=0)
    for step in range(30):
        next_obs, reward, terminated, truncated, _ = env.step(step % 6)
        builder.add(obs, step % 6, float(reward), terminated, truncated or step == 14, next_obs)
        obs = next_obs if step != 14 else env.reset()[0]
    env.close()
    buffer = builder.build()
    assert frame_padding_of(buffer) == "reset"
    assert atari_cql.evaluation_padding(buffer, None) == "reset"
    # watching a checkpoint without data: the padding its data had, saved with it
    assert atari_cql.evaluation_padding(None, {"dataset_info": {"frame_padding": "zero"}}) == "zero"


class _Lives:
    def __init__(self) -> None:
        self.left = 3

    def lives(self) -> int:
        return self.left


class LivesEnv(gym.Env):
    """A game that loses a life every 5 steps and pays a reward of 5 per step."""

    observation_space = gym.spaces.Box(0, 1e6, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.ale = _Lives()
        self.resets = 0
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        self.resets += 1
        self.ale.left, self.t = 3, 0
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        if self.t % 5 == 0:
            self.ale.left -= 1
        return np.full(1, self.t, np.float32), 5.0, self.ale.left == 0, False, {}


def test_life_loss_ends_the_learners_episode_but_not_the_game() -> None:
    game = LivesEnv()
    env = LifeLossTerminal(game)
    env.reset()
    ends = [env.step(0)[2] for _ in range(5)]
    assert ends == [False, False, False, False, True]  # a life lost at step 5
    obs, _ = env.reset()
    assert game.resets == 1 and obs[0] == 6  # the game went on (one no-op step), no new game
    while not env.step(0)[2]:
        pass
    assert game.t == 10
    while not env.step(0)[2]:
        pass
    assert game.ale.left == 0  # game over ...
    env.reset()
    assert game.resets == 2  # ... resets for real


def test_clipped_rewards_for_training_envs_only() -> None:
    assert [clip_reward(r) for r in (-7.0, -0.5, 0.0, 3.0)] == [-1.0, -0.5, 0.0, 1.0]
    clipped = gym.wrappers.TransformReward(LivesEnv(), clip_reward)
    clipped.reset()
    assert clipped.step(0)[1] == 1.0
    config = atari_qrdqn.config_from_args([])
    assert config.reward_clip and not config.episode_life  # Dopamine's protocol by default
    assert atari_qrdqn.config_from_args(["--episode-life", "--no-reward-clip"]).episode_life
    env = make_atari_env("PongNoFrameskip-v4", clip_rewards=True, life_loss=True)
    wrappers = []
    while hasattr(env, "env"):
        wrappers.append(type(env).__name__)
        env = env.env
    assert "TransformReward" in wrappers and "LifeLossTerminal" in wrappers
