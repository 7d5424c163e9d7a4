"""Checkpoints that hold everything a resumed run needs, written atomically.

A checkpoint is a `torch.save`d dict: the algorithm's `state_dict()` (networks, target networks,
optimiser states, α, α′, observation normaliser, update counter), the epoch and step counters the
trainer reached, and the configuration that made it, so `--watch` can rebuild the networks. It
carries a checksum of all that (`offline_rl.core.files.with_checksum`): a damaged copy is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import DAMAGED, atomic_path, damaged, load_weights_only, unreadable_torch_file, with_checksum
from offline_rl.runs.files import FINE_TUNING_KEY, RUN_BEST_POLICY_FILE, RUN_CHECKPOINT_FILE, RUN_FINAL_POLICY_FILE

CHECKPOINT_FORMAT = "offline_rl.runs.checkpoint/1"


def save_checkpoint(path: str | os.PathLike[str], algorithm: torch.nn.Module, **extra: Any) -> Path:
    """Write `algorithm.state_dict()` plus `extra` (counters, config) to `path`, atomically."""
    payload = {"format": CHECKPOINT_FORMAT, "algorithm": algorithm.state_dict(), **extra}
    final = Path(path).expanduser()
    with atomic_path(final) as tmp:
        torch.save(with_checksum(payload), tmp)
    return final


def load_checkpoint(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`; a one-line error for anything else."""
    file_path = Path(path).expanduser()
    if file_path.is_dir():
        raise OfflineRLError(f"--resume-path {file_path}: a folder; {_files_in_run_folder(file_path)}")
    if not file_path.is_file():
        raise OfflineRLError(f"--resume-path {file_path}: no such file")
    try:
        payload = load_weights_only(file_path, device)
    except Exception as error:  # torch raises many types for foreign or corrupt files
        raise OfflineRLError(
            f"--resume-path {file_path}: {unreadable_torch_file(file_path, error)}; {EXPECTED_CHECKPOINT}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise OfflineRLError(
            f"--resume-path {file_path}: a torch file, but not an offline_rl checkpoint; {EXPECTED_CHECKPOINT}"
        )
    if damaged(payload):
        raise OfflineRLError(f"--resume-path {file_path}: {DAMAGED}")
    return payload


EXPECTED_CHECKPOINT = "expected checkpoint.pth, policy.pth or policy_last.pth from a run's log folder"
RUN_FILES = {
    RUN_CHECKPOINT_FILE: "to go on training",
    RUN_BEST_POLICY_FILE: "the best evaluation's weights",
    RUN_FINAL_POLICY_FILE: "the last weights",
}
"""The files a run's log folder holds that `--resume-path` takes, and what each is for."""


def _files_in_run_folder(folder: Path) -> str:
    """Which file of `folder` to name instead: those a run wrote there, or what a run folder holds.
    A folder is the usual slip (the log folder a run printed), and which file is meant depends on
    what the user does next, so it is named, not picked."""
    present = [f"{folder / name} ({use})" for name, use in RUN_FILES.items() if (folder / name).is_file()]
    if present:
        return "name one of its files: " + ", ".join(present)
    return f"it holds no file a run writes ({', '.join(RUN_FILES)}); {EXPECTED_CHECKPOINT}"


def restore_algorithm(
    algorithm: torch.nn.Module, checkpoint: dict[str, Any], path: str, *, task: str | None = None
) -> None:
    """Load a checkpoint's state into `algorithm`; a one-line error naming both tasks and the first
    network that differs if it does not fit."""
    try:
        algorithm.load_state_dict(checkpoint["algorithm"])
    except (RuntimeError, KeyError, ValueError) as error:
        saved_task = (checkpoint.get("config") or {}).get("task")
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = next(
            (line for line in lines if line.startswith(("size mismatch", "Missing key", "Unexpected key"))), lines[0]
        )
        same_task = bool(saved_task) and saved_task == task  # then the network settings differ, not the task
        where = f"were built for --task {saved_task}" if saved_task and not same_task else "were built differently"
        here = f" --task {task}" if task and not same_task else " these settings"
        raise OfflineRLError(
            f"--resume-path {path}: its networks {where}, not for{here} ({detail.rstrip('.')}); "
            f"resume without flags that change the networks, or use a checkpoint of{here}"
        ) from None


def require_training_checkpoint(checkpoint: dict[str, Any], path: str, *, final_weights: bool = False) -> None:
    """Training goes on from `checkpoint.pth` only. `policy.pth` and `policy_last.pth` hold the
    weights of one evaluation, without the epoch, counters and random generators of the moment the
    run stopped: continuing from the best epoch's weights under the counters of the run's last
    epoch would number its evaluations from 1 again and mix two points of the run in one folder.
    `final_weights`: the command starts a new phase from where a finished run ended (fine-tuning online,
    which reseeds its generators), which an offline run's `policy_last.pth` holds as well."""
    if final_weights and Path(path).name == RUN_FINAL_POLICY_FILE and FINE_TUNING_KEY not in checkpoint:
        return
    if "epoch" not in checkpoint:
        raise OfflineRLError(
            f"--resume-path {path}: the weights of one evaluation (policy.pth or policy_last.pth), not where "
            f"the run stopped; continue training from the checkpoint.pth beside it, or evaluate this file with --watch"
        )
