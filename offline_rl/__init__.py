"""offline_rl: offline reinforcement learning (CQL-SAC, discrete CQL) on Tianshou 2.x.

Public names: the algorithms (`CQLSAC`, `CQLQRDQN`, built from their configs with `build`), the
Tianshou drop-ins `CQL`, `DiscreteCQL` and `TD3BC` (Tianshou 2.0.1's constructors), the configurations, and
`export_policy` (a trained policy as an ONNX file or a torch.export program); datasets in `offline_rl.data`.
"""

from offline_rl.core import VERSION as __version__
from offline_rl.core.import_order import load_triton_before_tensorflow, use_tensorboard_without_tensorflow

use_tensorboard_without_tensorflow()  # before anything below imports tianshou, hence tensorboard
load_triton_before_tensorflow()  # where TensorFlow is installed: a Triton loaded after it crashes the process

from offline_rl.core.lazy import lazy_exports  # noqa: E402

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CQL": "offline_rl.algorithms.dropin",
        "CQLQRDQN": "offline_rl.algorithms.discrete_cql.algorithm",
        "CQLSAC": "offline_rl.algorithms.cql_sac.algorithm",
        "CQLSACConfig": "offline_rl.algorithms.cql_sac.config",
        "DatasetError": "offline_rl.core.errors",
        "DiscreteCQL": "offline_rl.algorithms.dropin",
        "DiscreteCQLConfig": "offline_rl.algorithms.discrete_cql.config",
        "OfflineRLError": "offline_rl.core.errors",
        "TD3BC": "offline_rl.algorithms.dropin",
        "export_policy": "offline_rl.algorithms.export.standalone",
    },
)

__all__ = [
    "CQL",
    "CQLQRDQN",
    "CQLSAC",
    "TD3BC",
    "CQLSACConfig",
    "DatasetError",
    "DiscreteCQL",
    "DiscreteCQLConfig",
    "OfflineRLError",
    "__version__",
    "export_policy",
]
