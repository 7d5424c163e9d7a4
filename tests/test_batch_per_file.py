"""`--batch-per-file`: each batch from one of the buffer's files, picked uniformly per batch, as
batch_rl's FixedReplayBuffer (the CQL authors' Atari code) draws each batch from one DQN Replay
checkpoint; off, batches draw from all transitions alike, as before."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.algorithm.algorithm_base import policy_within_training_step

from offline_rl.algorithms.discrete_cql import CQLQRDQN, DiscreteCQLConfig
from offline_rl.algorithms.discrete_cql.staging import SourceBatches
from offline_rl.data import load_buffer, load_buffers
from offline_rl.data.dqn_replay import convert_checkpoint
from offline_rl.data.dqn_replay.testing import DopamineReplay, step_frame
from offline_rl.data.transitions import source_of_index, source_sizes

EPISODES = ((12,), (20, 25), (30, 30, 30))  # per file: its episodes' lengths, so the files differ in size


def checkpoint_files(folder: Path) -> list[Path]:
    """DQN Replay checkpoints converted as the converter does, file i's every action being i."""
    paths = []
    for number, lengths in enumerate(EPISODES):
        replay = DopamineReplay(128, (84, 84))
        for episode, length in enumerate(lengths):
            for step in range(length):
                replay.add(step_frame(10 * number + episode, step), number, 0.0, step == length - 1)
        replay.save(folder / f"replay{number}", 0)
        paths.append(folder / f"ckpt_{number}.hdf5")
        convert_checkpoint(folder / f"replay{number}", 0, paths[-1])
    return paths


def test_a_buffer_of_several_files_knows_which_file_each_transition_came_from(tmp_path: Path) -> None:
    paths = checkpoint_files(tmp_path)
    buffer = load_buffers(paths)
    sizes = [len(load_buffer(path)) for path in paths]
    assert source_sizes(buffer).tolist() == sizes and len(set(sizes)) == 3
    indices = np.arange(len(buffer))
    np.testing.assert_array_equal(source_of_index(buffer, indices), buffer.act[indices])  # file i acts i
    assert source_sizes(load_buffer(paths[0])) is None and source_of_index(load_buffers(paths[:1]), indices) is None


def test_each_draw_is_one_file_picked_uniformly_then_rows_uniformly_within_it() -> None:
    sources = np.array([2, 0, 0, 1, 2, 0, 0, 0, 0, 0, 1, 2])  # interleaved, 7 rows of file 0, 2 of 1, 3 of 2
    batches = SourceBatches.of(sources, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    files, rows = [], []
    for _ in range(3000):
        drawn = batches.draw(4, generator)
        assert len(set(sources[drawn.numpy()].tolist())) == 1  # one file per batch
        files.append(int(sources[drawn[0]]))
        rows.extend(drawn.tolist())
    share = np.bincount(files, minlength=3) / len(files)
    assert np.all(np.abs(share - 1 / 3) < 0.04), share  # files alike, whatever their sizes
    per_row = np.bincount(rows, minlength=len(sources)) / len(rows)
    expected = np.array([1 / 3 / np.sum(sources == file) for file in sources])  # uniform within its file
    assert np.all(np.abs(per_row - expected) < 0.25 * expected), (per_row, expected)


def batch_actions(buffer, *, batch_per_file: bool, on_device: bool | None) -> list[list[int]]:
    """The actions of each batch twelve updates of discrete CQL learned from."""
    config = DiscreteCQLConfig(num_quantiles=4, target_update_freq=0, batch_per_file=batch_per_file)
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    torch.manual_seed(0)
    algorithm = CQLQRDQN.build(space, gym.spaces.Discrete(3), config)
    algorithm.dataset_on_device = on_device
    seen: list[list[int]] = []
    step = algorithm.gradient_step

    def recording(batch, weight=None):
        seen.append(batch[1].tolist())  # the actions
        return step(batch, weight)

    algorithm.gradient_step = recording
    with policy_within_training_step(algorithm.policy):
        for _ in range(12):
            algorithm.update(buffer, 8)
    return seen


@pytest.mark.parametrize("on_device", [None, False], ids=["staged", "fed from host memory"])
def test_discrete_cql_learns_from_one_file_per_batch_when_asked(tmp_path: Path, on_device: bool | None) -> None:
    buffer = load_buffers(checkpoint_files(tmp_path))
    per_file = batch_actions(buffer, batch_per_file=True, on_device=on_device)
    assert len(per_file) == 12 and all(len(set(actions)) == 1 for actions in per_file)
    assert len({actions[0] for actions in per_file}) > 1  # not always the same file
    mixed = batch_actions(buffer, batch_per_file=False, on_device=on_device)
    assert any(len(set(actions)) > 1 for actions in mixed)  # as before: batches mix the files


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("on_device", [None, False], ids=["staged", "fed from host memory"])
def test_captured_and_eager_updates_draw_the_same_files_on_cuda(tmp_path: Path, on_device: bool | None) -> None:
    """A file picked and rows drawn inside the captured update: the replayed graph does what the eager
    update does, from the same state and random numbers."""
    import copy

    from test_discrete_staging import assert_ten_updates_agree

    buffer = load_buffers(checkpoint_files(tmp_path))
    config = DiscreteCQLConfig(num_quantiles=8, target_update_freq=4, batch_per_file=True)
    torch.manual_seed(0)
    captured = CQLQRDQN.build(
        gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(3), config, device="cuda"
    )
    eager = copy.deepcopy(captured)
    captured.capture, captured.compile_update, eager.capture = True, False, False
    captured.dataset_on_device = eager.dataset_on_device = on_device
    assert_ten_updates_agree(captured, eager, buffer)
    assert captured._staged.sources is not None
