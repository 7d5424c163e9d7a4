"""Behaviour cloning's hyper-parameters: every field is a flag of `examples/d4rl_bc.py`, a preset key
and a checkpoint entry (see `offline_rl.core.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from offline_rl.algorithms.continuous_settings import (
    clip_dataset_actions_setting,
    mlp_parameters,
    normalize_obs_setting,
)
from offline_rl.core.settings import check_ranges, setting

GROUP = "BC"


@dataclass
class BCConfig:
    """Behaviour cloning: a deterministic actor regressed onto the data's actions, mean (π(s) − a)².

    With `top_fraction` below 1 it clones only the best episodes (CORL's BC-x%: the episodes ranked by
    their undiscounted return, the top ⌊x·episodes⌋ of them, at least one). Defaults are CORL's
    (`algorithms/offline/any_percent_bc.py`): a 2×256 actor with PyTorch's initialisation at 3e-4,
    normalised observations, every episode; BC-10% is `--top-fraction 0.1`.
    """

    FLAG_GROUP: ClassVar[str] = GROUP
    # BC learns no values: the rewards only rank episodes, unscaled.
    normalize_reward: ClassVar[bool] = False
    reward_scale: ClassVar[float] = 1.0
    reward_bias: ClassVar[float] = 0.0
    gamma: ClassVar[float] = 1.0

    hidden_sizes: list[int] = setting([256, 256], "hidden layer widths of the actor", minimum=1, group=GROUP)
    actor_lr: float = setting(3e-4, "actor learning rate", above=0, group=GROUP)
    top_fraction: float = setting(
        1.0,
        "clone the best this fraction of episodes, by return (CORL's BC-10%: 0.1)",
        above=0,
        maximum=1,
        group=GROUP,
    )
    normalize_obs: bool = normalize_obs_setting(True, GROUP)
    clip_dataset_actions: bool = clip_dataset_actions_setting(GROUP)

    def training_bytes(self, obs_dim: int, act_dim: int, batch_size: int) -> dict[str, int]:
        """A lower estimate of an update's memory: the actor with its gradient and Adam's moments, and
        the activations of a batch."""
        networks = 4 * 4 * mlp_parameters([obs_dim, *self.hidden_sizes, act_dim])
        widths = " ".join(map(str, self.hidden_sizes))
        activations = 4 * 2 * batch_size * sum(self.hidden_sizes)
        return {f"--hidden-sizes {widths}": networks, f"--batch-size {batch_size}": activations}

    def validate(self) -> None:
        """One-line errors naming the flag for settings that cannot work."""
        check_ranges(self)
