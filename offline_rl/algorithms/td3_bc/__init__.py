"""TD3+BC (TD3 with a behaviour-cloning term in the actor's loss) for Tianshou 2.x."""

from offline_rl.core.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "TD3BC": "offline_rl.algorithms.td3_bc.algorithm",
        "TD3BCConfig": "offline_rl.algorithms.td3_bc.config",
        "TD3BCTrainingStats": "offline_rl.algorithms.td3_bc.algorithm",
    },
)

__all__ = ["TD3BC", "TD3BCConfig", "TD3BCTrainingStats"]
