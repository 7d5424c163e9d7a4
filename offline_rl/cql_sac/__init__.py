"""Continuous CQL-SAC (Conservative Q-Learning on SAC) for Tianshou 2.x."""

from offline_rl.cql_sac.algorithm import CQLSAC, CQLSACTrainingStats
from offline_rl.cql_sac.config import CQLSACConfig
from offline_rl.cql_sac.networks import EnsembleCritic, ObservationNormalizer, TanhGaussianActor

__all__ = [
    "CQLSAC",
    "CQLSACConfig",
    "CQLSACTrainingStats",
    "EnsembleCritic",
    "ObservationNormalizer",
    "TanhGaussianActor",
]
