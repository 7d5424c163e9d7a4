"""Checkpoints that hold everything a resumed run needs, written atomically.

A checkpoint is a `torch.save`d dict: the algorithm's `state_dict()` (networks, target networks,
optimiser states, α, α′, observation normaliser, update counter), the epoch and step counters the
trainer reached, and the configuration that made it, so `--watch` can rebuild the networks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from offline_rl.atomic import atomic_path
from offline_rl.errors import OfflineRLError

CHECKPOINT_FORMAT = "offline_rl.checkpoint/1"


def save_checkpoint(path: str | os.PathLike[str], algorithm: torch.nn.Module, **extra: Any) -> Path:
    """Write `algorithm.state_dict()` plus `extra` (counters, config) to `path`, atomically."""
    payload = {"format": CHECKPOINT_FORMAT, "algorithm": algorithm.state_dict(), **extra}
    final = Path(path).expanduser()
    with atomic_path(final) as tmp:
        torch.save(payload, tmp)
    return final


def load_checkpoint(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`; a one-line error for anything else."""
    file_path = Path(path).expanduser()
    if not file_path.is_file():
        raise OfflineRLError(f"--resume-path {file_path}: no such file")
    try:
        payload = torch.load(file_path, map_location=device, weights_only=True)
    except Exception as error:  # torch raises many types for foreign or corrupt files
        raise OfflineRLError(f"--resume-path {file_path}: not a checkpoint ({str(error).splitlines()[0]})") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise OfflineRLError(f"--resume-path {file_path}: not an offline_rl checkpoint")
    return payload


def restore_algorithm(algorithm: torch.nn.Module, checkpoint: dict[str, Any], path: str) -> None:
    """Load a checkpoint's state into `algorithm`; a one-line error if the networks differ."""
    try:
        algorithm.load_state_dict(checkpoint["algorithm"])
    except (RuntimeError, KeyError, ValueError) as error:
        raise OfflineRLError(
            f"--resume-path {path}: does not match these flags ({str(error).splitlines()[0]})"
        ) from None


def saved_algorithm_config(
    checkpoint: dict[str, Any] | None, config_class: type, fallback: Any, path: str | None
) -> Any:
    """The algorithm settings a checkpoint was trained with (they define its networks), else `fallback`."""
    from offline_rl.settings import from_dict

    saved = (checkpoint or {}).get("config", {}).get("algorithm")
    if not isinstance(saved, dict):
        return fallback
    print(f"using the algorithm settings saved in {path}")
    try:
        return from_dict(config_class, saved)
    except (OfflineRLError, TypeError) as error:
        raise OfflineRLError(f"--resume-path {path}: its saved settings do not fit this version ({error})") from None
