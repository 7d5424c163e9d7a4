"""`python -m offline_rl.describe`: what a dataset holds and the command that trains on it.

Why: a researcher handed a file (a colleague's buffer, a downloaded D4RL file, a Minari directory)
wants to know before an hour of training whether it is what they think: its format, the env it was
recorded on, its actions, how many episodes end by termination and how many by a time limit, and its
returns, on D4RL's normalised scale where the dataset has references (D4RL's halfcheetah-medium data
scores ~40, its random data ~0). Each line comes from the loaders the training examples use, so what this says is what a
run would see; nothing is downloaded unless `--download` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from offline_rl.cli.flags import parse_config
from offline_rl.cli.programs import training_command
from offline_rl.core.settings import check_ranges, setting
from offline_rl.data.frame_padding import frame_padding_of

PROG = "python -m offline_rl.describe"
DESCRIPTION = "What each dataset holds (format, env, actions, episodes, returns) and the command that trains on it."

FORMAT_NAMES = {
    "d4rl": "D4RL-format HDF5 file",
    "minari": "Minari dataset",
    "tianshou": "Tianshou buffer",
    "d3rlpy": "d3rlpy dataset file",
}


@dataclass
class DescribeConfig:
    FLAG_GROUP: ClassVar[str] = "describe"

    sources: list[str] = setting(
        help="datasets: D4RL-format or d3rlpy files, Tianshou buffers, Minari directories, or D4RL names / "
        "Minari ids already on disk",
        required=True,
        positional=True,
    )
    download: bool = setting(False, "fetch a named D4RL or Minari dataset that is not on disk, as training does")

    def validate(self) -> None:
        check_ranges(self)


def load_for_description(source: str, *, download: bool) -> tuple[Any, str]:
    """(the buffer, its format's name) as the training example for its actions would load it; Minari's
    Atari screens as `atari_cql.py` stacks them."""
    from offline_rl.data.detect import (  # heavy (gymnasium, h5py, Tianshou, torch, tqdm): loaded only when used
        detect_format,
        load_dataset,
    )
    from offline_rl.data.minari import (
        open_minari,  # heavy (gymnasium, h5py, Tianshou, torch, tqdm): loaded only when used
    )
    from offline_rl.data.minari_atari import (  # heavy (gymnasium, h5py, Tianshou, torch, tqdm): loaded only when used
        holds_atari_screens,
        load_minari_atari,
    )

    kind = detect_format(source)
    if kind == "minari" and holds_atari_screens(open_minari(source, download=download)):
        return load_minari_atari(source, download=download), "Minari dataset of Atari screens"
    return load_dataset(source, download=download), FORMAT_NAMES[kind]


def describe_dataset(source: str, buffer: Any, format_name: str) -> list[str]:
    """The lines printed for one dataset."""
    from offline_rl.data import dataset_info, dataset_stats  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.data.fit import dataset_env  # gymnasium: kept out of --help's start
    from offline_rl.data.transitions import has_discrete_actions  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.envs.scores import normalized_score  # gymnasium: kept out of --help's start

    info, stats = dataset_info(buffer), dataset_stats(buffer)
    belongs_to = dataset_env(info)
    name = f", dataset {info['name']}" if info.get("name") else ""  # a foreign buffer's file records none
    lines = [f"{source}: {format_name}{name}"]
    lines.append(
        f"env: {belongs_to.task} (it {belongs_to.origin})"
        if belongs_to is not None
        else "env: none recorded (training needs --task with the env it was recorded on)"
    )
    lines.append(f"observations: {observation_line(buffer, info)}")
    discrete = has_discrete_actions(buffer)
    lines.append(f"actions: {action_line(np.asarray(buffer.act[: len(buffer)]), discrete=discrete)}")
    lines += stats.summary().splitlines()
    low, high = info.get("ref_min_score"), info.get("ref_max_score")
    if low is not None and high is not None:
        score = normalized_score(stats.return_mean, float(low), float(high))
        lines.append(
            f"normalized score of the data's mean return: {score:.1f} (references: random {float(low):.1f}, "
            f"expert {float(high):.1f})"
        )
    task = "" if belongs_to is not None else " --task <env>"
    lines.append(f"train: {training_command([source], discrete=discrete)}{task}")
    return lines


PADDING_WORDS = {
    "zero": "black frames before an episode's first (Dopamine's, so DQN Replay's and RL Unplugged's)",
    "reset": "an episode's first frame repeated (gymnasium's FrameStackObservation)",
}


def observation_line(buffer: Any, info: dict[str, Any]) -> str:
    """One observation's shape and dtype (a frame stack's as sampled), what the data says of them, and
    how its stacks are padded at episode starts, which `atari_cql.py`'s evaluation env copies."""

    obs = np.asarray(buffer[np.array([0])].obs)
    notes = [str(info["observations"])] if info.get("observations") else []
    if obs.ndim == 4:  # (1, stack, H, W)
        padding = frame_padding_of(buffer) or info.get("frame_padding")
        notes.append(f"stacks padded with {PADDING_WORDS[padding]}" if padding else "stack padding unknown")
    return f"{tuple(obs.shape[1:])} {obs.dtype}" + "".join(f"; {note}" for note in notes)


def action_line(actions: np.ndarray, *, discrete: bool) -> str:
    """Discrete: how many actions appear and how often the commonest does; continuous: the shape and
    the range the data's actions span (D4RL's lie in [-1, 1]; a task with other bounds shows them)."""
    if discrete:
        counts = np.bincount(actions.reshape(-1).astype(np.int64))
        used = int((counts > 0).sum())
        return (
            f"discrete, indices 0 to {len(counts) - 1} ({used} used; the commonest "
            f"{100.0 * counts.max() / counts.sum():.1f}% of steps)"
        )
    flat = actions.reshape(len(actions), -1)
    return f"continuous, {tuple(actions.shape[1:])} {actions.dtype}, in [{flat.min():.3f}, {flat.max():.3f}]"


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(DescribeConfig(), argv, prog=PROG, description=DESCRIPTION)
    for position, source in enumerate(config.sources):
        buffer, format_name = load_for_description(source, download=config.download)
        if position:
            print()
        print("\n".join(describe_dataset(source, buffer, format_name)))
    return 0
