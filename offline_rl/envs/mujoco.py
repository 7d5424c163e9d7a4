"""MuJoCo as D4RL's data knew it: its import, its contact margins, and how its frames are drawn.

A contact becomes a constraint once two geoms come within their pair's margin. MuJoCo up to 3.4 takes
the larger of the two geoms' margins, later releases their sum. D4RL recorded its datasets, and the
published scores were obtained, on MuJoCo 2.x, where gymnasium's v4 envs were defined too; models that
give every geom one margin (Hopper, Ant, the mazes, three Adroit hands) would start their contacts twice
as far out. `keep_classic_margins` halves such a model's margins where this MuJoCo adds them up, so each
contact's margin is again the model's one value; models with several margin values are left as they are.

Where no GPU draws, Mesa rasterises each frame on the CPU, and the shadow pass and the floor's reflection
take most of a frame's time. `--video-quality` chooses whether filmed frames keep them: the robot, its
motion and the camera are the same either way.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import numpy as np

log = logging.getLogger(__name__)

_APPLIED = "_offline_rl_classic_margin"  # set on an env once its model has been seen: halving twice would be wrong
_ANNOUNCED: set[str] = set()  # tasks whose note this process has printed
_PROBE = """<mujoco><worldbody><geom type="plane" size="1 1 0.1" margin="0.01"/>
<body pos="0 0 0.115"><freejoint/><geom type="sphere" size="0.1" margin="0.01"/></body></worldbody></mujoco>"""


@functools.cache
def margins_add_up() -> bool:
    """Whether this MuJoCo makes a contact's margin the sum of its geoms' (3.5 and later), not the larger."""
    import mujoco  # heavy (MuJoCo): loaded only when used

    model = mujoco.MjModel.from_xml_string(_PROBE)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return data.ncon > 0


def keep_classic_margins(env: Any) -> float | None:
    """Give `env`'s MuJoCo model (its `unwrapped.model`, if any) the contact margins MuJoCo ≤ 3.4 gave it.
    Returns the margin each contact now has when the model's margins were halved, else None; an env
    already seen returns what it returned then, without touching its model again."""
    import mujoco  # heavy (MuJoCo): loaded only when used

    base = getattr(env, "unwrapped", env)
    if hasattr(base, _APPLIED):
        return getattr(base, _APPLIED)
    model = getattr(base, "model", None)
    restored = keep_classic_model_margins(model) if isinstance(model, mujoco.MjModel) else None
    setattr(base, _APPLIED, restored)
    return restored


def keep_classic_model_margins(model: Any) -> float | None:
    """The same for a bare `MjModel`, which carries no mark: call it once per model. Where this MuJoCo
    adds margins up and every geom that can collide has the same positive margin and no gap, halves
    the geoms' margins and returns that margin; otherwise changes nothing and returns None."""

    if not margins_add_up():
        return None
    colliding = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
    margins = np.unique(model.geom_margin[colliding])
    if len(margins) != 1 or margins[0] <= 0 or np.any(model.geom_gap[colliding] != 0):
        return None
    model.geom_margin[:] = model.geom_margin / 2
    return float(margins[0])


def classic_margins_note(env: Any, task: str) -> str | None:
    """One line for a run's start when `keep_classic_margins` changed `env`'s model."""
    margin = getattr(getattr(env, "unwrapped", env), _APPLIED, None)
    if margin is None:
        return None
    import mujoco  # heavy (MuJoCo): loaded only when used

    return (
        f"contacts: {task}'s margin {margin:g} kept as MuJoCo <= 3.4 applied it (MuJoCo {mujoco.__version__} "
        "adds both geoms' margins: each geom's is halved)"
    )


def announce_classic_margins(env: Any, task: str) -> None:
    """Print `classic_margins_note` once per task and process: a run that first generates its dataset
    on the task and then evaluates on it would otherwise say the same line twice."""
    if task not in _ANNOUNCED and (note := classic_margins_note(env, task)):
        _ANNOUNCED.add(task)
        log.info(note)


if TYPE_CHECKING:
    import gymnasium as gym

VIDEO_QUALITIES = ("auto", "full", "fast")
"""`--video-quality`: full (MuJoCo's own look), fast (no shadows or reflections) or auto (fast where Mesa
draws in software)."""

SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software rasterizer")
"""Words in the OpenGL renderer's name of a software rasteriser (Mesa's, and its older ones)."""

INNER_MUJOCO_ENVS = ("ant_env", "point_env")
"""Where Gymnasium-Robotics' mazes keep the MuJoCo env that draws them (AntMaze, PointMaze)."""


def mujoco_renderer_of(env: gym.Env) -> Any | None:
    """The gymnasium `MujocoRenderer` that draws `env`'s frames; None for an env MuJoCo does not draw."""
    unwrapped = env.unwrapped
    for holder in (unwrapped, *(getattr(unwrapped, name, None) for name in INNER_MUJOCO_ENVS)):
        renderer = getattr(holder, "mujoco_renderer", None)
        if renderer is not None:
            return renderer
    return None


def opengl_renderer_name() -> str:
    """The renderer of the OpenGL context current in this thread (MuJoCo's, after it has drawn a frame):
    a GPU's name, or Mesa's `llvmpipe (LLVM ...)`; empty where it cannot be asked."""
    try:
        from OpenGL import GL  # PyOpenGL comes with MuJoCo's rendering, asked only here

        name = GL.glGetString(GL.GL_RENDERER)
    except Exception:  # PyOpenGL missing, or no context current: nothing known, nothing changed
        return ""
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name or "")


def drawn_in_software(renderer_name: str) -> bool:
    return any(word in renderer_name.lower() for word in SOFTWARE_RENDERERS)


def leave_out_shadows_and_reflections(renderer: Any) -> bool:
    """Turn off the shadow and reflection passes of the scene `renderer` draws with (its viewer is made
    by its first frame); whether it had a viewer to change."""
    import mujoco  # heavy (MuJoCo): loaded only when used

    scene = getattr(getattr(renderer, "viewer", None), "scn", None)
    if scene is None:
        return False
    scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
    scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
    return True
