"""The settings of `examples/d4rl_iql.py`: the shared data settings (`offline_rl.cli.continuous_data`),
the run, and IQL's."""

from __future__ import annotations

from dataclasses import dataclass, field

from offline_rl.algorithms.iql.config import IQLConfig
from offline_rl.cli.continuous_data import ContinuousDataSettings, check_with_fine_tuning, settings_reader
from offline_rl.runs.config import FineTuneConfig, OfflineRunConfig


@dataclass
class D4RLIQLConfig(ContinuousDataSettings):
    """What to train on, the run around it, and the algorithm."""

    run: OfflineRunConfig = field(default_factory=OfflineRunConfig)
    algorithm: IQLConfig = field(default_factory=IQLConfig)
    finetune: FineTuneConfig = field(default_factory=FineTuneConfig)

    def validate(self) -> None:
        check_with_fine_tuning(self)


config_from_args = settings_reader(D4RLIQLConfig, "examples/d4rl_iql.py", "IQL")
