"""The critics' estimate of each evaluation episode's discounted return, beside that return.

CQL claims its critics lower-bound the value of the policy (Kumar et al. 2020, whose table compares
exactly these two): an estimate above the return means the critics overestimate, one far below that
they are more conservative than needed. Both algorithms give `StartValues` from the first observation
and the rewards of each episode the evaluation played (`CQLSAC.start_values`,
`CQLQRDQN.start_values`); the evaluation reporter prints and logs their means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class StartValues(NamedTuple):
    """Per episode: the critics' estimate of its discounted return from its first state, and the
    discounted return it got. `rewards` names their units where they are not the env's rewards."""

    estimated: np.ndarray
    actual: np.ndarray
    rewards: str = ""


def discounted_returns(rewards: Sequence[np.ndarray], gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Σ_t γ^t r_t of each episode's rewards, and Σ_t γ^t over its steps (the weight a constant reward
    added to every step gets)."""
    powers = [gamma ** np.arange(len(episode)) for episode in rewards]
    returns = np.array([float(np.dot(power, episode)) for power, episode in zip(powers, rewards, strict=True)])
    return returns, np.array([float(power.sum()) for power in powers])


def values_in_env_units(
    q: np.ndarray, rewards: Sequence[np.ndarray], gamma: float, reward_factor: float, reward_bias: float
) -> StartValues | None:
    """Critics' estimates `q` of critics that learn rewards r·factor + bias, mapped back to the env's
    units: (Q − bias·Σ_t γ^t) / factor over each episode's steps; None when the factor is 0 (the critics
    learn no reward). A time limit cuts the return where the critics bootstrap on: γ^T of the tail is
    left out, which is negligible at D4RL's episode lengths."""
    if reward_factor == 0:
        return None
    returns, masses = discounted_returns(rewards, gamma)
    return StartValues((q - reward_bias * masses) / reward_factor, returns)
