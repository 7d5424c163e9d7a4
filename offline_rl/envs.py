"""Building gymnasium environments by id, and checking a dataset fits one.

ale-py's environments are registered on demand, so Atari ids (`PongNoFrameskip-v4`,
`ALE/Pong-v5`) work wherever MuJoCo ids do.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import warnings
from typing import TYPE_CHECKING, Any, SupportsFloat

import gymnasium as gym
import numpy as np

from offline_rl.d4rl_adroit import adroit_task_of, d4rl_adroit_id, register_d4rl_adroit
from offline_rl.d4rl_antmaze import antmaze_of, register_d4rl_antmaze
from offline_rl.d4rl_maze2d import maze2d_of, register_d4rl_maze2d
from offline_rl.errors import OfflineRLError, OfflineRLWarning, first_line
from offline_rl.mujoco_margins import keep_classic_margins
from offline_rl.robotics_joints import repair_joint_accessors
from offline_rl.robotics_mazes import keep_maze_models_private

if TYPE_CHECKING:
    from tianshou.data import ReplayBuffer


register_d4rl_adroit()  # D4RL's Adroit envs (`D4RL/door-v1`, ...): ids only, nothing is imported or made
register_d4rl_maze2d()  # D4RL's Maze2D envs (`D4RL/maze2d-umaze-v1`, ...), rebuilt on the mujoco bindings
register_d4rl_antmaze()  # D4RL's AntMaze envs (`D4RL/antmaze-umaze-v2`, ...), likewise


def _register_atari() -> None:
    try:
        import ale_py
    except ImportError:  # pragma: no cover - ale-py is a hard dependency
        return
    gym.register_envs(ale_py)


_HARMLESS_MUJOCO_WARNINGS = ("compiler attribute 'settotalmass' is deprecated",)


MUJOCO_OFFSCREEN_BACKENDS = "MUJOCO_GL=egl (libEGL: Debian's libegl1) or MUJOCO_GL=osmesa (libosmesa6, slower)"
"""What lets MuJoCo render without a display, for the errors where it could not."""


def import_mujoco() -> Any:
    """`import mujoco`, whose import loads the OpenGL backend `MUJOCO_GL` names: a backend whose library
    is missing (`osmesa` without OSMesa: an AttributeError deep in PyOpenGL) or a value MuJoCo does not
    know is one line naming the variable, not a traceback."""
    try:
        import mujoco
    except (ImportError, AttributeError, OSError, RuntimeError) as error:
        chosen = os.environ.get("MUJOCO_GL")
        if chosen is None:
            raise
        raise OfflineRLError(
            f"MUJOCO_GL={chosen}: MuJoCo could not load that OpenGL backend ({first_line(error)}); unset it, or "
            f"set {MUJOCO_OFFSCREEN_BACKENDS} where that library is installed"
        ) from None
    return mujoco


@functools.cache
def _route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings through Python's `warnings`, minus one known-harmless deprecation.

    MuJoCo ≥ 3.x prints a deprecation for an attribute of gymnasium's bundled models at every env
    creation (ten evaluation envs: ten copies) and appends it to MUJOCO_LOG.TXT in the current
    directory; routed here, it is dropped and no log file appears.
    """
    mujoco = import_mujoco()

    def handle(message: str) -> None:
        if not any(harmless in message for harmless in _HARMLESS_MUJOCO_WARNINGS):
            warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)

    mujoco.set_mju_user_warning(handle)


@functools.cache
def register_robotics() -> bool:
    """Register Gymnasium-Robotics' envs (AntMaze, PointMaze, Adroit, Franka Kitchen: the envs of
    Minari's D4RL datasets) when it is installed. It is optional: `pip install gymnasium-robotics`.
    Its import prints a note on Adroit's reward versions to stderr, which is not about the user's run."""
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import gymnasium_robotics
    except ImportError:
        return False
    repair_joint_accessors()  # Franka Kitchen, Fetch, the Shadow hand: made only after this on MuJoCo >= 3.12
    keep_maze_models_private()  # AntMaze and PointMaze: no model file left in /tmp per env
    gym.register_envs(gymnasium_robotics)
    return True


