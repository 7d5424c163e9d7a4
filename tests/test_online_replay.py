"""The online trainer's replay buffer answers `hasnull()` as Tianshou's full scan does, from the
batches as they were added."""

from __future__ import annotations

import numpy as np
from tianshou.data import Batch, VectorReplayBuffer

from offline_rl.data.online_replay import NullCheckedVectorReplayBuffer


def step_batch(rng: np.random.Generator, envs: int, *, nan_reward: bool = False) -> Batch:
    rew = rng.normal(size=envs)
    if nan_reward:
        rew[envs - 1] = np.nan
    return Batch(
        obs=rng.normal(size=(envs, 3)),
        act=rng.integers(0, 2, size=envs),
        rew=rew,
        terminated=np.zeros(envs, dtype=bool),
        truncated=np.zeros(envs, dtype=bool),
        obs_next=rng.normal(size=(envs, 3)),
        info=Batch(),
    )


def test_hasnull_matches_the_full_scan_as_batches_arrive_and_after_reset() -> None:
    rng = np.random.default_rng(0)
    ours, theirs = NullCheckedVectorReplayBuffer(40, 4), VectorReplayBuffer(40, 4)
    answers = []
    for step in range(12):
        batch = step_batch(rng, 4, nan_reward=step == 7)
        ours.add(batch)
        theirs.add(batch)
        answers.append((ours.hasnull(), theirs.hasnull()))
    assert [a for a, _ in answers] == [b for _, b in answers]
    assert answers[6] == (False, False) and answers[7] == (True, True)
    ours.reset()
    assert not ours.hasnull()
    ours.add(step_batch(rng, 4))
    assert not ours.hasnull()


def frame_step(rng: np.random.Generator, envs: int, step: int, *, ends: np.ndarray) -> Batch:
    """One collector step of frame-stacked observations; each env's newest frame is unique."""
    frames = rng.integers(0, 255, size=(envs, 4, 6, 6), dtype=np.uint8)
    frames[:, -1, 0, 0] = step
    return Batch(
        obs=frames,
        act=rng.integers(0, 6, size=envs),
        rew=rng.normal(size=envs),
        terminated=ends & (rng.random(envs) < 0.5),
        truncated=np.zeros(envs, dtype=bool),
        obs_next=rng.integers(0, 255, size=(envs, 4, 6, 6), dtype=np.uint8),
        info=Batch(lives=np.full(envs, 3)),
    )


def chronological(replay: VectorReplayBuffer, env: int) -> np.ndarray:
    return replay.buffers[env].sample_indices(0) + replay.subbuffer_edges[env]


def test_a_saved_replay_is_restored_in_order_and_its_running_episodes_are_cut(tmp_path) -> None:
    from offline_rl.data.online_replay import restore_replay, save_replay

    rng = np.random.default_rng(1)
    options = {"ignore_obs_next": True, "save_only_last_obs": True, "stack_num": 4}
    original = NullCheckedVectorReplayBuffer(4 * 30, 4, **options)
    for step in range(50):  # the ring wraps: 30 places per env
        ends = rng.random(4) < 0.15
        ends[0], ends[1] = ends[0] and step < 49, ends[1] or step == 49  # env 0 is mid-episode at the end
        batch = frame_step(rng, 4, step, ends=ends)
        batch.truncated = ends & ~batch.terminated
        original.add(batch)
    save_replay(original, tmp_path / "replay.hdf5")

    restored = NullCheckedVectorReplayBuffer(4 * 30, 4, **options)
    assert restore_replay(restored, tmp_path / "replay.hdf5") is None
    assert len(restored) == len(original) == 120
    for env in range(4):
        theirs, ours = original[chronological(original, env)], restored[chronological(restored, env)]
        for key in ("obs", "obs_next", "act", "rew", "terminated"):
            np.testing.assert_array_equal(np.asarray(ours[key]), np.asarray(theirs[key]), err_msg=f"{env} {key}")
        assert bool(theirs.done[-1]) == (env == 1) or env > 1  # env 0 runs on at the end, env 1 has ended
        cut = np.asarray(theirs.truncated).copy()
        cut[-1] |= not theirs.done[-1]  # a running episode ends where the file ends: truncated, not bridged
        np.testing.assert_array_equal(ours.truncated, cut)
        np.testing.assert_array_equal(ours.done, ours.terminated | ours.truncated)

    # After the resume the envs start afresh: env 0's next transition begins a new episode.
    newest = restored.add(frame_step(rng, 4, 99, ends=np.zeros(4, dtype=bool)))[0]
    assert restored.prev(newest[0]) == newest[0]
    assert (np.asarray(restored[newest[:1]].obs)[0, :, 0, 0] == 99).all()  # its stack repeats its first frame


