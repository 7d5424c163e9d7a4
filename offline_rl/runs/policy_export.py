"""A run's policy written out for use elsewhere: `behaviour_policy.pt` beside each best CQL-SAC
evaluation (the actor file `python -m offline_rl.collect --policy` rolls out), and `--export-policy`
(ONNX or a torch.export program, `offline_rl.algorithms.export.standalone`) from any of the three training programs."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from offline_rl.algorithms.export.policy_file import PolicyNetwork, save_policy
from offline_rl.algorithms.export.standalone import export_policy
from offline_rl.runs.config import RunConfig

log = logging.getLogger(__name__)

CHECK_OBSERVATIONS = 64
"""Observations an exported file is checked on: the env's own, from random play."""


def export_behaviour_policy(algorithm: Any, path: str | os.PathLike[str], *, task: str | None = None) -> Path:
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


def export_run_policy(policy: Any, make_env: Callable[[], Any], run: RunConfig, *, task: str) -> dict[str, Any]:
    """`--export-policy`: write the policy restored from `--resume-path`, checked on observations of
    the run's evaluation env (the frame stacks, flattening and padding of its evaluation included),
    and described in the file by its task, its checkpoint and that env's gymnasium spec."""

    assert run.export_policy is not None and run.resume_path is not None
    observations, env_spec = env_sample(make_env, CHECK_OBSERVATIONS, seed=run.seed)
    source = str(Path(run.resume_path).expanduser().resolve())
    metadata = {"task": task, "source": source, **({"env_spec": env_spec} if env_spec else {})}
    report = export_policy(policy, observations, run.export_policy, metadata=metadata)
    log.info(f"exported the policy of {run.resume_path} ({task}) as {report.describe()}")
    return {
        "mode": "export",
        "task": task,
        "source": str(run.resume_path),
        "path": str(report.path),
        "format": report.format,
        "checked_on": report.checked_on,
        "max_difference": report.max_difference,
        "metadata": report.metadata,
    }


def env_sample(make_env: Callable[[], Any], count: int, *, seed: int) -> tuple[np.ndarray, str | None]:
    """`count` observations of one env under uniformly random actions, from a new episode at each end;
    and the env's gymnasium spec as JSON (`gym.make(EnvSpec.from_json(...))` rebuilds it, wrappers
    included), where every wrapper records its arguments."""
    env = make_env()
    try:
        env.action_space.seed(seed)
        obs, _ = env.reset(seed=seed)
        seen = [np.asarray(obs)]
        while len(seen) < count:
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                obs, _ = env.reset()
            seen.append(np.asarray(obs))
        return np.stack(seen), _spec_json(env)
    finally:
        env.close()


def _spec_json(env: Any) -> str | None:
    try:
        return env.spec.to_json() if env.spec is not None else None
    except Exception:  # a wrapper that does not record its arguments, or arguments JSON cannot hold
        return None
