"""TD3+BC (Fujimoto & Gu 2021, arXiv:2106.06860) as a Tianshou OfflineAlgorithm.

One update, top to bottom (B states, A action dims, two critics), in two stages as the authors' code
runs it: the critics step first, then the actor learns against the critics just updated.

(1) `td_target`: y = r + γ·(1 − terminated)·min_e Q̄_e(s′, ã′), ã′ = clip(π̄(s′) + clip(ε, −c, c), −1, 1),
    ε ~ N(0, σ²) (target policy smoothing; σ = `policy_noise`, c = `noise_clip`). Time-outs are not
    terminals: they bootstrap. With `n_step` > 1 the staged data hold n-step returns in r and s′
    (`offline_rl.algorithms.staging.n_step_columns`).
(2) `critic_loss`: Σ_e mean (Q_e(s, a_data) − y)² (times the importance weights of a prioritized buffer).
(3) `actor_loss`, every `policy_freq`-th update only: −λ·mean Q₁(s, π(s)) + mean (π(s) − a_data)²,
    λ = α / mean |Q₁(s, π(s))|, held constant; the critics are constants here.
(4) After the actor's step, the Polyak updates of the target actor and critics, θ̄ ← θ̄ + τ(θ − θ̄).

All of it works in the policy's action box [-1, 1], on data staged once on the algorithm's device
(normalised observations, actions in the box). The engine (`offline_rl.algorithms.base`) runs the two
stages eagerly or as a replayed CUDA graph, one recording for the updates with an actor step and one
for those without.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import torch
from tianshou.algorithm.algorithm_base import TrainingStats
from tianshou.algorithm.modelfree.sac import SACPolicy
from tianshou.algorithm.optim import OptimizerFactory

from offline_rl.algorithms.actors import DeterministicActor, deterministic_policy, target_copy
from offline_rl.algorithms.base import Losses
from offline_rl.algorithms.continuous import ContinuousOfflineAlgorithm
from offline_rl.algorithms.networks import CriticModules, EnsembleCritic, ObservationNormalizer
from offline_rl.algorithms.staging import Transitions
from offline_rl.algorithms.td3_bc.config import TD3BCConfig
from offline_rl.core.compat import polyak_update_


@dataclass(kw_only=True)
class TD3BCTrainingStats(TrainingStats):
    """Per-update figures; the actor's are those of its latest step."""

    critic_loss: float
    actor_loss: float
    bc_loss: float
    q_weight: float
    q_data: float
    q_policy: float
    target_q: float


ACTOR_FIGURES = ("actor_loss", "bc_loss", "q_weight", "q_policy")


