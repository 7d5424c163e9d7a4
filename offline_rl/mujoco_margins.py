"""Contact margins as the MuJoCo of D4RL's data and of gymnasium's v4 envs combined them, under any MuJoCo.

A contact becomes a constraint once two geoms come within their pair's margin. MuJoCo up to 3.4 takes
the larger of the two geoms' margins, MuJoCo 3.5 and later their sum (a sphere of margin 0.01 held
0.015 above a plane of margin 0.01 touches only under the sum). D4RL recorded its datasets, and its
and CORL's scores were measured, on MuJoCo 2.x; gymnasium's v4 envs were defined there too. Models
that give every geom one margin (gymnasium's Hopper 0.001 and Ant 0.01, Gymnasium-Robotics' AntMaze,
PointMaze and three of the Adroit hands, D4RL's Maze2D and AntMaze) therefore start their contacts
twice as far out on a recent MuJoCo: one Hopper-v4 step differed from MuJoCo 3.4.0's by more than 1e-3
in 79% of 10 000 random states, and by nothing with the margins halved (BENCHMARKS.md, "D4RL's AntMaze
envs"). `offline_rl.envs.make_env` and the envs rebuilt here halve such a model's margins where this
MuJoCo adds them up, so every contact's margin is again the model's one value. Models with several
margin values or with gaps (gymnasium's HalfCheetah and Walker2d have none: unaffected) are left as
they are, since no per-geom margins give the larger of two under a sum.
"""

from __future__ import annotations

import functools
from typing import Any

_APPLIED = "_offline_rl_classic_margin"  # set on an env once its model has been seen: halving twice would be wrong
_ANNOUNCED: set[str] = set()  # tasks whose note this process has printed
_PROBE = """<mujoco><worldbody><geom type="plane" size="1 1 0.1" margin="0.01"/>
<body pos="0 0 0.115"><freejoint/><geom type="sphere" size="0.1" margin="0.01"/></body></worldbody></mujoco>"""


@functools.cache
def margins_add_up() -> bool:
    """Whether this MuJoCo makes a contact's margin the sum of its geoms' (3.5 and later), not the larger."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(_PROBE)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return data.ncon > 0


def keep_classic_margins(env: Any) -> float | None:
    """Give `env`'s MuJoCo model (its `unwrapped.model`, if any) the contact margins MuJoCo ≤ 3.4 gave it.
    Returns the margin each contact now has when the model's margins were halved, else None; an env
    already seen returns what it returned then, without touching its model again."""
    import mujoco

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
    import numpy as np

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
    import mujoco

    return (
        f"contacts: {task}'s margin {margin:g} kept as MuJoCo <= 3.4 applied it (MuJoCo {mujoco.__version__} "
        "adds both geoms' margins: each geom's is halved)"
    )


def announce_classic_margins(env: Any, task: str) -> None:
    """Print `classic_margins_note` once per task and process: a run that first generates its dataset
    on the task and then evaluates on it would otherwise say the same line twice."""
    if task not in _ANNOUNCED and (note := classic_margins_note(env, task)):
        _ANNOUNCED.add(task)
        print(note)
