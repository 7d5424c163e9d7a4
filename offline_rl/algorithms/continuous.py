"""The engine's side for continuous (Box) actions, shared by the algorithms that learn from
(s, a, r, s′) transitions in the policy's [-1, 1] box.

Such an algorithm keeps its env's action bounds (`action_low`, `action_high` buffers), an observation
normaliser (or None) and a config with the data settings (`clip_dataset_actions`, `normalize_obs`,
`normalize_reward`, `reward_scale`, `reward_bias`, `gamma`, declared through
`offline_rl.algorithms.continuous_settings`; CQL-SAC's also `reward_noise_std` and `calibrated`); this
class stages its data (`offline_rl.algorithms.staging`), draws its batches on the device or by a
prioritized buffer's priorities, and takes Tianshou's generic batches too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Generic

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.optim import OptimizerFactory
from tianshou.data import ReplayBuffer

from offline_rl.algorithms.base import CountedOfflineAlgorithm, PolicyT
from offline_rl.algorithms.fine_tuning import FineTuningData
from offline_rl.algorithms.staging import (
    DeviceDataset,
    StoredTransitions,
    TransitionPreparation,
    is_prioritized,
    stage_continuous,
)
from offline_rl.algorithms.training_stats import stats_from_tensors
from offline_rl.algorithms.value_check import StartValues, values_in_env_units


class ContinuousOfflineAlgorithm(CountedOfflineAlgorithm[PolicyT], Generic[PolicyT]):
    """Staging and sampling for continuous-action data; see the module docstring."""

    NEXT_ACTIONS: ClassVar[bool] = False
    """Whether batches carry the data's action at each s′ (`TransitionsWithNextActions`)."""

    config: Any
    normalizer: torch.nn.Module | None
    fine_tuning: FineTuningData | None = None
    """While fine-tuned online: the offline data and the collected transitions each batch is drawn from."""
    action_low: torch.Tensor
    action_high: torch.Tensor

    def register_action_bounds(self, space: gym.Space) -> None:
        """Keep the env's action box (`action_low`, `action_high`) in the algorithm's state."""
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"{type(self).__name__} needs a Box action space, got {space}")
        self.register_buffer("action_low", torch.as_tensor(space.low, dtype=torch.float32).reshape(-1))
        self.register_buffer("action_high", torch.as_tensor(space.high, dtype=torch.float32).reshape(-1))

    def add_critic_optimizers(
        self, critic: Any, factories: Sequence[OptimizerFactory] | None, **adam: Any
    ) -> list[torch.optim.Optimizer]:
        """One optimiser for the critics, or one per critic module from Tianshou factories (the
        drop-ins' `critic_optims`, for a `CriticModules` of Tianshou critics)."""
        if factories is None:
            return [self.add_optimizer(critic, None, **adam)]
        members = getattr(critic, "members", None)
        if members is None or len(factories) != len(members):
            raise ValueError("critic_optims needs one optimiser factory per module of a CriticModules critic")
        return [self.add_optimizer(member, factory, **adam) for member, factory in zip(members, factories, strict=True)]

    def preparation(self) -> TransitionPreparation:
        """How raw columns become what the losses take: observations through the normaliser, actions
        into the policy's box, rewards scaled and shifted."""
        cfg = self.config
        return TransitionPreparation(
            self.normalize_obs,
            self.action_low,
            self.action_high,
            cfg.clip_dataset_actions,
            cfg.reward_scale,
            cfg.reward_bias,
        )

    def normalize_obs(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations (rows, D) as the networks see them: through the normaliser, if any."""
        return self.normalizer(obs) if self.normalizer is not None else obs

    def stage(self, buffer: ReplayBuffer) -> DeviceDataset:
        """The buffer's transitions prepared on the device; the observation normaliser is fitted on
        them once (a resumed run keeps its own)."""
        cfg = self.config
        normalizer = self.normalizer if cfg.normalize_obs else None
        unfitted = normalizer is not None and not bool(normalizer.fitted)
        return stage_continuous(
            buffer,
            self.preparation(),
            self.device,
            action_scaling=bool(self.policy.action_scaling),  # type: ignore[attr-defined]
            fit_normalizer=normalizer.fit if unfitted else None,  # type: ignore[union-attr]
            normalize_reward=cfg.normalize_reward,
            mc_gamma=cfg.gamma if getattr(cfg, "calibrated", False) else None,  # Cal-QL floors at these
            select=self.selected_rows,
            next_actions=self.NEXT_ACTIONS,
            n_step=(getattr(cfg, "n_step", 1), cfg.gamma),
            failure_reward=getattr(cfg, "calibration_failure_reward", None),
        )

    def selected_rows(self, stored: StoredTransitions) -> np.ndarray | None:
        """The rows of the buffer this algorithm learns from; None: all of them, staged without a copy
        (BC-x% keeps its best episodes)."""
        return None

    @property
    def reward_unit(self) -> float:
        """`--normalize-reward`'s factor of the staged data (1 before any is staged)."""
        staged = self._staged if self.batched_in is None else self.batched_in.stacked._staged
        return staged.reward_unit if isinstance(staged, DeviceDataset) else 1.0

    @property
    def reward_noise_scale(self) -> float:
        """`reward_noise_std` in the units of prepared rewards: the noise joins the raw reward, so it is
        scaled with it (by the reward unit and `reward_scale`)."""
        return getattr(self.config, "reward_noise_std", 0.0) * abs(self.reward_unit * self.config.reward_scale)

    @torch.no_grad()
    def start_values(
        self, start_obs: np.ndarray, rewards: Sequence[np.ndarray], *, reward_unit: float | None = None
    ) -> StartValues | None:
        """Per evaluation episode, min_e Q_e(s₀, π(s₀)) at its first observation against its discounted
        return, in the env's reward units (`offline_rl.algorithms.value_check`), for an algorithm with
        `critic`s and a deterministic actor's `action`; None for one without critics (BC)."""
        critic = getattr(self, "critic", None)
        if critic is None:
            return None
        obs = torch.as_tensor(np.asarray(start_obs), dtype=torch.float32, device=self.device)
        norm_obs = self.normalize_obs(obs.reshape(len(obs), -1))
        action = self.actor.action(norm_obs).unsqueeze(1)  # type: ignore[attr-defined]
        q = critic(norm_obs, action).amin(dim=0)[:, 0].double().cpu().numpy()
        unit = self.reward_unit if reward_unit is None else reward_unit
        cfg = self.config
        return values_in_env_units(q, rewards, cfg.gamma, unit * cfg.reward_scale, cfg.reward_bias)

    def eager_phase(self) -> bool:
        """Whether updates now run uncaptured (a warm-up phase whose losses differ)."""
        return False

    def start_fine_tuning(self, offline: ReplayBuffer, online_steps: int, mixing_ratio: float | None) -> None:
        """From now on learn online (`offline_rl.algorithms.fine_tuning`): `update` is given the replay the
        env steps are collected into, and each batch is drawn from it and the offline data `offline`
        (`mixing_ratio`: the offline share; None: both drawn alike). The losses take their online
        settings first (`go_online`)."""
        if getattr(self.config, "n_step", 1) > 1:
            raise ValueError("fine-tuning collects one-step transitions; n-step returns are for offline data")
        self.go_online()
        self._captured = {}  # the losses' settings changed: record afresh
        self.fine_tuning = FineTuningData(self.staged(offline), online_steps, mixing_ratio)

    def go_online(self) -> None:
        """What changes in the losses when fine-tuning starts; nothing by default."""

    def update_from_buffer(self, buffer: ReplayBuffer, sample_size: int | None) -> Any:
        """A batch drawn on the device from the staged dataset (from a prioritized buffer: indices drawn
        by its priorities); while fine-tuning, from the offline data and `buffer`, the online replay."""
        if self.fine_tuning is not None:
            self.fine_tuning.take_new(buffer, self.preparation())
            batch_size = sample_size or self.fine_tuning.offline.size
            draw = self.fine_tuning.sample
            return self.sampled_step(draw, batch_size, id(self.fine_tuning), eager=self.eager_phase())
        dataset = self.staged(buffer)
        batch_size = sample_size or dataset.size
        if is_prioritized(buffer):
            return self.prioritized_step(buffer, batch_size, lambda indices: dataset.take(dataset.rows_of(indices)))
        return self.sampled_step(dataset.sample, batch_size, id(dataset), eager=self.eager_phase())

    def _update_with_batch(self, batch: Any) -> Any:
        """Tianshou's generic path (a sampled Batch, actions in the policy's box as Tianshou stores
        them), kept for callers that use it directly."""
        keys = ("obs", "act", "rew", "terminated", "obs_next")
        columns = [torch.as_tensor(np.asarray(batch[key]), dtype=torch.float32, device=self.device) for key in keys]
        figures = self.gradient_step(self.preparation()(*columns, env_units=False))
        return stats_from_tensors(self.STATS, figures)
