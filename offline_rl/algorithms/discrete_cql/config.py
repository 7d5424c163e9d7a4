"""Discrete CQL (QR-DQN head) hyper-parameters: every field is a flag of `examples/atari_cql.py`, a
preset key and a checkpoint entry (see `offline_rl.core.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from offline_rl.core.settings import check_ranges, setting

CNN_VARIANTS = ("nature", "dopamine")
"""How the Nature CNN's layers are built (`networks.QuantileNatureCNN`): as Tianshou and most PyTorch
code build them, or as Dopamine (TensorFlow) built them for the DQN Replay agents and the CQL paper's
Atari agent."""


@dataclass
class DiscreteCQLConfig:
    """Everything that defines the discrete CQL update and its network.

    Loss per batch: quantile-Huber TD loss + w·mean(logsumexp_a Q(s, a) − Q(s, a_data)), with
    w = `cql_weight` and Q the mean over quantiles. Defaults match Tianshou's classic Atari CQL
    example. The CQL authors' Atari settings (`lr 5e-5, adam_eps 3.125e-4, target_update_freq 2000`,
    Dopamine's network, w = 4 for 1% of the data or 1 for 10%) are `configs/cql_authors/atari-*.yaml`.
    """

    FLAG_GROUP: ClassVar[str] = "discrete CQL"

    num_quantiles: int = setting(200, "quantiles of the QR-DQN head", minimum=2)
    gamma: float = setting(0.99, "discount factor", minimum=0, maximum=1)
    n_step: int = setting(1, "n of the n-step TD target (windows stop at episode ends)", minimum=1)
    target_update_freq: int = setting(
        500, "updates between hard target-network copies (0: no target network)", minimum=0
    )
    cql_weight: float = setting(10.0, "weight w of the conservative term", aliases=("--min-q-weight",), minimum=0)
    lr: float = setting(1e-4, "Adam learning rate", above=0)
    adam_eps: float = setting(1e-8, "Adam's ε", above=0)
    double_q: bool = setting(False, "pick the target's greedy action with the online network")
    kappa: float = setting(1.0, "κ of the quantile-Huber loss", above=0)
    reward_clip: bool | None = setting(
        None,
        "clip each reward to [-1, 1] in the learner, not the data (none: on for images, off for vectors)",
        details=(
            "As Dopamine, DQN Replay's agents and the CQL paper's Atari agent do; the default clips "
            "for image observations (Atari) and keeps vector tasks' rewards as they are."
        ),
    )
    hidden_sizes: list[int] = setting([128, 128], "MLP hidden layers (vector observations only)", minimum=1)
    cnn: str = setting(
        "nature",
        ("the Nature CNN as Tianshou builds it (nature) or as Dopamine and the CQL authors' Atari code do (dopamine)"),
        details=(
            "nature: unpadded convolutions and torch's initialisation. dopamine: TensorFlow's 'same' "
            "padding, 7744 features into the 512-unit layer instead of 3136, and Dopamine's "
            "initialisation."
        ),
        choices=CNN_VARIANTS,
    )
    scale_obs: bool = setting(True, "divide uint8 frames by 255 inside the network (image observations)")
    batch_per_file: bool = setting(
        False,
        "draw each batch from one --load-buffer-name file, picked uniformly per batch (batch_rl's way)",
        details=(
            "As batch_rl's FixedReplayBuffer (the CQL authors' Atari code) draws each batch from one "
            "DQN Replay checkpoint; off: each batch from all transitions alike."
        ),
    )
    eps_test: float = setting(0.001, "ε of the ε-greedy evaluation policy", minimum=0, maximum=1)

    def validate(self) -> None:
        """One-line errors naming the flag for settings that cannot work."""
        check_ranges(self)
