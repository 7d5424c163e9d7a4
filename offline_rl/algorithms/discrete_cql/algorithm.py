"""Discrete Conservative Q-Learning on a QR-DQN head (Kumar et al. 2020, §4 Atari) for Tianshou 2.x.

One update, top to bottom (B transitions, A actions, Nq quantiles, κ = `kappa`):

1. n-step returns from the buffer (each reward clipped to [-1, 1] first with `reward_clip`, by default
   for image observations, as in Dopamine, the DQN-Replay agents and the CQL paper's Atari agent)
   that stop at episode ends:
   G = Σ_{k<m} γ^k r_{t+k}, where m ≤ n is cut short by an episode end or by the newest step of a
   (sub-)buffer whose episode is still running (as Tianshou's `compute_nstep_return`); the
   bootstrap weight is γ^m·(1 − terminated), so a truncated (time-out) episode still bootstraps
   from its last true next observation.
2. Target quantiles θ̄(s', a*), a* greedy under the target network (or the online one with
   `double_q`); target network copied from the online one every `target_update_freq` updates
   (0: no target network, the online one gives the targets, as in Tianshou).
3. Quantile-Huber loss (`quantile_loss.py`) with τ̂ᵢ = (i + 0.5)/Nq: Σᵢ meanⱼ |τ̂ᵢ − 1{uᵢⱼ < 0}|·Lκ(uᵢⱼ)/κ with
   uᵢⱼ = Tⱼ − θᵢ(s, a_data), averaged over the batch (weighted by a prioritized buffer's
   importance weights, which then receive meanᵢ Σⱼ Lκ(uᵢⱼ) as new priorities, as in Tianshou).
4. Conservative term: `cql_weight`·mean over the batch of (logsumexp_a Q(s, a) − Q(s, a_data)),
   Q = mean over quantiles.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.algorithm_base import TrainingStats
from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
from tianshou.algorithm.optim import OptimizerFactory
from tianshou.data import ReplayBuffer
from torch.overrides import TorchFunctionMode

from offline_rl.algorithms.base import CountedOfflineAlgorithm, Losses
from offline_rl.algorithms.discrete_cql.config import DiscreteCQLConfig
from offline_rl.algorithms.discrete_cql.host_feed import HostBatchFeed
from offline_rl.algorithms.discrete_cql.networks import QuantileMLP, QuantileNatureCNN
from offline_rl.algorithms.discrete_cql.quantile_loss import quantile_huber_loss
from offline_rl.algorithms.discrete_cql.staging import SourceBatches, StagedTransitions, stage_transitions
from offline_rl.algorithms.staging import is_prioritized
from offline_rl.algorithms.value_check import StartValues, discounted_returns
from offline_rl.core.errors import OfflineRLError
from offline_rl.data.transitions import source_of_index, source_sizes

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class DiscreteCQLTrainingStats(TrainingStats):
    """Per-update figures, logged to TensorBoard by Tianshou's logger; this declaration is the list."""

    loss: float
    qr_loss: float
    cql_loss: float
    q_data: float
    q_mean: float
    q_max: float


