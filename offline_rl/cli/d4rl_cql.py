"""The settings of `examples/d4rl_cql.py`: the shared data settings (`offline_rl.cli.continuous_data`),
the run, and CQL-SAC's."""

from __future__ import annotations

from dataclasses import dataclass, field

from offline_rl.algorithms.cql_sac.config import CQLSACConfig
from offline_rl.cli.continuous_data import ContinuousDataSettings, check_with_fine_tuning, settings_reader
from offline_rl.runs.config import FineTuneConfig, OfflineRunConfig, TorchConfig


@dataclass
class D4RLCQLConfig(ContinuousDataSettings):
    """What to train on, the run around it, and the algorithm."""

    run: OfflineRunConfig = field(
        # TF32 on CUDA: CQL-SAC's learning check found no difference from float32
        default_factory=lambda: OfflineRunConfig(torch=TorchConfig(matmul_precision="auto"))
    )
    algorithm: CQLSACConfig = field(default_factory=CQLSACConfig)
    finetune: FineTuneConfig = field(default_factory=FineTuneConfig)

    def validate(self) -> None:
        check_with_fine_tuning(self)


config_from_args = settings_reader(D4RLCQLConfig, "examples/d4rl_cql.py", "CQL-SAC")
