"""The programs that read settings, by the command a user types: where each one's `main` and its
settings class live. The sweep runs two of them by name, and a preset given to the wrong one is
recognised as another's from here."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Program:
    command: str  # as the README writes it
    module: str  # holds `main` and `config_from_args`
    settings_class: str

    def default_settings(self) -> Any:
        return getattr(importlib.import_module(self.module), self.settings_class)()


PROGRAMS = {
    "d4rl_cql": Program("examples/d4rl_cql.py", "offline_rl.apps.d4rl_cql", "D4RLCQLConfig"),
    "atari_cql": Program("examples/atari_cql.py", "offline_rl.apps.atari_cql", "AtariCQLConfig"),
    "atari_qrdqn": Program("examples/atari_qrdqn.py", "offline_rl.apps.atari_qrdqn", "AtariQRDQNConfig"),
}
