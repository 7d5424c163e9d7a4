"""Behaviour cloning, and CORL's BC-x% (the best episodes only), as a Tianshou OfflineAlgorithm: the
floor every offline-RL table reports.

(1) `best_episodes`: with `top_fraction` x < 1, the data's episodes ranked by undiscounted return,
    the top max(1, ⌊x·episodes⌋) kept, whole (CORL's `keep_best_trajectories`; episodes end where the
    data says they do, time-outs included, rather than every 1000 steps).
(2) `bc_loss`: mean over the batch and the action dims of (π(s) − a_data)², π(s) = tanh(f(s)).

On data staged once on the algorithm's device (normalised observations, fitted on the kept episodes;
actions in the policy's [-1, 1] box), run eagerly or as a replayed CUDA graph by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.algorithm_base import TrainingStats
from tianshou.algorithm.modelfree.sac import SACPolicy
from tianshou.algorithm.optim import OptimizerFactory

from offline_rl.algorithms.actors import DeterministicActor, deterministic_policy
from offline_rl.algorithms.base import Losses
from offline_rl.algorithms.bc.config import BCConfig
from offline_rl.algorithms.continuous import ContinuousOfflineAlgorithm
from offline_rl.algorithms.networks import ObservationNormalizer
from offline_rl.algorithms.staging import StoredTransitions, Transitions


@dataclass(kw_only=True)
class BCTrainingStats(TrainingStats):
    """Per-update figures."""

    bc_loss: float
    action_error: float


class BC(ContinuousOfflineAlgorithm[SACPolicy]):
    """Behaviour cloning for continuous (Box) actions; see the module docstring."""

    STATS = BCTrainingStats

    def __init__(
        self,
        *,
        policy: SACPolicy,
        config: BCConfig,
        normalizer: ObservationNormalizer | None = None,
        actor_optim: OptimizerFactory | None = None,
    ) -> None:
        super().__init__(policy=policy)
        config.validate()
        self.config = config
        self.actor: DeterministicActor = policy.actor
        self.normalizer = normalizer
        self.register_action_bounds(policy.action_space)
        self._actor_optim = self.add_optimizer(self.actor, actor_optim, lr=config.actor_lr)

    @classmethod
    def build(
        cls,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: BCConfig | None = None,
        *,
        device: str | torch.device = "cpu",
    ) -> BC:
        """Actor, normaliser and policy for the given spaces, moved to `device`."""
        config = config or BCConfig()
        policy, _actor, normalizer = deterministic_policy(observation_space, action_space, config.hidden_sizes)
        return cls(policy=policy, normalizer=normalizer, config=config).to(device)

    def selected_rows(self, stored: StoredTransitions) -> np.ndarray | None:
        """(1) The rows of the best episodes (None: every row, when every episode is kept)."""
        if self.config.top_fraction >= 1.0:
            return None
        return best_episodes(stored.rew, stored.episode_end, self.config.top_fraction)

    def compute_losses(self, batch: Transitions, *, weight: torch.Tensor | None = None) -> Losses:
        """(2) on a prepared batch (a prioritized buffer's `weight` weighs each sample's error)."""
        action = self.actor.action(batch.obs)
        squared = (action - batch.act).pow(2).mean(dim=1)  # (B,)
        loss = squared.mean() if weight is None else (squared * weight).mean()
        figures = {"bc_loss": loss.detach(), "action_error": squared.detach().sqrt().mean()}
        return Losses(parts={"actor": loss}, figures=figures, priority=squared.detach().sqrt())

    def apply_gradients(self) -> None:
        self._actor_optim.step()


def best_episodes(rewards: np.ndarray, episode_end: np.ndarray, fraction: float) -> np.ndarray:
    """(1) Rows (ascending) of the top max(1, ⌊fraction·episodes⌋) episodes by undiscounted return;
    rows in buffer order, each episode contiguous and ending where `episode_end` is set."""
    ends = np.flatnonzero(np.asarray(episode_end, dtype=bool))
    if len(ends) == 0 or ends[-1] != len(rewards) - 1:
        ends = np.append(ends, len(rewards) - 1)  # the rows after the last end: an episode of their own
    starts = np.concatenate([[0], ends[:-1] + 1])
    returns = np.add.reduceat(np.asarray(rewards, dtype=np.float64).reshape(-1), starts)
    keep = max(1, int(fraction * len(starts)))
    chosen = np.sort(np.argsort(-returns, kind="stable")[:keep])
    return np.concatenate([np.arange(starts[i], ends[i] + 1) for i in chosen])
