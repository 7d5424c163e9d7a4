"""Discrete CQL on a QR-DQN head for Tianshou 2.x."""

from offline_rl.discrete_cql.algorithm import DiscreteCQL, DiscreteCQLTrainingStats, nstep_returns
from offline_rl.discrete_cql.config import DiscreteCQLConfig
from offline_rl.discrete_cql.networks import QuantileMLP, QuantileNatureCNN

__all__ = [
    "DiscreteCQL",
    "DiscreteCQLConfig",
    "DiscreteCQLTrainingStats",
    "QuantileMLP",
    "QuantileNatureCNN",
    "nstep_returns",
]
