"""D4RL's AntMaze envs (`D4RL/antmaze-*`), rebuilt on the `mujoco` bindings.

The references: D4RL's `locomotion/ant.py`, `maze_env.py`, `goal_reaching_env.py` and `wrappers.py`
(the ant, the blocks, starts, goals, the step, the reward and the episode's end), its registered
time limits, and its `ant.xml`, whose compiled model the rebuild's equals field by field (checked
with D4RL's file by `benchmarks/mujoco_physics.py compare-antmaze`)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from conftest import load_benchmark, rendered_frame_summary
from offline_rl.envs.antmaze import ANTMAZE_LAYOUTS, antmaze_of, d4rl_antmaze_id
from offline_rl.envs.d4rl_catalogue import d4rl_episode_steps, d4rl_gymnasium_task, d4rl_names
from offline_rl.envs.make import make_env

KINDS = {
    "umaze": ("umaze", "umaze-diverse"),
    "medium": ("medium-play", "medium-diverse"),
    "large": ("large-play", "large-diverse"),
}
GOAL_CELLS = {"umaze": (0.0, 8.0), "medium": (20.0, 20.0), "large": (32.0, 24.0)}  # the G cell's centre, start at 0


def test_the_layouts_are_d4rls_evaluation_mazes() -> None:
    """D4RL's `U_MAZE_TEST`, `BIG_MAZE_TEST` and `HARDEST_MAZE_TEST` (`maze_env.py`), as its lists: 1 a
    block, 0 empty, 'r' the start, 'g' the goal."""
    d4rl = {
        "umaze": [[1, 1, 1, 1, 1], [1, "r", 0, 0, 1], [1, 1, 1, 0, 1], [1, "g", 0, 0, 1], [1, 1, 1, 1, 1]],
        "medium": [
            [1, 1, 1, 1, 1, 1, 1, 1], [1, "r", 0, 1, 1, 0, 0, 1], [1, 0, 0, 1, 0, 0, 0, 1], [1, 1, 0, 0, 0, 1, 1, 1],
            [1, 0, 0, 1, 0, 0, 0, 1], [1, 0, 1, 0, 0, 1, 0, 1], [1, 0, 0, 0, 1, 0, "g", 1], [1, 1, 1, 1, 1, 1, 1, 1],
        ],
        "large": [
            [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [1, "r", 0, 0, 0, 1, 0, 0, 0, 0, 0, 1],
            [1, 0, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1], [1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1],
            [1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 0, 1], [1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1],
            [1, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1], [1, 0, 0, 1, 0, 0, 0, 1, 0, "g", 0, 1],
            [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
        ],
    }  # fmt: skip
    symbols = {1: "#", 0: "O", "r": "R", "g": "G"}
    for maze, rows in d4rl.items():
        assert ANTMAZE_LAYOUTS[maze] == tuple("".join(symbols[cell] for cell in row) for row in rows), maze


@pytest.mark.parametrize("maze", list(ANTMAZE_LAYOUTS))
def test_each_maze_has_its_ids_spaces_time_limit_and_datasets(maze: str) -> None:
    """D4RL registers 700 steps for the U-maze and 1000 for the others, in every version; each of the
    maze's datasets evaluates on it: v2 files on the v2 env (a goal per episode), v0 and v1 on v0's."""
    for version in ("v2", "v0"):
        env_id = d4rl_antmaze_id(maze, version)
        env = make_env(env_id)
        assert env.spec.max_episode_steps == (700 if maze == "umaze" else 1000)
        assert env.observation_space.shape == (29,) and env.action_space.shape == (8,)
        np.testing.assert_array_equal(env.action_space.low, -np.ones(8))
        assert antmaze_of(env_id) == (maze, version)
        env.close()
    for kind in KINDS[maze]:
        for version in ("v0", "v1", "v2"):
            name = f"antmaze-{kind}-{version}"
            assert name in d4rl_names()
            assert d4rl_gymnasium_task(name) == d4rl_antmaze_id(maze, "v2" if version == "v2" else "v0")
            assert d4rl_episode_steps(name) == gym.spec(d4rl_gymnasium_task(name)).max_episode_steps
    assert antmaze_of("AntMaze_UMaze-v5") is None


def test_the_model_is_d4rls_ant() -> None:
    """D4RL's ant.xml: 0.02 s RK4 steps, five per env step; eight motors of gear 1 and range ±30 in D4RL's
    order (the back right leg first); hips of ±30° and ankles of 30°–70°, armature and damping 1."""
    env = make_env(d4rl_antmaze_id("umaze")).unwrapped
    model = env.model
    assert model.opt.timestep == 0.02 and model.opt.integrator == 1  # mjINT_RK4
    assert (model.nq, model.nv, model.nu) == (15, 14, 8)
    assert [model.joint(int(j)).name for j in model.actuator_trnid[:, 0]] == [
        "hip_4", "ankle_4", "hip_1", "ankle_1", "hip_2", "ankle_2", "hip_3", "ankle_3"
    ]  # fmt: skip
    np.testing.assert_array_equal(model.actuator_ctrlrange, np.tile([-30.0, 30.0], (8, 1)))
    np.testing.assert_array_equal(model.actuator_gear[:, 0], np.ones(8))
    np.testing.assert_allclose(model.jnt_range[model.joint("hip_1").id], np.radians([-30, 30]))
    np.testing.assert_allclose(model.jnt_range[model.joint("ankle_2").id], np.radians([-70, -30]))
    np.testing.assert_array_equal(model.dof_damping[6:], np.ones(8))
    np.testing.assert_array_equal(model.qpos0[:7], [0, 0, 0.75, 1, 0, 0, 0])
    # a 0.25 m sphere and eight 0.08 m capsules of density 5: the torso alone is 4/3·π·0.25³·5
    assert model.body_mass[model.body("torso").id] == pytest.approx(4 / 3 * np.pi * 0.25**3 * 5)


def test_the_feet_touch_the_floor_at_d4rls_margin_under_any_mujoco() -> None:
    """D4RL's geoms all have margin 0.01, and so do the rebuild's; MuJoCo 3.5+ would make each contact's
    margin their sum, 0.02, but for `offline_rl.envs.mujoco`: a foot resting on the floor has 0.01."""
    import mujoco

    env = make_env(d4rl_antmaze_id("umaze")).unwrapped
    env.reset(seed=0)
    for _ in range(20):
        env.step(np.zeros(8))
    floor = env.model.geom("floor").id
    margins = [float(c.includemargin) for c in env.data.contact[: env.data.ncon] if floor in (c.geom1, c.geom2)]
    assert margins and all(margin == pytest.approx(0.01) for margin in margins), mujoco.__version__


def test_actions_in_the_unit_box_drive_the_motors_at_thirty() -> None:
    """D4RL's `NormalizedBoxEnv` maps [-1, 1] onto the motors' ±30 and clips what lies beyond."""
    env = make_env(d4rl_antmaze_id("umaze")).unwrapped
    env.reset(seed=0)
    env.step(np.array([1, -1, 0.5, 0, 2, -3, 0.1, -0.2]))
    np.testing.assert_allclose(env.data.ctrl, [30, -30, 15, 0, 30, -30, 3, -6])


def test_episodes_start_at_the_origin_of_the_start_cell() -> None:
    """`reset_model`: qpos0 (the torso at (0, 0, 0.75), upright, legs at 0) plus U(-0.1, 0.1) on each of
    the 15 coordinates, qvel ~ N(0, 0.1²) on each of the 14."""
    env = make_env(d4rl_antmaze_id("large"))
    observations = np.array([env.reset(seed=seed)[0] for seed in range(200)])
    qpos, qvel = observations[:, :15], observations[:, 15:]
    offsets = qpos - np.array([0, 0, 0.75, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    assert np.abs(offsets).max() <= 0.1 and np.abs(offsets).max() > 0.09
    assert qvel.std() == pytest.approx(0.1, rel=0.1)


@pytest.mark.parametrize("maze", list(ANTMAZE_LAYOUTS))
def test_goals_lie_in_the_goal_cell_offset_as_d4rl_offsets_them(maze: str) -> None:
    """D4RL's `goal_sampler`: the goal cell's centre plus U(0, 1) and U(0, 0.5) on each axis, so the goals
    fill [centre, centre + 1.5]² with a mean of centre + 0.75; v2 draws one per episode."""
    env = make_env(d4rl_antmaze_id(maze, "v2"))
    env.reset(seed=0)
    goals = np.array([env.reset()[1]["goal"] for _ in range(400)])
    offsets = goals - np.array(GOAL_CELLS[maze])
    assert offsets.min() >= 0 and offsets.max() <= 1.5
    np.testing.assert_allclose(offsets.mean(axis=0), [0.75, 0.75], atol=0.06)
    assert len(np.unique(goals[:, 0])) == len(goals)


def test_the_v0_env_keeps_its_goal_from_episode_to_episode() -> None:
    """D4RL's v0 and v1 envs draw the goal once, when the env is made (here: at its first or seeded reset)."""
    env = make_env(d4rl_antmaze_id("umaze", "v0"))
    first = env.reset(seed=3)[1]["goal"]
    assert all(np.array_equal(env.reset()[1]["goal"], first) for _ in range(5))
    assert np.array_equal(env.reset(seed=3)[1]["goal"], first) and not np.array_equal(
        env.reset(seed=4)[1]["goal"], first
    )


