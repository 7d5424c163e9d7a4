"""The programs that read settings, by the command a user types: where each one's `main` and its
settings class live. The sweep runs two of them by name, a preset given to the wrong one is
recognised as another's from here, and so is the program that wrote a run's recorded settings."""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from offline_rl.core.settings import leaf_fields, setting_key, setting_keys


@dataclass(frozen=True)
class Program:
    command: str  # as the documentation writes it
    module: str  # holds `config_from_args` and the settings class
    settings_class: str
    main_module: str  # holds `main`: the example itself, installed as `offline_rl.examples`

    def default_settings(self) -> Any:
        return getattr(importlib.import_module(self.module), self.settings_class)()

    def default_values(self) -> dict[str, Any]:
        """Every setting's default by its field name, in the JSON types a run's `run.json` records."""
        return dict(_default_values(self))


PROGRAMS = {
    name: Program(f"examples/{name}.py", f"offline_rl.cli.{name}", settings, f"offline_rl.examples.{name}")
    for name, settings in (
        ("d4rl_cql", "D4RLCQLConfig"),
        ("d4rl_td3_bc", "D4RLTD3BCConfig"),
        ("d4rl_bc", "D4RLBCConfig"),
        ("d4rl_rebrac", "D4RLReBRACConfig"),
        ("d4rl_iql", "D4RLIQLConfig"),
        ("atari_cql", "AtariCQLConfig"),
        ("atari_qrdqn", "AtariQRDQNConfig"),
        ("mujoco_sac", "MujocoSACConfig"),
    )
}


@functools.cache
def _default_values(program: Program) -> dict[str, Any]:
    settings = program.default_settings()
    defaults = {field.name: getattr(owner, field.name) for _, field, owner in leaf_fields(settings)}
    return json.loads(json.dumps(defaults, default=str))


@functools.cache
def _setting_keys(program: Program) -> frozenset[str]:
    return frozenset(key for _, field, _ in leaf_fields(program.default_settings()) for key in setting_keys(field))


def programs_holding(names: Collection[str]) -> list[Program]:
    """The programs with a setting for each of `names` (field names or flag spellings, `setting_key`):
    the program a preset file was written for, or the one whose run recorded these settings."""
    wanted = {setting_key(name) for name in names}
    return [program for program in PROGRAMS.values() if wanted <= _setting_keys(program)]


def program_recording(names: Collection[str]) -> Program | None:
    """The one program whose settings include all of `names` (those a run recorded), or None: a run of
    an older version lacks the settings added since, never one of its program's."""
    matching = programs_holding(names)
    return matching[0] if len(matching) == 1 else None


def training_command(sources: Sequence[str], *, discrete: bool) -> str:
    """The command line that trains on `sources`, as printed for the user to copy: discrete CQL takes
    them as --load-buffer-name, CQL-SAC as --dataset. One place, so that every message that points
    from a dataset to its trainer names the same program and flag."""
    from offline_rl.core.progress import shell_quoted  # flags reads PROGRAMS at import: imported here

    program, flag = (PROGRAMS["atari_cql"], "--load-buffer-name") if discrete else (PROGRAMS["d4rl_cql"], "--dataset")
    return f"python {program.command} {flag} {' '.join(map(shell_quoted, sources))}"
