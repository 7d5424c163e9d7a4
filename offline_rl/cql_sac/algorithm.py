"""Conservative Q-Learning on SAC (Kumar et al. 2020, arXiv:2006.04779) as a Tianshou OfflineAlgorithm.

One update, top to bottom (B states, N = `cql_n_actions`, A action dims, E critics):

1. Actor pass on s (with gradient) and s' (without): N tanh-Gaussian samples per state from a single
   forward pass, with their log-densities.
2. Actor loss: α·log π(ã|s) − min_e Q_e(s, ã), critics held constant; during the first `bc_steps`
   updates −log π(a_data|s) replaces the Q term (behaviour-cloning warm-up). Entropy temperature α
   tuned towards `target_entropy` (default −A) or fixed.
3. TD target: y = r·scale + bias + γ·(1 − terminated)·min_e Q̄_e(s', a'), a' ~ π(·|s'). With
   `max_target_backup` the min over critics is taken for each of N samples, then the max over
   samples; `backup_entropy` subtracts α·log π(a'|s'). Time-outs are not terminals: they bootstrap.
4. Conservative term: one critic call scores, at s, the dataset action, N uniform actions on the
   box, N actions from π(·|s) and N from π(·|s') (samples and densities detached). Per critic:
   T·logsumexp over the 3N density-corrected values of each state (uniform: −A·log 2; policy:
   log π) minus Q(s, a_data), clipped, averaged over the batch, times `cql_weight`. Without
   importance sampling (CQL(ρ)) the dataset action joins the logsumexp and nothing is corrected.
   The Lagrange variant multiplies by α′ = exp(log α′) ∈ [0, 1e6] and subtracts
   `target_action_gap`; α′ follows dual ascent.
5. All losses touch disjoint parameters, so one backward pass serves every optimiser; then a Polyak
   update of the target critics.

All of it works in the policy's action box [-1, 1]: dataset actions are mapped into it with the
inverse of `SACPolicy`'s action scaling, so tasks with other bounds (Pendulum's ±2) are handled.
The dataset lives on the algorithm's device and batches are drawn there (no host round trip per
update); statistics leave the device once per update, in one transfer.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.algorithm_base import OfflineAlgorithm, TrainingStats
from tianshou.algorithm.modelfree.sac import SACPolicy
from tianshou.data import ReplayBuffer
from tianshou.utils.torch_utils import torch_train_mode

from offline_rl.cql_sac.config import CQLSACConfig
from offline_rl.cql_sac.networks import (
    EnsembleCritic,
    ObservationNormalizer,
    TanhGaussianActor,
    tanh_gaussian_log_prob,
    tanh_gaussian_sample,
)
from offline_rl.perf import make_adam

BC_ACTION_LIMIT = 1.0 - 1e-3
"""Dataset actions are clipped to ±this for log π(a_data|s), so atanh stays finite."""
CQL_ALPHA_MAX = 1e6


@dataclass(kw_only=True)
class CQLSACTrainingStats(TrainingStats):
    """Per-update figures, logged to TensorBoard by Tianshou's logger."""

    actor_loss: float
    critic_loss: float
    td_loss: float
    alpha_loss: float
    alpha: float
    cql_alpha: float
    cql_alpha_loss: float
    cql_gap: float
    q_data: float
    q_random: float
    q_policy: float
    target_q: float


_STAT_NAMES = (
    "actor_loss",
    "critic_loss",
    "td_loss",
    "alpha_loss",
    "alpha",
    "cql_alpha",
    "cql_alpha_loss",
    "cql_gap",
    "q_data",
    "q_random",
    "q_policy",
    "target_q",
)


class ActionSamples(NamedTuple):
    """Actions drawn for one update: π(·|s) with gradient, π(·|s') and uniform ones without."""

    mean: torch.Tensor  # (B, A) pre-tanh mean of π(·|s)
    log_std: torch.Tensor  # (B, A)
    pi_actions: torch.Tensor  # (B, N, A)
    pi_log_prob: torch.Tensor  # (B, N)
    next_actions: torch.Tensor  # (B, N, A)
    next_log_prob: torch.Tensor  # (B, N)
    random_actions: torch.Tensor  # (B, N, A), uniform on [-1, 1]^A


