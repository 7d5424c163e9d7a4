"""Conservative Q-Learning on SAC (Kumar et al. 2020, arXiv:2006.04779) as a Tianshou OfflineAlgorithm.

One update, top to bottom (B states, N = `cql_n_actions`, A action dims, E critics); each equation
is one method below, named after it:

(1) `sample_actions`: one actor pass on s (with gradient) and on s′ (without) gives N tanh-Gaussian
    samples per state with their log-densities, plus N uniform actions on the box.
(2) `actor_loss`: α·log π(ã|s) − min_e Q_e(s, ã), critics held constant; during the first
    `bc_steps` updates −log π(a_data|s) replaces the Q term (behaviour-cloning warm-up).
    `alpha_loss`: −log α·(log π(ã|s) + target entropy), when α is tuned.
(3) `td_target`: y = r·scale + bias + γ·(1 − terminated)·min_e Q̄_e(s′, a′), a′ ~ π(·|s′). With
    `max_target_backup` the min over critics is taken per sample, then the max over N samples;
    `backup_entropy` subtracts α·log π(a′|s′). Time-outs are not terminals: they bootstrap.
    `reward_noise_std` σ adds fresh noise to r before the scale: y gains |scale|·σ·ε, ε ~ N(0, 1).
(4) `conservative_gap`, per critic: T·logsumexp over the 3N density-corrected values of each state
    (uniform: −A·log 2; policy: log π) minus Q(s, a_data), clipped, averaged over the batch. Without
    importance sampling (CQL(ρ)) the dataset action joins the logsumexp and nothing is corrected.
    With Cal-QL (`calibrated`), the π(·|s) and π(·|s′) values are first floored at the Monte-Carlo
    return of the data's episode from s (Nakamoto et al. 2023; the authors floor these two groups,
    not the uniform one, before the density correction).
(5) `critic_loss`: Σ_e mean (Q_e(s, a_data) − y)² (times the importance weights of a prioritized
    buffer) + the weighted gap of (4); one critic call scores the dataset action and the 3N sampled
    actions together.
(6) `lagrange_terms`: the gap's weight is w, or α′·w with the Lagrange variant, whose multiplier
    α′ = exp(log α′), clamped to [min, max], follows dual ascent on −mean_e α′·w·(gap_e − τ).
(7) All losses touch disjoint parameters, so one backward pass serves every optimiser (each critic's
    gradient optionally clipped to `max_grad_norm`); then a Polyak update of the target critics.

All of it works in the policy's action box [-1, 1], on data staged once on the algorithm's device
(`offline_rl.algorithms.staging`: action units, normalised observations, rewards as the critics learn
them). The engine (`offline_rl.algorithms.base`) runs each step eagerly or as one replayed CUDA graph,
and a prioritized buffer's path.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.algorithm_base import OfflineAlgorithm, TrainingStats
from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
from tianshou.algorithm.optim import OptimizerFactory

from offline_rl.algorithms.base import Losses, make_adam
from offline_rl.algorithms.continuous import ContinuousOfflineAlgorithm
from offline_rl.algorithms.cql_sac.config import CQLSACConfig
from offline_rl.algorithms.cql_sac.networks import gaussian_params, tanh_gaussian_log_prob, tanh_gaussian_sample
from offline_rl.algorithms.cql_sac.policy import build_networks
from offline_rl.algorithms.cql_sac.q_filter import CriticScores, QFilteredSACPolicy
from offline_rl.algorithms.networks import CriticModules, EnsembleCritic, ObservationNormalizer
from offline_rl.algorithms.staging import Transitions
from offline_rl.algorithms.value_check import StartValues, values_in_env_units
from offline_rl.core.compat import auto_alpha_parts, polyak_update_

BC_ACTION_LIMIT = 1.0 - 1e-3
"""Dataset actions are clipped to ±this for log π(a_data|s), so atanh stays finite."""


@dataclass(kw_only=True)
class CQLSACTrainingStats(TrainingStats):
    """Per-update figures, logged to TensorBoard by Tianshou's logger; this declaration is the list."""

    actor_loss: float
    critic_loss: float
    td_loss: float
    alpha_loss: float
    alpha: float
    lagrange_multiplier: float
    lagrange_loss: float
    cql_gap: float
    q_data: float
    q_random: float
    q_policy: float
    target_q: float


