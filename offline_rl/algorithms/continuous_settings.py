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


def actor_critic_bytes(
    obs_dim: int, act_dim: int, batch_size: int, hidden_sizes: list[int], *, passes: int
) -> dict[str, int]:
    """A lower estimate of a TD3-style update's memory by the flag that sets each part: a deterministic
    actor and two critics of `hidden_sizes`, their targets, gradients and Adam's moments; and the
    activations of `passes` network passes over a batch, kept for the backward pass with their gradients."""
    actor = mlp_parameters([obs_dim, *hidden_sizes, act_dim])
    critic = mlp_parameters([obs_dim + act_dim, *hidden_sizes, 1])
    networks = 4 * 5 * (actor + 2 * critic)
    activations = 4 * 2 * batch_size * passes * sum(hidden_sizes)
    widths = " ".join(map(str, hidden_sizes))
    return {f"--hidden-sizes {widths}": networks, f"--batch-size {batch_size}": activations}
