"""Franka Kitchen: Minari's `D4RL/kitchen/*` datasets train and evaluate on Gymnasium-Robotics'
FrankaKitchen-v1, and D4RL's own Kitchen files are known by name.

Gymnasium-Robotics' Kitchen, Fetch and Shadow-hand envs could not be made at all on the MuJoCo this
project installs (4.0): their joint helpers compare `np.int32` joint types with MuJoCo enums, which
stopped comparing equal in 3.12 (`offline_rl.envs.robotics`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from conftest import record_minari_dataset, run_in_process, write_d4rl_file
from offline_rl.data import dataset_info, load_d4rl, load_minari
from offline_rl.data.d4rl import d4rl_path
from offline_rl.envs.d4rl_catalogue import d4rl_episode_steps
from offline_rl.envs.make import make_env, with_flat_observations
from offline_rl.envs.robotics import (
    enums_equal_numpy_integers,
    get_joint_qpos,
    get_joint_qvel,
    repair_joint_accessors,
    set_joint_qpos,
    set_joint_qvel,
)
from offline_rl.envs.scores import reference_scores

KITCHEN_TASKS = ["microwave", "kettle", "light switch", "slide cabinet"]  # Minari's D4RL/kitchen/complete-v2
# the kitchen hands out one observation dict per call; these tests step it unflattened, and copy what they keep
pytestmark = pytest.mark.filterwarnings("ignore:.*share an object:UserWarning")


@pytest.mark.parametrize("task", ["FrankaKitchen-v1", "FetchPickAndPlace-v4", "HandManipulateBlock-v1"])
def test_gymnasium_robotics_envs_with_named_joints_are_made_and_step(task: str) -> None:
    env = make_env(task)
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(3):
        env.step(env.action_space.sample())
    env.close()
    assert repair_joint_accessors() == (not enums_equal_numpy_integers())


def test_the_probe_tells_this_mujocos_enums_apart() -> None:
    """The condition the repair depends on, checked the way Gymnasium-Robotics' assertion checks it."""
    model = mujoco.MjModel.from_xml_string(_FOUR_JOINTS)
    hinge = model.jnt_type[3]
    assert enums_equal_numpy_integers() == (hinge in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE))


_FOUR_JOINTS = """<mujoco><worldbody>
<body name="a"><freejoint name="free"/><geom size="0.1"/>
  <body name="b"><joint name="ball" type="ball"/><geom size="0.1"/>
    <body name="c"><joint name="slide" type="slide"/><geom size="0.1"/>
      <body name="d"><joint name="hinge" type="hinge"/><geom size="0.1"/></body></body></body></body>
</worldbody></mujoco>"""


def test_the_joint_accessors_read_and_write_each_joint_types_own_slice() -> None:
    model = mujoco.MjModel.from_xml_string(_FOUR_JOINTS)
    data = mujoco.MjData(model)
    data.qpos[:] = np.arange(model.nq)  # 7 + 4 + 1 + 1
    data.qvel[:] = 100 + np.arange(model.nv)  # 6 + 3 + 1 + 1
    assert get_joint_qpos(model, data, "free").tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert get_joint_qpos(model, data, "ball").tolist() == [7, 8, 9, 10]
    assert get_joint_qpos(model, data, "slide").tolist() == [11] and get_joint_qpos(model, data, "hinge").tolist() == [
        12
    ]
    assert get_joint_qvel(model, data, "ball").tolist() == [106, 107, 108]
    assert get_joint_qvel(model, data, "hinge").tolist() == [110]
    reading = get_joint_qpos(model, data, "ball")
    reading[:] = -1  # a copy, not a view into the simulator
    assert data.qpos[7] == 7
    set_joint_qpos(model, data, "hinge", 0.5)
    set_joint_qvel(model, data, "free", np.ones(6))
    assert data.qpos[12] == 0.5 and data.qvel[:6].tolist() == [1.0] * 6 and data.qvel[6] == 106
    with pytest.raises(ValueError, match="joint 'elbow' is not part of the model"):
        get_joint_qpos(model, data, "elbow")


