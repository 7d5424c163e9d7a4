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

All of it works in the policy's action box [-1, 1]. A buffer's actions are read by its marker
(`offline_rl.data.action_units`): datasets in environment units are mapped with the inverse of
`SACPolicy`'s action scaling, buffers from Tianshou collectors are already in the box.
The dataset lives on the algorithm's device and batches are drawn there (no host round trip per
update; a prioritized buffer draws indices by its priorities and gets new ones back); statistics
are summed on the device and read once per logging window. On CUDA the whole step — sampling,
losses, backward pass, every optimiser, the target update — is recorded once and replayed as one
CUDA graph (`CountedOfflineAlgorithm.run_step`); CPU runs, prioritized buffers and optimisers
given by Tianshou factories run it eagerly, on CPU with the networks' products in the library measured faster
there (`offline_rl.cpu_products`: oneDNN on AMD processors, torch's BLAS elsewhere).

This module is longer than most here on purpose: one algorithm's mathematics reads top to bottom in
one file, as in CORL and CleanRL, with each equation above a short method of its own.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.algorithm_base import OfflineAlgorithm, TrainingStats
from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
from tianshou.algorithm.optim import OptimizerFactory
from tianshou.data import ReplayBuffer

from offline_rl.algorithm_base import CountedOfflineAlgorithm, stats_from_tensors
from offline_rl.compat import auto_alpha_parts, importance_weights, polyak_update_
from offline_rl.cql_sac.config import CQLSACConfig
from offline_rl.cql_sac.networks import (
    CriticModules,
    EnsembleCritic,
    ObservationNormalizer,
    TanhGaussianActor,
    gaussian_params,
    tanh_gaussian_log_prob,
    tanh_gaussian_sample,
)
from offline_rl.cql_sac.q_filter import CriticScores, QFilteredSACPolicy
from offline_rl.data.action_units import needs_action_scaling
from offline_rl.data.staging import (
    StoredTransitions,
    is_prioritized,
    monte_carlo_returns,
    read_transitions,
)
from offline_rl.data.stats import corl_reward_unit
from offline_rl.perf import make_adam
from offline_rl.value_check import StartValues, discounted_returns

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


class Transitions(NamedTuple):
    """A prepared batch: normalised obs, policy-box actions, scaled rewards, 1 − terminated,
    normalised next obs, and (Cal-QL only) the Monte-Carlo return from s."""

    obs: torch.Tensor
    act: torch.Tensor
    rew: torch.Tensor
    not_terminated: torch.Tensor
    obs_next: torch.Tensor
    mc_return: torch.Tensor | None = None


class DeviceDataset:
    """Every transition of a replay buffer as prepared tensors on one device, ready for indexing."""

    def __init__(
        self,
        stored: StoredTransitions,
        prepare: Callable[..., tuple[torch.Tensor, ...]],
        device: torch.device,
        *,
        mc_gamma: float | None,
    ) -> None:
        """`prepare(obs, act, rew, terminated, obs_next)` is the algorithm's `prepare_transitions`."""

        def column(array: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.asarray(array), dtype=torch.float32).to(device)

        columns = (stored.obs, stored.act, stored.rew, stored.terminated, stored.obs_next)
        self.obs, self.act, self.rew, self.not_terminated, self.obs_next = prepare(*map(column, columns))
        self.mc_return = None
        if mc_gamma is not None:  # from the rewards the critic learns (scaled), to each episode's end
            returns = monte_carlo_returns(self.rew.cpu().numpy(), stored.episode_end, mc_gamma)
            self.mc_return = torch.as_tensor(returns).to(device)
        self.size = len(stored.indices)
        self.indices = stored.indices
        self._row_of: np.ndarray | None = None

    def sample(self, batch_size: int) -> Transitions:
        return self.take(torch.randint(self.size, (batch_size,), device=self.obs.device))

    def take(self, rows: torch.Tensor) -> Transitions:
        mc_return = None if self.mc_return is None else self.mc_return[rows]
        return Transitions(
            self.obs[rows], self.act[rows], self.rew[rows], self.not_terminated[rows], self.obs_next[rows], mc_return
        )

    def rows_of(self, indices: np.ndarray) -> torch.Tensor:
        """Staged rows of buffer indices (what a prioritized buffer's `sample_indices` returns)."""
        if self._row_of is None:
            self._row_of = np.full(int(self.indices.max()) + 1, -1, dtype=np.int64)
            self._row_of[self.indices] = np.arange(self.size)
        return torch.as_tensor(self._row_of[indices], device=self.obs.device)


class CQLSAC(CountedOfflineAlgorithm[SACPolicy]):
    """CQL-SAC for continuous (Box) actions; see the module docstring for the update.

    Built from a config with `CQLSAC.build(...)`, or from Tianshou-style parts with the drop-in
    `offline_rl.CQL`; both land here. `critic` is our `EnsembleCritic` or `CriticModules` wrapping
    Tianshou critics; the actor is `policy.actor`, ours or a Tianshou probabilistic actor. Without
    optimiser factories, Adam runs at the config's learning rates; `entropy_tuner` (Tianshou's
    `AutoAlpha`) replaces our own α tuning by that object's parameter and optimiser.
    """

    STATS = CQLSACTrainingStats

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
        space = policy.action_space
        assert isinstance(space, gym.spaces.Box)
        self.register_buffer("action_low", torch.as_tensor(space.low, dtype=torch.float32).reshape(-1))
        self.register_buffer("action_high", torch.as_tensor(space.high, dtype=torch.float32).reshape(-1))
        self.log_lagrange_multiplier = torch.nn.Parameter(torch.tensor(math.log(config.lagrange_multiplier_init)))
        self._actor_optim = self._make_optimizer(self.actor, actor_optim, config.actor_lr)
        if critic_optims is None:
            self._critic_optims = [self._make_optimizer(self.critic, None, config.critic_lr)]
        else:
            if not isinstance(critic, CriticModules) or len(critic_optims) != critic.num_critics:
                raise ValueError("critic_optims needs one optimiser factory per module of a CriticModules critic")
            self._critic_optims = [
                self._make_optimizer(member, factory, config.critic_lr)
                for member, factory in zip(critic.members, critic_optims, strict=True)
            ]
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
        self.reward_unit = 1.0  # --normalize-reward's factor, set when the data is staged
        # Registered with Tianshou so that state_dict() / load_state_dict() carry optimiser state.
        self._optimizers.append(OfflineAlgorithm.Optimizer(self._alpha_optim, self))
        self._optimizers.append(OfflineAlgorithm.Optimizer(self._lagrange_optim, self))

    def _make_optimizer(
        self, module: torch.nn.Module, factory: OptimizerFactory | None, lr: float
    ) -> torch.optim.Optimizer:
        if factory is None:
            optimizer = make_adam(module.parameters(), lr=lr)
        else:
            optimizer, scheduler = factory.create_instances(module)
            if scheduler is not None:
                self.lr_schedulers.append(scheduler)
        self._optimizers.append(OfflineAlgorithm.Optimizer(optimizer, module))
        return optimizer

    @classmethod
    def build(
        cls,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: CQLSACConfig | None = None,
        *,
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
            obs_dim,
            act_dim,
            config.actor_hidden_sizes,
            normalizer,
            orthogonal_init=config.orthogonal_init,
            log_std_offset=config.log_std_offset,
        )
        critic = EnsembleCritic(
            obs_dim, act_dim, config.critic_hidden_sizes, config.num_critics, orthogonal_init=config.orthogonal_init
        )
        policy_kwargs: dict[str, Any] = dict(
            actor=actor,
            action_space=action_space,
            observation_space=observation_space,
            action_scaling=True,
            deterministic_eval=True,
        )
        if config.eval_q_filter:
            policy = QFilteredSACPolicy(q_filter_samples=config.eval_q_filter, **policy_kwargs)
        else:
            policy = SACPolicy(**policy_kwargs)
        return CQLSAC(policy=policy, critic=critic, normalizer=normalizer, config=config).to(device)

    def to_policy_actions(self, actions: torch.Tensor, *, env_units: bool = True) -> torch.Tensor:
        """Map actions into the policy's [-1, 1] box: environment units go through the inverse of
        SACPolicy's action scaling; policy units pass unchanged."""
        if env_units:
            actions = 2.0 * (actions - self.action_low) / (self.action_high - self.action_low) - 1.0
        return actions.clamp(-1.0, 1.0) if self.config.clip_dataset_actions else actions

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp().detach()

    @property
    def lagrange_multiplier(self) -> torch.Tensor:
        """α′ of the Lagrange variant."""
        cfg = self.config
        return self.log_lagrange_multiplier.exp().clamp(cfg.lagrange_multiplier_min, cfg.lagrange_multiplier_max)

    # ----------------------------------------------------------------------------------------
    # data
    def process_buffer(self, buffer: ReplayBuffer) -> ReplayBuffer:
        """Stage the data afresh (Tianshou's trainer calls this at the start of every run, so edits
        made between runs are seen) and fit the observation normaliser once (a resumed run keeps its own)."""
        super().process_buffer(buffer)
        self._stage(buffer)
        return buffer

    def _stage(self, buffer: ReplayBuffer) -> DeviceDataset:
        return self.staged(buffer, lambda: self._build_dataset(buffer))

    def _build_dataset(self, buffer: ReplayBuffer) -> DeviceDataset:
        """The buffer's transitions, prepared (`prepare_transitions`) and moved to the device."""
        stored = read_transitions(buffer)
        env_units = needs_action_scaling(
            buffer,
            stored.act,
            self.action_low.cpu().numpy(),
            self.action_high.cpu().numpy(),
            action_scaling=bool(self.policy.action_scaling),
            clipped=self.config.clip_dataset_actions,
        )
        if self.normalizer is not None and self.config.normalize_obs and not bool(self.normalizer.fitted):
            self.normalizer.fit(stored.obs.reshape(len(stored.obs), -1))
        gamma = self.config.gamma if self.config.calibrated else None
        reward_unit = 1.0
        if self.config.normalize_reward:
            finished = np.asarray(buffer.done[stored.indices], dtype=bool)
            reward_unit = corl_reward_unit(stored.rew, stored.episode_end, finished)
        prepare = functools.partial(self.prepare_transitions, env_units=env_units, reward_unit=reward_unit)
        self.reward_unit = reward_unit
        return DeviceDataset(stored, prepare, self.device, mc_gamma=gamma)

    @property
    def reward_noise_scale(self) -> float:
        """The standard deviation of `reward_noise_std`'s noise in the units of prepared rewards: the noise
        joins the raw reward, so it is scaled with it (by --normalize-reward's unit and --reward-scale)."""
        return self.config.reward_noise_std * abs(self.reward_unit * self.config.reward_scale)

    def normalize_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations (rows, D) as the critics and the actor see them: through the normaliser, if any."""
        return self.normalizer(obs) if self.normalizer is not None else obs

    def update_from_buffer(self, buffer: ReplayBuffer, sample_size: int | None) -> CQLSACTrainingStats:
        """A batch drawn on-device from the staged dataset; a prioritized buffer draws the indices by
        its priorities, weights the TD loss and receives |TD error| as new priorities."""
        dataset = self._stage(buffer)
        batch_size = sample_size or dataset.size
        if not is_prioritized(buffer):
            cloning = self.in_cloning_phase()  # a different actor loss: its own phase
            key = (id(dataset), batch_size, cloning)
            return self.run_step(lambda: self.gradient_step(dataset.sample(batch_size)), key, eager=cloning)

        def prioritized_step() -> dict[str, torch.Tensor]:
            indices = buffer.sample_indices(batch_size)
            weight = torch.as_tensor(importance_weights(buffer, indices), dtype=torch.float32, device=self.device)  # type: ignore[arg-type]
            values = self.gradient_step(dataset.take(dataset.rows_of(indices)), weight=weight)
            buffer.update_weight(indices, values["td_error"].cpu().numpy())  # type: ignore[attr-defined]
            return values

        return self.run_step(prioritized_step, None, eager=True)  # host-side sampling: never captured

    def _update_with_batch(self, batch: Any) -> CQLSACTrainingStats:
        """Tianshou's generic path (a sampled Batch, actions in the policy's box as Tianshou stores
        them), kept for callers that use it directly."""
        keys = ("obs", "act", "rew", "terminated", "obs_next")
        columns = [torch.as_tensor(np.asarray(batch[key]), dtype=torch.float32, device=self.device) for key in keys]
        return self.learn(*self.prepare_transitions(*columns, env_units=False))

    @torch.no_grad()
    def prepare_transitions(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        rew: torch.Tensor,
        terminated: torch.Tensor,
        obs_next: torch.Tensor,
        *,
        env_units: bool = True,
        reward_unit: float = 1.0,
    ) -> tuple[torch.Tensor, ...]:
        """Raw columns -> what `learn` takes: normalised obs, policy-space actions, scaled rewards,
        1 - terminated, normalised next obs; `env_units` says where the actions live, `reward_unit`
        multiplies rewards before --reward-scale/--reward-bias (`corl_reward_unit`)."""
        size = rew.shape[0]
        return (
            self.normalize_obs(obs.reshape(size, -1)),
            self.to_policy_actions(act.reshape(size, -1), env_units=env_units),
            rew.reshape(size) * (reward_unit * self.config.reward_scale) + self.config.reward_bias,
            1.0 - terminated.reshape(size),
            self.normalize_obs(obs_next.reshape(size, -1)),
        )

    @torch.no_grad()
    def start_values(self, start_obs: np.ndarray, rewards: Sequence[np.ndarray]) -> StartValues | None:
        """Per evaluation episode, what the critics expect its discounted return to be and what it was
        (`offline_rl.value_check`): min_e Q_e(s₀, tanh(mean of π(·|s₀))) at its first observation s₀,
        and Σ_t γ^t r_t of its rewards. The critics learn rewards r·u·scale + bias (u: --normalize-reward's
        factor), so the estimate is mapped back to the env's units: (Q − bias·Σ_t γ^t) / (u·scale) over
        the episode's steps; None when u·scale is 0. A time limit cuts the return where the critics
        bootstrap on: γ^T of the tail is left out (4e-5 for D4RL's 1000 steps at γ = 0.99)."""
        factor = self.reward_unit * self.config.reward_scale
        if factor == 0:
            return None
        obs = torch.as_tensor(np.asarray(start_obs), dtype=torch.float32, device=self.device)
        norm_obs = self.normalize_obs(obs.reshape(len(obs), -1))
        mean, _ = self._gaussian_params(norm_obs)
        q = self.critic(norm_obs, torch.tanh(mean).unsqueeze(1)).amin(dim=0)[:, 0].double().cpu().numpy()
        returns, masses = discounted_returns(rewards, self.config.gamma)
        return StartValues((q - self.config.reward_bias * masses) / factor, returns)

    # ----------------------------------------------------------------------------------------
    # the update
    def learn(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        rew: torch.Tensor,
        not_terminated: torch.Tensor,
        obs_next: torch.Tensor,
        mc_return: torch.Tensor | None = None,
    ) -> CQLSACTrainingStats:
        """One CQL-SAC step (7) on prepared tensors (normalised obs, policy-space actions, scaled rewards)."""
        batch = Transitions(obs, act, rew, not_terminated, obs_next, mc_return)
        return stats_from_tensors(CQLSACTrainingStats, self.gradient_step(batch))

    def gradient_step(self, batch: Transitions, weight: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """(7): losses, one backward pass, every optimiser, the target update; returns the detached
        statistics (and the per-sample `td_error` a prioritized buffer takes as priorities)."""
        losses, stats = self.compute_losses(*batch, weight=weight, cloning=self.in_cloning_phase())
        for optim in self.stepped_optimizers():
            optim.zero_grad(set_to_none=True)
        sum(losses.values()).backward()
        self.apply_gradients()
        self.count_update()
        return stats

    OPTIMIZER_STEPS = "apply_gradients"

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
        then the Polyak update (one method so that torch.compile can fuse it on the captured path)."""
        if self.config.max_grad_norm is not None:
            self.critic.clip_grad_norm_(self.config.max_grad_norm)
        for optim in self.stepped_optimizers():
            optim.step()
        with torch.no_grad():
            if self.config.with_lagrange:
                self.log_lagrange_multiplier.clamp_(max=math.log(self.config.lagrange_multiplier_max))
            self.soft_update_targets()

    def in_cloning_phase(self) -> bool:
        """Whether this update is one of the first `bc_steps` (the actor clones the data's actions)."""
        return self._host_updates < self.config.bc_steps

    def soft_update_targets(self) -> None:
        """Polyak averaging: θ̄ ← θ̄ + τ(θ − θ̄)."""
        polyak_update_(list(self.critic_target.parameters()), list(self.critic.parameters()), self.config.tau)

    def compute_losses(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        rew: torch.Tensor,
        not_terminated: torch.Tensor,
        obs_next: torch.Tensor,
        mc_return: torch.Tensor | None = None,
        *,
        weight: torch.Tensor | None = None,
        cloning: bool | None = None,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Equations (1)-(6): the losses to sum and back-propagate once, and detached statistics.

        `cloning` (default: `in_cloning_phase()`) is the phase as a plain flag, passed in because
        `torch.compile` specialises on what it reads: comparing the update counter in here would
        recompile at every update."""
        if cloning is None:
            cloning = self.in_cloning_phase()
        zero = torch.zeros((), device=obs.device)
        alpha = self.alpha if self.config.auto_alpha or self.config.alpha > 0 else zero
        samples = self.sample_actions(obs, obs_next)
        actor_loss, new_log_prob = self.actor_loss(obs, act, samples, alpha, cloning=cloning)
        alpha_loss = self.alpha_loss(new_log_prob) if self.config.auto_alpha else zero
        with torch.no_grad():
            target_q = self.td_target(rew, not_terminated, obs_next, samples.next_actions, samples.next_log_prob, alpha)
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
        losses = {"actor": actor_loss, "alpha": alpha_loss, "critic": critic_loss, "lagrange": lagrange_loss}
        stats = {
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
            "td_error": td_error.mean(dim=0),
        }
        return losses, {name: value.detach() for name, value in stats.items()}

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
    ) -> torch.Tensor:
        """(3) r + γ·(1 − terminated)·V̄(s'), with V̄ from the target critics."""
        cfg = self.config
        if self.reward_noise_scale > 0:  # a Python number: no draw at all, and the same graph, without noise
            rew = rew + self.reward_noise_scale * torch.randn_like(rew)
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

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """Also reads checkpoints written before α′ was named `log_lagrange_multiplier`."""
        if "log_cql_alpha" in state_dict:
            state_dict = dict(state_dict)
            state_dict["log_lagrange_multiplier"] = state_dict.pop("log_cql_alpha")
        return super().load_state_dict(state_dict, strict=strict, assign=assign)
