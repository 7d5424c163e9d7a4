"""The settings of `examples/d4rl_td3_bc.py`: the shared data settings (`offline_rl.cli.continuous_data`),
the run, and TD3+BC's."""

from __future__ import annotations

from dataclasses import dataclass, field

from offline_rl.algorithms.td3_bc.config import TD3BCConfig
from offline_rl.cli.continuous_data import ContinuousDataSettings, settings_reader
from offline_rl.runs.config import OfflineRunConfig


@dataclass
class D4RLTD3BCConfig(ContinuousDataSettings):
    """What to train on, the run around it, and the algorithm."""

    run: OfflineRunConfig = field(default_factory=OfflineRunConfig)
    algorithm: TD3BCConfig = field(default_factory=TD3BCConfig)


config_from_args = settings_reader(D4RLTD3BCConfig, "examples/d4rl_td3_bc.py", "TD3+BC")
