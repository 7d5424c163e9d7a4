"""Discrete CQL (QR-DQN head) hyperparameters; defaults match Tianshou's classic Atari CQL example."""

from __future__ import annotations

from dataclasses import dataclass

from offline_rl.errors import OfflineRLError


@dataclass
class DiscreteCQLConfig:
    """Everything that defines the discrete CQL update.

    The CQL paper's Atari settings are `lr=5e-5, adam_eps=3.125e-4, target_update_freq=2000` with
    `min_q_weight` 4 (1% of the data) or 1 (10%).
    """

    num_quantiles: int = 200
    gamma: float = 0.99
    n_step: int = 1
    target_update_freq: int = 500
    min_q_weight: float = 10.0
    lr: float = 1e-4
    adam_eps: float = 1e-8
    double_q: bool = False
    kappa: float = 1.0

    def validate(self) -> None:
        checks = [
            (self.num_quantiles > 1, "--num-quantiles must be at least 2"),
            (self.n_step >= 1, "--n-step must be at least 1"),
            (self.target_update_freq >= 1, "--target-update-freq must be at least 1"),
            (0 <= self.gamma <= 1, "--gamma must be in [0, 1]"),
            (self.kappa > 0, "kappa must be positive"),
            (self.lr > 0, "--lr must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise OfflineRLError(message)
