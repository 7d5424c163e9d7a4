"""D4RL's Adroit envs (`D4RL/<task>-v1`): Gymnasium-Robotics' hands with D4RL's reward, end and time limit.

The references are D4RL's `hand_manipulation_suite/*_v0.py` step functions, recomputed here from the
simulator's positions, and D4RL's random-policy reference returns."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import mujoco
import numpy as np
import pytest

from offline_rl.core.errors import OfflineRLError
from offline_rl.envs.adroit import ADROIT_TASKS, d4rl_adroit_id
from offline_rl.envs.make import make_env
from offline_rl.envs.scores import reference_scores


def hand(task: str) -> gym.Env:
    """Gymnasium-Robotics' own env for a task, as it registers it."""
    return make_env(f"AdroitHand{task.capitalize()}-v1")


def position(env: gym.Env, kind: mujoco.mjtObj, name: str) -> np.ndarray:
    model, data = env.unwrapped.model, env.unwrapped.data
    index = mujoco.mj_name2id(model, kind, name)
    return (data.site_xpos if kind == mujoco.mjtObj.mjOBJ_SITE else data.xpos)[index].copy()


def palm_to_object(env: gym.Env, task: str) -> float:
    """‖palm − object‖, the term whose sign Gymnasium-Robotics' v1 door, hammer and relocate flip."""
    palm = position(env, mujoco.mjtObj.mjOBJ_SITE, "S_grasp")
    if task == "door":
        return float(np.linalg.norm(palm - position(env, mujoco.mjtObj.mjOBJ_SITE, "S_handle")))
    return float(np.linalg.norm(palm - position(env, mujoco.mjtObj.mjOBJ_BODY, "Object")))


@pytest.mark.parametrize(("task", "limit"), [("pen", 100), ("door", 200), ("hammer", 200), ("relocate", 200)])
def test_each_task_is_registered_with_d4rls_time_limit_and_the_hands_spaces(task: str, limit: int) -> None:
    env, original = make_env(d4rl_adroit_id(task)), hand(task)
    assert gym.spec(d4rl_adroit_id(task)).max_episode_steps == limit
    assert env.observation_space == original.observation_space and env.action_space == original.action_space
    observation, _ = env.reset(seed=5)
    np.testing.assert_array_equal(observation, original.reset(seed=5)[0])
    assert reference_scores(d4rl_adroit_id(task)) == reference_scores(f"{task}-human-v1")


@pytest.mark.parametrize("task", ADROIT_TASKS)
def test_the_reward_is_d4rls_where_gymnasium_robotics_v1_pays_the_palms_distance_with_the_wrong_sign(
    task: str,
) -> None:
    """Both envs step in lockstep: every term but the palm-to-object one is the hand's own arithmetic, so
    the difference is 0.2·‖palm − object‖ on door, hammer and relocate (Gymnasium-Robotics ≥ 1.2.1 pays
    +0.1·‖…‖ where D4RL pays −0.1·‖…‖, and mends it only as v2) and nothing on pen. A D4RL reward with
    the hand's sign would differ by nothing, and fail."""
    env, original = make_env(d4rl_adroit_id(task)), hand(task)
    env.reset(seed=1)
    original.reset(seed=1)
    rng = np.random.default_rng(0)
    differences, distances = [], []
    for _ in range(60):
        action = rng.uniform(-1.0, 1.0, env.action_space.shape).astype(np.float32)
        observation, reward, terminated, truncated, _ = env.step(action)
        expected_observation, hands_reward, _, _, _ = original.step(action)
        np.testing.assert_array_equal(observation, expected_observation)
        differences.append(float(hands_reward) - float(reward))
        distances.append(palm_to_object(original, task))
        if terminated or truncated:
            break
    differences_array, flipped = np.array(differences), 0.2 * np.array(distances)
    if task == "pen":
        np.testing.assert_allclose(differences_array, 0.0, atol=1e-9)
    else:
        np.testing.assert_allclose(differences_array, flipped, atol=1e-9)
        assert flipped.min() > 0.001  # the palm is away from the object: the two signs differ at every step


def test_an_open_door_pays_d4rls_bonuses_by_hand() -> None:
    env = make_env(d4rl_adroit_id("door"))
    env.reset(seed=0)
    sim = env.unwrapped
    hinge = sim.model.jnt_qposadr[mujoco.mj_name2id(sim.model, mujoco.mjtObj.mjOBJ_JOINT, "door_hinge")]
    qpos, qvel = sim.data.qpos.copy(), sim.data.qvel.copy()
    qpos[hinge] = 1.45
    sim.set_state(qpos, qvel)
    _, reward, terminated, _, _ = env.step(np.zeros(env.action_space.shape, dtype=np.float32))
    door = float(sim.data.qpos[hinge])
    palm = position(env, mujoco.mjtObj.mjOBJ_SITE, "S_grasp")
    handle = position(env, mujoco.mjtObj.mjOBJ_SITE, "S_handle")
    assert door > 1.35
    by_hand = (
        -0.1 * np.linalg.norm(palm - handle)
        - 0.1 * (door - 1.57) ** 2
        - 1e-5 * np.sum(sim.data.qvel**2)
        + 2.0
        + 8.0
        + 10.0  # door past 0.2, 1.0 and 1.35 rad
    )
    assert float(reward) == pytest.approx(by_hand, abs=1e-12) and not terminated


