"""Continuous CQL-SAC (Conservative Q-Learning on SAC) for Tianshou 2.x."""

from offline_rl.core.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CQLSAC": "offline_rl.algorithms.cql_sac.algorithm",
        "CQLSACConfig": "offline_rl.algorithms.cql_sac.config",
        "CQLSACTrainingStats": "offline_rl.algorithms.cql_sac.algorithm",
        "EnsembleCritic": "offline_rl.algorithms.networks",
        "ObservationNormalizer": "offline_rl.algorithms.networks",
        "TanhGaussianActor": "offline_rl.algorithms.cql_sac.networks",
    },
)

__all__ = [
    "CQLSAC",
    "CQLSACConfig",
    "CQLSACTrainingStats",
    "EnsembleCritic",
    "ObservationNormalizer",
    "TanhGaussianActor",
]