def make_env(task: str, *, spec: gym.envs.registration.EnvSpec | None = None, **kwargs: Any) -> gym.Env:
    """`gymnasium.make(task)`, with a one-line error naming `--task` for an unknown id. `spec` (an
    EnvSpec for `task`, e.g. the one a Minari dataset records) is made instead of the registered one,
    its keyword arguments included. Gymnasium-Robotics' ids work when that package is installed. A MuJoCo
    env's contacts keep the margins MuJoCo <= 3.4 gave them (`offline_rl.mujoco_margins`)."""
    if spec is not None and (untrusted := untrusted_entry_point(spec)):
        raise OfflineRLError(f"--task '{task}': {untrusted}")
    if "NoFrameskip" in task or task.startswith("ALE/"):
        _register_atari()
    else:
        _route_mujoco_warnings()
    if _is_robotics(task) or (spec is not None and str(spec.entry_point).startswith("gymnasium_robotics")):
        register_robotics()  # a recorded spec's entry point is imported by gym itself: repair its joints first
    try:
        env = _make_registering_robotics(spec if spec is not None else task, kwargs)
    except gym.error.NameNotFound as error:
        hint = _robotics_hint(task) or _d4rl_hint(task)
        # with a hint of our own, gymnasium's spelling suggestion (`maze2d-large-dense`: `AntMaze_LargeDense`?) goes
        found = str(error).split(". Did you mean", 1)[0].rstrip(".") if hint else str(error)
        raise OfflineRLError(f"--task '{task}': {found}{hint}") from None
    except (ImportError, gym.error.DependencyNotInstalled) as error:
        # a recorded spec's entry point in a package not installed here; gym's mujoco-py envs (which
        # Gymnasium-Robotics registers again once it is loaded: then a DependencyNotInstalled)
        if legacy := _LEGACY_MUJOCO.fullmatch(task):
            raise OfflineRLError(
                f"--task '{task}': gym's MuJoCo {legacy[2]} envs need mujoco-py and MuJoCo 2.1, which are not "
                f"installed; {legacy[1]}-v4 is the same env on today's mujoco bindings (the env D4RL's "
                f"locomotion datasets evaluate on here): --task {legacy[1]}-v4"
            ) from None
        raise OfflineRLError(
            f"--task '{task}': its env's module is not installed ({error}){_robotics_hint(task)}"
        ) from None
    except gym.error.Error as error:  # a malformed id (`mujoco/hopper/medium-v0`: a Minari dataset's)
        hint = _d4rl_hint(task)
        found = str(error).split(". (Currently", 1)[0] if hint else str(error)
        raise OfflineRLError(f"--task '{task}': {found}{hint}") from None
    keep_classic_margins(env)
    return env


def with_flat_observations(env: gym.Env) -> gym.Env:
    """`env`, its dict or tuple observations (goal-conditioned mazes: achieved goal, desired goal,
    observation) flattened into one vector in the order the Minari loader flattens a dataset's, so
    data recorded, loaded and evaluated here all share one layout. Other envs are returned as they are."""
    if isinstance(env.observation_space, gym.spaces.Dict | gym.spaces.Tuple):
        # Flattening copies each observation, so an env that hands out one dict object on every call
        # (Franka Kitchen's goals) cannot alias what is recorded or evaluated: gymnasium's checker
        # would still say so at each env's first steps, in every evaluation worker.
        warnings.filterwarnings("ignore", message=_SHARED_OBSERVATION_WARNING, category=UserWarning)
        return gym.wrappers.FlattenObservation(env)
    return env


_SHARED_OBSERVATION_WARNING = r".*The observations returned by `(reset|step)` and the following `step` share an object"


def _make_registering_robotics(target: Any, kwargs: dict[str, Any]) -> gym.Env:
    """`gym.make`, again after registering Gymnasium-Robotics when the id was unknown."""
    try:
        return gym.make(target, **kwargs)
    except gym.error.NameNotFound:
        if not register_robotics():  # not installed: the id stays unknown
            raise
    return gym.make(target, **kwargs)


_LEGACY_MUJOCO = re.compile(
    r"(Ant|HalfCheetah|Hopper|Humanoid|HumanoidStandup|InvertedDoublePendulum|InvertedPendulum|Pusher|Reacher|"
    r"Swimmer|Walker2d)-(v2|v3)"
)
"""gym's mujoco-py envs, which Tianshou's offline examples and D4RL name (`--task HalfCheetah-v2`);
gymnasium's v4 versions changed only the bindings."""