def test_a_dropped_pen_ends_the_episode_with_d4rls_penalty() -> None:
    env, original = make_env(d4rl_adroit_id("pen")), hand("pen")
    env.reset(seed=2)
    original.reset(seed=2)
    rng = np.random.default_rng(2)
    played = 0
    while played < 100:
        played += 1
        action = rng.uniform(-1.0, 1.0, env.action_space.shape).astype(np.float32)
        _, reward, terminated, truncated, _ = env.step(action)
        _, hands_reward, hand_ended, _, _ = original.step(action)
        height = position(env, mujoco.mjtObj.mjOBJ_BODY, "Object")[2]
        assert terminated == (height < 0.075)
        if terminated:
            break
    assert terminated and not truncated and played < 100
    assert float(reward) == pytest.approx(float(hands_reward)) and float(reward) < -3.0  # −5 for the drop
    assert not hand_ended  # Gymnasium-Robotics' pen plays on, to its own 200-step limit


def test_a_random_policy_scores_d4rls_random_reference_on_door() -> None:
    """D4RL's normalised score puts 0 at a random policy's return on D4RL's env (−56.51 for door);
    Gymnasium-Robotics' own door pays ~11 more (benchmarks/adroit_random_returns.py, 100 episodes)."""

    def mean_return(env: gym.Env) -> float:
        returns = []
        for episode in range(10):
            env.reset(seed=episode)
            env.action_space.seed(episode)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
        return float(np.mean(returns))

    random_reference = reference_scores("door")[0]
    assert abs(mean_return(make_env(d4rl_adroit_id("door"))) - random_reference) < 1.0
    assert abs(mean_return(hand("door")) - random_reference) > 5.0


def test_d4rls_random_reference_procedure_replayed_with_its_streams_gives_its_hammer_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """D4RL's `generate_ref_min_score.py` on D4RL/hammer-v1 with D4RL's random streams (gym's old seeding of
    0 for the board heights the resets draw and for the actions): −274.77 against D4RL's −274.86, where
    100 episodes seeded otherwise give −275.56 ± 0.51 (benchmarks/adroit_random_returns.py)."""
    from conftest import load_benchmark

    replay = load_benchmark("adroit_random_returns", monkeypatch).d4rl_replay_return
    assert replay(d4rl_adroit_id("hammer")) == pytest.approx(reference_scores("hammer")[0], abs=0.3)


def test_without_gymnasium_robotics_the_env_is_one_line_naming_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import offline_rl.envs.adroit

    monkeypatch.setattr(offline_rl.envs.adroit, "register_robotics", lambda: False)
    with pytest.raises(OfflineRLError, match=r"^D4RL/hammer-v1 \(D4RL's hammer env\) .*pip install gymnasium-robotics"):
        make_env(d4rl_adroit_id("hammer"))


@pytest.mark.parametrize(
    ("task", "hint"),
    [
        ("door-v0", "D4RL's door env is D4RL/door-v1 here"),
        ("pen-v1", "D4RL's pen env is D4RL/pen-v1 here"),
        (
            "relocate-cloned-v1",
            "relocate-cloned-v1 is a D4RL dataset: --dataset relocate-cloned-v1, which evaluates on D4RL/relocate-v1",
        ),
        (
            "hopper-medium-v2",
            "hopper-medium-v2 is a D4RL dataset: --dataset hopper-medium-v2, which evaluates on Hopper-v4",
        ),
        (
            "mujoco/hopper/medium-v0",
            "mujoco/hopper/medium-v0 looks like a Minari dataset id: data, not an env (--dataset in d4rl_cql.py, "
            "--load-buffer-name in atari_cql.py)",
        ),
    ],
)
def test_d4rl_ids_given_as_task_are_told_what_they_stand_for_here(task: str, hint: str) -> None:
    with pytest.raises(OfflineRLError, match=f"^--task '{task}': .*; {re.escape(hint)}"):
        make_env(task)


def test_d4rl_door_data_evaluated_on_gymnasium_robotics_own_door_is_warned(tmp_path: Path) -> None:
    """Same shapes, another reward: the scores would not be D4RL's, so one line names D4RL/door-v1."""
    from conftest import episodes_to_arrays, write_d4rl_file
    from offline_rl.data import load_d4rl
    from offline_rl.data.fit import TaskMismatchWarning, check_dataset_belongs_to_task

    arrays = episodes_to_arrays([200], ["timeout"], obs_dim=39, act_dim=28)
    buffer = load_d4rl(write_d4rl_file(tmp_path / "door-human-v1.hdf5", **arrays))
    expected = (
        "door-human-v1 is D4RL data of its door env (here: D4RL/door-v1) but is evaluated on --task "
        "AdroitHandDoor-v1; give --task D4RL/door-v1 to evaluate where the data came from"
    )
    with pytest.warns(TaskMismatchWarning, match=re.escape(expected)):
        check_dataset_belongs_to_task(buffer, "AdroitHandDoor-v1", source="door-human-v1")
