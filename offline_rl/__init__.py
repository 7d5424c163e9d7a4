"""offline_rl: offline reinforcement learning (CQL-SAC, discrete CQL) on Tianshou 2.x.

Public names: the algorithms and their configurations here; datasets in `offline_rl.data`.
"""

__version__ = "0.1.0"  # first: submodules read it while this package is still initialising

from offline_rl.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.discrete_cql import DiscreteCQL, DiscreteCQLConfig
from offline_rl.errors import DatasetError, OfflineRLError

__all__ = [
    "CQLSAC",
    "CQLSACConfig",
    "DatasetError",
    "DiscreteCQL",
    "DiscreteCQLConfig",
    "OfflineRLError",
    "__version__",
]