class TD3BC(ContinuousOfflineAlgorithm[SACPolicy]):
    """TD3+BC for continuous (Box) actions; see the module docstring for the update.

    `critic` is our `EnsembleCritic` (two members) or `CriticModules` wrapping two Tianshou critics;
    the actor is `policy.actor`, a `DeterministicActor`. Without optimiser factories, Adam runs at
    the config's learning rates.
    """

    STATS = TD3BCTrainingStats
    STAGES: ClassVar[tuple[tuple[str, str], ...]] = (("critic_stage", "step_critics"), ("actor_stage", "step_actor"))
    SEED_BUFFERS: ClassVar[tuple[str, ...]] = ("latest_actor_figures",)

    def __init__(
        self,
        *,
        policy: SACPolicy,
        critic: EnsembleCritic | CriticModules,
        config: TD3BCConfig,
        normalizer: ObservationNormalizer | None = None,
        actor_optim: OptimizerFactory | None = None,
        critic_optims: Sequence[OptimizerFactory] | None = None,
        actor: DeterministicActor | None = None,
    ) -> None:
        super().__init__(policy=policy)
        config.validate()
        self.config = config
        self.actor: DeterministicActor = actor if actor is not None else policy.actor
        self.action_limit = 1.0
        """The bound of the actor's actions: the policy's [-1, 1] box (a Tianshou actor's `max_action`)."""
        self.actor_target = target_copy(self.actor)
        self.critic = critic
        self.critic_target = copy.deepcopy(critic).requires_grad_(False)
        self.normalizer = normalizer
        self.register_action_bounds(policy.action_space)
        self._actor_optim = self.add_optimizer(self.actor, actor_optim, lr=config.actor_lr)
        self._critic_optims = self.add_critic_optimizers(critic, critic_optims, lr=config.critic_lr)
        # The actor's figures of its latest step, reported by the updates between its steps.
        self.register_buffer("latest_actor_figures", torch.zeros(len(ACTOR_FIGURES)), persistent=False)

    @classmethod
    def build(
        cls,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: TD3BCConfig | None = None,
        *,
        device: str | torch.device = "cpu",
    ) -> TD3BC:
        """Actor, two critics, normaliser and policy for the given spaces, moved to `device`."""
        config = config or TD3BCConfig()
        policy, actor, normalizer = deterministic_policy(observation_space, action_space, config.hidden_sizes)
        critic = EnsembleCritic(
            actor.normalizer.mean.numel(), actor.act_dim, config.hidden_sizes, 2, orthogonal_init=False
        )
        return cls(policy=policy, critic=critic, normalizer=normalizer, config=config).to(device)

    # ----------------------------------------------------------------------------------------
    # the update
    def loss_options(self) -> dict[str, Any]:
        """Whether this update steps the actor (every `policy_freq`-th, counting from 1, as the authors do)."""
        return {"actor_step": (self._host_updates + 1) % self.config.policy_freq == 0}

    def critic_stage(self, batch: Transitions, *, weight: torch.Tensor | None = None, actor_step: bool) -> Losses:
        """(1)-(2): the critics' loss on a prepared batch, and its figures."""
        with torch.no_grad():
            target_q = self.td_target(batch.rew, batch.not_terminated, batch.obs_next)
        return self.critic_losses(batch.obs, batch.act, target_q, weight)

    def critic_losses(
        self, obs: torch.Tensor, act: torch.Tensor, target_q: torch.Tensor, weight: torch.Tensor | None, **more: Any
    ) -> Losses:
        """(2) on the batch's (s, a) against the targets y; `more`: further figures of the stage."""
        q_data = self.critic(obs, act.unsqueeze(1))[..., 0]  # (E, B)
        td_error = q_data - target_q.unsqueeze(0)
        critic_loss = self.critic_loss(td_error, weight)
        figures = {"critic_loss": critic_loss, "q_data": q_data.mean(), "target_q": target_q.mean(), **more}
        return Losses(
            parts={"critic": critic_loss},
            figures={name: value.detach() for name, value in figures.items()},
            priority=td_error.detach().mean(dim=0),
        )

    def actor_stage(self, batch: Transitions, *, weight: torch.Tensor | None = None, actor_step: bool) -> Losses:
        """(3): the actor's loss on the updates that step it; on the others, nothing to step and the
        figures of its latest step."""
        if not actor_step:
            return Losses(parts={}, figures=dict(zip(ACTOR_FIGURES, self.latest_actor_figures, strict=True)))
        actor_loss, bc_loss, q_weight, q_policy = self.actor_loss(batch.obs, batch.act)
        figures = torch.stack([actor_loss.detach(), bc_loss, q_weight, q_policy])
        with torch.no_grad():
            self.latest_actor_figures.copy_(figures)
        return Losses(parts={"actor": actor_loss}, figures=dict(zip(ACTOR_FIGURES, figures, strict=True)))

    def td_target(self, rew: torch.Tensor, not_terminated: torch.Tensor, obs_next: torch.Tensor) -> torch.Tensor:
        """(1) r + γ·(1 − terminated)·min_e Q̄_e(s′, ã′) with the smoothed target action ã′."""
        next_action = self.smoothed_target_action(obs_next)
        next_q = self.critic_target(obs_next, next_action.unsqueeze(1)).min(dim=0).values[:, 0]
        return rew + self.config.gamma * not_terminated * next_q

    def smoothed_target_action(self, obs_next: torch.Tensor) -> torch.Tensor:
        """(1) ã′ = clip(π̄(s′) + clip(ε, −c, c), −1, 1), ε ~ N(0, σ²): target policy smoothing."""
        cfg = self.config
        next_action = self.actor_target.action(obs_next)
        noise = (torch.randn_like(next_action) * cfg.policy_noise).clamp(-cfg.noise_clip, cfg.noise_clip)
        return (next_action + noise).clamp(-self.action_limit, self.action_limit)

    @staticmethod
    def critic_loss(td_error: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """(2) Σ_e mean_b (Q_e − y)², each sample weighted by a prioritized buffer's weight if any."""
        squared = td_error.pow(2) if weight is None else td_error.pow(2) * weight.unsqueeze(0)
        return squared.mean(dim=1).sum()

    def actor_loss(
        self, obs: torch.Tensor, act: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(3) (−λ·mean Q₁(s, π(s)) + mean (π(s) − a)², the cloning term, λ, mean Q₁(s, π(s)))."""
        action = self.actor.action(obs)
        q = self.critic.member_values(obs, action.unsqueeze(1), 0, detach_params=True)[:, 0]
        q_weight = self.config.alpha / q.abs().mean().detach()
        bc_loss = (action - act).pow(2).mean()
        return -q_weight * q.mean() + bc_loss, bc_loss.detach(), q_weight, q.mean().detach()

    def step_critics(self) -> None:
        """After the critics' backward pass: their optimiser steps."""
        for optim in self._critic_optims:
            optim.step()

    def step_actor(self) -> None:
        """(4) After the actor's backward pass: its step, then the Polyak updates of every target."""
        self._actor_optim.step()
        with torch.no_grad():
            tau = self.config.tau
            polyak_update_(list(self.critic_target.parameters()), list(self.critic.parameters()), tau)
            polyak_update_(list(self.actor_target.net.parameters()), list(self.actor.net.parameters()), tau)
