"""Export a trained CQL-SAC actor as a standalone behaviour-policy file (`offline_rl.policy_file`)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from offline_rl.policy_file import PolicyNetwork, save_policy


def export_policy(algorithm, path: str | os.PathLike[str], *, task: str | None = None) -> Path:
    """Write the actor's deterministic action (tanh of the Gaussian mean) as a policy file, with the
    task it was trained for."""
    actor = algorithm.actor
    linears = [m for m in actor.net if isinstance(m, torch.nn.Linear)]
    obs_dim, act_dim = linears[0].in_features, actor.act_dim
    normalizer = actor.normalizer
    policy = PolicyNetwork(
        obs_dim,
        act_dim,
        actor.hidden_sizes,
        obs_mean=normalizer.mean.detach().cpu().numpy(),
        obs_std=normalizer.std.detach().cpu().numpy(),
        action_low=algorithm.action_low.detach().cpu().numpy(),
        action_high=algorithm.action_high.detach().cpu().numpy(),
        task=task,
    )
    targets = [m for m in policy.mlp if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for source, target in zip(linears[:-1], targets[:-1], strict=True):
            target.weight.copy_(source.weight)
            target.bias.copy_(source.bias)
        targets[-1].weight.copy_(linears[-1].weight[:act_dim])  # the mean half of the output layer
        targets[-1].bias.copy_(linears[-1].bias[:act_dim])
    return save_policy(policy, path)