def test_reaching_the_goal_is_rewarded_once_and_ends_the_episode() -> None:
    """Sparse reward 1 within 0.5 of the goal (the torso's x, y), where the evaluation env terminates
    (D4RL's `eval=True`); 0 elsewhere, without termination, until the time limit."""
    env = make_env(d4rl_antmaze_id("umaze"))
    _, info = env.reset(seed=0)
    ant = env.unwrapped
    qpos, qvel = ant.data.qpos.copy(), np.zeros(14)
    qpos[:2] = info["goal"] + [0.3, 0.0]
    ant.set_state(qpos, qvel)
    _, reward, terminated, truncated, step_info = env.step(np.zeros(8))
    assert (reward, terminated, truncated, step_info["success"]) == (1.0, True, False, True)
    env.reset(seed=1)
    steps, rewards = 0, []
    while True:
        _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        rewards.append(reward)
        steps += 1
        assert not terminated
        if truncated:
            break
    assert steps == 700 and set(rewards) == {0.0}


def test_a_fallen_ant_does_not_end_the_episode() -> None:
    """D4RL's ant ends an episode when its torso leaves heights 0.2-1.0; the goal-reaching step drops that."""
    env = make_env(d4rl_antmaze_id("medium"))
    env.reset(seed=0)
    ant = env.unwrapped
    qpos = ant.data.qpos.copy()
    qpos[2], qpos[3:7] = 1.6, [0.0, 1.0, 0.0, 0.0]  # upside down, well above the floor
    ant.set_state(qpos, np.zeros(14))
    for _ in range(20):
        observation, _, terminated, _, _ = env.step(np.zeros(8))
        assert not terminated
    assert observation[2] < 1.0


