"""ReBRAC hyper-parameters: every field is a flag of `examples/d4rl_rebrac.py`, a preset key and a
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

NETWORKS = "ReBRAC: networks and optimisation"
TD3 = "ReBRAC: TD3's target and delays"
PENALTIES = "ReBRAC: behaviour penalties and data"


@dataclass
class ReBRACConfig:
    """Everything that defines the ReBRAC update (Tarasov et al. 2023, arXiv:2305.09836): TD3+BC with
    the behaviour penalty in the actor (β_actor) and in the critics' target (β_critic) weighted
    separately, layer-normalised critics, deeper networks and larger batches.

    Defaults are the authors' and CORL's (`algorithms/offline/rebrac.py`'s `Config`): 3×256 networks
    (the EDAC paper's initialisation), layer norm in the critics, both at 1e-3, β_actor = β_critic = 1,
    Q normalised in the actor's loss, raw observations and rewards; batch 1024 is the program's
    default. The per-dataset penalties, rates and discounts are in `configs/rebrac/`.
    """

    FLAG_GROUP: ClassVar[str] = "ReBRAC"

    hidden_sizes: list[int] = setting(
        [256, 256, 256], "hidden layer widths of the actor and of each critic", minimum=1, group=NETWORKS
    )
    critic_layer_norm: bool = setting(
        True, "layer-normalise each critic hidden layer's output", aliases=("--critic-ln",), group=NETWORKS
    )
    actor_lr: float = setting(1e-3, "actor learning rate", aliases=("--actor-learning-rate",), above=0, group=NETWORKS)
    critic_lr: float = setting(
        1e-3, "critic learning rate", aliases=("--critic-learning-rate",), above=0, group=NETWORKS
    )
    gamma: float = gamma_setting(NETWORKS)
    tau: float = tau_setting(NETWORKS)
    policy_noise: float = setting(
        0.2, "standard deviation of the noise on the target policy's action", minimum=0, group=TD3
    )
    noise_clip: float = setting(0.5, "the target policy's noise is clipped to ±this", minimum=0, group=TD3)
    policy_freq: int = setting(2, "critic updates per actor and target update", minimum=1, group=TD3)
    actor_bc_weight: float = setting(
        1.0, "β_actor, the weight of ‖π(s) − a‖² in the actor's loss", aliases=("--actor-bc-coef",),
        minimum=0, group=PENALTIES,
    )  # fmt: skip
    critic_bc_weight: float = setting(
        1.0, "β_critic, the weight of ‖ã′ − a′‖² subtracted from the critics' target",
        aliases=("--critic-bc-coef",), minimum=0, group=PENALTIES,
    )  # fmt: skip
    normalize_q: bool = setting(True, "divide the actor's Q term by mean |Q| (held constant)", group=PENALTIES)
    normalize_obs: bool = normalize_obs_setting(False, PENALTIES)
    normalize_reward: bool = normalize_reward_setting(PENALTIES)
    reward_scale: float = reward_scale_setting(PENALTIES)
    reward_bias: float = reward_bias_setting(PENALTIES)
    clip_dataset_actions: bool = clip_dataset_actions_setting(PENALTIES)

    def training_bytes(self, obs_dim: int, act_dim: int, batch_size: int) -> dict[str, int]:
        """A lower estimate of an update's memory, by the flag that sets each part."""
        return actor_critic_bytes(obs_dim, act_dim, batch_size, self.hidden_sizes, passes=5)

    def validate(self) -> None:
        """One-line errors naming the flag for settings that cannot work."""
        check_ranges(self)