def _robotics_hint(task: str) -> str:
    if _is_robotics(task) and not register_robotics():
        return "; its envs come with Gymnasium-Robotics: pip install gymnasium-robotics"
    return ""


def _d4rl_hint(task: str) -> str:
    """What a D4RL id given as `--task` stands for here: a dataset name is a `--dataset` (which picks its
    env), and D4RL's Adroit env ids (`door-v0`) are `D4RL/door-v1`."""
    from offline_rl.data.d4rl import d4rl_gymnasium_task, is_d4rl_name

    if is_d4rl_name(task):
        env = d4rl_gymnasium_task(task)
        evaluated = f", which evaluates on {env}" if env else ""
        return f"; {task} is a D4RL dataset: --dataset {task}{evaluated}"
    if adroit := adroit_task_of(task):
        return f"; D4RL's {adroit} env is {d4rl_adroit_id(adroit)} here (Gymnasium-Robotics' hand with D4RL's reward)"
    if _MINARI_DATASET_ID.fullmatch(task):
        return (
            f"; {task} looks like a Minari dataset id: data, not an env (--dataset in d4rl_cql.py, "
            "--load-buffer-name in atari_cql.py), whose recorded env is then the one evaluated on"
        )
    return ""


_MINARI_DATASET_ID = re.compile(r"[\w.-]+/[\w.-]+(/[\w.-]+)+-v\d+")
"""namespace/env/dataset-vN (`mujoco/hopper/medium-v0`); gymnasium's ids have one namespace at most."""


_ROBOTICS_PREFIXES = ("AntMaze", "PointMaze", "Adroit", "FrankaKitchen", "Fetch", "HandManipulate", "HandReach")


def _is_robotics(task: str) -> bool:
    return task.startswith(_ROBOTICS_PREFIXES)


def episode_limit(task: str) -> int | None:
    """The time limit gymnasium registers for `task` (None when it has none or does not know it)."""
    if "NoFrameskip" in task or task.startswith("ALE/"):
        _register_atari()
    try:
        return gym.spec(task).max_episode_steps
    except gym.error.Error:
        if not register_robotics():
            return None
    try:
        return gym.spec(task).max_episode_steps
    except gym.error.Error:
        return None


def check_dataset_fits_env(buffer: ReplayBuffer, task: str, *, source: str, env: gym.Env | None = None) -> None:
    """Refuse a dataset whose observation or action shape differs from `task`'s env (`env`, the one
    the run will evaluate on, when given: it is left open)."""
    made = env is None
    env = with_flat_observations(make_env(task)) if env is None else env  # dicts: as the data holds them
    try:
        # Through indexing, not `buffer.obs`: frame buffers rebuild observations and store none.
        obs_shape = tuple(np.asarray(buffer[np.array([0])].obs).shape[1:])
        expected_obs = tuple(env.observation_space.shape or ())
        if obs_shape != expected_obs:
            raise OfflineRLError(
                f"{source}: observations have shape {obs_shape}, but --task {task} observes {expected_obs}"
            )
        act = np.asarray(buffer.act[:1])
        space = env.action_space
        if isinstance(space, gym.spaces.Box):
            expected_act = tuple(space.shape)
            if tuple(act.shape[1:]) != expected_act:
                raise OfflineRLError(
                    f"{source}: actions have shape {tuple(act.shape[1:])}, but --task {task} expects {expected_act}"
                )
        elif isinstance(space, gym.spaces.Discrete):
            top = int(np.max(buffer.act[: len(buffer)]))
            if act.ndim != 1 or top >= int(space.n):
                raise OfflineRLError(
                    f"{source}: actions are not indices below {space.n} (found max {top}, shape "
                    f"{tuple(act.shape[1:])}), as --task {task} expects"
                )
    finally:
        if made:
            env.close()


def env_spec_from_json(text: str | None) -> gym.envs.registration.EnvSpec | None:
    """An EnvSpec from the JSON a Minari dataset records (`env_spec`, `eval_env_spec`), or None when
    there is none or it cannot be read. Fields this gymnasium does not know (older versions wrote
    `order_enforce`, `apply_api_compatibility`, `autoreset`) are left out."""
    import json

    from gymnasium.envs.registration import EnvSpec

    if not text:
        return None
    try:
        data = json.loads(text)
        known = {field.name for field in dataclasses.fields(EnvSpec)}
        return EnvSpec.from_json(json.dumps({key: value for key, value in data.items() if key in known}))
    except (ValueError, TypeError, AttributeError, gym.error.Error):
        return None


