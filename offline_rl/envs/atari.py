"""Atari games: how datasets spell them, the evaluation protocols, and recorded RGB screens as frames.

RL Unplugged and DQN Replay name a game's folder `Breakout`, `MsPacman`, `UpNDown`; users type the
gymnasium ids they play (`BreakoutNoFrameskip-v4`, `ALE/Breakout-v5`) or the bare name in any case, and
`atari_game` matches them. An evaluation plays a game by one of two protocols (`EVAL_PROTOCOLS`): sticky
actions as Machado et al. recommend, or the CQL paper's NoFrameskip envs.

Minari's `atari/*` datasets keep each step's raw 210×160 RGB screen, recorded on `ALE/<Game>-v5` with the
emulator skipping 4 frames itself and no sticky actions. A frame here is that screen in ALE's own
grayscale (OpenCV's RGB → gray weights reproduce `ale.getScreenGrayscale()`) shrunk to 84×84 with area
interpolation, as gymnasium's `AtariPreprocessing` does. The evaluation env is the recorded one under
`AtariPreprocessing` taking one emulator step per env step: training and evaluation see one kind of
observation.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

from offline_rl.core.errors import OfflineRLError
from offline_rl.envs.make import make_env, register_atari

if TYPE_CHECKING:
    pass

_TASK_DECORATION = re.compile(r"^(ALE/)?(?P<game>[A-Za-z]+?)(NoFrameskip|Deterministic)?(-v\d+)?$")


def game_in(task: str, games: Sequence[str]) -> str | None:
    """The spelling in `games` of the game `task` names (`Breakout`, `breakout`,
    `BreakoutNoFrameskip-v4`, `ALE/Breakout-v5`), or None when it names none of them."""
    by_lower = {game.lower(): game for game in games}
    return by_lower.get(bare_game(task).lower())


def bare_game(task: str) -> str:
    """`task` without gymnasium's decoration (`ALE/`, `NoFrameskip`, `-v4`): `Breakout` of all of them."""
    match = _TASK_DECORATION.match(task.strip())
    return match.group("game") if match else task.strip()


def game_of(task: str, games: Sequence[str], data_set: str) -> str:
    """`game_in`, or the one-line `--task` error listing the games `data_set` has."""
    game = game_in(task, games)
    if game is None:
        by_lower = {name.lower(): name for name in games}
        # 0.8: typos (Pongg, Seaqest, Breakuot) and not another real game (Asteroids is not Asterix)
        close = difflib.get_close_matches(bare_game(task).lower(), by_lower, n=1, cutoff=0.8)
        if close:
            raise OfflineRLError(f"--task {task}: not {data_set} game; did you mean {by_lower[close[0]]}?")
        raise OfflineRLError(f"--task {task}: not {data_set} game; expected one of {', '.join(games)}")
    return game


SCREEN_SHAPE = (210, 160, 3)
FRAME_SIZE = 84


def is_screen_space(space: gym.Space) -> bool:
    """Whether `space` holds ALE's RGB screens."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and tuple(space.shape) == SCREEN_SHAPE


def screen_frames(screens: np.ndarray) -> np.ndarray:
    """(n, 210, 160, 3) uint8 RGB screens -> (n, 84, 84) uint8 grayscale frames."""
    import cv2  # OpenCV: kept out of --help's start

    frames = np.empty((len(screens), FRAME_SIZE, FRAME_SIZE), dtype=np.uint8)
    for frame, screen in zip(frames, screens, strict=True):
        gray = cv2.cvtColor(np.ascontiguousarray(screen), cv2.COLOR_RGB2GRAY)
        frame[:] = cv2.resize(gray, (FRAME_SIZE, FRAME_SIZE), interpolation=cv2.INTER_AREA)
    return frames


def make_screen_frames_env(spec: gym.envs.registration.EnvSpec, frames_stack: int, **kwargs: Any) -> gym.Env:
    """The env a screens dataset records (`spec`: its game, frame skip, sticky-action probability and
    frame cap), its screens made frames by gymnasium's `AtariPreprocessing` taking one emulator step per
    env step (no max-pooling, no no-ops: the recording had neither), `frames_stack` of them stacked,
    repeating the first at a start. Only gymnasium's own wrappers: an exported policy's env spec rebuilds
    this env without offline_rl. `tests/test_minari_atari.py` holds its frames to `screen_frames`'."""

    env = make_env(spec.id, spec=spec, **kwargs)
    if not is_screen_space(env.observation_space):
        env.close()
        raise ValueError(f"{spec.id} as recorded observes {env.observation_space}, not ALE's RGB screens")
    frames = AtariPreprocessing(env, noop_max=0, frame_skip=1, screen_size=FRAME_SIZE, terminal_on_life_loss=False)
    return FrameStackObservation(frames, frames_stack, padding_type="reset")


STICKY_ACTION_PROBABILITY = 0.25

MAX_EPISODE_FRAMES = 108_000  # 27 000 agent steps at frame skip 4

EVAL_PROTOCOLS = ("sticky", "NoFrameskip")


def atari_game(task: str) -> str:
    """The game of an Atari id: `PongNoFrameskip-v4`, `ALE/Pong-v5` and `Pong` all give `Pong`."""
    return task.removeprefix("ALE/").split("-")[0].removesuffix("NoFrameskip")


def is_atari_game(task: str) -> bool:
    """Whether `task` names an ALE game (`PongNoFrameskip-v4`, `ALE/Pong-v5`, `Pong`)."""
    register_atari()
    try:
        gym.spec(f"ALE/{atari_game(task)}-v5")
    except gym.error.Error:
        return False
    return True


