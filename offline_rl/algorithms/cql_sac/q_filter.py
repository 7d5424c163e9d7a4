"""Q-filtered evaluation: the policy acts with the best of K sampled actions, ranked by its critics.

jrl's CQL (google-research/jrl, `eval_with_q_filter` with `num_eval_samples` K; one of the documents
this project started from) evaluates this way: at each state it draws K actions from π(·|s) and K
uniform ones on the action box, scores all 2K by the minimum over the critics, and plays the best.
The critics CQL trains are what ranks the actions; the policy only proposes them. With K = 0 the
policy plays its mean action, as SAC's evaluation does.

The draws come from numpy's global generator, as Tianshou's ε-greedy coins do: the evaluation
collector seeds it for each evaluation and gives training its state back, so a score stays a
function of the weights and `--seed` (`--watch` reprints it), and the evaluations take nothing from
torch's generator, whose draws training (and an exact resume) depend on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch
from tianshou.algorithm.modelfree.sac import SACPolicy
from tianshou.data import Batch
from tianshou.data.types import DistLogProbBatchProtocol, ObsBatchProtocol
from torch import nn
from torch.distributions import Independent, Normal

from offline_rl.algorithms.cql_sac.networks import tanh_gaussian_log_prob

ActionScores = Callable[[torch.Tensor], torch.Tensor]
"""Candidate actions (B, M, A) -> their scores (B, M)."""

_INSIDE_BOX = 1.0 - 1e-6
"""Actions are kept this far inside (-1, 1) for their log-density, whose atanh is infinite on the box's faces."""


def q_filtered_actions(
    mean: torch.Tensor,
    std: torch.Tensor,
    normal_draws: torch.Tensor,
    uniform_draws: torch.Tensor,
    scores: ActionScores,
) -> torch.Tensor:
    """The best action (B, A) of each state among tanh(mean + std·ε) for its K normal draws ε (B, K, A)
    and its K uniform draws (B, K, A) on [-1, 1], by `scores`; the first best on ties."""
    policy_actions = torch.tanh(mean.unsqueeze(1) + std.unsqueeze(1) * normal_draws)
    candidates = torch.cat([policy_actions, uniform_draws], dim=1)
    best = scores(candidates).argmax(dim=1)
    return candidates[torch.arange(candidates.shape[0], device=best.device), best]


class CriticScores:
    """The critics' minimum Q(s, a) of candidate actions, on observations normalised as the critics
    were trained on them. A plain object, not a module: the policy holds the algorithm's critics
    without registering them a second time in its state_dict."""

    def __init__(self, critic: nn.Module, normalizer: nn.Module | None) -> None:
        self.critic, self.normalizer = critic, normalizer

    def of(self, obs: torch.Tensor) -> ActionScores:
        norm_obs = self.normalizer(obs) if self.normalizer is not None else obs
        return lambda candidates: self.critic(norm_obs, candidates).amin(dim=0)


class QFilteredSACPolicy(SACPolicy):
    """Tianshou's `SACPolicy`, whose evaluation plays the Q-filtered action of `q_filter_samples` K
    (the module docstring). Training steps sample as SAC does; K = 0 evaluates as `SACPolicy`.
    `CQLSAC` gives it its critics (`score_with`) when it is built around it."""

    def __init__(self, *, q_filter_samples: int, **sac_policy_kwargs: Any) -> None:
        super().__init__(**sac_policy_kwargs)
        self.q_filter_samples = q_filter_samples
        self._scores: CriticScores | None = None

    def score_with(self, scores: CriticScores) -> None:
        self._scores = scores

    def forward(  # type: ignore[override]
        self, batch: ObsBatchProtocol, state: dict | Batch | np.ndarray | None = None, **kwargs: Any
    ) -> DistLogProbBatchProtocol:
        samples = self.q_filter_samples
        if self.is_within_training_step or samples == 0 or self._scores is None:
            return super().forward(batch, state, **kwargs)
        (loc, scale), hidden = self.actor(batch.obs, state=state, info=batch.info)
        size, act_dim = loc.shape
        normal = np.random.standard_normal((size, samples, act_dim))
        uniform = np.random.uniform(-1.0, 1.0, (size, samples, act_dim))

        def as_tensor(array: Any) -> torch.Tensor:
            return torch.as_tensor(np.asarray(array), dtype=loc.dtype, device=loc.device)

        obs = as_tensor(batch.obs).reshape(size, -1)
        with torch.no_grad():
            act = q_filtered_actions(loc, scale, as_tensor(normal), as_tensor(uniform), self._scores.of(obs))
        log_prob = tanh_gaussian_log_prob(loc, scale.log(), act.clamp(-_INSIDE_BOX, _INSIDE_BOX)).unsqueeze(-1)
        dist = Independent(Normal(loc=loc, scale=scale), 1)
        result = Batch(logits=(loc, scale), act=act, state=hidden, dist=dist, log_prob=log_prob)
        return cast(DistLogProbBatchProtocol, result)
