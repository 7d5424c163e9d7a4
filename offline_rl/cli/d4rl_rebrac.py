"""The settings of `examples/d4rl_rebrac.py`: the shared data settings (`offline_rl.cli.continuous_data`),
the run (the authors' batch of 1024), and ReBRAC's."""

from __future__ import annotations

from dataclasses import dataclass, field

from offline_rl.algorithms.rebrac.config import ReBRACConfig
from offline_rl.cli.continuous_data import ContinuousDataSettings, settings_reader
from offline_rl.runs.config import OfflineRunConfig


@dataclass
class D4RLReBRACConfig(ContinuousDataSettings):
    """What to train on, the run around it, and the algorithm."""

    run: OfflineRunConfig = field(default_factory=lambda: OfflineRunConfig(batch_size=1024))
    algorithm: ReBRACConfig = field(default_factory=ReBRACConfig)


config_from_args = settings_reader(D4RLReBRACConfig, "examples/d4rl_rebrac.py", "ReBRAC")
