"""Tianshou 2.0.1's `CQL`, `DiscreteCQL` and `TD3BC` constructors on offline_rl's updates.

A Tianshou user swaps the import line (`from offline_rl import CQL`) and keeps the rest of the
script: the same SACPolicy, QRDQNPolicy or ContinuousDeterministicPolicy, networks, optimiser
factories, `AutoAlpha` and argument names. The arguments become a `CQLSACConfig` /
`DiscreteCQLConfig` / `TD3BCConfig` (saved in checkpoints as usual), and training runs the same core
as `CQLSAC.build` / `CQLQRDQN.build` / `offline_rl.algorithms.td3_bc.TD3BC.build`.

Where Tianshou 2.0.1's own CQL deviates from the paper, the drop-in follows the paper and says so:
random actions are uniform on the policy's box (Tianshou draws them all at +1), the logsumexp runs
over the 3N sampled actions of each state, α′ also learns on CUDA, time-outs bootstrap (Tianshou
stops at `done`), and Cal-QL floors only the policy actions' values, before the density correction,
as the Cal-QL authors do. Where Tianshou 2.0.1's TD3BC deviates from the authors' code, the drop-in
follows the authors: the smoothed target action is clipped to the actor's bounds, the actor steps on
updates 2, 4, 6, ... (Tianshou's on 1, 3, 5, ...), after the critics' step, and n-step returns bootstrap
at a time-out.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import torch
from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
from tianshou.algorithm.modelfree.sac import Alpha, AutoAlpha, SACPolicy
from tianshou.algorithm.optim import OptimizerFactory

from offline_rl.algorithms.cql_sac.algorithm import CQLSAC
from offline_rl.algorithms.cql_sac.config import CQLSACConfig
from offline_rl.algorithms.discrete_cql.algorithm import CQLQRDQN
from offline_rl.algorithms.discrete_cql.config import DiscreteCQLConfig
from offline_rl.algorithms.networks import CriticModules
from offline_rl.algorithms.td3_bc.algorithm import TD3BC as TD3BCOnEngine
from offline_rl.algorithms.td3_bc.config import TD3BCConfig
from offline_rl.core.compat import auto_alpha_parts


def _learning_rate(factory: OptimizerFactory, default: float) -> float:
    """The factory's rate, for the record in the saved config (the factory builds the optimiser)."""
    lr = getattr(factory, "lr", None)
    if lr is None:
        lr = getattr(factory, "kwargs", {}).get("lr", default)
    return float(lr)


def _device_of(module: torch.nn.Module) -> torch.device:
    parameter = next(module.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


class CQL(CQLSAC):
    """Conservative Q-Learning on SAC, built as Tianshou 2.0.1's `tianshou.algorithm.CQL` is.

    Every argument keeps Tianshou's name, default and meaning, with these notes:
    `lagrange_threshold` is the authors' threshold on w·gap, so it becomes
    `target_action_gap = lagrange_threshold / cql_weight`; `alpha_min`/`alpha_max` clamp α′;
    `max_grad_norm` clips each critic's gradient; `calibrated` (Tianshou's default, True) is Cal-QL
    with Monte-Carlo returns computed from the buffer's episodes. `min_action`/`max_action` are
    accepted and not needed: uniform actions are drawn on the policy's own box, where the critic
    sees dataset and policy actions (Tianshou's buffers hold actions in that box).
    """

    def __init__(
        self,
        *,
        policy: SACPolicy,
        policy_optim: OptimizerFactory,
        critic: torch.nn.Module,
        critic_optim: OptimizerFactory,
        critic2: torch.nn.Module | None = None,
        critic2_optim: OptimizerFactory | None = None,
        cql_alpha_lr: float = 1e-4,
        cql_weight: float = 1.0,
        tau: float = 0.005,
        gamma: float = 0.99,
        alpha: float | Alpha = 0.2,
        temperature: float = 1.0,
        with_lagrange: bool = True,
        lagrange_threshold: float = 10.0,
        min_action: float = -1.0,
        max_action: float = 1.0,
        num_repeat_actions: int = 10,
        alpha_min: float = 0.0,
        alpha_max: float = 1e6,
        max_grad_norm: float | None = 1.0,
        calibrated: bool = True,
    ) -> None:
        space = policy.action_space
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"CQL needs a Box action space, got {space}")
        if with_lagrange and cql_weight <= 0:
            raise ValueError("with_lagrange needs cql_weight > 0 (the threshold is on cql_weight × gap)")
        tuner = alpha if isinstance(alpha, AutoAlpha) else None
        config = CQLSACConfig(
            num_critics=2,
            normalize_obs=False,
            actor_lr=_learning_rate(policy_optim, 1e-3),
            critic_lr=_learning_rate(critic_optim, 1e-3),
            gamma=gamma,
            tau=tau,
            alpha=float(alpha.value if isinstance(alpha, Alpha) else alpha),
            auto_alpha=tuner is not None,
            cql_weight=cql_weight,
            cql_n_actions=num_repeat_actions,
            temperature=temperature,
            with_lagrange=with_lagrange,
            target_action_gap=lagrange_threshold / cql_weight if cql_weight > 0 else 0.0,
            lagrange_lr=cql_alpha_lr,
            lagrange_multiplier_min=alpha_min,
            lagrange_multiplier_max=alpha_max,
            backup_entropy=True,  # Tianshou's target subtracts α·log π(a′|s′)
            calibrated=calibrated,
            max_grad_norm=max_grad_norm,
        )
        if tuner is not None:
            config.target_entropy = auto_alpha_parts(tuner)[2]  # for the record: the tuner's own is used
        act_dim = int(np.prod(space.shape))
        critics = CriticModules([critic, critic2 if critic2 is not None else copy.deepcopy(critic)], act_dim)
        super().__init__(
            policy=policy,
            critic=critics,
            config=config,
            actor_optim=policy_optim,
            critic_optims=[critic_optim, critic2_optim or critic_optim],
            entropy_tuner=tuner,
        )
        self.to(_device_of(policy))


