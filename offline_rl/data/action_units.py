"""Where a buffer's continuous actions live: the environment's units or the policy's [-1, 1] box.

Tianshou's collectors store the policy's raw output (before `map_action` scales it to the
environment's bounds), so a buffer they fill holds actions in the policy's box. Datasets (D4RL,
Minari, files this package generates) hold what was sent to the environment. The two coincide
only when the bounds are ±1, and confusing them trains silently on shrunken or stretched actions
(Pendulum's ±2 would become ±0.5). So every buffer our loaders build carries a marker, in its
`dataset_info` (saved with the buffer), and an unmarked buffer is read by Tianshou's convention.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from tianshou.data import ReplayBuffer

from offline_rl.data.transitions import dataset_info, set_dataset_info

ActionUnits = Literal["env", "policy"]
ACTION_UNITS_KEY = "action_units"
UNITS: tuple[ActionUnits, ...] = ("env", "policy")


def set_action_units(buffer: ReplayBuffer, units: ActionUnits) -> ReplayBuffer:
    """Mark `buffer` as holding actions in the environment's units ("env") or in the policy's
    [-1, 1] box ("policy", what Tianshou's collectors store); returns the buffer."""
    if units not in UNITS:
        raise ValueError(f"action units must be one of {UNITS}, got {units!r}")
    set_dataset_info(buffer, {**dataset_info(buffer), ACTION_UNITS_KEY: units})
    return buffer


def action_units_of(buffer: ReplayBuffer) -> ActionUnits | None:
    """The buffer's marker; buffers built by offline_rl's loaders before markers existed are "env";
    None for a buffer that says nothing (one filled by a Tianshou collector, say)."""
    info = dataset_info(buffer)
    units = info.get(ACTION_UNITS_KEY)
    if isinstance(units, bytes):
        units = units.decode()
    if units in UNITS:
        return units  # type: ignore[return-value]
    return "env" if info else None


def bounds_are_unit(low: np.ndarray, high: np.ndarray) -> bool:
    """Whether the environment's action box is [-1, 1] in every dimension (then units agree)."""
    return bool(np.allclose(low, -1.0) and np.allclose(high, 1.0))
