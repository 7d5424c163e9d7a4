"""Off-policy evaluation: a trained policy's value estimated from the data alone, with no env steps."""

from offline_rl.core.lazy import lazy_exports

# The examples' settings import `offline_rl.algorithms.fqe.config`; their `--help` should not wait for torch.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "FQEConfig": "offline_rl.algorithms.fqe.config",
        "FQEEstimate": "offline_rl.algorithms.fqe.fqe",
        "FittedQEvaluation": "offline_rl.algorithms.fqe.fqe",
        "fitted_q_evaluation": "offline_rl.algorithms.fqe.fqe",
    },
)

__all__ = ["FQEConfig", "FQEEstimate", "FittedQEvaluation", "fitted_q_evaluation"]