class DiscreteCQL(CQLQRDQN):
    """Discrete CQL on a QR-DQN model, built as Tianshou 2.0.1's `tianshou.algorithm.DiscreteCQL` is.

    As in Tianshou, `target_update_freq=0` means no target network, and with one the greedy next
    action comes from the online network (double Q-learning). `estimation_step` is accepted as the
    pre-2.0 name of `n_step_return_horizon`.
    """

    def __init__(
        self,
        *,
        policy: QRDQNPolicy,
        optim: OptimizerFactory,
        min_q_weight: float = 10.0,
        gamma: float = 0.99,
        num_quantiles: int = 200,
        n_step_return_horizon: int = 1,
        target_update_freq: int = 0,
        estimation_step: int | None = None,
    ) -> None:
        config = DiscreteCQLConfig(
            num_quantiles=num_quantiles,
            gamma=gamma,
            n_step=estimation_step if estimation_step is not None else n_step_return_horizon,
            target_update_freq=target_update_freq,
            cql_weight=min_q_weight,
            lr=_learning_rate(optim, 1e-3),
            double_q=True,
        )
        super().__init__(policy=policy, config=config, optim=optim)
        self.to(_device_of(policy))


class TianshouDeterministicActor(torch.nn.Module):
    """A Tianshou deterministic actor (`obs -> (action, state)`, as `ContinuousActorDeterministic`) behind
    `offline_rl.algorithms.actors.DeterministicActor`'s interface: `action` is its action, `net` the
    actor itself; observations are used as given (no normaliser)."""

    def __init__(self, actor: torch.nn.Module) -> None:
        super().__init__()
        self.net = actor
        self.normalizer = None

    def action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)[0]


class TD3BC(TD3BCOnEngine):
    """TD3+BC, built as Tianshou 2.0.1's `tianshou.algorithm.TD3BC` is.

    Every argument keeps Tianshou's name, default and meaning: `update_actor_freq` is `policy_freq`,
    `n_step_return_horizon` the n-step returns (staged once; episodes never bridged). Actions stay in
    the actor's own units, which the buffer's actions share (a Tianshou collector stores them so).
    """

    def __init__(
        self,
        *,
        policy: ContinuousDeterministicPolicy,
        policy_optim: OptimizerFactory,
        critic: torch.nn.Module,
        critic_optim: OptimizerFactory,
        critic2: torch.nn.Module | None = None,
        critic2_optim: OptimizerFactory | None = None,
        tau: float = 0.005,
        gamma: float = 0.99,
        policy_noise: float = 0.2,
        update_actor_freq: int = 2,
        noise_clip: float = 0.5,
        alpha: float = 2.5,
        n_step_return_horizon: int = 1,
    ) -> None:
        space = policy.action_space
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"TD3BC needs a Box action space, got {space}")
        config = TD3BCConfig(
            actor_lr=_learning_rate(policy_optim, 1e-3),
            critic_lr=_learning_rate(critic_optim, 1e-3),
            tau=tau,
            gamma=gamma,
            policy_noise=policy_noise,
            noise_clip=noise_clip,
            policy_freq=update_actor_freq,
            n_step=n_step_return_horizon,
            alpha=alpha,
            normalize_obs=False,
        )
        act_dim = int(np.prod(space.shape))
        critics = CriticModules([critic, critic2 if critic2 is not None else copy.deepcopy(critic)], act_dim)
        super().__init__(
            policy=policy,  # type: ignore[arg-type]
            critic=critics,
            config=config,
            actor_optim=policy_optim,
            critic_optims=[critic_optim, critic2_optim or critic_optim],
            actor=TianshouDeterministicActor(policy.actor),  # type: ignore[arg-type]
        )
        self.action_limit = float(getattr(policy.actor, "max_action", 1.0))
        self.to(_device_of(policy))
