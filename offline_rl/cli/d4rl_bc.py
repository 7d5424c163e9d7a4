"""The settings of `examples/d4rl_bc.py`: the shared data settings (`offline_rl.cli.continuous_data`),
the run, and behaviour cloning's."""

from __future__ import annotations

from dataclasses import dataclass, field

from offline_rl.algorithms.bc.config import BCConfig
from offline_rl.cli.continuous_data import ContinuousDataSettings, settings_reader
from offline_rl.runs.config import OfflineRunConfig


@dataclass
class D4RLBCConfig(ContinuousDataSettings):
    """What to train on, the run around it, and the algorithm."""

    run: OfflineRunConfig = field(default_factory=OfflineRunConfig)
    algorithm: BCConfig = field(default_factory=BCConfig)


config_from_args = settings_reader(
    D4RLBCConfig, "examples/d4rl_bc.py", "behaviour cloning (BC, or CORL's BC-x% with --top-fraction)"
)
