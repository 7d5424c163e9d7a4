"""Implicit Q-Learning (IQL) for Tianshou 2.x."""

from offline_rl.core.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "IQL": "offline_rl.algorithms.iql.algorithm",
        "IQLConfig": "offline_rl.algorithms.iql.config",
        "IQLTrainingStats": "offline_rl.algorithms.iql.algorithm",
    },
)

__all__ = ["IQL", "IQLConfig", "IQLTrainingStats"]
