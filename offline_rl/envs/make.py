"""Building gymnasium environments by id, and checking a dataset fits one.

ale-py's environments are registered on demand, so Atari ids (`PongNoFrameskip-v4`,
`ALE/Pong-v5`) work wherever MuJoCo ids do.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import warnings
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

from offline_rl.core.errors import OfflineRLError, OfflineRLWarning, first_line
from offline_rl.envs.adroit import adroit_task_of, d4rl_adroit_id, register_d4rl_adroit
from offline_rl.envs.antmaze import register_d4rl_antmaze
from offline_rl.envs.d4rl_catalogue import d4rl_gymnasium_task, is_d4rl_name
from offline_rl.envs.maze2d import register_d4rl_maze2d
from offline_rl.envs.mujoco import keep_classic_margins
from offline_rl.envs.robotics import _is_robotics, register_robotics

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


register_d4rl_adroit()  # D4RL's Adroit envs (`D4RL/door-v1`, ...): ids only, nothing is imported or made
register_d4rl_maze2d()  # D4RL's Maze2D envs (`D4RL/maze2d-umaze-v1`, ...), rebuilt on the mujoco bindings
register_d4rl_antmaze()  # D4RL's AntMaze envs (`D4RL/antmaze-umaze-v2`, ...), likewise


def register_atari() -> None:
    try:
        import ale_py  # heavy (ale-py): loaded only when used
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
        import mujoco  # heavy (MuJoCo): loaded only when used
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


def make_env(task: str, *, spec: gym.envs.registration.EnvSpec | None = None, **kwargs: Any) -> gym.Env:
    """`gymnasium.make(task)`, with a one-line error naming `--task` for an unknown id. `spec` (an
    EnvSpec for `task`, e.g. the one a Minari dataset records) is made instead of the registered one,
    its keyword arguments included. Gymnasium-Robotics' ids work when that package is installed. A MuJoCo
    env's contacts keep the margins MuJoCo <= 3.4 gave them (`offline_rl.envs.mujoco`)."""
    if spec is not None and (untrusted := untrusted_entry_point(spec)):
        raise OfflineRLError(f"--task '{task}': {untrusted}")
    if "NoFrameskip" in task or task.startswith("ALE/"):
        register_atari()
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


def episode_limit(task: str) -> int | None:
    """The time limit gymnasium registers for `task` (None when it has none or does not know it)."""
    if "NoFrameskip" in task or task.startswith("ALE/"):
        register_atari()
    try:
        return gym.spec(task).max_episode_steps
    except gym.error.Error:
        if not register_robotics():
            return None
    try:
        return gym.spec(task).max_episode_steps
    except gym.error.Error:
        return None


def env_spec_from_json(text: str | None) -> gym.envs.registration.EnvSpec | None:
    """An EnvSpec from the JSON a Minari dataset records (`env_spec`, `eval_env_spec`), or None when
    there is none or it cannot be read. Fields this gymnasium does not know (older versions wrote
    `order_enforce`, `apply_api_compatibility`, `autoreset`) are left out."""

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
        log.info(f"evaluation env: {spec.id} as the dataset records it ({settings})"[:400])
