"""`--fqe-updates N`: a trained run's policy estimated on the data by fitted Q evaluation, no env step.

What the offline examples run instead of training when given `--resume-path` and `--fqe-updates`: π
acts as it does in evaluation, the data is the run's (or `--dataset`/`--load-buffer-name`), the discount
the run's. The one summary line puts π's estimate beside what the data's own episodes earned from the
same starts, in the same (discounted, unscaled) units as the evaluation line's "discounted return".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from offline_rl.core.files import write_json
from offline_rl.core.progress import progress_bar
from offline_rl.runs.config import OfflineRunConfig

log = logging.getLogger(__name__)


def policy_in_data_units(policy: Any, buffer: Any, *, discrete: bool) -> Any:
    """π's evaluation actions in the units the buffer's actions are in: the env's (datasets), or the
    policy's [-1, 1] box (a buffer a Tianshou collector filled), so that Q compares like with like."""
    from offline_rl.algorithms.export.acting import evaluation_actions  # heavy (torch): loaded only when used
    from offline_rl.data import action_units_of  # heavy (Tianshou, torch): loaded only when used

    space = policy.action_space
    in_policy_box = not discrete and action_units_of(buffer) != "env"  # None: Tianshou's convention

    def act(obs: np.ndarray) -> np.ndarray:
        actions = evaluation_actions(policy, obs)
        if in_policy_box:
            actions = 2.0 * (actions - space.low) / (space.high - space.low) - 1.0
        return np.asarray(actions, dtype=np.int64 if discrete else np.float32)

    return act


def estimate_policy_value(algorithm: Any, buffer: Any, settings: OfflineRunConfig, *, device: str) -> dict[str, Any]:
    """Fit FQE for `--fqe-updates` updates, print the summary line, and return its figures (also written
    to `--fqe-output` when given: what a sweep's results table reads)."""
    from offline_rl.algorithms.fqe import fitted_q_evaluation  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.data import dataset_info  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.data.transitions import has_discrete_actions  # heavy (Tianshou, torch): loaded only when used

    fqe = settings.fqe
    discrete = has_discrete_actions(buffer)
    space = algorithm.policy.action_space
    estimate = fitted_q_evaluation(
        buffer,
        policy_in_data_units(algorithm.policy, buffer, discrete=discrete),
        discrete=discrete,
        action_size=int(space.n) if discrete else int(np.prod(space.shape)),
        gamma=float(algorithm.config.gamma),
        updates=fqe.fqe_updates,
        batch_size=settings.batch_size,
        lr=fqe.fqe_lr,
        target_update_freq=fqe.fqe_target_update_freq,
        hidden_sizes=list(fqe.fqe_hidden_sizes),
        device=device,
        seed=settings.seed,
        progress=lambda updates: progress_bar(updates, desc="fitted Q evaluation", unit="update", leave=False),
    )
    name = dataset_info(buffer).get("name", "the data")
    log.info(
        f"fitted Q evaluation of {settings.resume_path} on {name}: discounted return {estimate.value:.2f} estimated "
        f"at the data's {estimate.starts} episode starts (γ {estimate.gamma:g}, {estimate.updates} updates, last TD "
        f"loss {estimate.last_loss:.4g}); the data's own episodes: {estimate.behaviour_return:.2f}"
    )
    figures = {
        "policy": str(settings.resume_path),
        "data": name,
        "fqe_value": estimate.value,
        "data_discounted_return": estimate.behaviour_return,
        "episode_starts": estimate.starts,
        "fqe_updates": estimate.updates,
        "gamma": estimate.gamma,
        "fqe_last_td_loss": estimate.last_loss,
    }
    if fqe.fqe_output:
        write_json(Path(fqe.fqe_output).expanduser(), figures)
    return figures
