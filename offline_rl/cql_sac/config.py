"""CQL-SAC hyperparameters, with defaults from CORL's D4RL locomotion configuration."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class CQLSACConfig:
    """Everything that defines the CQL-SAC update (not the experiment around it).

    Conservative term, per critic: `cql_weight · clip(T·logsumexp(q/T) - Q(s, a_data))`, the
    logsumexp over 3·`cql_n_actions` sampled actions per state (uniform, π(·|s), π(·|s')), each
    scored at s. TF-Agents' `softmax_temperature` τ corresponds to `temperature = 1/τ`.
    """

    # networks
    actor_hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    critic_hidden_sizes: list[int] = field(default_factory=lambda: [256, 256, 256])
    num_critics: int = 2
    orthogonal_init: bool = True
    normalize_obs: bool = True
    # optimisation
    actor_lr: float = 1e-4
    critic_lr: float = 3e-4
    gamma: float = 0.99
    tau: float = 5e-3
    # SAC entropy
    alpha: float = 0.2
    auto_alpha: bool = True
    alpha_lr: float = 1e-4
    target_entropy: float | None = None  # default -act_dim
    # conservative term
    cql_weight: float = 10.0
    cql_n_actions: int = 10
    temperature: float = 1.0
    importance_sample: bool = True
    with_lagrange: bool = False
    target_action_gap: float = -1.0
    cql_alpha_lr: float = 3e-4
    clip_diff_min: float = -math.inf
    clip_diff_max: float = math.inf
    # TD target
    max_target_backup: bool = False
    backup_entropy: bool = False
    reward_scale: float = 1.0
    reward_bias: float = 0.0
    # behaviour cloning warm-up and debugging
    bc_steps: int = 0
    bc_debug_mode: bool = False
    clip_dataset_actions: bool = False

    def validate(self) -> None:
        """Raise ValueError naming the flag for settings that cannot work."""
        from offline_rl.errors import OfflineRLError

        checks = [
            (self.cql_n_actions >= 1, "--cql-n-actions must be at least 1"),
            (self.temperature > 0, "--temperature must be positive"),
            (self.num_critics >= 1, "the number of critics must be at least 1"),
            (0 < self.tau <= 1, "--tau must be in (0, 1]"),
            (0 <= self.gamma <= 1, "--gamma must be in [0, 1]"),
            (self.clip_diff_min <= self.clip_diff_max, "--clip-diff-min must not exceed --clip-diff-max"),
            (self.bc_steps >= 0, "--bc-steps must be non-negative"),
            (len(self.critic_hidden_sizes) >= 1, "--critic-layers must be at least 1"),
            (all(h > 0 for h in self.actor_hidden_sizes), "--hidden-sizes must be positive integers"),
            (self.alpha > 0 or not self.auto_alpha, "--alpha must be positive with --auto-alpha"),
        ]
        for ok, message in checks:
            if not ok:
                raise OfflineRLError(message)
