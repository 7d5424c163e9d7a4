"""Contact margins kept as MuJoCo <= 3.4 combined them (`offline_rl.envs.mujoco`).

MuJoCo 3.5 changed a contact's margin from the larger of its two geoms' margins to their sum. D4RL's
data, its and CORL's scores, and gymnasium's v4 envs come from the earlier rule; models whose geoms
share one margin get it back by halving (`benchmarks/mujoco_physics.py`: Hopper-v4 then steps on MuJoCo
4.0 as on 2.3.1 to 2e-7)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from offline_rl.envs.make import make_env
from offline_rl.envs.mujoco import (
    announce_classic_margins,
    classic_margins_note,
    keep_classic_margins,
    margins_add_up,
)

VERSION = tuple(int(part) for part in mujoco.__version__.split(".")[:2])


def test_the_probe_tells_the_rule_of_this_mujoco() -> None:
    assert margins_add_up() == (VERSION >= (3, 5))


def floor_contact_margins(task: str, steps: int = 30) -> list[float]:
    env = make_env(task)
    env.reset(seed=0)
    for _ in range(steps):
        env.step(np.zeros(env.action_space.shape))
    model, data = env.unwrapped.model, env.unwrapped.data
    floor = model.geom("floor").id
    margins = [float(c.includemargin) for c in data.contact[: data.ncon] if floor in (c.geom1, c.geom2)]
    env.close()
    return margins


@pytest.mark.parametrize(("task", "margin"), [("Hopper-v4", 0.001), ("Ant-v4", 0.01)])
def test_gymnasiums_envs_touch_the_floor_at_their_own_margin(task: str, margin: float) -> None:
    """Hopper-v4 and Ant-v4 give every geom one margin; on MuJoCo 3.5+ made by `make_env` a resting
    foot's contact has that margin, not twice it."""
    margins = floor_contact_margins(task)
    assert margins and all(value == pytest.approx(margin) for value in margins)


def test_models_without_margins_are_left_as_they_are() -> None:
    env = make_env("HalfCheetah-v4")
    assert not env.unwrapped.model.geom_margin.any() and classic_margins_note(env, "HalfCheetah-v4") is None


def test_an_env_is_adjusted_once() -> None:
    """make_env has adjusted Hopper-v4 already: another call changes nothing and reports the same."""
    env = make_env("Hopper-v4")
    before = env.unwrapped.model.geom_margin.copy()
    first = keep_classic_margins(env)
    assert keep_classic_margins(env) == first and np.array_equal(env.unwrapped.model.geom_margin, before)
    assert first == (0.001 if margins_add_up() else None)


def test_a_model_with_several_margins_is_left_as_it_is() -> None:
    """No per-geom margins give the larger of two under a sum: such a model keeps its own."""
    xml = """<mujoco><worldbody><geom name="floor" type="plane" size="1 1 0.1" margin="0.02"/>
    <body pos="0 0 0.2"><freejoint/><geom type="sphere" size="0.1" margin="0.01"/></body></worldbody></mujoco>"""

    class Env:
        model = mujoco.MjModel.from_xml_string(xml)

    env = Env()
    assert keep_classic_margins(env) is None
    np.testing.assert_array_equal(env.model.geom_margin, [0.02, 0.01])


@pytest.mark.skipif(not margins_add_up(), reason=f"MuJoCo {mujoco.__version__} takes the larger margin itself")
def test_the_note_says_what_was_kept() -> None:
    env = make_env("Hopper-v4")
    assert classic_margins_note(env, "Hopper-v4") == (
        f"contacts: Hopper-v4's margin 0.001 kept as MuJoCo <= 3.4 applied it (MuJoCo {mujoco.__version__} adds "
        "both geoms' margins: each geom's is halved)"
    )


@pytest.mark.skipif(not margins_add_up(), reason=f"MuJoCo {mujoco.__version__} takes the larger margin itself")
def test_a_run_says_the_note_once_per_task(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The quickstart generates its dataset on the task, then evaluates on it: one contacts line, not two."""
    import offline_rl.envs.mujoco

    monkeypatch.setattr(offline_rl.envs.mujoco, "_ANNOUNCED", set())  # whatever earlier tests announced
    for task in ("Ant-v4", "Ant-v4", "D4RL/antmaze-umaze-v2"):
        env = make_env(task)
        announce_classic_margins(env, task)
        env.close()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("'")[0] for line in lines] == ["contacts: Ant-v4", "contacts: D4RL/antmaze-umaze-v2"]