class ActionSamples(NamedTuple):
    """Actions drawn for one update: π(·|s) with gradient, π(·|s') and uniform ones without."""

    mean: torch.Tensor  # (B, A) pre-tanh mean of π(·|s)
    log_std: torch.Tensor  # (B, A)
    pi_actions: torch.Tensor  # (B, N, A)
    pi_log_prob: torch.Tensor  # (B, N)
    next_actions: torch.Tensor  # (B, N, A)
    next_log_prob: torch.Tensor  # (B, N)
    random_actions: torch.Tensor  # (B, N, A), uniform on [-1, 1]^A


class CriticValues(NamedTuple):
    """Q-values (E, B, ·) of one critic call at s: dataset action, then N of each sampled group."""

    data: torch.Tensor  # (E, B)
    random: torch.Tensor  # (E, B, N)
    current: torch.Tensor  # (E, B, N), actions from π(·|s)
    next: torch.Tensor  # (E, B, N), actions from π(·|s′)


class CQLSAC(ContinuousOfflineAlgorithm[SACPolicy]):
    """CQL-SAC for continuous (Box) actions; see the module docstring for the update.

    Built from a config with `CQLSAC.build(...)`, or from Tianshou-style parts with the drop-in
    `offline_rl.CQL`; both land here. `critic` is our `EnsembleCritic` or `CriticModules` wrapping
    Tianshou critics; the actor is `policy.actor`, ours or a Tianshou probabilistic actor. Without
    optimiser factories, Adam runs at the config's learning rates; `entropy_tuner` (Tianshou's
    `AutoAlpha`) replaces our own α tuning by that object's parameter and optimiser.
    """

    STATS = CQLSACTrainingStats
    LEGACY_KEYS: ClassVar[dict[str, str]] = {"log_cql_alpha": "log_lagrange_multiplier"}

    def __init__(
        self,
        *,
        policy: SACPolicy,
        critic: EnsembleCritic | CriticModules,
        config: CQLSACConfig,
        normalizer: ObservationNormalizer | None = None,
        actor_optim: OptimizerFactory | None = None,
        critic_optims: Sequence[OptimizerFactory] | None = None,
        entropy_tuner: AutoAlpha | None = None,
    ) -> None:
        super().__init__(policy=policy)
        config.validate()
        self.config = config
        self.actor = policy.actor
        self._gaussian_params = gaussian_params(policy.actor)
        self.critic = critic
        self.critic_target = copy.deepcopy(critic).requires_grad_(False)
        self.normalizer = normalizer
        self.act_dim = critic.act_dim
        self.register_action_bounds(policy.action_space)
        self.log_lagrange_multiplier = torch.nn.Parameter(torch.tensor(math.log(config.lagrange_multiplier_init)))
        self._actor_optim = self.add_optimizer(self.actor, actor_optim, lr=config.actor_lr)
        self._critic_optims = self.add_critic_optimizers(critic, critic_optims, lr=config.critic_lr)
        if entropy_tuner is None:
            initial = math.log(config.alpha) if config.alpha > 0 else -math.inf
            self.log_alpha = torch.nn.Parameter(torch.tensor(initial))
            self._alpha_optim = make_adam([self.log_alpha], lr=config.entropy_lr)
            self.target_entropy = float(-self.act_dim if config.target_entropy is None else config.target_entropy)
        else:
            self.log_alpha, self._alpha_optim, self.target_entropy = auto_alpha_parts(entropy_tuner)
        self._lagrange_optim = make_adam([self.log_lagrange_multiplier], lr=config.lagrange_lr)
        if isinstance(policy, QFilteredSACPolicy):
            policy.score_with(CriticScores(self.critic, normalizer))
        elif config.eval_q_filter:
            raise ValueError("eval_q_filter needs a QFilteredSACPolicy (CQLSAC.build makes one)")
        # Registered with Tianshou so that state_dict() / load_state_dict() carry optimiser state.
        self._optimizers.append(OfflineAlgorithm.Optimizer(self._alpha_optim, self))
        self._optimizers.append(OfflineAlgorithm.Optimizer(self._lagrange_optim, self))

    @classmethod
    def build(
        cls,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: CQLSACConfig | None = None,
        *,
        device: str | torch.device = "cpu",
    ) -> CQLSAC:
        """Actor, critics, normaliser and SACPolicy for the given spaces (`build_networks`), moved to `device`."""
        config = config or CQLSACConfig()
        policy, critic, normalizer = build_networks(observation_space, action_space, config)
        return CQLSAC(policy=policy, critic=critic, normalizer=normalizer, config=config).to(device)

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp().detach()

    @property
    def lagrange_multiplier(self) -> torch.Tensor:
        """α′ of the Lagrange variant."""
        cfg = self.config
        return self.log_lagrange_multiplier.exp().clamp(cfg.lagrange_multiplier_min, cfg.lagrange_multiplier_max)

    @torch.no_grad()
    def start_values(
        self, start_obs: np.ndarray, rewards: Sequence[np.ndarray], *, reward_unit: float | None = None
    ) -> StartValues | None:
        """Per evaluation episode, what the critics expect its discounted return to be and what it was
        (`offline_rl.algorithms.value_check`): min_e Q_e(s₀, tanh(mean of π(·|s₀))) at its first
        observation s₀, in the env's reward units (`reward_unit`: the staged data's by default)."""
        obs = torch.as_tensor(np.asarray(start_obs), dtype=torch.float32, device=self.device)
        norm_obs = self.normalize_obs(obs.reshape(len(obs), -1))
        mean, _ = self._gaussian_params(norm_obs)
        q = self.critic(norm_obs, torch.tanh(mean).unsqueeze(1)).amin(dim=0)[:, 0].double().cpu().numpy()
        unit = self.reward_unit if reward_unit is None else reward_unit
        return values_in_env_units(
            q, rewards, self.config.gamma, unit * self.config.reward_scale, self.config.reward_bias
        )

    # ----------------------------------------------------------------------------------------
    # the update
    def loss_options(self) -> dict[str, Any]:
        """The warm-up phase and the reward noise of (3), passed to `compute_losses` as plain values."""
        return {"cloning": self.in_cloning_phase(), "noise_scale": self.reward_noise_scale}

    def go_online(self) -> None:
        """Fine-tuning online as CORL's Cal-QL and CQL: w becomes `online_cql_weight` where one is given, and
        Cal-QL's calibration is off (the transitions collected online have no Monte-Carlo return)."""
        cfg = self.config
        weight = cfg.cql_weight if cfg.online_cql_weight is None else cfg.online_cql_weight
        self.config = replace(cfg, cql_weight=weight, calibrated=False)

    def eager_phase(self) -> bool:
        return self.in_cloning_phase()  # a different actor loss: its own phase, uncaptured

    def in_cloning_phase(self) -> bool:
        """Whether this update is one of the first `bc_steps` (the actor clones the data's actions)."""
        return self._host_updates < self.config.bc_steps

    def stepped_optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimisers this configuration steps (α's and α′'s only when they are tuned)."""
        optimizers = [self._actor_optim, *self._critic_optims]
        if self.config.auto_alpha:
            optimizers.append(self._alpha_optim)
        if self.config.with_lagrange:
            optimizers.append(self._lagrange_optim)
        return optimizers

    def apply_gradients(self) -> None:
        """(7) After the backward pass: clip the critics' gradients, step every optimiser, clamp α′,
        then the Polyak update θ̄ ← θ̄ + τ(θ − θ̄)."""
        if self.config.max_grad_norm is not None:
            self.critic.clip_grad_norm_(self.config.max_grad_norm)
        for optim in self.stepped_optimizers():
            optim.step()
        with torch.no_grad():
            if self.config.with_lagrange:
                self.log_lagrange_multiplier.clamp_(max=math.log(self.config.lagrange_multiplier_max))
            polyak_update_(list(self.critic_target.parameters()), list(self.critic.parameters()), self.config.tau)

    def compute_losses(
        self,
        batch: Transitions,
        *,
        weight: torch.Tensor | None = None,
        cloning: bool = False,
        noise_scale: float = 0.0,
    ) -> Losses:
        """Equations (1)-(6) on a prepared batch: the losses to sum and back-propagate once, and detached
        figures. `weight`: a prioritized buffer's importance weights; `cloning`: the warm-up's actor
        loss; `noise_scale`: the reward noise of (3)."""
        obs, act, rew, not_terminated, obs_next, mc_return = batch
        zero = torch.zeros((), device=obs.device)
        alpha = self.alpha if self.config.auto_alpha or self.config.alpha > 0 else zero
        samples = self.sample_actions(obs, obs_next)
        actor_loss, new_log_prob = self.actor_loss(obs, act, samples, alpha, cloning=cloning)
        alpha_loss = self.alpha_loss(new_log_prob) if self.config.auto_alpha else zero
        with torch.no_grad():
            next_actions, next_log_prob = samples.next_actions, samples.next_log_prob
            target_q = self.td_target(
                rew, not_terminated, obs_next, next_actions, next_log_prob, alpha, noise_scale=noise_scale
            )
        q = self.critic_values(obs, act, samples)
        td_error = q.data - target_q.unsqueeze(0)  # (E, B)
        squared = td_error.pow(2) if weight is None else td_error.pow(2) * weight.unsqueeze(0)
        td_loss = squared.mean(dim=1).sum()
        q_current, q_next = q.current, q.next
        if self.config.calibrated:
            if mc_return is None:
                raise ValueError("calibrated (Cal-QL) needs the Monte-Carlo returns of the staged dataset")
            floor = mc_return.view(1, -1, 1)
            q_current, q_next = torch.maximum(q_current, floor), torch.maximum(q_next, floor)
        gap = self.conservative_gap(
            q.data, q.random, q_current, q_next, samples.pi_log_prob.detach(), samples.next_log_prob
        )
        conservative_loss, multiplier, lagrange_loss = self.lagrange_terms(gap)
        critic_loss = conservative_loss if self.config.bc_debug_mode else td_loss + conservative_loss
        figures = {
            "actor_loss": actor_loss,
            "critic_loss": critic_loss,
            "td_loss": td_loss,
            "alpha_loss": alpha_loss,
            "alpha": alpha,
            "lagrange_multiplier": multiplier,
            "lagrange_loss": lagrange_loss,
            "cql_gap": gap.mean(),
            "q_data": q.data.mean(),
            "q_random": q.random.mean(),
            "q_policy": q.current.mean(),
            "target_q": target_q.mean(),
        }
        return Losses(
            parts={"actor": actor_loss, "alpha": alpha_loss, "critic": critic_loss, "lagrange": lagrange_loss},
            figures={name: value.detach() for name, value in figures.items()},
            priority=td_error.detach().mean(dim=0),
        )

    def sample_actions(self, obs: torch.Tensor, obs_next: torch.Tensor) -> ActionSamples:
        """(1) The N uniform, π(·|s) and π(·|s') actions of one update, from one actor pass per state."""
        num_samples = self.config.cql_n_actions
        mean, log_std = self._gaussian_params(obs)
        pi_actions, pi_log_prob = tanh_gaussian_sample(mean, log_std, num_samples)
        with torch.no_grad():
            next_mean, next_log_std = self._gaussian_params(obs_next)
            next_actions, next_log_prob = tanh_gaussian_sample(next_mean, next_log_std, num_samples)
        shape = (obs.shape[0], num_samples, self.act_dim)
        random_actions = torch.rand(shape, device=obs.device, dtype=obs.dtype).mul_(2.0).sub_(1.0)
        return ActionSamples(mean, log_std, pi_actions, pi_log_prob, next_actions, next_log_prob, random_actions)

    def actor_loss(
        self, obs: torch.Tensor, act: torch.Tensor, samples: ActionSamples, alpha: torch.Tensor, *, cloning: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(2) mean of α·log π(ã|s) − min_e Q_e(s, ã) (or log π(a_data|s) while cloning); also log π(ã|s)."""
        new_action, new_log_prob = samples.pi_actions[:, :1], samples.pi_log_prob[:, 0]
        if cloning:
            data_action = act.clamp(-BC_ACTION_LIMIT, BC_ACTION_LIMIT)
            objective = tanh_gaussian_log_prob(samples.mean, samples.log_std, data_action)
        else:
            objective = self.critic(obs, new_action, detach_params=True).min(dim=0).values[:, 0]
        return (alpha * new_log_prob - objective).mean(), new_log_prob

    def alpha_loss(self, new_log_prob: torch.Tensor) -> torch.Tensor:
        """(2) −log α·(log π(ã|s) + target entropy), averaged over the batch."""
        return -(self.log_alpha * (new_log_prob.detach() + self.target_entropy)).mean()

    def td_target(
        self,
        rew: torch.Tensor,
        not_terminated: torch.Tensor,
        obs_next: torch.Tensor,
        next_actions: torch.Tensor,
        next_log_prob: torch.Tensor,
        alpha: torch.Tensor,
        *,
        noise_scale: float = 0.0,
    ) -> torch.Tensor:
        """(3) r + γ·(1 − terminated)·V̄(s'), with V̄ from the target critics; `noise_scale` is
        `reward_noise_std` in the units of the prepared rewards."""
        cfg = self.config
        if noise_scale > 0:  # a Python number: no draw at all, and the same graph, without noise
            rew = rew + noise_scale * torch.randn_like(rew)
        if cfg.max_target_backup:
            next_q = self.critic_target(obs_next, next_actions).min(dim=0).values  # min over critics: (B, N)
            next_q, best = next_q.max(dim=1)  # then max over samples
            chosen_log_prob = next_log_prob.gather(1, best.unsqueeze(1)).squeeze(1)
        else:
            next_q = self.critic_target(obs_next, next_actions[:, :1]).min(dim=0).values[:, 0]
            chosen_log_prob = next_log_prob[:, 0]
        if cfg.backup_entropy:
            next_q = next_q - alpha * chosen_log_prob
        return rew + cfg.gamma * not_terminated * next_q

    def critic_values(self, obs: torch.Tensor, act: torch.Tensor, samples: ActionSamples) -> CriticValues:
        """(5) One critic call at s scoring the dataset action and the 3N sampled ones."""
        n = self.config.cql_n_actions
        scored = torch.cat(
            [act.unsqueeze(1), samples.random_actions, samples.pi_actions.detach(), samples.next_actions], dim=1
        )
        q_all = self.critic(obs, scored)  # (E, B, 1 + 3N)
        return CriticValues(
            q_all[..., 0], q_all[..., 1 : 1 + n], q_all[..., 1 + n : 1 + 2 * n], q_all[..., 1 + 2 * n :]
        )

    def conservative_gap(
        self,
        q_data: torch.Tensor,
        q_random: torch.Tensor,
        q_current: torch.Tensor,
        q_next: torch.Tensor,
        current_log_prob: torch.Tensor,
        next_log_prob: torch.Tensor,
    ) -> torch.Tensor:
        """(4) Per critic (E,): mean over states of clip(T·logsumexp(values/T) − Q(s, a_data)).

        Q-values are (E, B, ·); log-densities (B, N) broadcast over critics.
        """
        cfg = self.config
        if cfg.importance_sample:
            random_log_density = -self.act_dim * math.log(2.0)  # uniform on [-1, 1]^A
            values = torch.cat(
                [
                    q_random - random_log_density,
                    q_current - current_log_prob.unsqueeze(0),
                    q_next - next_log_prob.unsqueeze(0),
                ],
                dim=-1,
            )
        else:
            values = torch.cat([q_random, q_data.unsqueeze(-1), q_next, q_current], dim=-1)
        soft_max = cfg.temperature * torch.logsumexp(values / cfg.temperature, dim=-1)  # (E, B)
        return (soft_max - q_data).clamp(cfg.clip_diff_min, cfg.clip_diff_max).mean(dim=1)

    def lagrange_terms(self, gap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(6) (weighted conservative loss summed over critics, α′, loss of α′'s dual ascent)."""
        cfg = self.config
        if not cfg.with_lagrange:
            one = torch.ones((), device=gap.device)
            return (cfg.cql_weight * gap).sum(), one, torch.zeros((), device=gap.device)
        multiplier = self.lagrange_multiplier
        weighted = multiplier.detach() * cfg.cql_weight * (gap - cfg.target_action_gap)
        # The dual step averages over critics, so its size does not depend on how many there are.
        dual_loss = -(multiplier * cfg.cql_weight * (gap.detach() - cfg.target_action_gap)).mean()
        return weighted.sum(), multiplier.detach(), dual_loss
