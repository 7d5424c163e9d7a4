"""The settings of fitted Q evaluation, each declared once (`offline_rl.core.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from offline_rl.core.settings import setting


@dataclass
class FQEConfig:
    """Fitted Q evaluation of a trained policy on the data (`offline_rl.algorithms.fqe.fqe`). The defaults are
    d3rlpy's `FQE` (learning rate 1e-4, a hard target copy every 100 updates, 256×256 layers); the batch
    is the run's `--batch-size`, the discount the run's `--gamma`."""

    FLAG_GROUP: ClassVar[str] = "fitted Q evaluation"

    fqe_updates: int = setting(
        0,
        ("only estimate --resume-path's policy by fitted Q evaluation with this many updates on the data (0: off)"),
        details=(
            "The policy's discounted value at the data's episode starts, on the data given (none: the"
            " run's own); nothing is trained and no env is played."
        ),
        minimum=0,
        per_invocation=True,
    )
    fqe_lr: float = setting(1e-4, "learning rate of FQE's Adam", above=0, per_invocation=True)
    fqe_target_update_freq: int = setting(
        100, "FQE updates between copies of its Q network into its target network", minimum=1, per_invocation=True
    )
    fqe_output: str | None = setting(
        None,
        "with --fqe-updates, also write the estimate's figures to this JSON file",
        details=(
            "A sweep's --fqe-updates writes fqe.json beside each trial's summary.json, which results tables read."
        ),
        per_invocation=True,
    )
    fqe_hidden_sizes: list[int] = setting(
        [256, 256],
        "hidden layers of FQE's Q network on vector observations (frames: the Nature CNN)",
        minimum=1,
        per_invocation=True,
    )
