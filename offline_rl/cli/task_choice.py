"""Which env a run evaluates on when `--task` is not given: the one its dataset belongs to.

Tasks of one family often share their sizes (D4RL's Walker2d and HalfCheetah both observe 17 numbers
and take 6 actions; every Atari game observes 4×84×84 frames and most fit in Pong's 6 actions), so a
default task that ignored the data would train on one env's data and evaluate on another's without
any error. The data's own env is the default, and the line saying so names the flag that overrides it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from offline_rl.core.errors import IgnoredFlagWarning
from offline_rl.core.settings import changed_settings
from offline_rl.data.fit import DatasetEnv
from offline_rl.envs.atari import is_atari_game


def evaluation_task(given: str | None, belongs_to: DatasetEnv | None, name: str, *, default: str) -> str:
    """--task when given, else the env the dataset belongs to, else `default`; said in one line when
    not given."""
    if given:
        return given
    if belongs_to is None:
        print(f"task: {default}, the default (no env recorded in {name}; --task to choose)")
        return default
    print(f"task: {belongs_to.task}, the env of {name} (--task to evaluate on another)")
    return belongs_to.task


def default_task_misfit(name: str, default: str) -> str:
    """The fix to name when data that records no env does not fit the default task: the data's own
    env, which only the user knows (a Tianshou buffer, a d3rlpy file, a file of one's own). Advice to
    make data for the default task instead would be advice for another env."""
    return f"{name} records no env, so the default {default} was tried: give --task with the env it was recorded on"


def warn_atari_only_settings(task: str, config: Any, names: Sequence[str]) -> None:
    """One line when Atari-only settings (the frame stack, the evaluation protocol, life loss) were
    changed for a vector task, which is played exactly as gymnasium makes it: without the line, a
    `--frames-stack 2` on CartPole-v1 would look like it had stacked two observations."""
    if is_atari_game(task):
        return
    changed = changed_settings(config, names)
    if changed:
        given = ", ".join(_as_flag(flag, value) for flag, value in changed)
        warnings.warn(
            f"{given}: {'applies' if len(changed) == 1 else 'apply'} to Atari games only; {task} is played "
            "as gymnasium makes it",
            IgnoredFlagWarning,
            stacklevel=2,
        )


def _as_flag(flag: str, value: Any) -> str:
    """A setting as it is typed: `--episode-life`, `--no-episode-life`, `--frames-stack 2`."""
    if isinstance(value, bool):
        return flag if value else f"--no-{flag.removeprefix('--')}"
    return f"{flag} {value}"
