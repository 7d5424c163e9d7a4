"""Behaviour cloning (and CORL's BC-x%, the best episodes only) for Tianshou 2.x."""

from offline_rl.core.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BC": "offline_rl.algorithms.bc.algorithm",
        "BCConfig": "offline_rl.algorithms.bc.config",
        "BCTrainingStats": "offline_rl.algorithms.bc.algorithm",
    },
)

__all__ = ["BC", "BCConfig", "BCTrainingStats"]