class DeviceDataset:
    """The transitions of a replay buffer as tensors on one device, ready for indexing.

    Observations are stored normalised, actions in the policy's [-1, 1] box, rewards scaled.
    """

    def __init__(self, buffer: ReplayBuffer, prepare: Any, device: torch.device) -> None:
        """`prepare(obs, act, rew, terminated, obs_next)` is the algorithm's `prepare_transitions`."""
        size = len(buffer)
        # A full buffer (what the loaders build) is already in order: slice, do not copy.
        order = None if buffer._insertion_idx in (0, size) else buffer.sample_indices(0)

        def column(array: np.ndarray) -> torch.Tensor:
            data = np.asarray(array[:size] if order is None else array[order])
            return torch.as_tensor(data, dtype=torch.float32).to(device)

        keys = ("obs", "act", "rew", "terminated", "obs_next")
        self.obs, self.act, self.rew, self.not_terminated, self.obs_next = prepare(
            *(column(getattr(buffer, key)) for key in keys)
        )
        self.size = size

    def sample(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        indices = torch.randint(self.size, (batch_size,), device=self.obs.device)
        return self.take(indices)

    def take(self, indices: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            self.obs[indices],
            self.act[indices],
            self.rew[indices],
            self.not_terminated[indices],
            self.obs_next[indices],
        )


class CQLSAC(OfflineAlgorithm[SACPolicy]):
    """CQL-SAC for continuous (Box) actions; see the module docstring for the update."""

    def __init__(
        self,
        *,
        policy: SACPolicy,
        critic: EnsembleCritic,
        normalizer: ObservationNormalizer,
        config: CQLSACConfig,
    ) -> None:
        super().__init__(policy=policy)
        config.validate()
        if not isinstance(policy.actor, TanhGaussianActor):
            raise TypeError("CQLSAC needs a SACPolicy whose actor is a TanhGaussianActor")
        self.config = config
        self.actor: TanhGaussianActor = policy.actor
        self.critic = critic
        self.critic_target = copy.deepcopy(critic).requires_grad_(False)
        self.normalizer = normalizer
        self.act_dim = critic.act_dim
        self.target_entropy = float(-self.act_dim if config.target_entropy is None else config.target_entropy)
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(config.alpha) if config.alpha > 0 else -math.inf))
        self.log_cql_alpha = torch.nn.Parameter(torch.tensor(0.0))
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))
        self._host_updates = 0  # host mirror of num_updates: reading the device copy would sync
        space = policy.action_space
        assert isinstance(space, gym.spaces.Box)
        self.register_buffer("action_low", torch.as_tensor(space.low, dtype=torch.float32).reshape(-1))
        self.register_buffer("action_high", torch.as_tensor(space.high, dtype=torch.float32).reshape(-1))
        self._actor_optim = make_adam(self.actor.net.parameters(), lr=config.actor_lr)
        self._critic_optim = make_adam(self.critic.parameters(), lr=config.critic_lr)
        self._alpha_optim = torch.optim.Adam([self.log_alpha], lr=config.alpha_lr)
        self._cql_alpha_optim = torch.optim.Adam([self.log_cql_alpha], lr=config.cql_alpha_lr)
        # Registered with Tianshou so that state_dict() / load_state_dict() carry optimiser state.
        for optim, module in (
            (self._actor_optim, self.actor.net),
            (self._critic_optim, self.critic),
            (self._alpha_optim, self),
            (self._cql_alpha_optim, self),
        ):
            self._optimizers.append(OfflineAlgorithm.Optimizer(optim, module))
        self._dataset: DeviceDataset | None = None
        self._dataset_key: tuple[int, int] | None = None

    # ----------------------------------------------------------------------------------------
    # construction helpers
    @classmethod
    def build(
        cls,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: CQLSACConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> CQLSAC:
        """Actor, critics, normaliser and SACPolicy for the given spaces, moved to `device`."""
        config = config or CQLSACConfig()
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"CQL-SAC needs a Box action space, got {action_space}")
        obs_dim = int(np.prod(observation_space.shape))
        act_dim = int(np.prod(action_space.shape))
        normalizer = ObservationNormalizer(obs_dim)
        actor = TanhGaussianActor(
            obs_dim, act_dim, config.actor_hidden_sizes, normalizer, orthogonal_init=config.orthogonal_init
        )
        critic = EnsembleCritic(
            obs_dim, act_dim, config.critic_hidden_sizes, config.num_critics, orthogonal_init=config.orthogonal_init
        )
        policy = SACPolicy(
            actor=actor,
            action_space=action_space,
            observation_space=observation_space,
            action_scaling=True,
            deterministic_eval=True,
        )
        return cls(policy=policy, critic=critic, normalizer=normalizer, config=config).to(device)

    @property
    def device(self) -> torch.device:
        return self.action_low.device

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self._host_updates = int(self.num_updates)
        return result

    def to_policy_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Map env actions into the policy's [-1, 1] box (inverse of SACPolicy's action scaling)."""
        scaled = 2.0 * (actions - self.action_low) / (self.action_high - self.action_low) - 1.0
        return scaled.clamp(-1.0, 1.0) if self.config.clip_dataset_actions else scaled

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp().detach()

    @property
    def cql_alpha(self) -> torch.Tensor:
        return self.log_cql_alpha.exp().clamp(0.0, CQL_ALPHA_MAX)

    # ----------------------------------------------------------------------------------------
    # data
    def process_buffer(self, buffer: ReplayBuffer) -> ReplayBuffer:
        """Fit the observation normaliser (once: a resumed run keeps its own) and stage the data."""
        if self.config.normalize_obs and not bool(self.normalizer.fitted):
            self.normalizer.fit(np.asarray(buffer.obs[: len(buffer)]).reshape(len(buffer), -1))
        self._stage(buffer)
        return buffer

    def _stage(self, buffer: ReplayBuffer) -> DeviceDataset:
        key = (id(buffer), len(buffer))
        if self._dataset is None or self._dataset_key != key or self._dataset.obs.device != self.device:
            self._dataset = DeviceDataset(buffer, self.prepare_transitions, self.device)
            self._dataset_key = key
        return self._dataset

    def update(self, buffer: ReplayBuffer, sample_size: int | None) -> CQLSACTrainingStats:
        """One gradient step on a batch drawn on-device (Tianshou's sampling path is bypassed)."""
        if not self.policy.is_within_training_step:
            raise RuntimeError("update() must run inside a training step (see policy_within_training_step)")
        start = time.time()
        dataset = self._stage(buffer)
        batch_size = sample_size or dataset.size
        with torch_train_mode(self):
            stats = self.learn(*dataset.sample(batch_size))
        for scheduler in self.lr_schedulers:
            scheduler.step()
        stats.train_time = time.time() - start
        return stats

    def _update_with_batch(self, batch: Any) -> CQLSACTrainingStats:
        """Tianshou's generic path (a sampled Batch), kept for callers that use it directly."""
        keys = ("obs", "act", "rew", "terminated", "obs_next")
        columns = (torch.as_tensor(np.asarray(batch[key]), dtype=torch.float32, device=self.device) for key in keys)
        return self.learn(*self.prepare_transitions(*columns))

    @torch.no_grad()
    def prepare_transitions(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        rew: torch.Tensor,
        terminated: torch.Tensor,
        obs_next: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """Raw columns -> what `learn` takes: normalised obs, policy-space actions, scaled rewards,
        1 - terminated, normalised next obs."""
        size = rew.shape[0]
        return (
            self.normalizer(obs.reshape(size, -1)),
            self.to_policy_actions(act.reshape(size, -1)),
            rew.reshape(size) * self.config.reward_scale + self.config.reward_bias,
            1.0 - terminated.reshape(size),
            self.normalizer(obs_next.reshape(size, -1)),
        )

    # ----------------------------------------------------------------------------------------
    # the update
    def learn(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        rew: torch.Tensor,
        not_terminated: torch.Tensor,
        obs_next: torch.Tensor,
    ) -> CQLSACTrainingStats:
        """One CQL-SAC step on prepared tensors (normalised obs, policy-space actions, scaled rewards)."""
        losses, stats = self.compute_losses(obs, act, rew, not_terminated, obs_next)
        optimizers = [self._actor_optim, self._critic_optim]
        if self.config.auto_alpha:
            optimizers.append(self._alpha_optim)
        if self.config.with_lagrange:
            optimizers.append(self._cql_alpha_optim)
        for optim in optimizers:
            optim.zero_grad(set_to_none=True)
        sum(losses.values()).backward()
        for optim in optimizers:
            optim.step()
        with torch.no_grad():
            if self.config.with_lagrange:
                self.log_cql_alpha.clamp_(max=math.log(CQL_ALPHA_MAX))
            self.soft_update_targets()
            self.num_updates += 1
        self._host_updates += 1
        values = torch.stack([stats[name] for name in _STAT_NAMES]).tolist()
        return CQLSACTrainingStats(**dict(zip(_STAT_NAMES, values, strict=True)))

    def soft_update_targets(self) -> None:
        """Polyak averaging: θ̄ ← θ̄ + τ(θ − θ̄)."""
        torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.critic.parameters()), self.config.tau)

    def compute_losses(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        rew: torch.Tensor,
        not_terminated: torch.Tensor,
        obs_next: torch.Tensor,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """All losses of one update (to be summed and back-propagated once) and detached statistics."""
        cfg = self.config
        num_samples = cfg.cql_n_actions
        alpha = self.alpha if cfg.auto_alpha or cfg.alpha > 0 else torch.zeros((), device=obs.device)
        samples = self.sample_actions(obs, obs_next)

        # Actor (and entropy temperature).
        new_action, new_log_prob = samples.pi_actions[:, :1], samples.pi_log_prob[:, 0]
        if self._host_updates < cfg.bc_steps:
            data_action = act.clamp(-BC_ACTION_LIMIT, BC_ACTION_LIMIT)
            actor_objective = tanh_gaussian_log_prob(samples.mean, samples.log_std, data_action)
        else:
            actor_objective = self.critic(obs, new_action, detach_params=True).min(dim=0).values[:, 0]
        actor_loss = (alpha * new_log_prob - actor_objective).mean()
        if cfg.auto_alpha:
            alpha_loss = -(self.log_alpha * (new_log_prob.detach() + self.target_entropy)).mean()
        else:
            alpha_loss = torch.zeros((), device=obs.device)

        with torch.no_grad():
            target_q = self.td_target(rew, not_terminated, obs_next, samples.next_actions, samples.next_log_prob, alpha)
        pi_actions, pi_log_prob = samples.pi_actions, samples.pi_log_prob
        next_actions, next_log_prob = samples.next_actions, samples.next_log_prob
        random_actions = samples.random_actions

        # Critics: TD error and the conservative term, from one critic call at s.
        scored = torch.cat([act.unsqueeze(1), random_actions, pi_actions.detach(), next_actions], dim=1)
        q_all = self.critic(obs, scored)  # (E, B, 1 + 3N)
        q_data = q_all[..., 0]
        q_random = q_all[..., 1 : 1 + num_samples]
        q_current = q_all[..., 1 + num_samples : 1 + 2 * num_samples]
        q_next = q_all[..., 1 + 2 * num_samples :]
        td_loss = (q_data - target_q.unsqueeze(0)).pow(2).mean(dim=1).sum()
        gap = self.conservative_gap(q_data, q_random, q_current, q_next, pi_log_prob.detach(), next_log_prob)
        if cfg.with_lagrange:
            cql_alpha = self.cql_alpha
            weighted = cql_alpha.detach() * cfg.cql_weight * (gap - cfg.target_action_gap)
            cql_alpha_loss = -0.5 * (cql_alpha * cfg.cql_weight * (gap.detach() - cfg.target_action_gap)).sum()
        else:
            cql_alpha = torch.ones((), device=obs.device)
            weighted = cfg.cql_weight * gap
            cql_alpha_loss = torch.zeros((), device=obs.device)
        conservative_loss = weighted.sum()
        critic_loss = conservative_loss if cfg.bc_debug_mode else td_loss + conservative_loss

        losses = {
            "actor": actor_loss,
            "alpha": alpha_loss,
            "critic": critic_loss,
            "cql_alpha": cql_alpha_loss,
        }
        stats = {
            "actor_loss": actor_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "td_loss": td_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
            "alpha": alpha.reshape(()).float(),
            "cql_alpha": cql_alpha.detach().reshape(()),
            "cql_alpha_loss": cql_alpha_loss.detach(),
            "cql_gap": gap.detach().mean(),
            "q_data": q_data.detach().mean(),
            "q_random": q_random.detach().mean(),
            "q_policy": q_current.detach().mean(),
            "target_q": target_q.mean(),
        }
        return losses, stats

    def sample_actions(self, obs: torch.Tensor, obs_next: torch.Tensor) -> ActionSamples:
        """The N uniform, π(·|s) and π(·|s') actions of one update, from one actor pass per state."""
        num_samples = self.config.cql_n_actions
        mean, log_std = self.actor.distribution_params(obs)
        pi_actions, pi_log_prob = tanh_gaussian_sample(mean, log_std, num_samples)
        with torch.no_grad():
            next_mean, next_log_std = self.actor.distribution_params(obs_next)
            next_actions, next_log_prob = tanh_gaussian_sample(next_mean, next_log_std, num_samples)
        shape = (obs.shape[0], num_samples, self.act_dim)
        random_actions = torch.rand(shape, device=obs.device, dtype=obs.dtype).mul_(2.0).sub_(1.0)
        return ActionSamples(mean, log_std, pi_actions, pi_log_prob, next_actions, next_log_prob, random_actions)

    def td_target(
        self,
        rew: torch.Tensor,
        not_terminated: torch.Tensor,
        obs_next: torch.Tensor,
        next_actions: torch.Tensor,
        next_log_prob: torch.Tensor,
        alpha: torch.Tensor,
    ) -> torch.Tensor:
        """r + γ·(1 − terminated)·V̄(s'), with V̄ from the target critics (see module docstring)."""
        cfg = self.config
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

    def conservative_gap(
        self,
        q_data: torch.Tensor,
        q_random: torch.Tensor,
        q_current: torch.Tensor,
        q_next: torch.Tensor,
        current_log_prob: torch.Tensor,
        next_log_prob: torch.Tensor,
    ) -> torch.Tensor:
        """Per critic (E,): mean over states of clip(T·logsumexp(values/T) − Q(s, a_data)).

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
