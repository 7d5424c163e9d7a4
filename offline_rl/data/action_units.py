"""Where a buffer's continuous actions live: the environment's units or the policy's [-1, 1] box.

Tianshou's collectors store the policy's raw output (before `map_action` scales it to the
environment's bounds), so a buffer they fill holds actions in the policy's box. Datasets (D4RL,
Minari, files this package generates) hold what was sent to the environment. The two coincide
only when the bounds are ±1, and confusing them trains silently on shrunken or stretched actions
(Pendulum's ±2 would become ±0.5). So every buffer our loaders build carries a marker, in its
`dataset_info` (saved with the buffer), and an unmarked buffer is read by Tianshou's convention.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
from tianshou.data import ReplayBuffer

from offline_rl.core.errors import DatasetError, OfflineRLWarning
from offline_rl.data.transitions import dataset_info, set_dataset_info

ActionUnits = Literal["env", "policy"]
ACTION_UNITS_KEY = "action_units"
UNITS: tuple[ActionUnits, ...] = ("env", "policy")
POLICY_BOX_TOLERANCE = 1e-3
"""Actions read as policy units may exceed ±1 by this much (float noise) before the buffer is refused."""


class ActionUnitsWarning(OfflineRLWarning):
    """A buffer's action units had to be assumed, or its actions lie where the policy cannot act."""


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


def needs_action_scaling(
    buffer: ReplayBuffer,
    actions: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    *,
    action_scaling: bool,
    clipped: bool = False,
) -> bool:
    """Whether `buffer`'s actions must go through the inverse of a policy's action scaling to reach
    its [-1, 1] box; warns when the units had to be assumed or the actions leave the env's bounds
    (unless they will be `clipped` into them), refuses actions no box can hold."""
    units = action_units_of(buffer)
    unit_box = bounds_are_unit(low, high)
    if units is None and not unit_box:
        warnings.warn(
            "the replay buffer does not say whether its actions are in the environment's units "
            f"(bounds {low.min():g}..{high.max():g}) or the policy's [-1, 1] box; reading them as "
            "Tianshou collectors store them, in the box (mark it with "
            "offline_rl.data.set_action_units(buffer, 'env' or 'policy'))",
            ActionUnitsWarning,
            stacklevel=5,
        )
    scale = units == "env" and action_scaling and not unit_box
    if not actions.size:
        return scale
    lowest, highest = actions.min(axis=0), actions.max(axis=0)
    reach = float(max(np.abs(lowest).max(), np.abs(highest).max()))
    if scale or (units == "env" and unit_box):
        if not clipped:
            _warn_if_outside_bounds(lowest, highest, low, high)
    elif reach > 1.0 + POLICY_BOX_TOLERANCE:
        if units != "env":
            raise DatasetError(
                f"the replay buffer's actions reach {reach:g}, outside the policy's [-1, 1] box where a "
                "buffer without an 'env' marker holds them; if they are in the environment's units, "
                "mark it with offline_rl.data.set_action_units(buffer, 'env')"
            )
        warnings.warn(
            f"the dataset's actions reach {reach:g} but this SACPolicy has action_scaling=False, so "
            "its tanh actions stay inside [-1, 1]: the critic learns values the policy cannot reach",
            ActionUnitsWarning,
            stacklevel=5,
        )
    return scale


def _warn_if_outside_bounds(lowest: np.ndarray, highest: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
    """Environment-unit actions beyond the env's bounds: a policy squashed into the bounds never takes
    them, so the critics fit (and CQL pushes down) values nothing will query and the cloning steps
    chase targets tanh cannot reach. Either the data holds actions before the env clipped them (many
    recorders store the policy's raw output) or it belongs to another env than the evaluation task."""
    with np.errstate(divide="ignore", invalid="ignore"):  # an unbounded dimension maps to nan: never outside
        below = 2.0 * (lowest - low) / (high - low) - 1.0 < -1.0 - POLICY_BOX_TOLERANCE
        above = 2.0 * (highest - low) / (high - low) - 1.0 > 1.0 + POLICY_BOX_TOLERANCE
    outside = np.flatnonzero(below | above)
    if not len(outside):
        return
    first = int(outside[0])
    warnings.warn(
        f"the dataset's actions leave the env's action bounds in {len(outside)} of {len(low)} dimension(s) "
        f"(dimension {first}: {lowest[first]:g}..{highest[first]:g}, bounds {low[first]:g}..{high[first]:g}), "
        "which the policy cannot take and the env would clip: recorded before the env clipped them, or on another "
        "env than the evaluation task? --clip-dataset-actions (clip_dataset_actions) clips them into the bounds",
        ActionUnitsWarning,
        stacklevel=6,
    )
