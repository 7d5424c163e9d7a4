"""Off-policy evaluation: a trained policy's value estimated from the data alone, with no env steps."""

from offline_rl.lazy import lazy_exports

# The examples' settings import `offline_rl.ope.config`; their `--help` should not wait for torch.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "FQEConfig": "offline_rl.ope.config",
        "FQEEstimate": "offline_rl.ope.fqe",
        "FittedQEvaluation": "offline_rl.ope.fqe",
        "fitted_q_evaluation": "offline_rl.ope.fqe",
    },
)

__all__ = ["FQEConfig", "FQEEstimate", "FittedQEvaluation", "fitted_q_evaluation"]
