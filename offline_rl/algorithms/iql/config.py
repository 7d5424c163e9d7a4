"""IQL hyper-parameters: every field is a flag of `examples/d4rl_iql.py`, a preset key and a checkpoint
entry (see `offline_rl.core.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from offline_rl.algorithms.continuous_settings import (
    clip_dataset_actions_setting,
    gamma_setting,
    mlp_parameters,
    normalize_obs_setting,
    normalize_reward_setting,
    reward_bias_setting,
    reward_scale_setting,
    tau_setting,
)
from offline_rl.core.settings import check_ranges, setting

NETWORKS = "IQL: networks and optimisation"
IQL = "IQL: expectile and advantage weights"
DATA = "IQL: data"


@dataclass
class IQLConfig:
    """Everything that defines the IQL update (Kostrikov et al. 2021, arXiv:2110.06169).

    V(s) is fitted as the τ-expectile of min_e Q̄_e(s, a) over the data's actions, the critics to
    r + γ·V(s′), and the actor by advantage-weighted regression with weights exp(β·(Q̄ − V)), clipped.

    Defaults are CORL's (`algorithms/offline/iql.py`, after the authors): 2×256 networks with PyTorch's
    initialisation, all three at 3e-4, τ = 0.7, β = 3, weights clipped at 100, the Gaussian actor, the
    actor's rate annealed to 0 along a cosine over the run, normalised observations, raw rewards; the
    files under `configs/iql/` are CORL's per-dataset values.
    """

    FLAG_GROUP: ClassVar[str] = "IQL"

    hidden_sizes: list[int] = setting(
        [256, 256], "hidden layer widths of the actor, each critic and the value network", minimum=1, group=NETWORKS
    )
    actor_lr: float = setting(3e-4, "actor learning rate (the start of its cosine schedule)", above=0, group=NETWORKS)
    critic_lr: float = setting(3e-4, "critic learning rate", above=0, group=NETWORKS)
    value_lr: float = setting(3e-4, "value network learning rate", above=0, group=NETWORKS)
    actor_schedule: str = setting(
        "cosine",
        "the actor's learning rate: cosine (annealed to 0 over --schedule-updates, CORL's) or constant",
        choices=("cosine", "constant"),
        group=NETWORKS,
    )
    schedule_updates: int | None = setting(
        None,
        "updates the cosine schedule spans (none: the run's --epoch × --step-per-epoch, CORL's max_timesteps)",
        minimum=1,
        group=NETWORKS,
    )
    gamma: float = gamma_setting(NETWORKS)
    tau: float = tau_setting(NETWORKS)
    expectile: float = setting(
        0.7, "τ of the value network's expectile loss (0.5: the mean; towards 1: the maximum)", above=0, below=1,
        aliases=("--iql-tau",), group=IQL,
    )  # fmt: skip
    temperature: float = setting(
        3.0, "β, the inverse temperature of the advantage weights exp(β·A) (0: behaviour cloning)",
        aliases=("--beta",), minimum=0, group=IQL,
    )  # fmt: skip
    max_weight: float = setting(100.0, "the advantage weights are clipped at this", above=0, group=IQL)
    deterministic_actor: bool = setting(
        False, "a deterministic actor regressed by squared error instead of the Gaussian's log-density",
        aliases=("--iql-deterministic",), group=IQL,
    )  # fmt: skip
    normalize_obs: bool = normalize_obs_setting(True, DATA)
    normalize_reward: bool = normalize_reward_setting(DATA)
    reward_scale: float = reward_scale_setting(DATA)
    reward_bias: float = reward_bias_setting(DATA)
    clip_dataset_actions: bool = clip_dataset_actions_setting(DATA)

    def training_bytes(self, obs_dim: int, act_dim: int, batch_size: int) -> dict[str, int]:
        """A lower estimate of an update's memory by the flag that sets each part: the three networks
        (the critics' targets too) with gradients and Adam's moments, and the activations of a batch."""
        actor = mlp_parameters([obs_dim, *self.hidden_sizes, act_dim])
        critic = mlp_parameters([obs_dim + act_dim, *self.hidden_sizes, 1])
        value = mlp_parameters([obs_dim, *self.hidden_sizes, 1])
        networks = 4 * (4 * actor + 5 * 2 * critic + 4 * value)
        activations = 4 * 2 * batch_size * 6 * sum(self.hidden_sizes)
        widths = " ".join(map(str, self.hidden_sizes))
        return {f"--hidden-sizes {widths}": networks, f"--batch-size {batch_size}": activations}

    def validate(self) -> None:
        """One-line errors naming the flag for settings that cannot work."""
        check_ranges(self)
