"""Installed commands: `pip install` puts these on PATH, so the programs of `examples/` and
`converters/` run from any directory, without a clone of the repository.

Each is the same `main` the script runs, wrapped by `run_main` (one-line errors, exit status 2).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from offline_rl.cli.main import run_main

COMMANDS = {
    "offline-rl-d4rl-cql": ("offline_rl.examples.d4rl_cql", "main"),
    "offline-rl-d4rl-td3-bc": ("offline_rl.examples.d4rl_td3_bc", "main"),
    "offline-rl-d4rl-bc": ("offline_rl.examples.d4rl_bc", "main"),
    "offline-rl-d4rl-rebrac": ("offline_rl.examples.d4rl_rebrac", "main"),
    "offline-rl-d4rl-iql": ("offline_rl.examples.d4rl_iql", "main"),
    "offline-rl-atari-cql": ("offline_rl.examples.atari_cql", "main"),
    "offline-rl-atari-qrdqn": ("offline_rl.examples.atari_qrdqn", "main"),
    "offline-rl-mujoco-sac": ("offline_rl.examples.mujoco_sac", "main"),
    "offline-rl-collect": ("offline_rl.collect", "main"),
    "offline-rl-describe": ("offline_rl.cli.describe", "main"),
    "offline-rl-convert-d4rl": ("offline_rl.cli.convert_buffers", "convert_d4rl"),
    "offline-rl-convert-minari": ("offline_rl.cli.convert_buffers", "convert_minari"),
    "offline-rl-convert-rl-unplugged": ("offline_rl.cli.convert_rl_unplugged", "main"),
    "offline-rl-convert-dqn-replay": ("offline_rl.cli.convert_dqn_replay", "main"),
    "offline-rl-sweep": ("offline_rl.sweep.command", "main"),
    "offline-rl-results": ("offline_rl.results.command", "main"),
}


def _command(name: str) -> Callable[[], None]:
    """The zero-argument function a console-script entry point calls for command `name`."""

    def run() -> None:
        module, function = COMMANDS[name]
        run_main(getattr(importlib.import_module(module), function))

    run.__name__ = name.removeprefix("offline-rl-").replace("-", "_")
    return run


d4rl_cql = _command("offline-rl-d4rl-cql")
d4rl_td3_bc = _command("offline-rl-d4rl-td3-bc")
d4rl_bc = _command("offline-rl-d4rl-bc")
d4rl_rebrac = _command("offline-rl-d4rl-rebrac")
d4rl_iql = _command("offline-rl-d4rl-iql")
atari_cql = _command("offline-rl-atari-cql")
atari_qrdqn = _command("offline-rl-atari-qrdqn")
mujoco_sac = _command("offline-rl-mujoco-sac")
collect = _command("offline-rl-collect")
describe = _command("offline-rl-describe")
convert_d4rl = _command("offline-rl-convert-d4rl")
convert_minari = _command("offline-rl-convert-minari")
convert_rl_unplugged = _command("offline-rl-convert-rl-unplugged")
convert_dqn_replay = _command("offline-rl-convert-dqn-replay")
sweep = _command("offline-rl-sweep")
results = _command("offline-rl-results")
