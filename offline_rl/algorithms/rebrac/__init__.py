"""ReBRAC (TD3+BC revisited: separate actor and critic penalties, layer-normalised critics) for Tianshou 2.x."""

from offline_rl.core.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ReBRAC": "offline_rl.algorithms.rebrac.algorithm",
        "ReBRACConfig": "offline_rl.algorithms.rebrac.config",
        "ReBRACTrainingStats": "offline_rl.algorithms.rebrac.algorithm",
    },
)

__all__ = ["ReBRAC", "ReBRACConfig", "ReBRACTrainingStats"]