def test_a_replay_of_another_layout_is_not_restored(tmp_path) -> None:
    from offline_rl.data.online_replay import restore_replay, save_replay

    rng = np.random.default_rng(2)
    original = NullCheckedVectorReplayBuffer(40, 4)
    for _ in range(5):
        original.add(step_batch(rng, 4))
    save_replay(original, tmp_path / "replay.hdf5")
    other = NullCheckedVectorReplayBuffer(40, 2)
    reason = restore_replay(other, tmp_path / "replay.hdf5")
    assert reason is not None and "'buffer_num': 4" in reason and len(other) == 0
    same = NullCheckedVectorReplayBuffer(40, 4)
    assert restore_replay(same, tmp_path / "replay.hdf5") is None and len(same) == 20
    np.testing.assert_array_equal(same.obs[chronological(same, 3)], original.obs[chronological(original, 3)])


def test_a_replay_restores_into_a_larger_one_that_holds_it_and_not_into_a_smaller(tmp_path) -> None:
    from offline_rl.data.online_replay import restore_replay, save_replay

    rng = np.random.default_rng(4)
    original = NullCheckedVectorReplayBuffer(40, 4)
    for _ in range(6):
        original.add(step_batch(rng, 4))
    save_replay(original, tmp_path / "replay.hdf5")
    larger = NullCheckedVectorReplayBuffer(80, 4)  # a run given more steps: the same transitions, room for more
    assert restore_replay(larger, tmp_path / "replay.hdf5") is None and len(larger) == 24
    np.testing.assert_array_equal(larger.obs[chronological(larger, 2)], original.obs[chronological(original, 2)])
    smaller = NullCheckedVectorReplayBuffer(20, 4)  # 5 per env, fewer than the 6 each holds
    reason = restore_replay(smaller, tmp_path / "replay.hdf5")
    assert reason is not None and "'size': 10" in reason and len(smaller) == 0


def test_a_damaged_replay_file_leaves_the_replay_empty_and_says_why(tmp_path) -> None:
    from offline_rl.data.online_replay import restore_replay, save_replay

    rng = np.random.default_rng(3)
    original = NullCheckedVectorReplayBuffer(4000, 4)
    for _ in range(500):
        original.add(step_batch(rng, 4))
    path = save_replay(original, tmp_path / "replay.hdf5")
    whole = path.read_bytes()
    for damage in (whole[:5000], whole[: len(whole) - 3000]):
        path.write_bytes(damage)
        replay = NullCheckedVectorReplayBuffer(4000, 4)
        reason = restore_replay(replay, path)
        assert reason is not None and "is unreadable" in reason and len(replay) == 0
    # Bytes changed where HDF5 keeps the file's structure: h5py raises RuntimeError and others, not only
    # OSError (and the HDF5 library itself may crash on a rare copy: each copy is read in a child process).
    from conftest import damaged_copy, in_forked_child

    def restore() -> str:
        replay = NullCheckedVectorReplayBuffer(4000, 4)
        reason = restore_replay(replay, path)
        return "restored" if reason is None else f"refused, {len(replay)} left: {reason}"

    outcomes = []
    for _ in range(40):
        path.write_bytes(damaged_copy(whole, rng))
        outcome = in_forked_child(restore, timeout=30)
        assert outcome in ("restored", "crashed", "hung") or outcome.startswith("refused, 0 left: "), outcome
        outcomes.append(outcome.split(",")[0])
    assert outcomes.count("refused") > 5, outcomes
