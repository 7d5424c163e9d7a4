"""offline_rl: offline reinforcement learning (CQL-SAC, discrete CQL) on Tianshou 2.x.

Public names: the algorithms (`CQLSAC`, `CQLQRDQN`, built from their configs with `build`), the
Tianshou drop-ins `CQL` and `DiscreteCQL` (Tianshou 2.0.1's constructors), and the configurations;
datasets in `offline_rl.data`.
"""

__version__ = "0.1.0"  # first: submodules read it while this package is still initialising

from offline_rl.quiet_tensorboard import use_tensorboard_without_tensorflow

use_tensorboard_without_tensorflow()  # before anything below imports tianshou, hence tensorboard

from offline_rl.cql_sac import CQLSAC, CQLSACConfig  # noqa: E402
from offline_rl.discrete_cql import CQLQRDQN, DiscreteCQLConfig  # noqa: E402
from offline_rl.errors import DatasetError, OfflineRLError  # noqa: E402
from offline_rl.tianshou_dropin import CQL, DiscreteCQL  # noqa: E402

__all__ = [
    "CQL",
    "CQLQRDQN",
    "CQLSAC",
    "CQLSACConfig",
    "DatasetError",
    "DiscreteCQL",
    "DiscreteCQLConfig",
    "OfflineRLError",
    "__version__",
]
