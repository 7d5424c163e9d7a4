"""Discrete CQL on a QR-DQN head for Tianshou 2.x."""

from offline_rl.core.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CQLQRDQN": "offline_rl.algorithms.discrete_cql.algorithm",
        "DiscreteCQLConfig": "offline_rl.algorithms.discrete_cql.config",
        "DiscreteCQLTrainingStats": "offline_rl.algorithms.discrete_cql.algorithm",
        "QuantileMLP": "offline_rl.algorithms.discrete_cql.networks",
        "QuantileNatureCNN": "offline_rl.algorithms.discrete_cql.networks",
        "nstep_returns": "offline_rl.algorithms.discrete_cql.algorithm",
    },
)

__all__ = [
    "CQLQRDQN",
    "DiscreteCQLConfig",
    "DiscreteCQLTrainingStats",
    "QuantileMLP",
    "QuantileNatureCNN",
    "nstep_returns",
]