def _record_kitchen(dataset_id: str, steps: int) -> gym.envs.registration.EnvSpec:
    """A random-action dataset in Minari's own format, its env spec as Minari's D4RL/kitchen/complete-v2
    records it (FrankaKitchen-v1, four tasks, 280 steps), its observations the nested dicts the env
    returns, and D4RL's kitchen reference scores."""
    registered = gym.spec("FrankaKitchen-v1")
    spec = dataclasses.replace(
        registered, kwargs={**registered.kwargs, "tasks_to_complete": KITCHEN_TASKS}, max_episode_steps=280
    )
    env = make_env("FrankaKitchen-v1", spec=spec)
    (episode,) = record_minari_dataset(dataset_id, env, steps, spec, ref_min_score=0.0, ref_max_score=4.0)
    assert not episode.terminations.any()  # one episode, cut by the end of the data
    env.close()
    return spec


def test_a_minari_kitchen_dataset_trains_and_evaluates_on_its_recorded_kitchen(tmp_path: Path) -> None:
    """Before the joint repair, the evaluation env could not be made: a bare AssertionError traceback."""
    spec = _record_kitchen("D4RL/kitchen/test-v0", 150)
    buffer = load_minari("D4RL/kitchen/test-v0")
    evaluation = with_flat_observations(make_env("FrankaKitchen-v1", spec=spec))
    flat, _ = evaluation.reset(seed=0)
    # 59 robot and object numbers, and the four tasks' achieved and desired goals (2 × 11)
    assert buffer.obs.shape[1:] == flat.shape == (81,)
    assert (dataset_info(buffer)["ref_min_score"], dataset_info(buffer)["ref_max_score"]) == (0.0, 4.0)
    evaluation.close()
    result = run_in_process(
        "examples/d4rl_cql.py",
        *("--dataset", "D4RL/kitchen/test-v0", "--epoch", "1", "--step-per-epoch", "2", "--test-num", "1"),
        *("--batch-size", "16", "--hidden-sizes", "16", "--critic-layers", "1", "--critic-width", "16"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "task: FrankaKitchen-v1, the env of D4RL/kitchen/test-v0" in result.stdout
    assert f"evaluation env: FrankaKitchen-v1 as the dataset records it (tasks_to_complete={KITCHEN_TASKS}" in (
        result.stdout
    )
    assert "normalized score" in result.stdout.split("done:")[1]
    assert "share an object" not in result.stderr  # flattening copies: gymnasium's aliasing warning is moot


def test_d4rl_kitchen_names_have_d4rls_time_limit_and_scores() -> None:
    """(Their files: tests/test_d4rl.py's URL table.)"""
    assert d4rl_episode_steps("kitchen-mixed-v0") == 280
    assert reference_scores("kitchen-partial-v0") == (0.0, 4.0)


def test_a_d4rl_kitchen_file_loads_with_d4rls_280_step_episodes() -> None:
    """D4RL's Kitchen data (60 numbers: robot and object positions and the goal; 9 actions) loads by its name;
    a file without `timeouts` ends its episodes by D4RL's 280-step limit."""
    rng = np.random.default_rng(0)
    steps = 600
    write_d4rl_file(
        d4rl_path("kitchen-complete-v0"),
        observations=rng.normal(size=(steps, 60)).astype(np.float32),
        actions=rng.uniform(-1, 1, size=(steps, 9)).astype(np.float32),
        rewards=np.zeros(steps, np.float32),
        terminals=np.zeros(steps, bool),
    )
    buffer = load_d4rl("kitchen-complete-v0")
    ends = np.flatnonzero(buffer.truncated[: len(buffer)])
    # 279 steps an episode: a time-out step is dropped (its next observation is unknown), its predecessor truncates
    assert buffer.obs.shape[1:] == (60,) and ends[:2].tolist() == [278, 557]
    assert dataset_info(buffer)["name"] == "kitchen-complete-v0"


def test_training_on_d4rls_kitchen_points_to_minaris_counterpart_before_any_download(tmp_path: Path) -> None:
    result = run_in_process("examples/d4rl_cql.py", "--dataset", "kitchen-partial-v0", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --dataset kitchen-partial-v0: kitchen-partial-v0 is D4RL's Franka Kitchen data, whose env (D4RL's "
        "KitchenTaskRelaxV1, on mujoco-py and dm_control) is not available here; its counterpart Minari's "
        "D4RL/kitchen/partial-v2, the same four tasks recorded on Gymnasium-Robotics' FrankaKitchen-v1, trains and "
        "evaluates here: --dataset D4RL/kitchen/partial-v2"
    )
    assert not d4rl_path("kitchen-partial-v0").exists()
