"""A small, framework-free file format for deterministic behaviour policies.

Collecting medium- or expert-style datasets needs a trained policy, and the collector must load it
without knowing which trainer made it. The file is a `torch.save`d dict of plain tensors and numbers
(loadable with `weights_only=True`, so opening it never runs code):

    format        "offline_rl.policy/1"
    hidden_sizes  list of hidden layer widths (ReLU)
    state_dict    weights of the MLP `obs -> pre-tanh action mean`
    obs_mean, obs_std        normalisation applied to observations first
    action_low, action_high  bounds the tanh output is rescaled to
    task          (optional) the gymnasium id the policy was trained to act in, so that a collection
                  on another env of the same sizes is named in a warning
    state_dict's `log_std.*` (optional) a linear head on the last hidden layer giving the Gaussian's log
                  standard deviation (clamped to [-20, 2]), for collections that sample the policy
                  (`PolicyNetwork.sample`) as D4RL collected its medium and expert data

This is exactly the deterministic (mean) action of a tanh-Gaussian SAC/CQL actor, so training code
exports its actor with `PolicyNetwork.from_layers(...)` + `save_policy`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from offline_rl.algorithms.layers import relu_mlp
from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import DAMAGED, atomic_path, damaged, load_weights_only, unreadable_torch_file, with_checksum

POLICY_FORMAT = "offline_rl.policy/1"


class PolicyNetwork(nn.Module):
    """Normalise observations, run an MLP, squash with tanh and rescale to the action bounds."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: list[int],
        *,
        obs_mean: np.ndarray | None = None,
        obs_std: np.ndarray | None = None,
        action_low: np.ndarray | None = None,
        action_high: np.ndarray | None = None,
        task: str | None = None,
        gaussian: bool = False,
    ) -> None:
        super().__init__()
        self.hidden_sizes = list(hidden_sizes)
        self.task = task
        self.mlp = relu_mlp(obs_dim, hidden_sizes, act_dim)
        self.log_std = nn.Linear(self.hidden_sizes[-1], act_dim) if gaussian else None
        self.register_buffer("obs_mean", _tensor(obs_mean, obs_dim, 0.0))
        self.register_buffer("obs_std", _tensor(obs_std, obs_dim, 1.0))
        self.register_buffer("action_low", _tensor(action_low, act_dim, -1.0))
        self.register_buffer("action_high", _tensor(action_high, act_dim, 1.0))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        squashed = torch.tanh(self.mlp((obs - self.obs_mean) / self.obs_std))
        return self.action_low + (squashed + 1.0) * 0.5 * (self.action_high - self.action_low)

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        """Actions for a batch of observations, as float32 numpy."""
        return self(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    @torch.no_grad()
    def sample(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Actions drawn from the tanh-Gaussian (`rng` draws the standard normals), as float32 numpy."""
        if self.log_std is None:
            raise ValueError("this policy file holds no Gaussian (log_std) head to sample from")
        features = self.mlp[:-1]((torch.as_tensor(obs, dtype=torch.float32) - self.obs_mean) / self.obs_std)
        mean, std = self.mlp[-1](features), self.log_std(features).clamp(-20.0, 2.0).exp()
        noise = torch.as_tensor(rng.standard_normal(size=tuple(mean.shape)), dtype=torch.float32)
        squashed = torch.tanh(mean + std * noise)
        return (self.action_low + (squashed + 1.0) * 0.5 * (self.action_high - self.action_low)).numpy()


def _tensor(value: np.ndarray | None, size: int, default: float) -> torch.Tensor:
    if value is None:
        return torch.full((size,), default, dtype=torch.float32)
    return torch.as_tensor(np.asarray(value, dtype=np.float32).reshape(size))


def save_policy(policy: PolicyNetwork, path: str | os.PathLike[str]) -> Path:
    """Write `policy` in the documented format, atomically."""
    state = {name: tensor.detach().cpu() for name, tensor in policy.state_dict().items()}
    payload: dict[str, Any] = {
        "format": POLICY_FORMAT,
        "hidden_sizes": policy.hidden_sizes,
        "state_dict": state,
    }
    if policy.task:
        payload["task"] = policy.task
    final = Path(path).expanduser()
    with atomic_path(final) as tmp:
        torch.save(with_checksum(payload), tmp)
    return final


EXPECTED_POLICY = "expected behaviour_policy.pt, the actor file d4rl_cql.py writes next to policy.pth"


def load_policy(path: str | os.PathLike[str]) -> PolicyNetwork:
    """Load a policy file; a one-line error if it is missing or in another format."""
    file_path = Path(path).expanduser()
    if not file_path.is_file():
        raise OfflineRLError(f"{file_path}: no such policy file")
    try:
        payload = load_weights_only(file_path, "cpu")
    except Exception as error:  # torch raises many types for foreign or corrupt files
        raise OfflineRLError(f"{file_path}: {unreadable_torch_file(file_path, error)}; {EXPECTED_POLICY}") from None
    if not isinstance(payload, dict) or payload.get("format") != POLICY_FORMAT:
        raise OfflineRLError(f"{file_path}: a torch file, but not a policy file; {EXPECTED_POLICY}")
    if damaged(payload):
        raise OfflineRLError(f"{file_path}: {DAMAGED}")
    state = payload["state_dict"]
    obs_dim = int(state["obs_mean"].shape[0])
    act_dim = int(state["action_low"].shape[0])
    task = payload.get("task")
    gaussian = "log_std.weight" in state
    policy = PolicyNetwork(
        obs_dim, act_dim, list(payload["hidden_sizes"]), task=str(task) if task else None, gaussian=gaussian
    )
    policy.load_state_dict(state)
    return policy.eval()