def require_atari_game(task: str) -> None:
    """A one-line error for a `--task` that must be an Atari game and names none."""
    if not is_atari_game(task):
        raise OfflineRLError(
            f"--task {task}: not an Atari game; expected an id such as PongNoFrameskip-v4, ALE/Pong-v5 or Pong"
        )


_ATARI_ONLY_OPTIONS = ("protocol", "padding", "life_loss")


def make_discrete_env(task: str, frames_stack: int = 4, **options: Any) -> gym.Env:
    """The env of the discrete-action scripts: an Atari game as `make_atari_env(task, frames_stack,
    **options)` makes it, or any other gymnasium task with discrete actions (CartPole-v1, ...)
    exactly as gymnasium makes it.

    The Atari-only options (the evaluation protocol, stack padding, life loss) and the frame stack do
    not apply to vector tasks: their observations are used as they are, so a buffer collected on
    CartPole by any Tianshou collector fits. `clip_rewards` applies to both; `spec` (the env spec a
    dataset records) makes that env: for an Atari game, a recording of its RGB screens played with them
    converted to frames (`offline_rl.envs.atari`); other options go to `gym.make`.
    """
    spec = options.pop("spec", None)  # a dataset's record of its env
    if is_atari_game(task):
        if spec is not None:  # a recording of the game's RGB screens (Minari's atari/*): that env, converted
            kwargs = {key: value for key, value in options.items() if key not in (*_ATARI_ONLY_OPTIONS, "clip_rewards")}
            return make_screen_frames_env(spec, frames_stack, **kwargs)
        return make_atari_env(task, frames_stack, **options)
    clip_rewards = bool(options.pop("clip_rewards", False))
    kwargs = {key: value for key, value in options.items() if key not in _ATARI_ONLY_OPTIONS}
    env = make_env(task, spec=spec, **kwargs)
    if not isinstance(env.action_space, gym.spaces.Discrete):
        kind = type(env.action_space).__name__
        env.close()
        raise OfflineRLError(
            f"--task {task}: has {kind} actions, but discrete CQL and QR-DQN need discrete ones (an Atari game, "
            "CartPole-v1, ...); for continuous actions use examples/d4rl_cql.py"
        )
    return gym.wrappers.TransformReward(env, clip_reward) if clip_rewards else env


def make_atari_env(
    task: str,
    frames_stack: int = 4,
    *,
    protocol: str | None = None,
    padding: str = "reset",
    clip_rewards: bool = False,
    life_loss: bool = False,
    **kwargs: Any,
) -> gym.Env:
    """DeepMind-style Atari: gymnasium's `AtariPreprocessing` (frame skip 4, 84×84 grayscale) and
    `FrameStackObservation(frames_stack)`, 108 000 frames (27 000 steps) at most per game.

    - `protocol=None` plays `task` itself with up to 30 no-ops at reset (`*NoFrameskip-v4`: no
      sticky actions, Tianshou's classic protocol); `"NoFrameskip"` is the same on
      `<Game>NoFrameskip-v4`. `"sticky"` is the DQN-Replay / CQL evaluation (Machado et al. 2018,
      Dopamine): `ALE/<Game>-v5` with sticky actions (p = 0.25, applied per emulator frame) and no
      no-ops, the minimal action set.
    - `padding` fills the stack at an episode start: `"reset"` repeats the first frame (gymnasium's
      default, what `atari_qrdqn.py` collects with), `"zero"` uses black frames (Dopamine's, and so
      DQN Replay's and RL Unplugged's). Evaluate with the padding the data was recorded with.
    - `clip_rewards` clips rewards to [-1, 1] and `life_loss` ends an episode at each lost life
      (`LifeLossTerminal`): for online training envs only; evaluation plays whole games unclipped.
    """

    require_atari_game(task)
    noop_max = 30
    if protocol is None and "-v" not in task:  # a bare game name: Tianshou's classic id
        task = f"{atari_game(task)}NoFrameskip-v4"
    if protocol == "sticky":
        task, noop_max = f"ALE/{atari_game(task)}-v5", 0
        kwargs.setdefault("repeat_action_probability", STICKY_ACTION_PROBABILITY)
    elif protocol == "NoFrameskip":
        task = f"{atari_game(task)}NoFrameskip-v4"
    elif protocol is not None:
        raise OfflineRLError(f"--eval-env {protocol}: expected one of {', '.join(EVAL_PROTOCOLS)}")
    if task.startswith("ALE/"):
        kwargs.setdefault("frameskip", 1)  # the skipping happens once, in the preprocessing wrapper
    kwargs.setdefault("max_num_frames_per_episode", MAX_EPISODE_FRAMES)
    env = make_env(task, **kwargs)
    env = AtariPreprocessing(env, noop_max=noop_max, frame_skip=4, screen_size=84, terminal_on_life_loss=False)
    if life_loss:
        env = LifeLossTerminal(env)
    if clip_rewards:
        env = gym.wrappers.TransformReward(env, clip_reward)
    return FrameStackObservation(env, frames_stack, padding_type=padding)


def clip_reward(reward: SupportsFloat) -> float:
    """Dopamine's and DQN's reward clipping to [-1, 1]."""
    return float(np.clip(float(reward), -1.0, 1.0))


class LifeLossTerminal(gym.Wrapper):
    """A lost life ends the learner's episode while the game plays on (DeepMind's "episodic life").

    After a life-loss termination, `reset` continues the same game with one no-op step instead of
    starting a new one, so the agent still sees every stage of the game; a real game over resets.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def _ale_lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = bool(terminated or truncated)
        lives = self._ale_lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if self._game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self._game_over = False
        self._lives = self._ale_lives()
        return obs, info