TRUSTED_ENV_PACKAGES = ("gymnasium", "ale_py", "gymnasium_robotics", "offline_rl")
"""The packages whose env classes a recorded env spec may name: `gym.make` imports a spec's entry point
and calls it, so a spec read from a file may only name an env (or wrapper) class of these."""


def untrusted_entry_point(spec: gym.envs.registration.EnvSpec) -> str | None:
    """Why `gym.make(spec)` could run code that is not an env's, or None when it cannot: each entry point
    the spec names (the env's and its wrappers') must be an env class, or a wrapper class that writes no
    files, of a `TRUSTED_ENV_PACKAGES` package. Nothing outside those packages is imported to find out."""
    from gymnasium.envs.registration import load_env_creator

    named = [(spec.entry_point, gym.Env)] + [(wrapper.entry_point, gym.Wrapper) for wrapper in spec.additional_wrappers]
    if spec.vector_entry_point is not None:
        named.append((spec.vector_entry_point, None))
    for entry_point, kind in named:
        text = entry_point if isinstance(entry_point, str) else getattr(entry_point, "__module__", "?")
        refused = (
            f"the env spec names '{text}', outside the env packages offline_rl makes envs from "
            f"({', '.join(TRUSTED_ENV_PACKAGES)}), and is not made"
        )
        if not isinstance(entry_point, str) or text.split(":")[0].split(".")[0] not in TRUSTED_ENV_PACKAGES:
            return refused
        if kind is None:
            continue
        try:
            creator = load_env_creator(entry_point)
        except Exception:  # any import error at all: gym.make fails the same way, and nothing is called
            continue
        if not (isinstance(creator, type) and issubclass(creator, kind)) or (
            isinstance(creator, type) and issubclass(creator, gym.wrappers.RecordVideo)
        ):
            return f"the env spec names '{text}', which is not an {kind.__name__} class, and is not made"
    return None


def recorded_evaluation_spec(
    task: str, info: dict[str, Any], *, source: str | None = None
) -> gym.envs.registration.EnvSpec | None:
    """The env spec a dataset records for evaluation (Minari's), when it is of `task`: evaluating
    there keeps the settings the data was recorded under (a maze's fixed start and goal, where the
    registered id would draw both at random; a reward variant).

    A spec that could run code (`untrusted_entry_point`) is never made. Where the run's env came from
    the data (`source`, the dataset, given), that is one line naming the entry point, with `--task` as
    the way out; where `--task` named it, the registered env is evaluated instead, with a warning."""
    spec = env_spec_from_json(info.get("eval_env_spec"))
    if spec is None or spec.id != task:
        return None
    if untrusted := untrusted_entry_point(spec):
        if source is not None:
            raise OfflineRLError(f"{source}: {untrusted}; give --task to evaluate on an env registered here instead")
        warnings.warn(
            f"{info.get('name') or 'the dataset'}: {untrusted}; evaluating on the registered {task}",
            OfflineRLWarning,
            stacklevel=1,  # one location, so a run that asks twice says it once
        )
        return None
    return spec


def say_recorded_settings(spec: gym.envs.registration.EnvSpec | None) -> None:
    """One line naming the settings a recorded evaluation spec sets, when it sets any."""
    if spec is not None and spec.kwargs:
        settings = ", ".join(f"{key}={value}" for key, value in spec.kwargs.items())
        print(f"evaluation env: {spec.id} as the dataset records it ({settings})"[:400])


class TaskMismatchWarning(OfflineRLWarning):
    """A dataset that says which env it belongs to is evaluated on another one."""


@dataclasses.dataclass(frozen=True)
class DatasetEnv:
    """The env a dataset belongs to, as the dataset itself says, and how it says it (for messages)."""

    task: str
    origin: str  # completes "<dataset> ...": "was recorded on Hopper-v5"