def nstep_returns(
    buffer: ReplayBuffer, indices: np.ndarray, n_step: int, gamma: float, *, clip_rewards: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(returns, bootstrap weights, index of each window's last step) for n-step TD targets.

    The window starting at each index walks forward with `buffer.next`, and stops after the first
    step flagged `done` (terminated or truncated), or at the newest step of a (sub-)buffer whose
    episode is still running (where `buffer.next(i) == i` would repeat it): rewards of the next
    episode never leak in, and none is counted twice. `clip_rewards` clips each reward to [-1, 1]
    before it is summed, as Dopamine's agents do.
    """
    unfinished = np.asarray(buffer.unfinished_index())
    returns = np.zeros(len(indices), dtype=np.float64)
    discount = np.ones(len(indices), dtype=np.float64)
    current = np.asarray(indices).copy()
    last = current.copy()
    active = np.ones(len(indices), dtype=bool)
    for step in range(n_step):
        rewards = np.asarray(buffer.rew[current], dtype=np.float64)
        if clip_rewards:
            rewards = np.clip(rewards, -1.0, 1.0)
        returns += np.where(active, discount * rewards, 0.0)
        last = np.where(active, current, last)
        discount = np.where(active, discount * gamma, discount)
        ends = np.asarray(buffer.done[current], dtype=bool) | np.isin(current, unfinished)
        still = active & ~ends
        if step + 1 < n_step:
            current = np.where(still, buffer.next(current), current)
        active = still
    bootstrap = discount * (1.0 - np.asarray(buffer.terminated[last], dtype=np.float64))
    return returns, bootstrap, last


def clips_rewards(config: DiscreteCQLConfig, observation_space: gym.Space | None) -> bool:
    """`reward_clip`, or by default the Atari protocol for image observations (DQN-Replay's rewards
    are unclipped in the data) and the rewards as they are for vector tasks such as CartPole."""
    if config.reward_clip is not None:
        return config.reward_clip
    return observation_space is not None and len(observation_space.shape or ()) == 3


class CQLQRDQN(CountedOfflineAlgorithm[QRDQNPolicy]):
    """CQL for discrete actions on a QR-DQN model; evaluated by Tianshou collectors via `QRDQNPolicy`.

    Built from a config with `CQLQRDQN.build(...)`, or from Tianshou-style parts with the drop-in
    `offline_rl.DiscreteCQL`; without an optimiser factory, Adam runs at the config's rate.
    """

    STATS = DiscreteCQLTrainingStats

    def __init__(
        self, *, policy: QRDQNPolicy, config: DiscreteCQLConfig, optim: OptimizerFactory | None = None
    ) -> None:
        super().__init__(policy=policy)
        config.validate()
        self.config = config
        self.model = policy.model
        self.model_target = copy.deepcopy(self.model).requires_grad_(False) if config.target_update_freq else None
        space = policy.action_space
        assert isinstance(space, gym.spaces.Discrete)
        self.num_actions = int(space.n)
        self.clip_rewards = clips_rewards(config, policy.observation_space)
        self.compile_update = False  # the capture alone: torch.compile of the CNN's losses has no speed check
        self.dataset_on_device: bool | None = None
        """Where the staged dataset lives: None (the default) on the device when it fits in GPU memory,
        otherwise in host memory with batches copied one update ahead (`host_feed`); True or False force it."""
        self._feed: HostBatchFeed | None = None
        self._optim = self.add_optimizer(self.model, optim, lr=config.lr, eps=config.adam_eps)

    @classmethod
    def build(
        cls,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DiscreteCQLConfig | None = None,
        *,
        device: str | torch.device = "cpu",
    ) -> CQLQRDQN:
        """QR-DQN model (Nature CNN for image stacks, MLP otherwise), QRDQNPolicy and algorithm."""

        config = config or DiscreteCQLConfig()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(f"discrete CQL needs a Discrete action space, got {action_space}")
        model = quantile_model(observation_space, action_space, config)
        policy = QRDQNPolicy(
            model=model,
            action_space=action_space,
            observation_space=observation_space,
            eps_inference=config.eps_test,
        )
        return CQLQRDQN(policy=policy, config=config).to(device)

    @torch.no_grad()
    def start_values(self, start_obs: np.ndarray, rewards: Sequence[np.ndarray]) -> StartValues:
        """Per evaluation episode, what the critics expect its discounted return to be and what it was
        (`offline_rl.algorithms.value_check`): max_a of the mean over quantiles at its first observation (the
        greedy action, which the evaluation plays but for its ε), and Σ_t γ^t r_t of the rewards as
        the learner sees them: clipped to [-1, 1] where it clips (Atari), so both are in its units."""
        q = self.model(np.asarray(start_obs))[0].mean(dim=2).amax(dim=1).double().cpu().numpy()
        learned = [np.clip(episode, -1.0, 1.0) for episode in rewards] if self.clip_rewards else list(rewards)
        returns, _ = discounted_returns(learned, self.config.gamma)
        return StartValues(q, returns, "rewards clipped to [-1, 1], as learned" if self.clip_rewards else "")

    def stage(self, buffer: ReplayBuffer) -> StagedTransitions | str:
        """Every sampleable transition's n-step target and frame rows, on the device (see `staging`)
        or, when they do not fit there, in host memory (see `host_feed`); or why neither is possible
        (the update then samples from the buffer on the host)."""
        self._feed = None  # it holds the previous staging
        if is_prioritized(buffer):
            staged: StagedTransitions | str = "a prioritized buffer (its priorities are sampled on the host)"
        else:
            indices = np.asarray(buffer.sample_indices(0))
            cfg = self.config
            returns, bootstrap, last = nstep_returns(
                buffer, indices, cfg.n_step, cfg.gamma, clip_rewards=self.clip_rewards
            )
            staged = stage_transitions(
                buffer, returns, bootstrap, indices, last, self.device, on_device=self.dataset_on_device
            )
            sources = source_of_index(buffer, indices) if cfg.batch_per_file else None
            if isinstance(staged, StagedTransitions) and sources is not None:
                staged.sources = SourceBatches.of(sources, staged.act.device)
        if isinstance(staged, str) and self.device.type == "cuda" and self.capture is not False:
            log.info(f"updates: eager, sampled on the host ({staged})")  # instead of captured
        elif isinstance(staged, StagedTransitions) and staged.host_reason and self.device.type == "cuda":
            log.info(f"dataset: in host memory, each batch copied to the GPU one update ahead ({staged.host_reason})")
        return staged

    def _host_feed(self, staged: StagedTransitions, batch_size: int) -> HostBatchFeed:
        """The feed of host-resident `staged` for this batch size (made afresh when either changes)."""
        feed = self._feed
        if feed is None or feed.host is not staged or feed.batch_size != batch_size:
            seed = int(torch.randint(2**62, (1,)))  # from torch's seed, so runs repeat
            self._feed = None  # release the old feed's buffers first
            feed = self._feed = HostBatchFeed(staged, batch_size, self.device, torch.Generator().manual_seed(seed))
        return feed

    def capture_blocker(self) -> str | None:
        if isinstance(self._staged, str):
            return self._staged
        return super().capture_blocker()

    def update_from_buffer(self, buffer: ReplayBuffer, sample_size: int | None) -> DiscreteCQLTrainingStats:
        """One step on a batch drawn on the device from the staged transitions; from a prioritized
        (or otherwise unstageable) buffer, drawn on the host with n-step targets built per batch."""
        batch_size = sample_size or len(buffer)
        staged = self.staged(buffer)
        if isinstance(staged, StagedTransitions) and staged.host_reason is not None:
            feed = self._host_feed(staged, batch_size)
            feed.advance()
            # The step reads the feed's fixed `inputs`; holding the feed keeps its id unique while recorded.
            if self.seed_batch is not None:
                raise OfflineRLError(f"--num-seeds: batches drawn on the host ({staged.host_reason})")
            stats = self.sampled_step(lambda _size: feed.inputs, batch_size, id(feed))
            feed.prefetch()  # while the device runs this update
        elif isinstance(staged, StagedTransitions):
            stats = self.sampled_step(lambda rows: staged.sample_batches(rows, batch_size), batch_size, id(staged))
        elif self.config.batch_per_file and source_sizes(buffer) is not None:
            raise OfflineRLError(f"--batch-per-file: drawing a file at a time needs staged transitions, not {staged}")
        elif is_prioritized(buffer):
            stats = self.prioritized_step(buffer, batch_size, lambda indices: self._batch_at(buffer, indices))
        elif self.seed_batch is not None:
            raise OfflineRLError(f"--num-seeds: this buffer cannot be staged on the device ({staged})")
        else:
            indices = buffer.sample_indices(batch_size)
            stats = self.run_step(lambda: self.gradient_step(self._batch_at(buffer, indices)), None, eager=True)
        if self.model_target is not None and self._host_updates % self.config.target_update_freq == 0:
            with torch.no_grad():
                self.model_target.load_state_dict(self.model.state_dict())
        return stats

    def _update_with_batch(self, batch: Any) -> DiscreteCQLTrainingStats:  # pragma: no cover - update() is used
        raise NotImplementedError("CQLQRDQN samples its own n-step windows; call update(buffer, batch_size)")

    def _batch_at(self, buffer: ReplayBuffer, indices: np.ndarray) -> tuple[Any, ...]:
        """The batch of the n-step windows starting at `indices`, built on the host from the buffer."""
        cfg = self.config
        returns, bootstrap, last = nstep_returns(buffer, indices, cfg.n_step, cfg.gamma, clip_rewards=self.clip_rewards)
        return (
            buffer[indices].obs,
            torch.as_tensor(np.asarray(buffer.act[indices]), dtype=torch.long, device=self.device),
            torch.as_tensor(returns, dtype=torch.float32, device=self.device),
            torch.as_tensor(bootstrap, dtype=torch.float32, device=self.device),
            buffer[last].obs_next,
        )

    def apply_gradients(self) -> None:
        self._optim.step()

    def compute_losses(self, batch: Sequence[Any], *, weight: torch.Tensor | None = None) -> Losses:
        """Quantile-Huber TD loss plus the conservative term, and figures (see module docstring), on a
        batch (observations, actions, n-step returns, bootstrap weights, next observations)."""
        obs, act, returns, bootstrap, obs_next = batch
        cfg = self.config
        rows = torch.arange(act.shape[0], device=act.device)
        theta, _ = self.model(obs)  # (B, A, Nq)
        theta_data = theta[rows, act]
        with torch.no_grad():
            target_model = self.model if self.model_target is None else self.model_target
            next_target, _ = target_model(obs_next)
            if cfg.double_q and self.model_target is not None:
                next_online, _ = self.model(obs_next)
                best = next_online.mean(dim=2).argmax(dim=1)
            else:
                best = next_target.mean(dim=2).argmax(dim=1)
            target = returns.unsqueeze(1) + bootstrap.unsqueeze(1) * next_target[rows, best]
        per_transition, priority = quantile_huber_loss(theta_data, target, cfg.kappa)
        qr_loss = (per_transition if weight is None else per_transition * weight).mean()
        q_values = theta.mean(dim=2)
        q_data = q_values[rows, act]
        cql_loss = (torch.logsumexp(q_values, dim=1) - q_data).mean()
        loss = qr_loss + cfg.cql_weight * cql_loss
        figures = {
            "loss": loss,
            "qr_loss": qr_loss,
            "cql_loss": cql_loss,
            "q_data": q_data.mean(),
            "q_mean": q_values.mean(),
            "q_max": q_values.max(dim=1).values.mean(),
        }
        return Losses(
            parts={"loss": loss},
            figures={name: value.detach() for name, value in figures.items()},
            priority=priority.detach(),
        )


def quantile_model(observation_space: gym.Space, action_space: gym.Space, config: DiscreteCQLConfig) -> torch.nn.Module:
    """The QR-DQN network: the Nature CNN for image stacks, an MLP otherwise."""
    shape = tuple(observation_space.shape or ())
    num_actions = int(action_space.n)  # type: ignore[attr-defined]
    if len(shape) == 3:
        return QuantileNatureCNN(
            shape, num_actions, config.num_quantiles, scale_obs=config.scale_obs, variant=config.cnn
        )
    return QuantileMLP(int(np.prod(shape)), num_actions, config.num_quantiles, config.hidden_sizes)


def training_bytes(
    observation_space: gym.Space,
    action_space: gym.Space,
    config: DiscreteCQLConfig,
    batch_size: int,
    *,
    cnn_flag: str | None = None,
) -> dict[str, int]:
    """An estimate of the memory an update takes, by the flag and value that set each part (as
    `offline_rl.runs.training.require_training_memory` takes it): the network with its gradients, Adam's
    two moments and its target copy, and the tensors a batch's observations and next observations
    leave on the way through it for the backward pass. Measured on torch's meta device: the network
    built and run on a batch of that size without any memory, each tensor its operations make counted."""
    shape = tuple(observation_space.shape or ())
    sizes: list[int] = []

    class Counted(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            output = func(*args, **(kwargs or {}))
            if isinstance(output, torch.Tensor):
                sizes.append(output.numel())
            return output

    with torch.device("meta"):
        model = quantile_model(observation_space, action_space, config)
        batch = torch.zeros((batch_size, *shape), dtype=torch.uint8 if len(shape) == 3 else torch.float32)
        with Counted():
            model(batch)
    networks = 4 * 5 * sum(parameter.numel() for parameter in model.parameters())  # float32
    if len(shape) == 3:  # `cnn_flag`: what a program without --cnn names instead
        layers = cnn_flag or f"--cnn {config.cnn}"
    else:
        layers = "--hidden-sizes " + " ".join(map(str, config.hidden_sizes))
    # float32: the online pass's tensors and their gradients, and the target's pass over the next observations
    return {layers: networks, f"--batch-size {batch_size}": 4 * 3 * sum(sizes)}
