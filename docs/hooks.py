"""MkDocs hooks: the pages that are made from the code, so that they cannot drift from it.

- `<!-- settings-reference -->` becomes the settings of every program, one table per group, each row
  a `setting()` declaration: its flag and other spellings, its default, its range or choices, its help
  and the details it declares for the documentation.
- `<!-- docstring: MODULE -->` becomes that module's docstring (an algorithm's numbered equations).
"""

from __future__ import annotations

import importlib
import math
import re
from typing import Any


def _programs() -> list[tuple[str, str, Any]]:
    """(command, what it does, its default settings) of every program, in the order a user meets them."""
    from offline_rl.cli.atari_cql import AtariCQLConfig
    from offline_rl.cli.atari_qrdqn import AtariQRDQNConfig
    from offline_rl.cli.convert_buffers import ConversionConfig, DownloadableConversionConfig
    from offline_rl.cli.convert_dqn_replay import DQNReplayConversionConfig
    from offline_rl.cli.convert_rl_unplugged import RLUnpluggedConversionConfig
    from offline_rl.cli.d4rl_bc import D4RLBCConfig
    from offline_rl.cli.d4rl_cql import D4RLCQLConfig
    from offline_rl.cli.d4rl_iql import D4RLIQLConfig
    from offline_rl.cli.d4rl_rebrac import D4RLReBRACConfig
    from offline_rl.cli.d4rl_td3_bc import D4RLTD3BCConfig
    from offline_rl.cli.describe import DescribeConfig
    from offline_rl.cli.mujoco_sac import MujocoSACConfig
    from offline_rl.results.command import ResultsConfig
    from offline_rl.runs.dataset_generation import CollectConfig
    from offline_rl.sweep.command import SweepConfig

    return [
        ("examples/d4rl_cql.py", "CQL-SAC on a continuous-action dataset", D4RLCQLConfig()),
        ("examples/d4rl_td3_bc.py", "TD3+BC on a continuous-action dataset", D4RLTD3BCConfig()),
        ("examples/d4rl_bc.py", "behaviour cloning (and BC-x%) on a continuous-action dataset", D4RLBCConfig()),
        ("examples/d4rl_rebrac.py", "ReBRAC on a continuous-action dataset", D4RLReBRACConfig()),
        ("examples/d4rl_iql.py", "IQL on a continuous-action dataset", D4RLIQLConfig()),
        ("examples/atari_cql.py", "discrete CQL on Atari or vector-task data", AtariCQLConfig()),
        ("examples/atari_qrdqn.py", "an online QR-DQN behaviour policy and the data it plays", AtariQRDQNConfig()),
        ("examples/mujoco_sac.py", "an online SAC behaviour policy and its snapshots", MujocoSACConfig()),
        ("python -m offline_rl.collect", "a dataset made locally by a behaviour policy", CollectConfig()),
        ("python -m offline_rl.describe", "what a dataset holds", DescribeConfig()),
        ("converters/d4rl.py", "a D4RL file as a Tianshou buffer", ConversionConfig()),
        ("converters/minari.py", "a Minari dataset as a Tianshou buffer", DownloadableConversionConfig()),
        ("converters/rl_unplugged_atari.py", "RL Unplugged Atari shards as buffers", RLUnpluggedConversionConfig()),
        ("converters/dqn_replay_atari.py", "DQN Replay checkpoints as buffers", DQNReplayConversionConfig()),
        ("python -m offline_rl.sweep", "a grid of runs and its results table", SweepConfig()),
        ("python -m offline_rl.results", "tables and plots from run folders", ResultsConfig()),
    ]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _default(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, list | tuple):
        return " ".join(map(str, value)) or "none"
    return str(value)


def _range(meta: dict[str, Any]) -> str:
    if meta.get("choices"):
        return ", ".join(map(str, meta["choices"]))
    parts = []
    if meta.get("minimum") is not None:
        parts.append(f"≥ {meta['minimum']:g}")
    if meta.get("above") is not None:
        parts.append(f"> {meta['above']:g}")
    if meta.get("maximum") is not None:
        parts.append(f"≤ {meta['maximum']:g}")
    if meta.get("below") is not None:
        parts.append(f"< {meta['below']:g}")
    return ", ".join(parts)


def settings_reference() -> str:
    from offline_rl.core.settings import flag_of, leaf_fields, spellings_of

    out = []
    for command, purpose, config in _programs():
        out.append(f"## `{command}`\n\n{purpose[0].upper()}{purpose[1:]}.\n")
        groups: dict[str, list[str]] = {}
        for _, field, owner in leaf_fields(config):
            meta = field.metadata
            group = meta.get("group") or getattr(owner, "FLAG_GROUP", None) or type(owner).__name__
            others = [name for name in spellings_of(field)[1:] if "_" not in name[2:]]
            flag = field.name if meta.get("positional") else flag_of(field)
            spelled = f"`{flag}`" + (f" ({', '.join(f'`{name}`' for name in others)})" if others else "")
            text = meta.get("help", "")
            if meta.get("details"):
                text = f"{text}. {meta['details']}" if not text.endswith(".") else f"{text} {meta['details']}"
            default = _cell(_default(getattr(owner, field.name)))
            groups.setdefault(group, []).append(f"| {spelled} | `{default}` | {_cell(_range(meta))} | {_cell(text)} |")
        for group, rows in groups.items():
            out.append(f"### {command.split('/')[-1].split(' ')[-1]}: {group}\n")
            out.append("| flag | default | range | what it does |\n|---|---|---|---|")
            out.extend(rows)
            out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "<!-- settings-reference -->" in markdown:
        markdown = markdown.replace("<!-- settings-reference -->", settings_reference())

    def docstring(match: re.Match[str]) -> str:
        module = importlib.import_module(match.group(1))
        return (module.__doc__ or "").strip()

    return re.sub(r"<!-- docstring: ([\w.]+) -->", docstring, markdown)