def dataset_env(info: dict[str, Any]) -> DatasetEnv | None:
    """The env a loaded dataset belongs to: the evaluation env a Minari dataset records (else the env
    it was recorded on), the task of a file `offline_rl.collect` wrote, or the gymnasium env of a named
    D4RL dataset (whose files record none). None when nothing says."""
    spec = env_spec_from_json(info.get("eval_env_spec"))
    recorded = spec.id if spec is not None else info.get("task")
    if recorded:
        return DatasetEnv(str(recorded), f"was recorded on {recorded}")
    if info.get("gymnasium_task"):
        task = str(info["gymnasium_task"])
        if adroit := adroit_task_of(task):  # D4RL's Adroit envs: Gymnasium-Robotics' hands with D4RL's rewards
            return DatasetEnv(task, f"is D4RL data of its {adroit} env (here: {task})")
        if maze2d_of(task):
            return DatasetEnv(task, f"is D4RL data of its Maze2D env (here: {task})")
        if antmaze_of(task):
            return DatasetEnv(task, f"is D4RL data of its AntMaze env (here: {task})")
        return DatasetEnv(task, f"is D4RL data of gym's {task.split('-')[0]} (gymnasium: {task})")
    return None


def same_task(recorded: str, task: str) -> bool:
    """Whether evaluating on `task` evaluates where data recorded on `recorded` came from: the same
    id, or for Atari the same game (an Atari evaluation's settings come from its protocol,
    `--eval-env`, not from how the id is spelled)."""
    if recorded == task:
        return True
    return is_atari_game(recorded) and is_atari_game(task) and atari_game(recorded) == atari_game(task)


def check_dataset_belongs_to_task(
    buffer: ReplayBuffer, task: str, *, source: str, env: gym.Env | None = None
) -> DatasetEnv | None:
    """`check_dataset_fits_env`, whose error names the env the dataset says it belongs to when that
    is another (the usual fix), with a warning when the shapes fit but the envs differ. Returns that
    env, or None when the dataset names none."""
    from offline_rl.data import dataset_info

    belongs_to = dataset_env(dataset_info(buffer))
    try:
        check_dataset_fits_env(buffer, task, source=source, env=env)
    except OfflineRLError as error:
        if belongs_to is not None and not same_task(belongs_to.task, task):
            raise OfflineRLError(f"{error}; it {belongs_to.origin}: give --task {belongs_to.task}") from None
        raise
    warn_if_recorded_elsewhere(belongs_to, task, source=source)
    return belongs_to


def warn_if_recorded_elsewhere(belongs_to: DatasetEnv | None, task: str, *, source: str) -> None:
    """One line when a dataset belongs to another env id than `--task`. With other shapes it would
    not train, so the shapes agree: another version of the same env (which can differ in dynamics or
    rewards: Minari's MuJoCo datasets were made on the v5 envs, and the v4 Hopper and Walker2d also
    pay the healthy reward on the unhealthy step that ends an episode), or another robot of the same
    sizes (D4RL's walker2d data fits HalfCheetah), and the scores would not be those of the data's own
    task. A warning, not an error: evaluating elsewhere can be meant."""
    if belongs_to is not None and not same_task(belongs_to.task, task):
        warnings.warn(
            f"{source} {belongs_to.origin} but is evaluated on --task {task}; "
            f"give --task {belongs_to.task} to evaluate where the data came from",
            TaskMismatchWarning,
            stacklevel=2,
        )


STICKY_ACTION_PROBABILITY = 0.25
MAX_EPISODE_FRAMES = 108_000  # 27 000 agent steps at frame skip 4
EVAL_PROTOCOLS = ("sticky", "NoFrameskip")


def atari_game(task: str) -> str:
    """The game of an Atari id: `PongNoFrameskip-v4`, `ALE/Pong-v5` and `Pong` all give `Pong`."""
    return task.removeprefix("ALE/").split("-")[0].removesuffix("NoFrameskip")


def is_atari_game(task: str) -> bool:
    """Whether `task` names an ALE game (`PongNoFrameskip-v4`, `ALE/Pong-v5`, `Pong`)."""
    _register_atari()
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
    converted to frames (`offline_rl.atari_screens`); other options go to `gym.make`.
    """
    spec = options.pop("spec", None)  # a dataset's record of its env
    if is_atari_game(task):
        if spec is not None:  # a recording of the game's RGB screens (Minari's atari/*): that env, converted
            from offline_rl.atari_screens import make_screen_frames_env

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
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

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
