"""Discrete CQL on a QR-DQN head for Tianshou 2.x."""

from offline_rl.discrete_cql.algorithm import CQLQRDQN, DiscreteCQLTrainingStats, nstep_returns
from offline_rl.discrete_cql.config import DiscreteCQLConfig
from offline_rl.discrete_cql.networks import QuantileMLP, QuantileNatureCNN

__all__ = [
    "CQLQRDQN",
    "DiscreteCQLConfig",
    "DiscreteCQLTrainingStats",
    "QuantileMLP",
    "QuantileNatureCNN",
    "nstep_returns",
]
