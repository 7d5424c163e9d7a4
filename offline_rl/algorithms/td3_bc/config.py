"""TD3+BC hyper-parameters: every field is a flag of `examples/d4rl_td3_bc.py`, a preset key and a
checkpoint entry (see `offline_rl.core.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from offline_rl.algorithms.continuous_settings import (
    actor_critic_bytes,
    clip_dataset_actions_setting,
    gamma_setting,
    normalize_obs_setting,
    normalize_reward_setting,
    reward_bias_setting,
    reward_scale_setting,
    tau_setting,
)
from offline_rl.core.settings import check_ranges, setting

NETWORKS = "TD3+BC: networks and optimisation"
TD3 = "TD3+BC: TD3's target and delays"
DATA = "TD3+BC: behaviour cloning and data"


@dataclass
class TD3BCConfig:
    """Everything that defines the TD3+BC update (Fujimoto & Gu 2021, arXiv:2106.06860).

    Actor loss: −λ·Q₁(s, π(s)) + mean (π(s) − a)², λ = α / mean |Q₁(s, π(s))| (held constant).
    Critics: TD3's clipped double-Q target with target policy smoothing; the actor and the targets
    update every `policy_freq` critic updates.

    Defaults are the authors' and CORL's (`algorithms/offline/td3_bc.py`): 2×256 networks with
    PyTorch's initialisation, both at 3e-4, α = 2.5, noise 0.2 clipped at 0.5, a delay of 2,
    normalised observations, raw rewards.
    """

    FLAG_GROUP: ClassVar[str] = "TD3+BC"

    hidden_sizes: list[int] = setting(
        [256, 256], "hidden layer widths of the actor and of each critic", minimum=1, group=NETWORKS
    )
    actor_lr: float = setting(3e-4, "actor learning rate", above=0, group=NETWORKS)
    critic_lr: float = setting(3e-4, "critic learning rate", above=0, group=NETWORKS)
    gamma: float = gamma_setting(NETWORKS)
    tau: float = tau_setting(NETWORKS)
    policy_noise: float = setting(
        0.2, "standard deviation of the noise on the target policy's action", minimum=0, group=TD3
    )
    noise_clip: float = setting(0.5, "the target policy's noise is clipped to ±this", minimum=0, group=TD3)
    policy_freq: int = setting(2, "critic updates per actor and target update", minimum=1, group=TD3)
    n_step: int = setting(
        1, "n-step returns: rewards of up to this many steps, then the bootstrap (1: the authors')",
        aliases=("--n-step-return-horizon",), minimum=1, group=TD3,
    )  # fmt: skip
    alpha: float = setting(2.5, "α of λ = α / mean|Q|: the weight of Q against behaviour cloning", above=0, group=DATA)
    normalize_obs: bool = normalize_obs_setting(True, DATA)
    normalize_reward: bool = normalize_reward_setting(DATA)
    reward_scale: float = reward_scale_setting(DATA)
    reward_bias: float = reward_bias_setting(DATA)
    clip_dataset_actions: bool = clip_dataset_actions_setting(DATA)

    def training_bytes(self, obs_dim: int, act_dim: int, batch_size: int) -> dict[str, int]:
        """A lower estimate of an update's memory, by the flag that sets each part."""
        return actor_critic_bytes(obs_dim, act_dim, batch_size, self.hidden_sizes, passes=3)

    def validate(self) -> None:
        """One-line errors naming the flag for settings that cannot work."""
        check_ranges(self)
