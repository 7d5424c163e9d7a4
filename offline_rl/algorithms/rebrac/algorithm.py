"""ReBRAC (Tarasov et al. 2023, arXiv:2305.09836) as a Tianshou OfflineAlgorithm: TD3+BC
(`offline_rl.algorithms.td3_bc`) with its behaviour penalty split between the actor and the critics.

One update, in TD3+BC's two stages (the critics step, then the actor against the critics just stepped):

(1) `penalized_target`: y = r + γ·(1 − terminated)·(min_e Q̄_e(s′, ã′) − β_critic·‖ã′ − a′‖²), ã′ TD3's
    smoothed target action, a′ the data's own action at s′. Where the data has no a′ (the last step of
    an episode cut by a time limit) the penalty is 0; time-outs are not terminals: they bootstrap.
(2) `critic_loss`: Σ_e mean (Q_e(s, a_data) − y)² over layer-normalised critics.
(3) `actor_loss`, on the updates 1, 1 + `policy_freq`, ... (the authors' order): mean of
    β_actor·‖π(s) − a_data‖² − λ·min_e Q_e(s, π(s)), λ = 1 / mean |min_e Q_e(s, π(s))| held constant
    (`normalize_q`; else 1).
(4) After the actor's step, the Polyak updates of the target actor and critics.

The networks are initialised as the authors' (after the EDAC paper): hidden weights uniform in
±1/√fan-in with biases 0.1, the output layers uniform in ±1e-3 (actor) and ±3e-3 (critics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from tianshou.algorithm.algorithm_base import TrainingStats

from offline_rl.algorithms.actors import DeterministicActor, deterministic_policy
from offline_rl.algorithms.base import Losses
from offline_rl.algorithms.networks import EnsembleCritic
from offline_rl.algorithms.rebrac.config import ReBRACConfig
from offline_rl.algorithms.staging import TransitionsWithNextActions
from offline_rl.algorithms.td3_bc.algorithm import TD3BC


@dataclass(kw_only=True)
class ReBRACTrainingStats(TrainingStats):
    """Per-update figures; the actor's are those of its latest step."""

    critic_loss: float
    critic_penalty: float
    actor_loss: float
    bc_loss: float
    q_weight: float
    q_data: float
    q_policy: float
    target_q: float


class ReBRAC(TD3BC):
    """ReBRAC for continuous (Box) actions; see the module docstring for the update."""

    STATS = ReBRACTrainingStats
    NEXT_ACTIONS = True
    config: ReBRACConfig  # type: ignore[assignment]

    @classmethod
    def build(  # type: ignore[override]
        cls,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: ReBRACConfig | None = None,
        *,
        device: str | torch.device = "cpu",
    ) -> ReBRAC:
        """Actor, two layer-normalised critics, normaliser and policy for the given spaces, on `device`."""
        config = config or ReBRACConfig()
        policy, actor, normalizer = deterministic_policy(observation_space, action_space, config.hidden_sizes)
        obs_dim = actor.normalizer.mean.numel()
        critic = EnsembleCritic(
            obs_dim, actor.act_dim, config.hidden_sizes, 2, orthogonal_init=False, layer_norm=config.critic_layer_norm
        )
        edac_init_(actor, critic)
        return cls(policy=policy, critic=critic, normalizer=normalizer, config=config).to(device)  # type: ignore[arg-type]

    def loss_options(self) -> dict[str, Any]:
        """Whether this update steps the actor: updates 1, 1 + `policy_freq`, ... as the authors'
        `arange(updates) % policy_freq == 0` (TD3+BC's code steps it on the `policy_freq`-th instead)."""
        return {"actor_step": self._host_updates % self.config.policy_freq == 0}

    def critic_stage(  # type: ignore[override]
        self, batch: TransitionsWithNextActions, *, weight: torch.Tensor | None = None, actor_step: bool
    ) -> Losses:
        """(1)-(2) on a prepared batch with the data's next actions."""
        data = batch.transitions
        with torch.no_grad():
            target_q, penalty = self.penalized_target(
                data.rew, data.not_terminated, data.obs_next, batch.next_act, batch.next_act_known
            )
        return self.critic_losses(data.obs, data.act, target_q, weight, critic_penalty=penalty)

    def actor_stage(  # type: ignore[override]
        self, batch: TransitionsWithNextActions, *, weight: torch.Tensor | None = None, actor_step: bool
    ) -> Losses:
        """(3) on the updates that step the actor (TD3+BC's stage, ReBRAC's loss)."""
        return super().actor_stage(batch.transitions, weight=weight, actor_step=actor_step)

    def penalized_target(
        self,
        rew: torch.Tensor,
        not_terminated: torch.Tensor,
        obs_next: torch.Tensor,
        next_act: torch.Tensor,
        next_act_known: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(1) The targets y and the mean penalty β_critic·‖ã′ − a′‖² they carry."""
        cfg = self.config
        next_action = self.smoothed_target_action(obs_next)
        next_q = self.critic_target(obs_next, next_action.unsqueeze(1)).min(dim=0).values[:, 0]
        penalty = cfg.critic_bc_weight * (next_action - next_act).pow(2).sum(dim=-1) * next_act_known
        return rew + cfg.gamma * not_terminated * (next_q - penalty), penalty.mean()

    def actor_loss(
        self, obs: torch.Tensor, act: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(3) (the loss, mean ‖π(s) − a‖², λ, mean min_e Q_e(s, π(s)))."""
        action = self.actor.action(obs)
        q = self.critic(obs, action.unsqueeze(1), detach_params=True).min(dim=0).values[:, 0]
        q_weight = 1.0 / q.abs().mean().detach() if self.config.normalize_q else torch.ones((), device=obs.device)
        penalty = (action - act).pow(2).sum(dim=-1)
        loss = (self.config.actor_bc_weight * penalty - q_weight * q).mean()
        return loss, penalty.mean().detach(), q_weight, q.mean().detach()


@torch.no_grad()
def edac_init_(actor: DeterministicActor, critic: EnsembleCritic) -> None:
    """The authors' initialisation: hidden weights uniform in ±1/√fan-in, hidden biases 0.1; output
    weights and biases uniform in ±1e-3 (actor) and ±3e-3 (critics)."""
    linears = [module for module in actor.net if isinstance(module, torch.nn.Linear)]
    for index, linear in enumerate(linears):
        if index == len(linears) - 1:
            torch.nn.init.uniform_(linear.weight, -1e-3, 1e-3)
            torch.nn.init.uniform_(linear.bias, -1e-3, 1e-3)
        else:
            bound = 1.0 / math.sqrt(linear.in_features)
            torch.nn.init.uniform_(linear.weight, -bound, bound)
            torch.nn.init.constant_(linear.bias, 0.1)
    layers = list(zip(critic.weights, critic.biases, strict=True))
    for index, (weight, bias) in enumerate(layers):
        if index == len(layers) - 1:
            torch.nn.init.uniform_(weight, -3e-3, 3e-3)
            torch.nn.init.uniform_(bias, -3e-3, 3e-3)
        else:
            bound = 1.0 / math.sqrt(weight.shape[1])  # (E, in, out)
            torch.nn.init.uniform_(weight, -bound, bound)
            torch.nn.init.constant_(bias, 0.1)
