"""Implicit Q-Learning (Kostrikov et al. 2021, arXiv:2110.06169) as a Tianshou OfflineAlgorithm.

One update, top to bottom (B states, two critics, a value network V, the actor π); every term reads
the networks as the update found them, as CORL's code does, so one backward pass serves all three:

(1) `td_target`: y = r + γ·(1 − terminated)·V(s′). Time-outs are not terminals: they bootstrap.
(2) `value_loss`: mean_b |τ − 1(u < 0)|·u², u = min_e Q̄_e(s, a_data) − V(s): V is the τ-expectile of
    the target critics' values of the data's actions (τ = `expectile`).
(3) `critic_loss`: mean_e mean_b (Q_e(s, a_data) − y)² (times a prioritized buffer's weights).
(4) `actor_loss`: mean_b w·ℓ(s, a_data), w = min(exp(β·u), `max_weight`) held constant, ℓ = −log π(a|s)
    for the Gaussian actor, ‖π(s) − a‖² for the deterministic one (β = `temperature`).
(5) `apply_gradients`: the three optimiser steps, the actor's at the rate of its cosine schedule,
    η_k = η₀·(1 + cos(π·(k − 1)/K))/2 for update k of K (computed on the device, so a captured update
    follows it); then the Polyak update of the target critics, θ̄ ← θ̄ + τ(θ − θ̄).

All of it works in the policy's action box [-1, 1], on data staged once on the algorithm's device; the
engine (`offline_rl.algorithms.base`) runs it eagerly or as one replayed CUDA graph.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import gymnasium as gym
import torch
from tianshou.algorithm.algorithm_base import TrainingStats
from tianshou.algorithm.modelfree.sac import SACPolicy

from offline_rl.algorithms.actors import DeterministicActor, GaussianMeanActor, deterministic_policy
from offline_rl.algorithms.base import Losses
from offline_rl.algorithms.continuous import ContinuousOfflineAlgorithm
from offline_rl.algorithms.iql.config import IQLConfig
from offline_rl.algorithms.networks import EnsembleCritic, ObservationNormalizer
from offline_rl.algorithms.staging import Transitions
from offline_rl.core.compat import polyak_update_


@dataclass(kw_only=True)
class IQLTrainingStats(TrainingStats):
    """Per-update figures; this declaration is the list."""

    value_loss: float
    critic_loss: float
    actor_loss: float
    advantage: float
    weight: float
    v_data: float
    q_data: float
    actor_lr: float


class IQL(ContinuousOfflineAlgorithm[SACPolicy]):
    """IQL for continuous (Box) actions; see the module docstring for the update.

    `critic` is an `EnsembleCritic` of two critics, `value` one of a single member without action
    inputs (V(s)); the actor is `policy.actor`, a `GaussianMeanActor` or a `DeterministicActor`.
    """

    STATS = IQLTrainingStats

    def __init__(
        self,
        *,
        policy: SACPolicy,
        critic: EnsembleCritic,
        value: EnsembleCritic,
        config: IQLConfig,
        normalizer: ObservationNormalizer | None = None,
    ) -> None:
        super().__init__(policy=policy)
        config.validate()
        self.config = config
        self.actor: DeterministicActor = policy.actor
        self.critic = critic
        self.critic_target = copy.deepcopy(critic).requires_grad_(False)
        self.value = value
        self.normalizer = normalizer
        self.register_action_bounds(policy.action_space)
        self.register_buffer("schedule_span", torch.zeros((), dtype=torch.long))  # K of (5); 0: not yet planned
        self.register_buffer("actor_lr_now", torch.tensor(float(config.actor_lr)))
        self._value_optim = self.add_optimizer(value, None, lr=config.value_lr)
        self._critic_optim = self.add_optimizer(critic, None, lr=config.critic_lr)
        # The actor's rate is a tensor, which its schedule sets on the device (a captured update follows it).
        self._actor_optim = self.add_optimizer(self.actor, None, lr=torch.tensor(float(config.actor_lr)))

    @classmethod
    def build(
        cls,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: IQLConfig | None = None,
        *,
        device: str | torch.device = "cpu",
    ) -> IQL:
        """Actor, critics, value network, normaliser and policy for the given spaces, on `device`."""
        config = config or IQLConfig()
        policy, actor, normalizer = deterministic_policy(
            observation_space, action_space, config.hidden_sizes, gaussian=not config.deterministic_actor
        )
        obs_dim = actor.normalizer.mean.numel()
        critic = EnsembleCritic(obs_dim, actor.act_dim, config.hidden_sizes, 2, orthogonal_init=False)
        value = EnsembleCritic(obs_dim, 0, config.hidden_sizes, 1, orthogonal_init=False)
        return cls(policy=policy, critic=critic, value=value, normalizer=normalizer, config=config).to(device)

    def plan(self, total_updates: int) -> None:
        """K of the cosine schedule: `schedule_updates`, else the run's length, fixed at the run's start
        (a resumed run keeps its own)."""
        if int(self.schedule_span) == 0:
            self.schedule_span.fill_(self.config.schedule_updates or total_updates)

    # ----------------------------------------------------------------------------------------
    # the update
    def compute_losses(self, batch: Transitions, *, weight: torch.Tensor | None = None) -> Losses:
        """Equations (1)-(4) on a prepared batch: the losses to sum and back-propagate once, and figures."""
        obs, act, rew, not_terminated, obs_next, _ = batch
        with torch.no_grad():
            target_q = self.critic_target(obs, act.unsqueeze(1)).min(dim=0).values[:, 0]
            y = self.td_target(rew, not_terminated, obs_next)
        v = self.state_value(obs)
        advantage = target_q - v
        value_loss = self.value_loss(advantage)
        q = self.critic(obs, act.unsqueeze(1))[..., 0]  # (E, B)
        td_error = q - y.unsqueeze(0)
        critic_loss = self.critic_loss(td_error, weight)
        weights = torch.exp(self.config.temperature * advantage.detach()).clamp(max=self.config.max_weight)
        actor_loss = self.actor_loss(obs, act, weights)
        figures = {
            "value_loss": value_loss,
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "advantage": advantage.mean(),
            "weight": weights.mean(),
            "v_data": v.mean(),
            "q_data": q.mean(),
            "actor_lr": self.actor_lr_now,
        }
        return Losses(
            parts={"value": value_loss, "critic": critic_loss, "actor": actor_loss},
            figures={name: value.detach() for name, value in figures.items()},
            priority=td_error.detach().mean(dim=0),
        )

    def state_value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(s) (B,) from normalised observations."""
        return self.value(obs, obs.new_zeros(obs.shape[0], 1, 0))[0, :, 0]

    def td_target(self, rew: torch.Tensor, not_terminated: torch.Tensor, obs_next: torch.Tensor) -> torch.Tensor:
        """(1) r + γ·(1 − terminated)·V(s′)."""
        return rew + self.config.gamma * not_terminated * self.state_value(obs_next)

    def value_loss(self, advantage: torch.Tensor) -> torch.Tensor:
        """(2) The expectile loss mean |τ − 1(u < 0)|·u² of u = min_e Q̄_e(s, a) − V(s)."""
        tau = self.config.expectile
        return (torch.abs(tau - (advantage < 0).float()) * advantage.pow(2)).mean()

    @staticmethod
    def critic_loss(td_error: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """(3) mean_e mean_b (Q_e − y)², each sample weighted by a prioritized buffer's weight if any."""
        squared = td_error.pow(2) if weight is None else td_error.pow(2) * weight.unsqueeze(0)
        return squared.mean()

    def actor_loss(self, obs: torch.Tensor, act: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """(4) Advantage-weighted regression onto the data's actions."""
        if isinstance(self.actor, GaussianMeanActor):
            behaviour = -self.actor.log_prob(obs, act)
        else:
            behaviour = (self.actor.action(obs) - act).pow(2).sum(dim=-1)
        return (weights * behaviour).mean()

    def apply_gradients(self) -> None:
        """(5) The optimiser steps (the actor's at its scheduled rate), then the Polyak update."""
        self.schedule_actor_lr()
        self._value_optim.step()
        self._critic_optim.step()
        self._actor_optim.step()
        with torch.no_grad():
            polyak_update_(list(self.critic_target.parameters()), list(self.critic.parameters()), self.config.tau)

    def schedule_actor_lr(self) -> None:
        """η₀·(1 + cos(π·t/K))/2 with t the updates done before this one (CORL's `CosineAnnealingLR`,
        stepped after each update), into the tensor the actor's optimiser reads its rate from."""
        group = self._actor_optim.param_groups[0]
        if group["lr"] is not self.actor_lr_now:  # the buffer moved to the device, or a checkpoint loaded
            for each in self._actor_optim.param_groups:
                each["lr"] = self.actor_lr_now
        if self.config.actor_schedule != "cosine":
            return
        with torch.no_grad():
            span = self.schedule_span.clamp(min=1).to(self.actor_lr_now.dtype)
            cosine = 0.5 * (1.0 + torch.cos(math.pi * self.num_updates.to(span.dtype) / span))
            planned = self.schedule_span > 0
            self.actor_lr_now.copy_(torch.where(planned, self.config.actor_lr * cosine, self.actor_lr_now))
