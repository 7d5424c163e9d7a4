"""CQL-SAC hyper-parameters: every field is a flag of `examples/d4rl_cql.py`, a preset key and a
checkpoint entry (see `offline_rl.core.settings`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from offline_rl.algorithms.continuous_settings import (
    clip_dataset_actions_setting,
    gamma_setting,
    mlp_parameters,
    normalize_obs_setting,
    normalize_reward_setting,
    reward_bias_setting,
    reward_scale_setting,
)
from offline_rl.core.settings import check_ranges, require, setting

NETWORKS = "CQL-SAC: networks"
OPTIMISATION = "CQL-SAC: optimisation and entropy"
CONSERVATIVE = "CQL-SAC: conservative term"
TARGET = "CQL-SAC: TD target and data"
EVALUATION = "CQL-SAC: evaluation"


@dataclass
class CQLSACConfig:
    """Everything that defines the CQL-SAC update and how its policy acts (not the experiment around it).

    Conservative term, per critic e (Kumar et al. 2020, eq. 4, CQL(H)):

        w · clip( T·logsumexp_j (Q_e(s, a_j) − log μ(a_j)) / T  −  Q_e(s, a_data) )

    over 3N sampled actions a_j per state (N uniform, N from π(·|s), N from π(·|s′), all scored at
    s), μ their sampling density, w = `cql_weight`, N = `cql_n_actions`, T = `temperature`
    (TF-Agents' `softmax_temperature` τ is 1/T). The Lagrange variant replaces w by α′·w and tunes
    the multiplier α′ by dual ascent so the gap meets `target_action_gap`; CORL's convention,
    w·(gap − τ), applies.

    Defaults are CORL's D4RL locomotion settings (`algorithms/offline/cql.py` and its
    `configs/offline/cql/*` files): a 3×256 actor with log-std offset −1 learning at 3e-5, 3×256
    critics at 3e-4, α starting at 1 and tuned at the actor's rate, w = 10, N = 10, orthogonal
    critic initialisation, normalised observations. The files under `configs/cql/` are CORL's
    per-dataset values (AntMaze's differ).
    """

    FLAG_GROUP: ClassVar[str] = "CQL-SAC"

    # networks
    actor_hidden_sizes: list[int] = setting(
        [256, 256, 256], "actor hidden layer widths", flag="--hidden-sizes", aliases=("--actor-hidden-sizes",),
        minimum=1, group=NETWORKS,
    )  # fmt: skip
    critic_layers: int = setting(3, "hidden layers of each critic", minimum=1, group=NETWORKS)
    critic_width: int | None = setting(
        None, "critic layer width (none: the widest --hidden-sizes layer)", minimum=1, group=NETWORKS
    )
    num_critics: int = setting(
        2, "critics in the ensemble (the TD target takes their minimum)", minimum=1, group=NETWORKS
    )
    orthogonal_init: bool = setting(True, "orthogonal initialisation of actor and critics", group=NETWORKS)
    log_std_offset: float = setting(
        -1.0, "added to the actor's log-std output before clamping (CORL's actor: -1)", group=NETWORKS
    )
    normalize_obs: bool = normalize_obs_setting(True, NETWORKS)
    # optimisation and entropy
    actor_lr: float = setting(3e-5, "actor learning rate", above=0, group=OPTIMISATION)
    critic_lr: float = setting(3e-4, "critic learning rate", above=0, group=OPTIMISATION)
    gamma: float = gamma_setting(OPTIMISATION)
    tau: float = setting(5e-3, "Polyak rate of the target critics", above=0, maximum=1, group=OPTIMISATION)
    alpha: float = setting(1.0, "entropy temperature α (initial value when tuned)", minimum=0, group=OPTIMISATION)
    auto_alpha: bool = setting(True, "tune α towards --target-entropy", group=OPTIMISATION)
    alpha_lr: float | None = setting(
        None, "learning rate of log α (none: the actor's, as CORL)", above=0, group=OPTIMISATION
    )
    target_entropy: float | None = setting(None, "target entropy of π (none: −|A|)", group=OPTIMISATION)
    # conservative term
    cql_weight: float = setting(
        10.0, "weight w of the conservative term", aliases=("--min-q-weight",), minimum=0, group=CONSERVATIVE
    )
    cql_n_actions: int = setting(
        10, "N, actions sampled per group (uniform, π(·|s), π(·|s′))", minimum=1, group=CONSERVATIVE
    )
    temperature: float = setting(1.0, "T of T·logsumexp(Q/T)", above=0, group=CONSERVATIVE)
    importance_sample: bool = setting(
        True, "density-corrected CQL(H); off: CQL(ρ), the dataset action joins the logsumexp", group=CONSERVATIVE
    )
    with_lagrange: bool = setting(
        False, "tune the multiplier α′ so the gap meets --target-action-gap", group=CONSERVATIVE
    )
    target_action_gap: float = setting(
        -1.0, (
    "τ of the Lagrange variant: the gap α′ aims for (CORL's w·(gap − τ); the authors' "
    'threshold is w·τ)'
),
        group=CONSERVATIVE,
    )  # fmt: skip
    lagrange_multiplier_init: float = setting(
        1.0, "initial α′ (CORL starts at e = 2.718…, the CQL authors at 1)", above=0, group=CONSERVATIVE
    )
    lagrange_multiplier_min: float = setting(0.0, "lower clamp of α′", minimum=0, group=CONSERVATIVE)
    lagrange_multiplier_max: float = setting(
        1e6, "upper clamp of α′ (inf: none)", above=0, infinite=math.inf, group=CONSERVATIVE
    )
    lagrange_lr: float = setting(
        3e-4, "learning rate of log α′", aliases=("--cql-alpha-lr",), above=0, group=CONSERVATIVE
    )
    clip_diff_min: float = setting(-math.inf, "lower clip of the per-state gap", infinite=-math.inf, group=CONSERVATIVE)
    clip_diff_max: float = setting(math.inf, "upper clip of the per-state gap", infinite=math.inf, group=CONSERVATIVE)
    online_cql_weight: float | None = setting(
        None, "w while fine-tuning online (none: --cql-weight; CORL's cql_alpha_online)", minimum=0, group=CONSERVATIVE
    )
    calibrated: bool = setting(
        False, "Cal-QL: floor the policy actions' Q-values in the gap at the data's Monte-Carlo return",
        aliases=("--cal-ql",), group=CONSERVATIVE,
    )  # fmt: skip
    calibration_failure_reward: float | None = setting(
        None, (
    "Cal-QL on a sparse reward: the raw reward short of the goal; an episode ending on it takes r/(1 − γ) as "
    "each step's Monte-Carlo return (CORL's is_sparse_reward; AntMaze: 0)"
),
        group=CONSERVATIVE,
    )  # fmt: skip
    max_grad_norm: float | None = setting(
        None, "clip each critic's gradient to this L2 norm (none: no clipping)", aliases=("--clip-grad",),
        above=0, group=OPTIMISATION,
    )  # fmt: skip
    # TD target and data
    max_target_backup: bool = setting(False, "min over critics, then max over N target samples", group=TARGET)
    backup_entropy: bool = setting(False, "subtract α·log π(a′|s′) in the TD target", group=TARGET)
    normalize_reward: bool = normalize_reward_setting(TARGET)
    reward_scale: float = reward_scale_setting(TARGET)
    reward_bias: float = reward_bias_setting(TARGET)
    reward_noise_std: float = setting(
        0.0,
        "standard deviation of Gaussian noise on each sampled reward of the TD target, drawn at every update",
        details=(
            "Added before --reward-scale. TF-Agents' reward_noise_variance, which TF-Agents uses as a"
            " standard deviation; its AntMaze setting is 0.1."
        ),
        minimum=0,
        group=TARGET,
    )
    bc_steps: int = setting(0, "behaviour-cloning warm-up updates for the actor", minimum=0, group=TARGET)
    bc_debug_mode: bool = setting(False, "critic loss = conservative term only (TF-Agents' check)", group=TARGET)
    clip_dataset_actions: bool = clip_dataset_actions_setting(TARGET)
    # evaluation
    eval_q_filter: int = setting(
        0,
        ("evaluate with the best of K policy and K uniform actions by the critics' minimum Q (0: the mean action)"),
        details=(
            "jrl's eval_with_q_filter with num_eval_samples K: the critics CQL trains rank the "
            "actions, the policy only proposes them."
        ),
        minimum=0,
        group=EVALUATION,
    )

    @property
    def entropy_lr(self) -> float:
        """The learning rate of log α: --alpha-lr, or the actor's."""
        return self.actor_lr if self.alpha_lr is None else self.alpha_lr

    @property
    def critic_hidden_sizes(self) -> list[int]:
        """Each critic's hidden layer widths."""
        return [self.critic_width or max(self.actor_hidden_sizes)] * self.critic_layers

    def training_bytes(self, obs_dim: int, act_dim: int, batch_size: int) -> dict[str, int]:
        """A lower estimate of the memory an update takes, by the flag that sets each part: the
        networks (the critics, their targets, the actor) with their gradients and Adam's two moments
        (`--hidden-sizes`), and the activations a batch keeps for the backward pass: every critic
        scores the batch's action and the 3·N actions the conservative term samples (`--batch-size`,
        or `--cql-n-actions` where N is the larger factor). Keyed by the flag and its value, for a
        message that names them."""
        actor = mlp_parameters([obs_dim, *self.actor_hidden_sizes, 2 * act_dim])
        critic = mlp_parameters([obs_dim + act_dim, *self.critic_hidden_sizes, 1])
        networks = 4 * (4 * actor + 5 * self.num_critics * critic)  # float32; the targets have no optimiser
        rows = batch_size * (1 + 3 * self.cql_n_actions)
        activations = 4 * 2 * rows * self.num_critics * sum(self.critic_hidden_sizes)  # kept for backward, and grads
        widths = " ".join(map(str, self.actor_hidden_sizes))
        larger = 1 + 3 * self.cql_n_actions > batch_size  # the factor of `rows` that asks for the most
        rows_flag = f"--cql-n-actions {self.cql_n_actions}" if larger else f"--batch-size {batch_size}"
        return {f"--hidden-sizes {widths}": networks, rows_flag: activations}

    def validate(self) -> None:
        """One-line errors naming the flag for settings that cannot work."""
        check_ranges(self)
        require(self.clip_diff_min <= self.clip_diff_max, "--clip-diff-min must not exceed --clip-diff-max")
        require(self.alpha > 0 or not self.auto_alpha, "--alpha must be positive with --auto-alpha")
        require(
            self.lagrange_multiplier_min <= self.lagrange_multiplier_max,
            "--lagrange-multiplier-min must not exceed --lagrange-multiplier-max",
        )
        require(
            self.lagrange_multiplier_min <= self.lagrange_multiplier_init <= self.lagrange_multiplier_max,
            "--lagrange-multiplier-init must lie between --lagrange-multiplier-min and --lagrange-multiplier-max",
        )

    @staticmethod
    def translate_legacy(data: dict[str, Any]) -> dict[str, Any]:
        """Checkpoints written before `critic_layers`/`critic_width` stored the critic's layer list."""
        sizes = data.pop("critic_hidden_sizes", None)
        if sizes:
            data.setdefault("critic_layers", len(sizes))
            data.setdefault("critic_width", int(sizes[0]))
        return data
