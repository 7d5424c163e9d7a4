"""Offline datasets as Tianshou replay buffers: D4RL, Minari, Tianshou HDF5, d3rlpy, RL Unplugged, local collection.

Every loader returns a `tianshou.data.ReplayBuffer` whose episode ends are exact: `terminated`
stops bootstrapping, `truncated` (a time-out or the end of the data) does not, and no transition's
`obs_next` belongs to another episode.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module that defines it, imported on first use: most loaders need torch and
# Tianshou (seconds to import), and a command's `--help`, its flag errors and the modules here that
# need neither (collection journals, file locks) should not wait for them.
_DEFINED_IN = {
    "DatasetStats": "stats",
    "FramePoolBuffer": "frame_pool",
    "FrameStackBuffer": "frame_stack",
    "FrameStackBufferBuilder": "frame_stack",
    "MissingTimeoutsWarning": "d4rl",
    "action_units_of": "action_units",
    "d4rl_path": "d4rl",
    "d4rl_url": "d4rl",
    "dataset_info": "transitions",
    "dataset_stats": "stats",
    "detect_format": "detect",
    "load_buffer": "buffers",
    "load_buffers": "buffers",
    "load_d3rlpy": "d3rlpy",
    "load_d4rl": "d4rl",
    "load_dataset": "detect",
    "load_minari": "minari",
    "save_buffer": "buffers",
    "set_action_units": "action_units",
}
__all__ = sorted(_DEFINED_IN)


def __getattr__(name: str) -> Any:
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
