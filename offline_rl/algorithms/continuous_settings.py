"""The data settings every continuous algorithm's config declares, one declaration each: how the
staged observations, actions and rewards are prepared (`offline_rl.algorithms.continuous` reads them
by these names). Light: configs import it for `--help` before torch loads."""

from __future__ import annotations

import itertools
from typing import Any

from offline_rl.core.settings import setting


def normalize_obs_setting(default: bool, group: str) -> Any:
    return setting(default, "normalise observations with dataset statistics", aliases=("--norm-obs",), group=group)


def gamma_setting(group: str) -> Any:
    return setting(0.99, "discount factor", minimum=0, maximum=1, group=group)


def tau_setting(group: str) -> Any:
    return setting(5e-3, "Polyak rate of the target networks", above=0, maximum=1, group=group)


def normalize_reward_setting(group: str) -> Any:
    return setting(
        False,
        "CORL's reward normalisation: rewards × 1000 / the range of the dataset's episode returns",
        details=(
            "Applied before --reward-scale and --reward-bias, over the dataset's complete episodes "
            "(CORL's `return_reward_range`), so the data's return range spans 1000 reward units "
            "whatever its quality."
        ),
        group=group,
    )


def reward_scale_setting(group: str) -> Any:
    return setting(1.0, "rewards are scaled by this ...", group=group)


def reward_bias_setting(group: str) -> Any:
    return setting(0.0, "... then shifted by this", group=group)


def clip_dataset_actions_setting(group: str) -> Any:
    return setting(False, "clip dataset actions into the action box", group=group)


def mlp_parameters(widths: list[int]) -> int:
    """Weights and biases of fully connected layers of these widths (for a config's memory estimate)."""
    return sum((inputs + 1) * outputs for inputs, outputs in itertools.pairwise(widths))
