"""Which env a run evaluates on when `--task` is not given: the one its dataset belongs to.

Tasks of one family often share their sizes (D4RL's Walker2d and HalfCheetah both observe 17 numbers
and take 6 actions; every Atari game observes 4×84×84 frames and most fit in Pong's 6 actions), so a
default task that ignored the data would train on one env's data and evaluate on another's without
any error. The data's own env is the default, and the line saying so names the flag that overrides it.
"""

from __future__ import annotations

from offline_rl.envs import DatasetEnv


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