def test_the_blocks_stand_where_d4rl_puts_them() -> None:
    """U-maze: the start cell is centred at the origin, a block fills the cell above it (row 2, column 1:
    y from 2 to 6), and the corridor runs on towards +x. Thrown at 8 m/s towards +y, the ant stops with
    its torso short of the block's face less the torso's radius (1.75); towards +x it slides past x = 4."""
    env = make_env(d4rl_antmaze_id("umaze"))
    ant = env.unwrapped
    reached = {}
    for axis in (0, 1):
        env.reset(seed=0)
        qpos, qvel = ant.data.qpos.copy(), np.zeros(14)
        qpos[:3], qvel[axis] = [0.0, 0.0, 0.75], 8.0
        ant.set_state(qpos, qvel)
        reached[axis] = max(env.step(np.zeros(8))[0][axis] for _ in range(15))
    assert reached[0] > 4.0 and 1.0 < reached[1] < 2.0 - 0.25


def test_the_maze_renders_from_above() -> None:
    assert rendered_frame_summary("D4RL/antmaze-umaze-v2") == "(480, 480, 3) True"


def test_the_physics_check_places_d4rls_blocks_as_the_rebuild_does(tmp_path, monkeypatch, capsys) -> None:
    """`benchmarks/mujoco_physics.py compare-antmaze` adds the blocks to an ant.xml by D4RL's own rule
    (cell (i, j) at (4j − torso_x, 4i − torso_y)). Given the rebuild's ant and floor as that file, it
    must find the compiled models equal in every field, for the three mazes."""
    import re

    from offline_rl.envs.antmaze import antmaze_model_xml

    physics = load_benchmark("mujoco_physics", monkeypatch)
    ant_only = re.sub(r"\s*<geom name=\"block_[^>]*/>", "", antmaze_model_xml(ANTMAZE_LAYOUTS["umaze"]))
    assert "block_" not in ant_only
    (tmp_path / "ant.xml").write_text(ant_only)
    assert physics.compare_antmaze(tmp_path / "ant.xml") == 0
    report = capsys.readouterr().out
    assert "umaze: 32 geoms, 14 bodies; fields that differ: none; options equal: True" in report
    assert "large: 76 geoms, 14 bodies; fields that differ: none" in report


@pytest.mark.parametrize("model", ["antmaze", "hopper", "kitchen"])  # kitchen: its XML read where it lies
def test_the_physics_check_finds_no_difference_between_a_mujoco_and_itself(
    model: str, tmp_path, monkeypatch, capsys
) -> None:
    physics = load_benchmark("mujoco_physics", monkeypatch)
    monkeypatch.setattr(physics, "EPISODE_STEPS", 50)
    assert physics.record(model, tmp_path / "states.npz", episodes=2) == 0
    assert physics.replay(tmp_path / "states.npz", tmp_path / "next.npz") == 0
    assert physics.diff(tmp_path / "states.npz", tmp_path / "next.npz") == 0
    report = capsys.readouterr().out
    assert f"{model}: 100 states of 2 episodes" in report
    same = "|qvel difference| median 0, 99th percentile 0, max 0; steps differing by > 1e-3: 0.0%"
    assert f"as_compiled: {same}" in report and f"classic_margins: {same}" in report
